# SPDX-License-Identifier: Apache-2.0
"""Sparse (top-k) attention through Session.attend(indices=...): numpy int32
arrays and DLPack int32 tensors, every form, against a float64 reference of
dense attention restricted to the listed positions."""

import numpy as np
import pytest

import gqla
import reference as ref
from cases import gqa_session, gqla_session


def listed_keys(filled, seq, layer=0):
    """float64 keys [G, L, Dq] and values [G, L, Dv] as the cache stores them."""
    c = filled.config
    a, b = filled.cache(seq, layer)
    a, b = ref.as_stored(a, c.cache_dtype).astype(np.float64), ref.as_stored(b, c.cache_dtype).astype(np.float64)
    if c.kind == "gqa":
        return a.transpose(1, 0, 2), b.transpose(1, 0, 2)
    w = filled.weights[layer].astype(np.float64)
    groups, dc, dv = c.num_kv_heads, c.nope_dim, c.value_dim
    w = w.reshape(groups, dc + dv, c.latent_dim)
    kc = np.einsum("gnr,lr->gln", w[:, :dc], a)
    v = np.einsum("gnr,lr->gln", w[:, dc:], a)
    keys = np.concatenate([kc, np.broadcast_to(b, (groups,) + b.shape)], axis=-1)
    return keys, v


def sparse_reference(filled, seq, q, idx, layer=0):
    """o [n, H, Dv], lse [n, H] of the n queries q of one sequence with
    lists idx [n, K]: visible entries only, repeats counted."""
    c = filled.config
    keys, values = listed_keys(filled, seq, layer)
    length = keys.shape[1]
    n, heads = q.shape[0], q.shape[1]
    scale = c.softmax_scale or 1.0 / np.sqrt(keys.shape[-1])
    group = np.arange(heads) // (heads // c.num_kv_heads)
    o = np.zeros((n, heads, values.shape[-1]))
    lse = np.full((n, heads), -np.inf)
    for i in range(n):
        pos = [int(j) for j in idx[i] if 0 <= j <= length - n + i]
        if not pos:
            continue
        for h in range(heads):
            k, v = keys[group[h]][pos], values[group[h]][pos]
            s = scale * (k @ q[i, h].astype(np.float64))
            peak = s.max()
            w = np.exp(s - peak)
            o[i, h] = (w / w.sum()) @ v
            lse[i, h] = peak + np.log(w.sum())
    return o, lse


def random_lists(rng, length, n, topk, empty=None):
    """Lists with visible positions, -1, the causal tail, out-of-range
    entries and repeats; query `empty` lists nothing visible."""
    out = np.empty((n, topk), np.int32)
    for i in range(n):
        limit = length - n + i
        row = rng.integers(0, limit + 1, topk)
        kinds = rng.integers(0, 6, topk)
        row = np.where(kinds == 0, -1, row)
        row = np.where(kinds == 1, length + rng.integers(0, 50, topk), row)
        if limit + 1 < length:
            row = np.where(kinds == 2, rng.integers(limit + 1, length, topk), row)
        row[1::7] = row[0]  # repeats
        if i == empty:
            row = np.full(topk, -1) if limit + 1 >= length else rng.integers(limit + 1, length, topk)
        out[i] = row
    return out


def check(filled, seqs, q_rows, idx, q_lens, path, *, uniform):
    c = filled.config
    q = q_rows.reshape(len(seqs), -1, c.num_heads, c.query_dim) if uniform else q_rows
    o, lse, taken = filled.session.attend(0, seqs, q, q_lens=None if uniform else q_lens, return_lse=True,
                                          path=path, indices=idx, return_path=True)
    o = np.asarray(o, np.float64).reshape(-1, c.num_heads, c.output_dim)
    lse = np.asarray(lse, np.float64).reshape(-1, c.num_heads)
    idx = idx._array if isinstance(idx, DLPackOnly) else idx
    idx_rows = np.asarray(idx).reshape(-1, np.asarray(idx).shape[-1])
    row = 0
    want_o, want_l = [], []
    for seq, n in zip(seqs, q_lens):
        ro, rl = sparse_reference(filled, seq, q_rows[row:row + n], idx_rows[row:row + n])
        want_o.append(ro)
        want_l.append(rl)
        row += n
    want_o, want_l = np.concatenate(want_o), np.concatenate(want_l)
    empty = np.isinf(want_l)
    assert np.all(o[empty] == 0.0) and np.all(lse[empty] == -np.inf)
    tol = ref.tolerance(c.cache_dtype, c.io_dtype)
    assert ref.relative_error(o[~empty], want_o[~empty]) <= tol
    assert ref.lse_error(lse[~empty], want_l[~empty]) <= tol
    return taken


