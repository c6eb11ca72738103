# SPDX-License-Identifier: Apache-2.0
"""Sequence export/import and the merge of partial attentions, through the
Python API."""

import numpy as np
import pytest

import gqla

RNG = np.random.default_rng()


def _gqa_session(cache_dtype="f32", page_size=16):
    cfg = gqla.Config.gqa(num_heads=6, num_kv_heads=2, head_dim=40, value_dim=24,
                          cache_dtype=cache_dtype, device="cpu", page_size=page_size, max_tokens=4096)
    return gqla.Session(cfg)


def _append(s, seq, n):
    k = RNG.standard_normal((n, 2, 40), dtype=np.float32)
    v = RNG.standard_normal((n, 2, 24), dtype=np.float32)
    s.append(0, seq, k, v)
    return k, v


def test_export_import_round_trip_is_bit_exact():
    for dtype in ("f32", "f16", "bf16", "fp8_e4m3"):
        with _gqa_session(dtype) as a, _gqa_session(dtype) as b:
            seq = a.add_sequence()
            _append(a, seq, 37)
            data = a.export_sequence(seq)
            assert isinstance(data, bytes)
            if dtype == "fp8_e4m3":  # codes, then one f32 scale per (token, KV head), for K and for V
                assert len(data) == 64 + 8 + 37 * (2 * 40 + 2 * 4 + 2 * 24 + 2 * 4) + 8
            copy = b.import_sequence(data)
            assert b.length(copy) == 37
            assert b.export_sequence(copy) == data
            q = RNG.standard_normal((1, 1, 6, 40), dtype=np.float32)
            np.testing.assert_array_equal(a.decode(0, [seq], q), b.decode(0, [copy], q))


def test_import_refuses_damaged_buffers_and_leaves_the_session_unchanged():
    with _gqa_session() as s:
        seq = s.add_sequence()
        _append(s, seq, 5)
        data = bytearray(s.export_sequence(seq))
        before = s.stats()
        data[70] ^= 0x10
        with pytest.raises(gqla.InvalidArgument, match="checksum"):
            s.import_sequence(bytes(data))
        with pytest.raises(gqla.InvalidArgument):
            s.import_sequence(b"")
        after = s.stats()
        assert (after["sequences"], after["pages_used"]) == (before["sequences"], before["pages_used"])
        with pytest.raises(gqla.NotFound):
            s.export_sequence(seq + 100)


def test_merge_of_two_parts_equals_the_union():
    with _gqa_session() as s:
        x, y, union = s.add_sequence(), s.add_sequence(), s.add_sequence()
        kx, vx = _append(s, x, 30)
        ky, vy = _append(s, y, 50)
        s.append(0, union, kx, vx)
        s.append(0, union, ky, vy)
        q = RNG.standard_normal((1, 1, 6, 40), dtype=np.float32)
        ox, lx = s.decode(0, [x], q, return_lse=True)
        oy, ly = s.decode(0, [y], q, return_lse=True)
        ou, lu = s.decode(0, [union], q, return_lse=True)
        o, lse = gqla.merge_attention_states([ox, oy], [lx, ly])
        assert np.linalg.norm(o - ou) / np.linalg.norm(ou) <= 1e-5
        assert np.all(np.abs(lse - lu) <= 1e-5 * np.maximum(1.0, np.abs(lu)))
        # An empty part (lse -inf) is skipped even when its output is NaN.
        empty_o = np.full_like(ox, np.nan)
        empty_l = np.full_like(lx, -np.inf)
        o2, lse2 = gqla.merge_attention_states([ox, empty_o], [lx, empty_l])
        np.testing.assert_allclose(o2, ox, rtol=1e-6)
        np.testing.assert_allclose(lse2, lx, rtol=1e-6)


def test_merge_refuses_mismatched_parts():
    a = np.zeros((4, 8), np.float32)
    with pytest.raises(gqla.InvalidArgument, match="lses"):
        gqla.merge_attention_states([a, a], [np.zeros(4, np.float32)])
    with pytest.raises(gqla.InvalidArgument, match=r"outputs\[1\]"):
        gqla.merge_attention_states([a, np.zeros((3, 8), np.float32)], [np.zeros(4, np.float32)] * 2)
    with pytest.raises(gqla.InvalidArgument, match="outputs"):
        gqla.merge_attention_states([], [])


def test_export_into_a_callers_buffer_and_import_from_any_buffer():
    with _gqa_session("bf16") as a, _gqa_session("bf16", page_size=8) as b:
        seq = a.add_sequence()
        _append(a, seq, 29)
        data = a.export_sequence(seq)
        assert a.export_size(seq) == len(data)
        # A larger reused buffer: the first export_size bytes are written, the rest untouched.
        out = bytearray(b"\xab" * (len(data) + 5))
        assert a.export_sequence(seq, out=out) == len(data)
        assert bytes(out[:len(data)]) == data and out[len(data):] == b"\xab" * 5
        staged = np.zeros(len(data), np.uint8)
        assert a.export_sequence(seq, out=staged) == len(data)
        assert staged.tobytes() == data
        # Imports read bytearray, memoryview and numpy buffers in place.
        for buffer in (bytearray(data), memoryview(out)[:len(data)], staged):
            copy = b.import_sequence(buffer)
            assert b.export_sequence(copy) == data
        # Too small: refused, naming the size, nothing written.
        small = bytearray(len(data) - 1)
        with pytest.raises(gqla.CapacityError, match=str(len(data))):
            a.export_sequence(seq, out=small)
        assert small == bytearray(len(data) - 1)
        # Not writable, not contiguous, not a buffer: InvalidArgument naming the argument.
        with pytest.raises(gqla.InvalidArgument, match="out"):
            a.export_sequence(seq, out=data)
        with pytest.raises(gqla.InvalidArgument, match="out"):
            a.export_sequence(seq, out=np.zeros(2 * len(data), np.uint8)[::2])
        with pytest.raises(gqla.InvalidArgument, match="data"):
            b.import_sequence([1, 2, 3])
