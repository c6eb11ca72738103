# SPDX-License-Identifier: Apache-2.0
"""Decode results against the float64 reference, within the dtype
tolerances: both kinds, both GQLA paths, every cache dtype, s_q
1..5, ragged batches around page boundaries, long contexts, fork, path
switches and several layers."""

import numpy as np
import pytest

import cases
import reference as ref

CACHE_DTYPES = ["f32", "f16", "bf16"]
PAGE = 16


def ragged_lengths(s_q):
    # Around page boundaries (page_size ± 1) and one multi-page sequence.
    return [max(s_q, 1), PAGE - 1, PAGE, PAGE + 1, 3 * PAGE + 5, 130]


def check_decode(filled, seqs, s_q, tolerance, layer=0):
    """o and lse within `tolerance` of the reference on the inputs as the
    cache stores them, and within the looser quantization bound of the
    reference on the inputs as given."""
    q = filled.random_queries(len(seqs), s_q)
    o, lse = filled.decode(seqs, q, layer=layer, return_lse=True)
    assert np.isfinite(o).all(), "output left poisoned"
    o_ref, lse_ref = filled.reference(seqs, q, layer=layer)
    assert ref.relative_error(o, o_ref) <= tolerance
    assert ref.lse_error(lse, lse_ref) <= tolerance
    c = filled.config
    if c.cache_dtype in ("f32", c.io_dtype):
        return  # the cache stores the inputs unchanged
    given_tolerance = ref.quantization_tolerance(c.cache_dtype, c.io_dtype)
    o_given, lse_given = filled.reference(seqs, q, layer=layer, as_stored=False)
    assert ref.relative_error(o, o_given) <= given_tolerance
    assert ref.lse_error(lse, lse_given) <= given_tolerance


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("s_q", [1, 2, 3, 4, 5])
def test_gqa_ragged_batch(rng, cache_dtype, s_q):
    filled = cases.gqa_session(rng, cache_dtype=cache_dtype, page_size=PAGE)
    with filled.session:
        seqs = [filled.new_sequence(n, chunk=7) for n in ragged_lengths(s_q)]
        check_decode(filled, seqs, s_q, ref.TOLERANCE[cache_dtype])


@pytest.mark.parametrize("path", ["gqa", "absorb"])
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("s_q", [1, 2, 3, 4, 5])
def test_gqla_ragged_batch(rng, path, cache_dtype, s_q):
    filled = cases.gqla_session(rng, cache_dtype=cache_dtype, page_size=PAGE, path=path)
    with filled.session:
        assert filled.session.path == path
        seqs = [filled.new_sequence(n, chunk=11) for n in ragged_lengths(s_q)]
        rng.shuffle(seqs)  # batch order need not follow creation order
        check_decode(filled, seqs, s_q, ref.TOLERANCE[cache_dtype])


@pytest.mark.parametrize("num_groups", [2, 3, 6])
def test_gqla_group_counts(rng, num_groups):
    # G = H is DeepSeek MLA; G = 2 and 3 are the odd groupings of H = 6.
    filled = cases.gqla_session(rng, num_groups=num_groups, path="absorb")
    with filled.session:
        seqs = [filled.new_sequence(n) for n in (3, 50)]
        check_decode(filled, seqs, 2, 1e-5)


@pytest.mark.parametrize("path", ["gqa", "absorb"])
def test_gqla_long_context(rng, path):
    filled = cases.gqla_session(rng, path=path, page_size=64)
    with filled.session:
        seqs = [filled.new_sequence(3000, chunk=1000), filled.new_sequence(1)]
        check_decode(filled, seqs[:1], 3, 1e-5)
        check_decode(filled, seqs, 1, 1e-5)


def test_gqa_long_context(rng):
    filled = cases.gqa_session(rng, page_size=64)
    with filled.session:
        seqs = [filled.new_sequence(2500, chunk=999), filled.new_sequence(2)]
        check_decode(filled, seqs, 2, 1e-5)


