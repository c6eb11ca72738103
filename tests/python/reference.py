# SPDX-License-Identifier: Apache-2.0
"""An independent float64 numpy implementation of GQA and GQLA decode
attention with causal multi-token queries, plus dtype helpers.

Written from the math, not from the library: scores, causal mask, softmax
and the value sum are computed densely per sequence.
"""

import numpy as np

# Bounds against the reference on the inputs as the cache stores them (o: rel
# L2, lse: lse_error).
TOLERANCE = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}
# Looser bounds against the reference on the inputs as given: they also cover
# the rounding of K/V (or c/kr) into the cache (up to 2^-8 relative per
# element for bf16, 2^-11 for f16), so they are twice the bounds above.
QUANTIZATION_TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}


def tolerance(cache_dtype, io_dtype):
    """Bound against the stored-input reference; a narrower io dtype adds
    its own rounding of q and o."""
    return max(TOLERANCE[cache_dtype], TOLERANCE[io_dtype])


def quantization_tolerance(cache_dtype, io_dtype):
    """Bound against the given-input reference."""
    return max(QUANTIZATION_TOLERANCE[cache_dtype], TOLERANCE[io_dtype])


def attention(q, keys, values, group_of_head, scale, s_q):
    """q [s_q, H, Dq], keys [G, L, Dq], values [G, L, Dv] (float64) for one
    sequence whose last s_q tokens are the queries. Returns (o [s_q, H, Dv],
    lse [s_q, H])."""
    length = keys.shape[1]
    k = keys[group_of_head]      # [H, L, Dq]
    v = values[group_of_head]    # [H, L, Dv]
    scores = scale * np.einsum("ihd,hjd->ihj", q, k)
    query_pos = length - s_q + np.arange(s_q)
    visible = np.arange(length)[None, :] <= query_pos[:, None]   # [s_q, L]
    scores = np.where(visible[:, None, :], scores, -np.inf)
    peak = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - peak)
    total = weights.sum(axis=-1, keepdims=True)
    o = np.einsum("ihj,hjv->ihv", weights / total, v)
    lse = (peak + np.log(total))[..., 0]
    return o, lse


def gqa(q, k, v, num_kv_heads, scale=None):
    """GQA for one sequence: q [s_q, H, D], k [L, G, D], v [L, G, Dv]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s_q, heads, dim = q.shape
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    group_of_head = np.arange(heads) // (heads // num_kv_heads)
    return attention(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), group_of_head, scale, s_q)


def gqla(q, c, kr, w_ukv, num_groups, nope_dim, value_dim, scale=None):
    """GQLA for one sequence: q [s_q, H, d_c+d_r], c [L, r], kr [L, d_r],
    w_ukv [G*(d_c+d_v), r] (kv_b_proj layout). Expands K/V per group in
    float64 (the math of docs/architecture.md, independent of either path)."""
    q, c, kr, w = (np.asarray(x, np.float64) for x in (q, c, kr, w_ukv))
    s_q, heads, qdim = q.shape
    rope_dim = qdim - nope_dim
    scale = 1.0 / np.sqrt(nope_dim + rope_dim) if scale is None else scale
    w = w.reshape(num_groups, nope_dim + value_dim, c.shape[1])
    w_uk, w_uv = w[:, :nope_dim], w[:, nope_dim:]
    key_nope = np.einsum("gdr,jr->gjd", w_uk, c)                         # [G, L, d_c]
    key_rope = np.broadcast_to(kr, (num_groups,) + kr.shape)            # shared by all groups
    keys = np.concatenate([key_nope, key_rope], axis=-1)
    values = np.einsum("gvr,jr->gjv", w_uv, c)
    group_of_head = np.arange(heads) // (heads // num_groups)
    return attention(q, keys, values, group_of_head, scale, s_q)


def relative_error(actual, expected):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def lse_error(actual, expected):
    """||lse - ref|| / ||max(1, |ref|)|| (L2 norms, max per element). lse is
    a log, so a relative error of values near zero would be fragile: there
    the absolute error counts, where every |ref| >= 1 this is the relative L2
    error. inf when lse holds a NaN or inf."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if not np.isfinite(actual).all():
        return float("inf")
    floor = np.maximum(1.0, np.abs(expected))
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(floor))


# ------------------------------------------------------------ io dtypes
def to_bf16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bf16_bits(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_io(x, io_dtype):
    """Host array in the session's io dtype (bf16 as uint16 bits)."""
    if io_dtype == "f32":
        return np.ascontiguousarray(x, np.float32)
    if io_dtype == "f16":
        return np.ascontiguousarray(x, np.float16)
    return to_bf16_bits(x)


def as_stored(x, cache_dtype):
    """float32 values as a cache of cache_dtype holds them: rounded to
    nearest even, like the library's append."""
    return from_io(to_io(x, cache_dtype)).astype(np.float32)


def from_io(x):
    """Back to float64 values, whatever the io dtype."""
    if x.dtype == np.uint16:
        return from_bf16_bits(x).astype(np.float64)
    return np.asarray(x, np.float64)


def poison_like(shape, io_dtype):
    """A NaN-filled output buffer in the io dtype."""
    nan = np.full(shape, np.nan, np.float32)
    return to_io(nan, io_dtype)
