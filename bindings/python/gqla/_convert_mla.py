# SPDX-License-Identifier: Apache-2.0
"""MLA (DeepSeek-V2/V3, G = H) -> GQLA with G' < H groups, one layer.

The latent c, the rope key and RoPE stay as they are; only the
up-projections change. The n = H/G' heads of a group share one key
up-projection W'_UK[g] [d_c', r] and one value up-projection W'_UV[g]
[d_v', r]. Per group the stacked key rows of its heads, W_K [n*d_c, r], are
factored as A W'_UK[g] by a PCA of the group's keys under the latent's
covariance (the top d_c' left singular vectors A of W_K Sigma_c^(1/2), then
W'_UK[g] = A^T W_K, the least-squares fit for that A); head h's query keeps
q'_c = A_h^T q_c (A_h: head h's rows of A), so q'_c . W'_UK c = q_c . A_h
A^T W_K c, exact once d_c' reaches the rank of W_K. Values likewise, with
A_h folded into o_proj. The GQA-path cache shrinks from H*(d_c+d_v) to
G'*(d_c'+d_v') per token; d_c' = min(n*d_c, r) and d_v' = min(n*d_v, r) are
lossless.
"""

import time

import numpy as np

from ._convert_errors import ConversionError, positive_int
from ._convert_gqa import working_dtype
from ._convert_layers import DeepseekAttention, GQLALayer, causal_attention, rms_norm
from ._convert_linalg import complete_basis, matmul, principal_rows
from ._convert_report import LayerReport, dtype_bytes, eval_rows, relative_error
from ._convert_rope import apply_rope
from ._convert_tokens import token_set


def check_mla_budget(src, num_groups, nope_dim, value_dim):
    H, r = src.num_heads, src.kv_lora_rank
    groups = positive_int("num_groups", num_groups)
    if groups > H or H % groups:
        raise ConversionError(f"num_groups: {groups} must divide num_heads {H} (H % G != 0)")
    rep = H // groups
    nope_dim = positive_int("nope_dim", nope_dim)
    limit = min(rep * src.qk_nope_head_dim, r)
    if nope_dim > limit:
        raise ConversionError(f"nope_dim: {nope_dim} is larger than possible: a group's key up-projection has rank "
                              f"at most min(H/G*qk_nope_head_dim, kv_lora_rank) = {limit}")
    value_dim = positive_int("value_dim", value_dim)
    limit = min(rep * src.v_head_dim, r)
    if value_dim > limit:
        raise ConversionError(f"value_dim: {value_dim} is larger than possible: a group's value up-projection has "
                              f"rank at most min(H/G*v_head_dim, kv_lora_rank) = {limit}")
    return groups, nope_dim, value_dim


def _group_factor(stacked, latent_root, keep):
    """Orthonormal A [rows, keep]: the top principal directions of the
    outputs of `stacked` [rows, r] under the latent covariance."""
    weighted = matmul(stacked, latent_root)                  # [rows, r]
    _, basis = principal_rows(weighted.T.copy(), keep, tolerance=1e-13)
    return complete_basis(basis, keep)


def absorbed_attention(q_nope, q_rope, latent, rope_key, w_uk, w_uv, group_of_head, scale, query_pos, key_pos):
    """GQLA/MLA attention in the absorbed form, float64: per head
    q~ = W_UK^T q_nope scores the latent directly; o = W_UV (sum p c)."""
    q_latent = np.einsum("ihd,hdr->ihr", q_nope, w_uk[group_of_head])
    scores_keys = np.concatenate([np.asarray(latent, np.float64), np.asarray(rope_key, np.float64)], axis=1)
    q = np.concatenate([q_latent, q_rope], axis=-1)
    mixed = causal_attention(q, scores_keys[None], np.asarray(latent, np.float64)[None], query_pos, key_pos,
                             scale, np.zeros(q.shape[1], np.int64))
    return np.einsum("ihr,hvr->ihv", mixed, w_uv[group_of_head])


