# SPDX-License-Identifier: Apache-2.0
"""Session.attend: ragged query counts (q_lens) against a float64 reference
on every path, the uniform form equal to decode, the return convention,
refused arguments naming themselves, max_q_tokens and the cost report's
per-call fields."""

import numpy as np
import pytest

import gqla
import cases
import reference as ref

PAGE = 16
# Around page boundaries: a decoding sequence (1 query), whole prompts
# (q_len = L) and prefill chunks ending inside a page.
LENGTHS = [1, PAGE - 1, PAGE, PAGE + 1, 40]
Q_LENS = [1, PAGE - 1, PAGE, 5, 9]


def ragged_reference(q, keys, values, q_lens, num_groups, scale):
    """float64 (o [N, H, Dv], lse [N, H]) of packed query rows, written from
    the definition: sequence i of length L owns the next q_lens[i] rows;
    its query k sees positions j <= L - q_lens[i] + k, and head h reads KV
    group h // (H / G). keys[i] [L, G, Dk], values[i] [L, G, Dv]."""
    q = np.asarray(q, np.float64)
    heads = q.shape[1]
    outs, lses = [], []
    row = 0
    for k_seq, v_seq, n in zip(keys, values, q_lens):
        k_seq, v_seq = np.asarray(k_seq, np.float64), np.asarray(v_seq, np.float64)
        length = k_seq.shape[0]
        for k in range(n):
            visible = length - n + k + 1
            o = np.empty((heads, v_seq.shape[-1]))
            lse = np.empty(heads)
            for h in range(heads):
                g = h // (heads // num_groups)
                scores = scale * (k_seq[:visible, g] @ q[row + k, h])
                peak = scores.max()
                weights = np.exp(scores - peak)
                o[h] = weights @ v_seq[:visible, g] / weights.sum()
                lse[h] = peak + np.log(weights.sum())
            outs.append(o)
            lses.append(lse)
        row += n
    return np.stack(outs), np.stack(lses)


def gqla_reference(filled, seqs, q_lens, q):
    """The same for GQLA, through the shared float64 GQLA reference
    (tests/python/reference.py), one sequence's rows at a time, on the
    latents as the cache stores them."""
    c = filled.config
    outs, lses = [], []
    row = 0
    for seq, n in zip(seqs, q_lens):
        latent, rope = filled.cache(seq)
        o, lse = ref.gqla(q[row:row + n], ref.as_stored(latent, c.cache_dtype),
                          ref.as_stored(rope, c.cache_dtype), filled.weights[0],
                          c.num_kv_heads, c.nope_dim, c.value_dim, c.softmax_scale or None)
        outs.append(o)
        lses.append(lse)
        row += n
    return np.concatenate(outs), np.concatenate(lses)


def packed_queries(filled, q_lens):
    c = filled.config
    q = filled.rng.standard_normal((sum(q_lens), c.num_heads, c.query_dim)).astype(np.float32)
    return ref.from_io(ref.to_io(q, filled.io_dtype)).astype(np.float32)


def attend_packed(filled, seqs, q_lens, q, path=None):
    """attend into NaN-poisoned buffers; returns float64 (o, lse) and the path taken."""
    c = filled.config
    rows = q.shape[0]
    out = ref.poison_like((rows, c.num_heads, c.output_dim), filled.io_dtype)
    lse = np.full((rows, c.num_heads), np.nan, np.float32)
    o, lse_out, taken = filled.session.attend(0, seqs, ref.to_io(q, filled.io_dtype), q_lens=q_lens,
                                              out=out, lse=lse, path=path, return_path=True)
    assert o is out and lse_out is lse
    return ref.from_io(o), lse.astype(np.float64), taken


def filled_gqla(rng, cache_dtype="f32", **overrides):
    filled = cases.gqla_session(rng, cache_dtype=cache_dtype, page_size=PAGE, path="absorb", **overrides)
    seqs = [filled.new_sequence(n, chunk=7) for n in LENGTHS]
    return filled, seqs


