# SPDX-License-Identifier: Apache-2.0
"""GQA (LLaMA family) -> GQLA, one layer.

1. RoRoPE (+ FreqFold where it helps): the rotary parts of the G key heads
   are mixed per pair across heads and the d_r/2 mixed pairs that matter
   most become the shared rope key kr (``plan_rope``). The query of head h
   gets the same mix restricted to its group, so q_r . kr reproduces every
   kept score term exactly.
2. The rest of each group's key (its NoPE dims plus the rotary copies that
   were not kept, now without rotation) is that group's NoPE key, D dims;
   a per-group PCA keeps d_c of them; the query keeps the matching d_c
   combinations (q_c = F_g^T q_h, so q_c . k_c = q_h . F_g F_g^T k).
3. Values: a per-group PCA to d_v dims when d_v < D_v, the basis folded
   into o_proj; otherwise unchanged.
4. The reduced NoPE keys and values of all groups are scaled to equal mean
   energy (so neither dominates), stacked, and compressed jointly to the
   latent c (rank r) by PCA: the calibration's principal directions, then
   the prior's in what remains. W_DKV = U^T J; the up-projections are U's
   rows with the balancing scales undone.
The softmax scale stays the source's 1/sqrt(D) (set explicitly).
"""

import time

import numpy as np

from ._convert_errors import ConversionError, positive_int
from ._convert_layers import GQLALayer, LlamaAttention, causal_attention
from ._convert_linalg import complement_rows, complete_basis, matmul, principal_rows, top_eigenvectors
from ._convert_report import LayerReport, dtype_bytes, eval_rows, relative_error
from ._convert_rope import RopeSpec, apply_rope, copy_rows, dropped_pair_map, pair_index, plan_rope
from ._convert_tokens import token_set


def check_gqa_budget(src, latent_dim, nope_dim, rope_dim, value_dim):
    G, D = src.num_kv_heads, src.head_dim
    rotary = src.rope.rotary_dim
    rope_dim = positive_int("rope_dim", rope_dim, 2)
    if rope_dim % 2:
        raise ConversionError(f"rope_dim: expected an even number (rotary pairs), got {rope_dim}")
    if rope_dim > G * rotary:
        raise ConversionError(f"rope_dim: {rope_dim} is larger than possible: the G*rotary_dim = {G}*{rotary} = "
                              f"{G * rotary} rotary dims of all key heads")
    nope_dim = positive_int("nope_dim", nope_dim)
    if nope_dim > D:
        raise ConversionError(f"nope_dim: {nope_dim} is larger than possible: a group's NoPE key has head_dim = "
                              f"{D} dims")
    value_dim = positive_int("value_dim", value_dim)
    if value_dim > src.value_dim:
        raise ConversionError(f"value_dim: {value_dim} is larger than possible: the source value heads have "
                              f"{src.value_dim} dims")
    latent_dim = positive_int("latent_dim", latent_dim)
    limit = min(G * (nope_dim + value_dim), src.hidden_size)
    if latent_dim > limit:
        raise ConversionError(
            f"latent_dim: {latent_dim} is larger than possible: at most min(G*(nope_dim+value_dim), hidden_size) "
            f"= min({G}*({nope_dim}+{value_dim}), {src.hidden_size}) = {limit}")
    return latent_dim, nope_dim, rope_dim, value_dim


def working_dtype(arrays, dtype=None):
    """float64 when any weight is float64 (or asked for), else float32."""
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(np.float64 if any(np.asarray(a).dtype == np.float64 for a in arrays) else np.float32)


def _group_pca(samples, weights, keep):
    """Per group: an orthonormal basis [dim, keep] of the top principal
    directions of samples [n, G, dim] (the identity when keep == dim)."""
    _, groups, dim = samples.shape
    if keep == dim:
        return np.broadcast_to(np.eye(dim), (groups, dim, dim)).copy()
    s = np.asarray(samples, np.float64) * np.sqrt(weights)[:, None, None]
    cov = np.einsum("ngi,ngj->gij", s, s)
    return np.stack([top_eigenvectors((c + c.T) * 0.5, keep)[1] for c in cov])