def test_paths_agree_and_switch_back_and_forth(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=PAGE, num_layers=2)
    s = filled.session
    with s:
        seqs = [filled.new_sequence(n) for n in (1, 17, 90)]
        for seq in seqs:
            filled.append(seq, 5, layer=1)  # the switch expands every layer
        q = filled.random_queries(len(seqs), 1)
        on_absorb = filled.decode(seqs, q)
        s.select_path("gqa")
        assert s.path == "gqa" and s.requested_path == "gqa"
        assert s.stats()["expanded_bytes"] > 0
        on_gqa = filled.decode(seqs, q)
        assert ref.relative_error(on_gqa, on_absorb) <= 1e-5
        # Tokens appended while on the GQA path are expanded as they come.
        for seq in seqs:
            filled.append(seq, 9)
        check_decode(filled, seqs, 3, 1e-5)
        check_decode(filled, seqs, 2, 1e-5, layer=1)
        s.select_path("absorb")
        assert s.stats()["expanded_bytes"] == 0
        check_decode(filled, seqs, 3, 1e-5)
        s.select_path("auto")
        assert s.path in ("gqa", "absorb") and s.requested_path == "auto"
        check_decode(filled, seqs, 1, 1e-5)


def test_fork_shares_prefix_and_diverges(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=PAGE)
    with filled.session as s:
        parent = filled.new_sequence(PAGE * 2 + 5)  # ends inside a partial page
        child = filled.fork(parent)
        assert s.length(child) == s.length(parent) == PAGE * 2 + 5
        filled.append(parent, 4)   # copy-on-write of the shared partial page
        filled.append(child, 13)
        check_decode(filled, [parent, child], 2, 1e-5)
        s.release(parent)
        check_decode(filled, [child], 1, 1e-5)


def test_gqa_fork(rng):
    filled = cases.gqa_session(rng, page_size=PAGE)
    with filled.session:
        parent = filled.new_sequence(PAGE + 3)
        child = filled.fork(parent)
        filled.append(child, 2)
        check_decode(filled, [parent, child], 1, 1e-5)


def test_append_many_ragged(rng):
    filled = cases.gqla_session(rng, path="absorb", page_size=PAGE)
    s = filled.session
    with s:
        seqs = [s.add_sequence() for _ in range(40)]
        for _ in range(3):
            counts = rng.integers(0, 60, size=len(seqs))
            counts[0] = max(counts[0], 1)
            a, b = filled.random_rows(int(counts.sum()))
            s.append_many(0, seqs, ref.to_io(a, "f32"), ref.to_io(b, "f32"), counts)
            start = 0
            for seq, n in zip(seqs, counts):
                if n:
                    filled.record(seq, 0, a[start:start + n], b[start:start + n])
                start += n
        live = [seq for seq in seqs if (seq, 0) in filled.tokens]
        for seq in live:
            assert s.length(seq) == sum(len(p[0]) for p in filled.tokens[(seq, 0)])
        check_decode(filled, live, 1, 1e-5)


def test_gqa_append_many(rng):
    filled = cases.gqa_session(rng, page_size=PAGE)
    s = filled.session
    with s:
        seqs = [s.add_sequence() for _ in range(5)]
        counts = np.array([3, 1, 20, 16, 2], dtype=np.int64)
        a, b = filled.random_rows(int(counts.sum()))
        s.append_many(0, np.array(seqs, dtype=np.int64), a, b, counts)
        start = 0
        for seq, n in zip(seqs, counts):
            filled.record(seq, 0, a[start:start + n], b[start:start + n])
            start += n
        check_decode(filled, seqs, 1, 1e-5)


@pytest.mark.parametrize("io_dtype,cache_dtype", [("f16", "f16"), ("bf16", "bf16"), ("f16", "f32")])
@pytest.mark.parametrize("kind", ["gqa", "gqla"])
def test_half_precision_io(rng, kind, io_dtype, cache_dtype):
    make = cases.gqla_session if kind == "gqla" else cases.gqa_session
    filled = make(rng, io_dtype=io_dtype, cache_dtype=cache_dtype, page_size=PAGE)
    with filled.session:
        seqs = [filled.new_sequence(n) for n in (2, 33)]
        # Output rounding to the io dtype adds to the cache tolerance.
        check_decode(filled, seqs, 2, ref.tolerance(cache_dtype, io_dtype))


def test_custom_softmax_scale_and_layers(rng):
    filled = cases.gqla_session(rng, num_layers=3, softmax_scale=0.05, path="gqa")
    with filled.session:
        seq = filled.new_sequence(20, layer=2)
        filled.append(seq, 7, layer=0)
        check_decode(filled, [seq], 1, 1e-5, layer=2)
        check_decode(filled, [seq], 4, 1e-5, layer=0)