# ---------------------------------------------------------------- numerics
@pytest.mark.parametrize("cache_dtype", ["f32", "bf16"])
def test_gqa_ragged_q_lens(rng, cache_dtype):
    filled = cases.gqa_session(rng, cache_dtype=cache_dtype, page_size=PAGE)
    with filled.session as s:
        seqs = [filled.new_sequence(n, chunk=7) for n in LENGTHS]
        q = packed_queries(filled, Q_LENS)
        cached = [filled.cache(seq) for seq in seqs]
        keys = [ref.as_stored(k, cache_dtype) for k, _ in cached]
        values = [ref.as_stored(v, cache_dtype) for _, v in cached]
        c = filled.config
        o_ref, lse_ref = ragged_reference(q, keys, values, Q_LENS, c.num_kv_heads,
                                          1.0 / np.sqrt(c.head_dim))
        # q_lens as a list, an int64 array (converted) and an int32 array (used in place).
        for q_lens, path in ((Q_LENS, None), (np.array(Q_LENS), "auto"),
                             (np.array(Q_LENS, np.int32), "gqa")):
            o, lse, taken = attend_packed(filled, seqs, q_lens, q, path)
            assert taken == "gqa"
            assert ref.relative_error(o, o_ref) <= ref.TOLERANCE[cache_dtype]
            assert ref.lse_error(lse, lse_ref) <= ref.TOLERANCE[cache_dtype]
        assert s.path == "gqa"


@pytest.mark.parametrize("cache_dtype", ["f32", "bf16"])
def test_gqla_ragged_q_lens_on_every_path(rng, cache_dtype):
    filled, seqs = filled_gqla(rng, cache_dtype)
    s = filled.session
    with s:
        rng.shuffle(seqs)  # the batch order need not follow creation order
        q_lens = [min(n, s.length(seq)) for n, seq in zip(Q_LENS[::-1], seqs)]
        q = packed_queries(filled, q_lens)
        o_ref, lse_ref = gqla_reference(filled, seqs, q_lens, q)
        tolerance = ref.TOLERANCE[cache_dtype]
        # No expanded cache is kept on the absorb path: 'gqa' runs transient.
        expected = {None: None, "auto": None, "absorb": "absorb", "gqa": "gqa_transient",
                    "gqa_transient": "gqa_transient", "transient": "gqa_transient"}
        outputs = []
        for path, taken_expected in expected.items():
            o, lse, taken = attend_packed(filled, seqs, q_lens, q, path)
            assert taken == taken_expected or (taken_expected is None and
                                               taken in ("absorb", "gqa_transient"))
            assert ref.relative_error(o, o_ref) <= tolerance, path
            assert ref.lse_error(lse, lse_ref) <= tolerance, path
            # The call's path is the call's: the session's stays as it was.
            assert s.path == "absorb" and s.requested_path == "absorb"
            assert s.stats()["expanded_bytes"] == 0
            outputs.append(o)
        agreement = 1e-5 if cache_dtype == "f32" else 2 * tolerance
        for o in outputs[1:]:
            assert ref.relative_error(o, outputs[0]) <= agreement
        # With the expanded cache kept, 'gqa' runs over it.
        s.select_path("gqa")
        for path in ("gqa", "transient"):
            o, lse, taken = attend_packed(filled, seqs, q_lens, q, path)
            assert taken == ("gqa" if path == "gqa" else "gqa_transient")
            assert ref.relative_error(o, o_ref) <= tolerance
            assert ref.lse_error(lse, lse_ref) <= tolerance


def test_uniform_attend_is_decode(rng):
    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        batch = seqs[2:]  # lengths 16, 17, 40
        q = filled.random_queries(len(batch), 3)
        o_decode, lse_decode = s.decode(0, batch, q, return_lse=True)
        o, lse = s.attend(0, batch, q, return_lse=True, path="absorb")
        assert o.shape == o_decode.shape and lse.shape == lse_decode.shape
        assert ref.relative_error(o, o_decode) <= 1e-6
        o_ref, lse_ref = filled.reference(batch, q)
        assert ref.relative_error(o, o_ref) <= 1e-5
        assert ref.lse_error(lse, lse_ref) <= 1e-5