def _latent_basis(y, calibrated, rank):
    """Orthonormal U [rows, rank]: the calibration's principal directions of
    the stacked rows y [n + p, rows], then the prior's in the complement,
    then (rank-deficient maps) any completion."""
    rows = y.shape[1]
    if rank == rows:
        return np.eye(rows), np.ones(rows)
    parts, energies = [], []
    if calibrated:
        values, basis = principal_rows(y[:calibrated], rank)
        parts.append(basis)
        energies.append(values)
    found = sum(p.shape[1] for p in parts)
    if found < rank and y.shape[0] > calibrated:
        known = np.concatenate(parts, axis=1) if parts else np.zeros((rows, 0))
        rest = complement_rows(y[calibrated:], known) if found else y[calibrated:]
        # What is left of the prior rows after removing the calibration's
        # directions counts only where it is clearly above round-off of the
        # prior's whole energy.
        prior_scale = float(np.max(np.sum(np.square(y[calibrated:], dtype=np.float64), axis=0)))
        tolerance = 1e-12 if y.dtype == np.float64 else 1e-6
        values, basis = principal_rows(rest, rank - found, tolerance, reference=prior_scale)
        if found and basis.shape[1]:  # exactly orthogonal to what the calibration found
            basis = basis - known @ (known.T @ basis)
            basis /= np.linalg.norm(basis, axis=0, keepdims=True)
        parts.append(basis)
        energies.append(values)
    basis = np.concatenate(parts, axis=1) if parts else np.zeros((rows, 0))
    energy = np.concatenate(energies) if energies else np.zeros(0)
    if basis.shape[1] < rank:  # the map has lower rank than the latent
        energy = np.concatenate([energy, np.zeros(rank - basis.shape[1])])
        basis = complete_basis(basis, rank)
    return basis, energy


