# SPDX-License-Identifier: Apache-2.0
"""Arguments the binding must refuse (or accept) before the library sees
them: byte order, empty arrays, integers out of range or given as bools, and
overlapping strides. A refusal is a gqla.InvalidArgument naming the argument
and leaves the session as it was."""

import numpy as np
import pytest

import gqla
import cases
import reference as ref


@pytest.fixture
def filled(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=16, max_tokens=256)
    yield filled
    filled.session.close()


def still_usable(filled, seq):
    q = filled.random_queries(1, 1)
    o_ref, _ = filled.reference([seq], q)
    assert ref.relative_error(filled.decode([seq], q), o_ref) <= 1e-5


def swapped(array):
    """The same values in the other byte order."""
    return array.astype(array.dtype.newbyteorder("S"))


def test_non_native_byte_order_is_refused(filled):
    s, c = filled.session, filled.config
    seq = filled.new_sequence(5)
    q = filled.random_queries(1, 1)
    out = np.full((1, 1, c.num_heads, c.value_dim), np.nan, np.float32)
    with pytest.raises(gqla.InvalidArgument, match=r"^q: .*non-native byte order; expected native"):
        s.decode(0, [seq], swapped(q), out=out)
    with pytest.raises(gqla.InvalidArgument, match=r"^out: .*native byte order"):
        s.decode(0, [seq], q, out=swapped(out))
    with pytest.raises(gqla.InvalidArgument, match=r"^lse: .*native byte order"):
        s.decode(0, [seq], q, out=out, lse=swapped(np.zeros((1, 1, c.num_heads), np.float32)))
    assert np.isnan(out).all()
    a, b = filled.random_rows(2)
    with pytest.raises(gqla.InvalidArgument, match=r"^c: .*native byte order"):
        s.append(0, seq, swapped(a), b)
    with pytest.raises(gqla.InvalidArgument, match=r"^kr: .*native byte order"):
        s.append_many(0, [seq], a, swapped(b), counts=[2])
    with pytest.raises(gqla.InvalidArgument, match=r"^w_ukv: .*native byte order"):
        s.set_weights(0, swapped(filled.weights[0]))
    with pytest.raises(gqla.InvalidArgument, match=r"^tensor: .*native byte order"):
        gqla._gqla.describe_tensor(swapped(np.zeros((2, 3), np.float16)))
    assert s.length(seq) == 5
    still_usable(filled, seq)


class _FakeCudaArray:
    def __init__(self, typestr):
        self.__cuda_array_interface__ = {
            "data": (4096, False), "shape": (2, 3), "typestr": typestr, "version": 3}


def test_cuda_array_interface_byte_order():
    with pytest.raises(gqla.InvalidArgument, match=r"^tensor: .*'>f4' has non-native byte order"):
        gqla._gqla.describe_tensor(_FakeCudaArray(">f4"))
    assert gqla._gqla.describe_tensor(_FakeCudaArray("<f4"))["shape"] == (2, 3)


def test_zero_row_arrays_reach_the_library(filled):
    s, c = filled.session, filled.config
    seq = filled.new_sequence(3)
    empty_c, empty_kr = np.zeros((0, c.latent_dim), np.float32), np.zeros((0, c.rope_dim), np.float32)
    assert empty_c.strides == (0, 0)  # what numpy gives empty arrays
    s.append_many(0, [seq], empty_c, empty_kr, counts=[0])
    with pytest.raises(gqla.InvalidArgument, match=r"c: shape\[0\] \(n\) expected >= 1"):
        s.append(0, seq, empty_c, empty_kr)  # the library's own rule for a single append
    other = s.add_sequence()
    a, b = filled.random_rows(4)
    s.append_many(0, [seq, other], a, b, counts=[0, 4])
    filled.record(other, 0, a, b)
    assert (s.length(seq), s.length(other)) == (3, 4)
    still_usable(filled, other)


def test_batch_zero_decode_mirrors_the_library(filled):
    c = filled.config
    seq = filled.new_sequence(3)
    q = np.zeros((0, 1, c.num_heads, c.query_dim), np.float32)
    with pytest.raises(gqla.InvalidArgument, match=r"batch: expected 1\.\.\d+ .*got 0"):
        filled.session.decode(0, [], q)
    still_usable(filled, seq)