def test_half_precision_io(rng):
    filled, seqs = filled_gqla(rng, cache_dtype="f16", io_dtype="f16")
    with filled.session:
        q = packed_queries(filled, Q_LENS)
        o_ref, lse_ref = gqla_reference(filled, seqs, Q_LENS, q)
        o, lse, _ = attend_packed(filled, seqs, Q_LENS, q, "transient")
        assert ref.relative_error(o, o_ref) <= ref.tolerance("f16", "f16")
        assert ref.lse_error(lse, lse_ref) <= ref.tolerance("f16", "f16")


def test_dlpack_query_is_read_in_place(rng):
    class DlpackOnly:
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__()

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        q = packed_queries(filled, Q_LENS)
        out = np.empty((q.shape[0], filled.config.num_heads, filled.config.output_dim), np.float32)
        o = s.attend(0, seqs, DlpackOnly(q), q_lens=Q_LENS, out=out)
        assert o is out
        assert ref.relative_error(o, gqla_reference(filled, seqs, Q_LENS, q)[0]) <= 1e-5


# --------------------------------------------------------- return values
def test_return_convention(rng):
    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        q = packed_queries(filled, Q_LENS)
        rows, heads, dv = q.shape[0], filled.config.num_heads, filled.config.output_dim
        o = s.attend(0, seqs, q, q_lens=Q_LENS)
        assert isinstance(o, np.ndarray) and o.shape == (rows, heads, dv) and o.dtype == np.float32
        o, lse = s.attend(0, seqs, q, q_lens=Q_LENS, return_lse=True)
        assert lse.shape == (rows, heads) and lse.dtype == np.float32
        o, path = s.attend(0, seqs, q, q_lens=Q_LENS, path="absorb", return_path=True)
        assert path == "absorb"
        o, lse, path = s.attend(0, seqs, q, q_lens=Q_LENS, return_lse=True, return_path=True)
        assert path in ("absorb", "gqa_transient")
        buffer = np.empty((rows, heads), np.float32)
        o, lse = s.attend(0, seqs, q, q_lens=Q_LENS, lse=buffer)  # an lse buffer implies return_lse
        assert lse is buffer
        uniform = s.attend(0, seqs[2:], filled.random_queries(3, 2))
        assert uniform.shape == (3, 2, heads, dv)


# ----------------------------------------------------------------- errors
def unchanged_and_usable(filled, seqs):
    for seq, n in zip(seqs, LENGTHS):
        assert filled.session.length(seq) == n
    q = packed_queries(filled, Q_LENS)
    o, _, _ = attend_packed(filled, seqs, Q_LENS, q)
    assert ref.relative_error(o, gqla_reference(filled, seqs, Q_LENS, q)[0]) <= 1e-5


@pytest.mark.parametrize("q_lens,reason", [
    (Q_LENS[:-1], "one entry short"),
    (Q_LENS + [1], "one entry too many"),
    ([1, 16, 15, 5, 9], "16 queries of a 15-token sequence (same total)"),
    ([1, 15, 16, 0, 14], "a sequence without queries"),
    ([1, 15, 16, -5, 19], "a negative count"),
])
def test_bad_q_lens_name_the_argument(rng, q_lens, reason):
    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        q = packed_queries(filled, Q_LENS)
        with pytest.raises(gqla.InvalidArgument, match="q_lens") as info:
            s.attend(0, seqs, q, q_lens=q_lens)
        assert info.value.status == 1, reason
        unchanged_and_usable(filled, seqs)