def convert_gqa_layer(src, latent_dim, nope_dim, rope_dim, value_dim, calibration=None, *, fold="auto",
                      context_length=4096, dropped_rope="nope", deepseek_rope=False, eval_tokens=32,
                      prior_weight=0.05, seed=0, evaluate=True, holdout=0, cache_dtype="bf16", layer_index=0,
                      dtype=None):
    """Convert one LLaMA-family layer; returns ``(GQLALayer, LayerReport)``."""
    if not isinstance(src, LlamaAttention):
        raise ConversionError(f"src: expected a LlamaAttention, got {type(src).__name__}")
    src.check()
    r, dc, dr, dv = check_gqa_budget(src, latent_dim, nope_dim, rope_dim, value_dim)
    context_length = positive_int("context_length", context_length)
    eval_tokens = positive_int("eval_tokens", eval_tokens)
    bytes_per = dtype_bytes(cache_dtype)
    start = time.perf_counter()
    H, G, D, Dv, d = src.num_heads, src.num_kv_heads, src.head_dim, src.value_dim, src.hidden_size
    rep = H // G
    rotary = src.rope.rotary_dim
    F = rotary // 2
    wd = working_dtype((src.q_proj, src.k_proj, src.v_proj, src.o_proj), dtype)
    wq, wk, wv, wo = (np.asarray(w, wd) for w in (src.q_proj, src.k_proj, src.v_proj, src.o_proj))
    toks = token_set(calibration, d, max(r, D), wd, prior_weight, seed, holdout)
    n_all, weights = toks.tokens.shape[0], toks.weights

    # Keys and values of every token; queries of some rows of the fitted
    # sequence (their energy per rotary pair guides RoRoPE).
    keys = matmul(toks.tokens, wk.T.copy())                                   # [N, G*D]
    values = matmul(toks.tokens, wv.T.copy())                                 # [N, G*Dv]
    fit_rows = eval_rows(toks.fitted.shape[0], eval_tokens)
    queries = matmul(toks.fitted[fit_rows], wq.T.copy()).reshape(len(fit_rows), H, D)   # unrotated

    # 1. RoRoPE plan from the key pairs; query energy per (group, pair).
    first, second = pair_index(rotary, "half")
    k3 = keys.reshape(n_all, G, D).astype(np.float64)
    pairs = np.stack([k3[:, :, first], k3[:, :, second]], axis=-1)            # [N, G, F, 2]
    q64 = queries.astype(np.float64)
    q_energy = (q64[:, :, first] ** 2 + q64[:, :, second] ** 2).mean(0)       # [H, F]
    q_energy = q_energy.reshape(G, rep, F).sum(1)
    plan = plan_rope(pairs, weights, src.rope.inv_freq, dr, q_energy, context_length, fold, dropped_rope,
                     one_per_group=deepseek_rope)
    m = plan.fold

    w_kr = np.empty((dr, d), wd)
    w_qr = np.empty((H, dr, d), wd)
    half = dr // 2
    for i, (p, u, _) in enumerate(plan.kept):
        u_by_head = u.reshape(m, G)
        for comp, row in ((0, i), (1, i + half)):
            idx = copy_rows(p, m, G, D, rotary, comp)
            w_kr[row] = u.astype(wd) @ wk[idx]
            dims = (first if comp == 0 else second)[p * m:(p + 1) * m]
            for h in range(H):
                w_qr[h, row] = u_by_head[:, h // rep].astype(wd) @ wq[h * D + dims]

    # 2. NoPE key of each group: its NoPE dims plus the dropped rotary copies
    #    (the projection of its rotary dims onto what was not kept), each
    #    pair through the map its dropped rotation becomes.
    nope_map = wk.copy()
    nope_keys = k3.copy()
    flat = nope_keys.reshape(n_all, G * D)
    pair_maps = dropped_pair_map(src.rope.inv_freq, context_length, dropped_rope)   # [F, 2, 2]
    for p in range(F // m):
        proj = plan.dropped[p]
        idx = [copy_rows(p, m, G, D, rotary, comp) for comp in (0, 1)]
        rows_w = [proj.astype(wd) @ wk[i] for i in idx]                     # [mG, d] per component
        rows_k = [flat[:, i] @ proj.T for i in idx]                          # [N, mG] per component
        turn = np.repeat(pair_maps[p * m:(p + 1) * m], G, axis=0)           # per copy (local pair, head)
        for comp in (0, 1):
            a, b = turn[:, comp, 0], turn[:, comp, 1]
            nope_map[idx[comp]] = a[:, None].astype(wd) * rows_w[0] + b[:, None].astype(wd) * rows_w[1]
            flat[:, idx[comp]] = a * rows_k[0] + b * rows_k[1]
    nope_basis = _group_pca(nope_keys, weights, dc)                           # [G, D, dc]
    k_reduced = np.einsum("ngd,gdc->ngc", nope_keys, nope_basis)              # [N, G, dc]
    k_map = np.stack([matmul(nope_basis[g].T.astype(wd).copy(), nope_map[g * D:(g + 1) * D])
                      for g in range(G)])                                     # [G, dc, d]
    w_qc = np.stack([matmul(nope_basis[h // rep].T.astype(wd).copy(), wq[h * D:(h + 1) * D])
                     for h in range(H)])                                      # [H, dc, d]

    # 3. Values: per-group PCA when d_v < D_v.
    v3 = values.reshape(n_all, G, Dv).astype(np.float64)
    value_basis = _group_pca(v3, weights, dv)                                 # [G, Dv, dv]
    v_reduced = np.einsum("ngd,gdc->ngc", v3, value_basis)
    if dv == Dv:
        v_map = wv.reshape(G, Dv, d)
        o_proj = wo
    else:
        v_map = np.stack([matmul(value_basis[g].T.astype(wd).copy(), wv[g * Dv:(g + 1) * Dv])
                          for g in range(G)])
        o_proj = np.concatenate([matmul(wo[:, h * Dv:(h + 1) * Dv], value_basis[h // rep].astype(wd))
                                 for h in range(H)], axis=1)

    # 4. Balance, stack and compress jointly.
    total = weights.sum()
    k_energy = float(np.einsum("n,ngc,ngc->", weights, k_reduced, k_reduced) / total)
    v_energy = float(np.einsum("n,ngc,ngc->", weights, v_reduced, v_reduced) / total)
    alpha = 1.0 / np.sqrt(k_energy) if k_energy > 0 else 1.0
    beta = 1.0 / np.sqrt(v_energy) if v_energy > 0 else 1.0
    stacked = np.concatenate([alpha * k_reduced.reshape(n_all, G * dc),
                              beta * v_reduced.reshape(n_all, G * dv)], axis=1)
    basis, energy = _latent_basis(stacked.astype(wd), toks.calibrated, r)
    joint_map = np.concatenate([(alpha * k_map).reshape(G * dc, d).astype(wd),
                                (beta * v_map).reshape(G * dv, d).astype(wd)])
    w_dkv = matmul(basis.T.astype(wd).copy(), joint_map)                      # [r, d]
    # Scale c to unit mean square (as gqla's tests draw it); undo it above.
    reference_rows = stacked[:toks.calibrated] if toks.calibrated else stacked
    kept_rows = matmul(reference_rows.astype(wd), basis.astype(wd))
    c_energy = float(np.mean(np.square(kept_rows, dtype=np.float64)))
    c_scale = 1.0 / np.sqrt(c_energy) if c_energy > 0 else 1.0
    w_dkv *= wd.type(c_scale)
    up_k = basis[:G * dc].reshape(G, dc, r) / (alpha * c_scale)
    up_v = basis[G * dc:].reshape(G, dv, r) / (beta * c_scale)
    w_ukv = np.concatenate([up_k, up_v], axis=1).reshape(G * (dc + dv), r).astype(wd)

    q_proj = np.concatenate([w_qc, w_qr], axis=1).reshape(H * (dc + dr), d)
    layer = GQLALayer(num_heads=H, num_groups=G, latent_dim=r, nope_dim=dc, rope_dim=dr, value_dim=dv,
                      softmax_scale=src.softmax_scale, kv_a_proj=np.concatenate([w_dkv, w_kr]),
                      w_ukv=w_ukv, o_proj=np.ascontiguousarray(o_proj), rope=RopeSpec(plan.inv_freq, "half"),
                      q_proj=q_proj)
    seconds = time.perf_counter() - start

    stacked_energy = float(np.mean(np.square(reference_rows, dtype=np.float64))) * reference_rows.shape[1]
    details = {
        "fold": m, "fold_estimates": plan.candidates, "rope_kept_energy": plan.kept_energy,
        "dropped_rope": dropped_rope, "context_length": context_length,
        "latent_kept_energy": c_energy * r / stacked_energy if stacked_energy > 0 else 1.0,
        "balance": {"key": float(alpha), "value": float(beta)},
        "calibration_tokens": toks.calibrated, "synthetic_tokens": n_all - toks.calibrated,
        "held_out_tokens": 0 if toks.held_out is None else len(toks.held_out),
        "softmax_scale": float(src.softmax_scale), "working_dtype": wd.name,
    }
    report = LayerReport(
        layer=layer_index, direction="gqa->gqla", relative_error=None,
        kv_bytes_before={"gqa": G * (D + Dv) * bytes_per},
        kv_bytes_after={k: v * bytes_per for k, v in layer.kv_elements_per_token().items()},
        cache_dtype=cache_dtype, seconds=seconds, details=details)
    if evaluate:
        t0 = time.perf_counter()
        sequence = toks.sequence
        n_seq = sequence.shape[0]
        if toks.held_out is None:
            rows, seq_keys, seq_values = fit_rows, keys[:n_seq], values[:n_seq]
        else:
            rows = eval_rows(n_seq, eval_tokens)
            queries = matmul(sequence[rows], wq.T.copy()).reshape(len(rows), H, D)
            seq_keys, seq_values = matmul(sequence, wk.T.copy()), matmul(sequence, wv.T.copy())
        original = _source_heads(src, queries, seq_keys, seq_values, rows)
        converted = _converted_heads(layer, sequence, rows, wd)
        back = np.einsum("ihv,hdv->ihd", converted, value_basis[np.arange(H) // rep])
        report.relative_error = relative_error(back, original)
        report.eval_rows = len(rows)
        report.eval_seconds = time.perf_counter() - t0
    return layer, report


def _source_heads(src, queries, keys, values, rows):
    H, G, D = src.num_heads, src.num_kv_heads, src.head_dim
    pos = np.arange(keys.shape[0])
    q = apply_rope(queries, rows, src.rope.inv_freq)
    k = apply_rope(keys.reshape(-1, G, D), pos, src.rope.inv_freq)
    v = np.asarray(values, np.float64).reshape(keys.shape[0], G, -1)
    return causal_attention(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), rows, pos, src.softmax_scale,
                            np.arange(H) // (H // G))


def _converted_heads(layer, sequence, rows, wd):
    # The layer's own weights, as a runtime would apply them.
    pos = np.arange(sequence.shape[0])
    r, dc = layer.latent_dim, layer.nope_dim
    latent = matmul(sequence, layer.kv_a_proj.T.astype(wd).copy()).astype(np.float64)
    kr = apply_rope(latent[:, r:], pos, layer.rope.inv_freq)
    q = matmul(sequence[rows], layer.q_proj.T.astype(wd).copy()).astype(np.float64)
    q = q.reshape(len(rows), layer.num_heads, -1)
    q[..., dc:] = apply_rope(q[..., dc:], rows, layer.rope.inv_freq)
    return layer.attend(q, latent[:, :r], kr, rows, pos)
