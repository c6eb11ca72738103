# SPDX-License-Identifier: Apache-2.0
"""Group-sharded sessions (tensor parallelism): the outputs of one session
per shard, gathered over heads, equal the full session's and the float64
reference's; a shard without the latent keeps 256 elements per token of
LLaMA-3-8B-GQLA and refuses what needs the latent; bad shards are refused
naming the field."""

import numpy as np
import pytest

import gqla
import reference as ref

SHAPE = dict(num_heads=8, num_groups=4, latent_dim=40, nope_dim=16, rope_dim=8, value_dim=12)
SHARDS = [(0, 1), (1, 2), (3, 1)]  # uneven on purpose


def make(begin=None, count=None, keep_latent=None, path="auto", cache="f32"):
    cfg = gqla.Config.gqla(**SHAPE, device="cpu", threads=2, path=path, cache_dtype=cache,
                           max_tokens=1024, page_size=4, max_q_len=8)
    cfg.group_begin, cfg.group_count, cfg.keep_latent = begin, count, keep_latent
    return gqla.Session(cfg)


def fill(sessions, rng, lengths, weights):
    """The same random tokens in every session; returns the float32 rows."""
    rows = []
    for s in sessions:
        s.set_weights(0, weights)
    for length in lengths:
        c = rng.standard_normal((length, SHAPE["latent_dim"])).astype(np.float32)
        kr = rng.standard_normal((length, SHAPE["rope_dim"])).astype(np.float32)
        for s in sessions:
            seq = s.add_sequence()
            s.append(0, seq, c, kr)
        rows.append((seq, c, kr))
    return rows


def reference(rows, q, q_lens, weights):
    out, lses, start = [], [], 0
    for (_, c, kr), n in zip(rows, q_lens):
        o, lse = ref.gqla(q[start:start + n], c, kr, weights, SHAPE["num_groups"], SHAPE["nope_dim"],
                          SHAPE["value_dim"])
        out.append(o)
        lses.append(lse)
        start += n
    return np.concatenate(out), np.concatenate(lses)


@pytest.mark.parametrize("keep_latent,paths", [(1, ["auto", "gqa", "absorb", "transient"]), (0, ["auto", "gqa"])])
def test_shards_gathered_over_heads_equal_full_session_and_reference(rng, keep_latent, paths):
    weights = (rng.standard_normal((4 * 28, 40)) / np.sqrt(40)).astype(np.float32)
    full = make()
    ranks = [make(b, n, keep_latent) for b, n in SHARDS]
    rows = fill([full] + ranks, rng, [13, 30, 7], weights)
    seqs = [seq for seq, _, _ in rows]
    q_lens = [1, 4, 2]
    q = rng.standard_normal((sum(q_lens), 8, 24)).astype(np.float32)
    want_o, want_lse = reference(rows, q, q_lens, weights)
    n_rep = 2
    for path in paths:
        o_full, lse_full = full.attend(0, seqs, q, q_lens=q_lens, return_lse=True, path=path)
        o = np.full_like(o_full, np.nan)
        lse = np.full_like(lse_full, np.nan)
        for (begin, count), s in zip(SHARDS, ranks):
            heads = slice(begin * n_rep, (begin + count) * n_rep)
            o[:, heads], lse[:, heads] = s.attend(0, seqs, np.ascontiguousarray(q[:, heads]), q_lens=q_lens,
                                                  return_lse=True, path=path)
        assert ref.relative_error(o, want_o) <= 1e-5, path
        assert ref.relative_error(o_full, want_o) <= 1e-5, path
        assert ref.relative_error(o, o_full) <= 2e-5, path
        assert np.max(np.abs(lse - want_lse) / np.maximum(1, np.abs(want_lse))) <= 1e-5, path


def test_shard_weights_whole_or_rows_give_identical_outputs(rng):
    weights = (rng.standard_normal((4 * 28, 40)) / np.sqrt(40)).astype(np.float32)
    a, b = make(1, 2), make(1, 2)
    rows = fill([a], rng, [9], weights)
    b.set_weights(0, weights[28:3 * 28])
    seq_b = b.add_sequence()
    b.append(0, seq_b, rows[0][1], rows[0][2])
    q = rng.standard_normal((1, 2, 4, 24)).astype(np.float32)
    for path in ("gqa", "absorb"):
        a.select_path(path)
        b.select_path(path)
        assert np.array_equal(a.decode(0, [rows[0][0]], q), b.decode(0, [seq_b], q))
    with pytest.raises(gqla.InvalidArgument, match="w_ukv.*112.*56"):
        b.set_weights(0, weights[:3 * 28])