@pytest.mark.parametrize("q_lens,match", [
    ([1, True, 16, 5, 9], r"^q_lens\[1\]: .*bool"),
    ([1, 15, 16, 5, 2**31], r"^q_lens\[4\]: expected an int32"),
    ([1, 15, 16, 5, 9.0], r"^q_lens\[4\]: "),
    (5, r"^q_lens: expected a sequence of integers"),
])
def test_q_lens_that_are_not_int32_lists(rng, q_lens, match):
    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        q = packed_queries(filled, Q_LENS)
        with pytest.raises(gqla.InvalidArgument, match=match):
            s.attend(0, seqs, q, q_lens=q_lens)
        unchanged_and_usable(filled, seqs)


def test_bad_shapes_and_paths(rng):
    filled, seqs = filled_gqla(rng)
    with filled.session as s:
        q = packed_queries(filled, Q_LENS)
        with pytest.raises(gqla.InvalidArgument, match=r"^q: .*\[N, H, Dq\]"):
            s.attend(0, seqs, q[None], q_lens=Q_LENS)  # the uniform rank with q_lens
        with pytest.raises(gqla.InvalidArgument, match=r"^q: .*\[B, s_q, H, Dq\]"):
            s.attend(0, seqs, q)  # the packed rank without q_lens
        with pytest.raises(gqla.InvalidArgument, match="q"):
            s.attend(0, seqs, q[1:], q_lens=Q_LENS)  # one row short of sum(q_lens)
        with pytest.raises(gqla.InvalidArgument, match="path"):
            s.attend(0, seqs, q, q_lens=Q_LENS, path="fastest")
        with pytest.raises(gqla.InvalidArgument):
            s.select_path("gqa_transient")  # a form of one call, never a session path
        assert s.path == "absorb"
        unchanged_and_usable(filled, seqs)


def test_gqa_kind_accepts_auto_and_gqa_only(rng):
    filled = cases.gqa_session(rng, page_size=PAGE)
    with filled.session as s:
        seqs = [filled.new_sequence(n) for n in (3, 20)]
        q = packed_queries(filled, [1, 8])
        for path in ("auto", "gqa"):
            assert s.attend(0, seqs, q, q_lens=[1, 8], path=path, return_path=True)[1] == "gqa"
        for path in ("absorb", "gqa_transient"):
            with pytest.raises(gqla.InvalidArgument):
                s.attend(0, seqs, q, q_lens=[1, 8], path=path)


# ------------------------------------------------- config and cost model
def test_max_q_tokens_bounds_one_call(rng):
    filled = cases.gqla_session(rng, page_size=PAGE, max_q_len=40, max_q_tokens=48)
    with filled.session as s:
        assert filled.config.max_q_tokens == 48
        seqs = [filled.new_sequence(40) for _ in range(2)]
        s.attend(0, seqs, packed_queries(filled, [8, 40]), q_lens=[8, 40])
        with pytest.raises(gqla.InvalidArgument, match="max_q_tokens"):
            s.attend(0, seqs, packed_queries(filled, [9, 40]), q_lens=[9, 40])
    config = gqla.Config.gqla(**cases.ODD_GQLA, device="cpu")
    assert config.max_q_tokens is None and "max_q_tokens" not in config.to_c()
    config.max_q_tokens = 100
    assert gqla.Config.from_c(config.to_c()).max_q_tokens == 100


def test_cost_report_has_the_per_call_forms(rng):
    filled = cases.gqla_session(rng, page_size=PAGE)
    with filled.session as s:
        report = s.predict_cost(batch=1, context=4096, s_q=16)
        transient = report["transient"]
        assert transient["time_s"] > 0 and transient["flops"] > 0
        assert transient["bound"] in ("memory", "compute")
        assert report["call_chosen"] in ("absorb", "gqa_transient")
        assert report["chosen"] in ("gqa", "absorb")
    gqa_config = gqla.Config.gqa(num_heads=8, num_kv_heads=2, head_dim=64, device="cpu")
    report = gqla.predict_cost(gqa_config, batch=1, context=100)
    assert report["transient"] is None and report["call_chosen"] == "gqa"