def convert_mla_layer(src, num_groups, nope_dim, value_dim, calibration=None, *, eval_tokens=32,
                      prior_weight=0.05, seed=0, evaluate=True, holdout=0, cache_dtype="bf16", layer_index=0,
                      dtype=None):
    """Convert one DeepSeek MLA layer to G' groups; returns ``(GQLALayer, LayerReport)``."""
    if not isinstance(src, DeepseekAttention):
        raise ConversionError(f"src: expected a DeepseekAttention, got {type(src).__name__}")
    src.check()
    if src.kv_a_proj_bias is not None or src.o_proj_bias is not None:
        raise ConversionError("source: attention biases (kv_a_proj_with_mqa.bias, o_proj.bias) are not supported "
                              "for an MLA source; a LLaMA-sourced DeepSeek-V3 export is converted from its GQLA "
                              "checkpoint instead")
    groups, dc2, dv2 = check_mla_budget(src, num_groups, nope_dim, value_dim)
    eval_tokens = positive_int("eval_tokens", eval_tokens)
    bytes_per = dtype_bytes(cache_dtype)
    start = time.perf_counter()
    H, r, dc, dr, dv, d = (src.num_heads, src.kv_lora_rank, src.qk_nope_head_dim, src.qk_rope_head_dim,
                           src.v_head_dim, src.hidden_size)
    rep = H // groups
    weights_in = [w for w in (src.kv_a_proj_with_mqa, src.kv_b_proj, src.o_proj, src.q_proj, src.q_b_proj)
                  if w is not None]
    wd = working_dtype(weights_in, dtype)
    toks = token_set(calibration, d, r, wd, prior_weight, seed, holdout)
    kv_a = np.asarray(src.kv_a_proj_with_mqa, wd)
    raw = matmul(toks.tokens, kv_a.T.copy())                                # [N, r + d_r]
    latent = rms_norm(raw[:, :r], src.kv_a_layernorm, src.rms_norm_eps)    # float64 [N, r]

    # Latent covariance and its square root (weights normalized to a mean).
    w = toks.weights / toks.weights.sum()
    cov = matmul((latent * w[:, None]).T.copy(), latent)
    values, vectors = np.linalg.eigh((cov + cov.T) * 0.5)
    root = (vectors * np.sqrt(np.maximum(values, 0.0))) @ vectors.T

    kv_b = np.asarray(src.kv_b_proj, np.float64).reshape(H, dc + dv, r)
    w_uk = kv_b[:, :dc]                                                     # [H, dc, r]
    w_uv = kv_b[:, dc:]
    new_uk, new_uv, key_factors, value_factors = [], [], [], []
    for g in range(groups):
        heads = slice(g * rep, (g + 1) * rep)
        stacked_k = w_uk[heads].reshape(rep * dc, r)
        stacked_v = w_uv[heads].reshape(rep * dv, r)
        a_k = _group_factor(stacked_k, root, dc2)                           # [rep*dc, dc2]
        a_v = _group_factor(stacked_v, root, dv2)
        new_uk.append(a_k.T @ stacked_k)
        new_uv.append(a_v.T @ stacked_v)
        key_factors.append(a_k.reshape(rep, dc, dc2))
        value_factors.append(a_v.reshape(rep, dv, dv2))
    key_factors = np.concatenate(key_factors)                               # [H, dc, dc2]
    value_factors = np.concatenate(value_factors)                           # [H, dv, dv2]
    w_ukv = np.concatenate([np.stack(new_uk), np.stack(new_uv)], axis=1).reshape(groups * (dc2 + dv2), r)

    # Queries: each head's nope rows through its factor; rope rows as they were.
    q_source = src.q_proj if src.q_proj is not None else src.q_b_proj
    q_w = np.asarray(q_source, wd).reshape(H, dc + dr, -1)
    q_nope = np.stack([matmul(key_factors[h].T.astype(wd).copy(), q_w[h, :dc]) for h in range(H)])
    q_new = np.concatenate([q_nope, q_w[:, dc:]], axis=1).reshape(H * (dc2 + dr), -1)
    o_w = np.asarray(src.o_proj, wd)
    o_new = np.concatenate([matmul(o_w[:, h * dv:(h + 1) * dv], value_factors[h].astype(wd))
                            for h in range(H)], axis=1)
    lora = src.q_proj is None
    layer = GQLALayer(
        num_heads=H, num_groups=groups, latent_dim=r, nope_dim=dc2, rope_dim=dr, value_dim=dv2,
        softmax_scale=src.softmax_scale, kv_a_proj=kv_a, w_ukv=w_ukv.astype(wd), o_proj=o_new, rope=src.rope,
        q_proj=None if lora else q_new, q_a_proj=src.q_a_proj if lora else None,
        q_a_layernorm=src.q_a_layernorm if lora else None, q_b_proj=q_new if lora else None,
        kv_a_layernorm=np.asarray(src.kv_a_layernorm), rms_norm_eps=src.rms_norm_eps)
    seconds = time.perf_counter() - start

    report = LayerReport(
        layer=layer_index, direction="mla->gqla", relative_error=None,
        kv_bytes_before={"absorb": (r + dr) * bytes_per, "gqa": (r + dr + H * (dc + dv)) * bytes_per},
        kv_bytes_after={k: v * bytes_per for k, v in layer.kv_elements_per_token().items()},
        cache_dtype=cache_dtype, seconds=seconds,
        details={"groups": groups, "calibration_tokens": toks.calibrated,
                 "synthetic_tokens": toks.tokens.shape[0] - toks.calibrated,
                 "held_out_tokens": 0 if toks.held_out is None else len(toks.held_out),
                 "softmax_scale": float(src.softmax_scale), "working_dtype": wd.name})
    if evaluate:
        t0 = time.perf_counter()
        sequence = toks.sequence
        n_seq = sequence.shape[0]
        rows = eval_rows(n_seq, eval_tokens)
        pos = np.arange(n_seq)
        seq_raw = raw[:n_seq] if toks.held_out is None else matmul(sequence, kv_a.T.copy())
        kr = apply_rope(seq_raw[:, r:], pos, src.rope.inv_freq, src.rope.layout)
        c = rms_norm(seq_raw[:, :r], src.kv_a_layernorm, src.rms_norm_eps)
        q_old = src.queries(sequence[rows])
        q_old_rope = apply_rope(q_old[..., dc:], rows, src.rope.inv_freq, src.rope.layout)
        original = absorbed_attention(q_old[..., :dc], q_old_rope, c, kr, w_uk, w_uv, np.arange(H),
                                      src.softmax_scale, rows, pos)
        q = layer.queries(sequence[rows], rows)
        c_new, kr_new = layer.latent_and_rope_key(sequence, pos)
        groups_w = np.asarray(layer.w_ukv, np.float64).reshape(groups, dc2 + dv2, r)
        converted = absorbed_attention(q[..., :dc2], q[..., dc2:], c_new, kr_new, groups_w[:, :dc2],
                                       groups_w[:, dc2:], np.arange(H) // rep, layer.softmax_scale, rows, pos)
        back = np.einsum("ihk,hvk->ihv", converted, value_factors)
        report.relative_error = relative_error(back, original)
        report.eval_rows = len(rows)
        report.eval_seconds = time.perf_counter() - t0
    return layer, report