def test_integers_out_of_range_name_the_argument(filled):
    s, c = filled.session, filled.config
    seq = filled.new_sequence(3)
    q = filled.random_queries(1, 1)
    a, b = filled.random_rows(1)
    checks = [
        (r"^layer: expected an int32, got 1099511627776", lambda: s.length(seq, layer=2**40)),
        (r"^seq: expected an int64, got 9223372036854775808", lambda: s.length(2**63)),
        (r"^seq: ", lambda: s.release(2**63)),
        (r"^seq: ", lambda: s.fork(-2**64)),
        (r"^layer: ", lambda: s.append(2**40, seq, a, b)),
        (r"^seq: ", lambda: s.append(0, 2**63, a, b)),
        (r"^layer: ", lambda: s.append_many(-2**40, [seq], a, b, counts=[1])),
        (r"^counts\[0\]: ", lambda: s.append_many(0, [seq], a, b, counts=[2**64])),
        (r"^layer: ", lambda: s.decode(2**40, [seq], q)),
        (r"^layer: ", lambda: s.set_weights(2**40, filled.weights[0])),
        (r"^seqs\[0\]: ", lambda: s.decode(0, [2**63], q)),
        (r"^batch: ", lambda: s.predict_cost(2**40, 10)),
        (r"^context: ", lambda: s.predict_cost(1, 2**70)),
        (r"^s_q: ", lambda: s.predict_cost(1, 10, s_q=2**31)),
        (r"^context: ", lambda: gqla.predict_cost(s.config, 1, 2**70)),
        (r"^seq: expected an int64, got 1\.5", lambda: s.length(1.5)),
    ]
    for pattern, call in checks:
        with pytest.raises(gqla.InvalidArgument, match=pattern) as info:
            call()
        assert info.value.status == 1
    assert s.length(np.int64(seq), layer=np.int32(0)) == 3  # numpy integers are integers
    still_usable(filled, seq)


def test_bools_are_not_integers(filled):
    s = filled.session
    seq = filled.new_sequence(3)
    q = filled.random_queries(1, 1)
    a, b = filled.random_rows(1)
    checks = [
        (r"^seq: expected an int64, got the bool True", lambda: s.length(True)),
        (r"^seq: .*bool", lambda: s.release(np.True_)),
        (r"^layer: .*bool", lambda: s.length(seq, layer=False)),
        (r"^seqs\[0\]: .*bool", lambda: s.decode(0, [True], q)),
        (r"^seqs\[0\]: .*bool", lambda: s.decode(0, np.array([True]), q)),
        (r"^counts\[0\]: .*bool", lambda: s.append_many(0, [seq], a, b, counts=[True])),
        (r"^seq: .*bool", lambda: s.append(0, True, a, b)),
        (r"^s_q: .*bool", lambda: s.predict_cost(1, 10, s_q=True)),
    ]
    for pattern, call in checks:
        with pytest.raises(gqla.InvalidArgument, match=pattern):
            call()
    assert s.length(seq) == 3
    still_usable(filled, seq)


def test_overlapping_strides_are_refused(filled):
    s, c = filled.session, filled.config
    seqs = [filled.new_sequence(4), filled.new_sequence(6)]
    q = filled.random_queries(2, 1)
    H, Dv = c.num_heads, c.value_dim
    buffer = np.full(2 * H * Dv, np.nan, np.float32)
    item = buffer.itemsize
    # Heads half a row apart: head h's second half is head h+1's first half.
    heads_overlap = np.lib.stride_tricks.as_strided(
        buffer, (2, 1, H, Dv), (H * Dv * item, H * Dv * item, Dv // 2 * item, item))
    with pytest.raises(gqla.InvalidArgument, match=r"^out: strides overlap"):
        s.decode(0, seqs, q, out=heads_overlap)
    # Both sequences on the same rows.
    same_rows = np.lib.stride_tricks.as_strided(buffer, (2, 1, H, Dv), (Dv * item, H * Dv * item, Dv * item, item))
    with pytest.raises(gqla.InvalidArgument, match=r"^out: strides overlap"):
        s.decode(0, seqs, q, out=same_rows)
    lse_buffer = np.full(2 * H, np.nan, np.float32)
    lse_overlap = np.lib.stride_tricks.as_strided(lse_buffer, (2, 1, H), (item, H * item, item))
    with pytest.raises(gqla.InvalidArgument, match=r"^lse: strides overlap"):
        s.decode(0, seqs, q, out=np.empty((2, 1, H, Dv), np.float32), lse=lse_overlap)
    assert np.isnan(buffer).all() and np.isnan(lse_buffer).all()

    # Disjoint but permuted is fine: o stored as [H, B, Dv].
    permuted = np.full((H, 2, Dv), np.nan, np.float32).transpose(1, 0, 2)[:, None]
    o = s.decode(0, seqs, q, out=permuted)
    o_ref, _ = filled.reference(seqs, q)
    assert o is permuted and ref.relative_error(o, o_ref) <= 1e-5
