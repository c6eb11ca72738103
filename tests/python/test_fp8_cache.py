# SPDX-License-Identifier: Apache-2.0
"""An 8-bit cache by name ("fp8_e4m3"): append, decode and compare with the
float64 reference on the cache as stored (rebuilt here from the documented
quantization: scale = amax / 448 per row group, docs/fp8-cache.md) and on
the inputs as given, with the quantization-error bound; fp8 refused as an
io dtype."""

import numpy as np
import pytest

import gqla
import reference as ref

STORED_BOUND = 1e-2   # kernels alone (bf16 bound of docs/numerics.md)
GIVEN_BOUND = 6e-2    # plus the 8-bit rounding


def _e4m3_values():
    """Every finite non-negative e4m3 value, in code order (0x00..0x7e)."""
    codes = np.arange(0x7F)
    exp, man = codes >> 3, codes & 7
    return np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))


E4M3 = _e4m3_values()


def e4m3_round(x):
    """Round to nearest e4m3 value, ties to the even code, saturating at 448."""
    mag = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(E4M3, mag), 1, len(E4M3) - 1)
    lo = hi - 1
    d_lo, d_hi = mag - E4M3[lo], E4M3[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.sign(x) * np.where(pick_hi, E4M3[hi], E4M3[lo])


def stored(x, group):
    """x (float32 values) quantized per consecutive `group` elements of the
    last axis as the cache stores them."""
    x = np.asarray(x, np.float32)
    out = np.empty(x.shape, np.float64)
    for b in range(0, x.shape[-1], group):
        part = x[..., b:b + group]
        amax = np.abs(part).max(axis=-1, keepdims=True)
        scale = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
        out[..., b:b + group] = e4m3_round((part / scale).astype(np.float32)) * scale
    return out


def bf16(x):
    return ref.from_bf16_bits(ref.to_bf16_bits(x)).astype(np.float64)


def test_gqa_kind_fp8_decode_matches_reference(rng):
    H, G, D, Dv, L = 6, 2, 72, 40, 83
    cfg = gqla.Config.gqa(H, G, D, value_dim=Dv, cache_dtype="fp8_e4m3", device="cpu", max_tokens=512,
                          page_size=16, threads=2)
    with gqla.Session(cfg) as s:
        assert s.config.cache_dtype == "fp8_e4m3"
        seq = s.add_sequence()
        k = rng.standard_normal((L, G, D)).astype(np.float32)
        k[..., 5] *= 50.0  # an outlier channel
        v = rng.standard_normal((L, G, Dv)).astype(np.float32)
        s.append(0, seq, k[:30], v[:30])
        s.append(0, seq, k[30:], v[30:])
        q = rng.standard_normal((1, 2, H, D)).astype(np.float32)
        o, lse = s.decode(0, [seq], q, return_lse=True)
        o_stored, lse_stored = ref.gqa(q[0], stored(k, D), stored(v, Dv), G)
        o_given, _ = ref.gqa(q[0], k, v, G)
        assert ref.relative_error(o[0], o_stored) <= STORED_BOUND
        assert ref.lse_error(lse[0], lse_stored) <= STORED_BOUND
        assert ref.relative_error(o[0], o_given) <= GIVEN_BOUND


@pytest.mark.parametrize("path", ["absorb", "gqa"])
def test_gqla_fp8_decode_matches_reference(rng, path):
    H, G, r, dc, dr, dv, L = 6, 3, 300, 40, 24, 56, 70
    cfg = gqla.Config.gqla(H, G, r, dc, dr, dv, cache_dtype="fp8_e4m3", device="cpu", max_tokens=512,
                           page_size=16, threads=2, path=path)
    with gqla.Session(cfg) as s:
        w = (rng.standard_normal((G * (dc + dv), r)) / np.sqrt(r)).astype(np.float32)
        s.set_weights(0, w)
        seq = s.add_sequence()
        c = rng.standard_normal((L, r)).astype(np.float32)
        kr = rng.standard_normal((L, dr)).astype(np.float32)
        s.append(0, seq, c, kr)
        q = rng.standard_normal((1, 1, H, dc + dr)).astype(np.float32)
        o = s.decode(0, [seq], q)
        c_stored, kr_stored = stored(c, 128), bf16(kr)
        o_given, _ = ref.gqla(q[0], c, kr, w, G, dc, dv)
        if path == "absorb":
            o_stored, _ = ref.gqla(q[0], c_stored, kr_stored, w, G, dc, dv)
        else:
            # The expanded cache: KC/VE from the stored latent (f32 GEMM),
            # quantized per (token, group).
            wg = w.astype(np.float64).reshape(G, dc + dv, r)
            kc = stored(np.einsum("gdr,jr->jgd", wg[:, :dc], c_stored).astype(np.float32), dc)
            ve = stored(np.einsum("gdr,jr->jgd", wg[:, dc:], c_stored).astype(np.float32), dv)
            keys = np.concatenate([kc, np.broadcast_to(kr_stored[:, None, :], (L, G, dr))], axis=-1)
            o_stored, _ = ref.gqa(q[0], keys, ve, G, scale=1.0 / np.sqrt(dc + dr))
        assert ref.relative_error(o[0], o_stored) <= STORED_BOUND
        assert ref.relative_error(o[0], o_given) <= GIVEN_BOUND


def test_fp8_is_a_cache_dtype_only():
    with pytest.raises(gqla.InvalidArgument, match="io_dtype"):
        gqla.Config.gqa(4, 2, 16, io_dtype="fp8_e4m3", device="cpu", max_tokens=64).validate()