FORMS = [("gqa-kind", "gqa"), ("gqla", "absorb"), ("gqla", "gqa_transient"), ("gqla-kept", "gqa")]


@pytest.mark.parametrize("kind,path", FORMS)
@pytest.mark.parametrize("cache_dtype", ["f32", "f16", "bf16"])
def test_sparse_matches_reference(rng, kind, path, cache_dtype):
    if kind == "gqa-kind":
        filled = gqa_session(rng, cache_dtype=cache_dtype, page_size=16)
    else:
        filled = gqla_session(rng, cache_dtype=cache_dtype, page_size=16)
        if kind == "gqla-kept":
            filled.session.select_path("gqa")
    lengths = [1, 15, 16, 17, 90, 300]
    seqs = [filled.new_sequence(n, chunk=23) for n in lengths]
    c = filled.config
    for s_q in (1, 3, 8):
        use = [s for s, n in zip(seqs, lengths) if n >= s_q]
        topk = 33
        idx = np.concatenate([random_lists(rng, lengths[seqs.index(s)], s_q, topk, empty=0 if i == 0 else None)
                              for i, s in enumerate(use)])
        q = rng.standard_normal((len(use) * s_q, c.num_heads, c.query_dim)).astype(np.float32)
        taken = check(filled, use, q, idx, [s_q] * len(use), path, uniform=True)
        assert taken == path
    # Ragged, and a long list cut across threads.
    q_lens = [1, 1, 3, 1, 8, 1]
    idx = np.concatenate([random_lists(rng, n, k, 700) for n, k in zip(lengths, q_lens)])
    q = rng.standard_normal((sum(q_lens), c.num_heads, c.query_dim)).astype(np.float32)
    check(filled, seqs, q, idx, q_lens, path, uniform=False)


class DLPackOnly:
    """An int32 tensor seen only through the DLPack protocol (numpy's own
    __dlpack__), as a framework tensor would hand it over."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_sparse_accepts_dlpack_int32(rng):
    if not hasattr(np.empty(1), "__dlpack__"):
        pytest.skip("numpy without DLPack export")
    filled = gqla_session(rng, page_size=16)
    seq = filled.new_sequence(200, chunk=37)
    c = filled.config
    idx = random_lists(rng, 200, 2, 50)
    q = rng.standard_normal((2, c.num_heads, c.query_dim)).astype(np.float32)
    check(filled, [seq], q, DLPackOnly(idx), [2], "absorb", uniform=True)


def test_sparse_3d_indices_and_bad_indices(rng):
    filled = gqla_session(rng, page_size=16)
    seq = filled.new_sequence(64)
    c = filled.config
    q = rng.standard_normal((1, 2, c.num_heads, c.query_dim)).astype(np.float32)
    idx = random_lists(rng, 64, 2, 9)
    check(filled, [seq], q.reshape(2, c.num_heads, c.query_dim), idx[None], [2], "absorb", uniform=True)
    with pytest.raises(gqla.InvalidArgument, match="indices"):
        filled.session.attend(0, [seq], q, indices=idx.astype(np.float32))  # refused by the binding
    with pytest.raises(gqla.InvalidArgument, match="indices"):
        filled.session.attend(0, [seq], q, indices=idx[:1])
    with pytest.raises(gqla.InvalidArgument, match="indices"):
        filled.session.attend(0, [seq], q, indices=np.zeros((2, 0), np.int32))
    with pytest.raises(gqla.InvalidArgument, match="indices"):
        filled.session.attend(0, [seq], q, indices=idx.astype(np.int64))