def test_llama3_gqla_rank_without_latent_keeps_256_elements_per_token():
    def stats(keep_latent, path):
        cfg = gqla.Config.gqla(num_heads=32, num_groups=8, latent_dim=512, nope_dim=64, rope_dim=64, value_dim=128,
                               device="cpu", threads=1, max_tokens=256, path=path)
        cfg.group_begin, cfg.group_count, cfg.keep_latent = 3, 1, keep_latent
        with gqla.Session(cfg) as s:
            assert s.config.group_begin == 3 and s.config.group_count == 1
            assert s.config.num_heads == 32
            return s.stats()
    drop, keep = stats(0, "gqa"), stats(1, "gqa")
    assert (drop["kept_bytes_per_token"] + drop["expanded_bytes_per_token"]) // 2 == 256  # bf16
    assert keep["kept_bytes_per_token"] // 2 == 576
    assert (keep["kept_bytes_per_token"] + keep["expanded_bytes_per_token"]) // 2 == 768
    assert drop["latent_bytes"] == 256 * 64 * 2


def test_session_without_latent_refuses_what_needs_it(rng):
    weights = (rng.standard_normal((4 * 28, 40)) / np.sqrt(40)).astype(np.float32)
    s = make(2, 2, keep_latent=0)
    rows = fill([s], rng, [10], weights)
    seq = rows[0][0]
    before = s.stats()
    with pytest.raises(gqla.InvalidState, match="keep_latent = 0"):
        s.select_path("absorb")
    q = rng.standard_normal((2, 4, 24)).astype(np.float32)
    for path in ("absorb", "transient"):
        with pytest.raises(gqla.InvalidState, match="latent"):
            s.attend(0, [seq], q, q_lens=[2], path=path)
    with pytest.raises(gqla.InvalidState, match="sequence_export"):
        s.export_sequence(seq)
    with pytest.raises(gqla.InvalidState, match="holds tokens"):
        s.set_weights(0, weights)
    assert s.stats() == before
    assert s.path == "gqa"
    o = s.attend(0, [seq], q, q_lens=[2])
    want, _ = ref.gqla(q, rows[0][1], rows[0][2], weights[2 * 28:], 2, 16, 12)
    assert ref.relative_error(o, want) <= 1e-5


@pytest.mark.parametrize("fields,name", [
    (dict(group_count=5), "config.group_count"),
    (dict(group_begin=3, group_count=2), "config.group_begin"),
    (dict(keep_latent=0, path="absorb"), "config.path"),
    (dict(keep_latent=2), "config.keep_latent"),
])
def test_bad_shard_configs_name_the_field(fields, name):
    cfg = gqla.Config.gqla(**SHAPE, device="cpu")
    for key, value in fields.items():
        setattr(cfg, key, value)
    with pytest.raises(gqla.InvalidArgument, match=name):
        cfg.validate()
    gqa = gqla.Config.gqa(8, 4, 24, device="cpu")
    gqa.keep_latent = 0
    with pytest.raises(gqla.InvalidArgument, match="config.keep_latent"):
        gqa.validate()


def test_fp8_shards_without_the_latent_hold_what_a_latent_keeping_session_expands(rng):
    """An 8-bit cache without the latent: each rank's GQA-path outputs are
    those of a full fp8 session that keeps the latent (same stored bytes,
    same kernels: equal but for the order of f32 sums), within the 8-bit
    bound of the reference."""
    weights = (rng.standard_normal((4 * 28, 40)) / np.sqrt(40)).astype(np.float32)
    full = make(path="gqa", cache="fp8_e4m3")
    ranks = [make(b, n, 0, path="gqa", cache="fp8_e4m3") for b, n in SHARDS]
    rows = fill([full] + ranks, rng, [13, 30, 7], weights)
    seqs = [seq for seq, _, _ in rows]
    q_lens = [1, 4, 2]
    q = rng.standard_normal((sum(q_lens), 8, 24)).astype(np.float32)
    want_o, _ = reference(rows, q, q_lens, weights)
    o_full = full.attend(0, seqs, q, q_lens=q_lens, path="gqa")
    o = np.full_like(o_full, np.nan)
    for (begin, count), s in zip(SHARDS, ranks):
        heads = slice(begin * 2, (begin + count) * 2)
        o[:, heads] = s.attend(0, seqs, np.ascontiguousarray(q[:, heads]), q_lens=q_lens, path="gqa")
    assert ref.relative_error(o, o_full) <= 1e-5  # an 8-bit rounding apart would be ~1e-2
    assert ref.relative_error(o, want_o) <= 6e-2
