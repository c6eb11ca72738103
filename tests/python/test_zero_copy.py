# SPDX-License-Identifier: Apache-2.0
"""Arrays cross into the library without copies: the descriptor points at
the caller's memory, strided views are read in place, `out=` is written in
place, and layouts the C ABI cannot take are refused, naming the argument."""

import numpy as np
import pytest

import gqla
from gqla import _gqla
import cases
import reference as ref


def test_descriptor_points_at_the_array():
    base = np.zeros((4, 6, 10, 40), np.float32)
    view = base[1:3, ::2, :, 3:35]  # outer strides arbitrary, inner contiguous
    d = _gqla.describe_tensor(view)
    assert d["data"] == view.__array_interface__["data"][0] == view.ctypes.data
    assert d["shape"] == view.shape
    assert d["strides"] == tuple(s // 4 for s in view.strides)
    assert d["strides"][-1] == 1 and d["strides"][1] == 2 * 10 * 40


def test_bf16_as_uint16_and_f16():
    assert _gqla.describe_tensor(np.zeros((2, 3), np.uint16))["dtype"] == 3
    assert _gqla.describe_tensor(np.zeros((2, 3), np.float16))["dtype"] == 2
    assert _gqla.describe_tensor(np.zeros((2, 3), np.float32))["dtype"] == 1


def test_dlpack_capsule_is_consumed_without_copy():
    class DlpackOnly:
        """Exposes only __dlpack__ (like a framework tensor)."""
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__()

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    if not hasattr(np.ndarray, "__dlpack__"):
        pytest.skip("numpy without DLPack export")
    base = np.arange(3 * 5 * 8, dtype=np.float32).reshape(3, 5, 8)[:, 1:4, :]
    d = _gqla.describe_tensor(DlpackOnly(base))
    assert d["data"] == base.ctypes.data
    assert d["strides"] == (40, 8, 1) and d["shape"] == (3, 3, 8)


def test_refused_layouts_name_the_argument(rng):
    filled = cases.gqla_session(rng, path="absorb")
    with filled.session as s:
        seq = filled.new_sequence(6)
        q = filled.random_queries(1, 1)
        transposed = np.asfortranarray(q)
        with pytest.raises(gqla.InvalidArgument, match=r"^q: .*innermost"):
            s.decode(0, [seq], transposed)
        reversed_view = q[..., ::-1]
        with pytest.raises(gqla.InvalidArgument, match=r"^q: "):
            s.decode(0, [seq], reversed_view)
        out = np.empty((1, 1, 6, 80), np.float32)
        out.flags.writeable = False
        with pytest.raises(gqla.InvalidArgument, match=r"^out: .*read-only"):
            s.decode(0, [seq], q, out=out)
        c, kr = filled.random_rows(3)
        with pytest.raises(gqla.InvalidArgument, match=r"^c: "):
            s.append(0, seq, np.broadcast_to(c[:1], c.shape), kr)
        assert s.length(seq) == 6


def test_strided_views_and_out_in_place(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=16)
    c = filled.config
    with filled.session as s:
        seq = s.add_sequence()
        # Append from views into larger buffers (row strides != row widths).
        rows_c = np.full((40, c.latent_dim + 13), np.nan, np.float32)
        rows_kr = np.full((2, 40, c.rope_dim), np.nan, np.float32)
        a, b = filled.random_rows(20)
        rows_c[::2, 5:5 + c.latent_dim] = a
        rows_kr[1, ::2] = b
        s.append(0, seq, rows_c[::2, 5:5 + c.latent_dim], rows_kr[1, ::2])
        filled.record(seq, 0, a, b)

        q = filled.random_queries(1, 3)
        q_buffer = np.full((1, 3, c.num_heads, c.query_dim + 9), np.nan, np.float32)
        q_buffer[..., 9:] = q
        q_view = q_buffer[..., 9:]
        out_buffer = np.full((1, 3, c.num_heads + 2, c.value_dim), np.nan, np.float32)
        out_view = out_buffer[:, :, 1:-1, :]
        lse = np.full((1, 3, c.num_heads), np.nan, np.float32)

        o, lse_out = s.decode(0, [seq], q_view, out=out_view, lse=lse)
        assert o is out_view and lse_out is lse
        assert np.isnan(out_buffer[:, :, 0]).all() and np.isnan(out_buffer[:, :, -1]).all()
        o_ref, lse_ref = filled.reference([seq], q)
        assert ref.relative_error(out_buffer[:, :, 1:-1], o_ref) <= 1e-5
        assert ref.relative_error(lse, lse_ref) <= 1e-5
        # The same query from a contiguous copy gives the same bits.
        assert np.array_equal(s.decode(0, [seq], np.ascontiguousarray(q_view)), out_view)


def test_allocated_outputs_follow_q(rng):
    filled = cases.gqa_session(rng, io_dtype="f16", cache_dtype="f16")
    with filled.session as s:
        seq = filled.new_sequence(4)
        q = ref.to_io(filled.random_queries(1, 2), "f16")
        o, lse = s.decode(0, [seq], q, return_lse=True)
        assert isinstance(o, np.ndarray) and o.dtype == np.float16
        assert o.shape == (1, 2, 6, 80) and lse.shape == (1, 2, 6) and lse.dtype == np.float32
        o_plain = s.decode(0, np.array([seq], np.int64), q)
        assert np.array_equal(o, o_plain)
