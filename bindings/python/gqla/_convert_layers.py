# SPDX-License-Identifier: Apache-2.0
"""The attention layers the converter reads and writes, each with a float64
forward pass written from its definition (the reference every conversion
is measured against).

All weights are [out, in] like torch's nn.Linear; hidden states x are
[n, d] of one sequence at positions 0..n-1 unless given. ``heads_output``
returns the per-head attention outputs (the input of o_proj) of the rows
``query_rows``, each attending causally to every token up to its own.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._convert_errors import ConversionError
from ._convert_rope import RopeSpec, apply_rope


def causal_attention(q, k, v, query_pos, key_pos, scale, group_of_head):
    """q [nq, H, Dk], k [Gk, n, Dk], v [Gk, n, Dv] -> o [nq, H, Dv]; query i
    sees keys with key_pos <= query_pos[i]. float64 throughout."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = scale * np.einsum("ihd,hjd->ihj", q, k[group_of_head])
    visible = np.asarray(key_pos)[None, :] <= np.asarray(query_pos)[:, None]
    scores = np.where(visible[:, None, :], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("ihj,hjv->ihv", p, v[group_of_head])


def rms_norm(x, weight, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(weight, np.float64)


def _rows(x, query_rows):
    n = x.shape[0]
    return np.arange(n) if query_rows is None else np.asarray(query_rows)


def _linear(x, w):
    return np.asarray(x, np.float64) @ np.asarray(w, np.float64).T


def _check_matrix(name, w, rows, cols):
    shape = getattr(w, "shape", None)
    if shape is None or len(shape) != 2 or (rows is not None and shape[0] != rows) or \
            (cols is not None and shape[1] != cols):
        want = f"[{rows if rows is not None else '*'}, {cols if cols is not None else '*'}]"
        raise ConversionError(f"{name}: expected shape {want}, got {tuple(shape) if shape is not None else type(w)}")


@dataclass
class LlamaAttention:
    """A LLaMA-family (GQA) attention layer with Hugging Face weights: query
    head h uses key/value head h // (H/G); the first ``rope.rotary_dim`` dims
    of every q/k head rotate (rotate-half layout); scale 1/sqrt(head_dim)."""

    q_proj: np.ndarray      # [H*D, d]
    k_proj: np.ndarray      # [G*D, d]
    v_proj: np.ndarray      # [G*Dv, d]
    o_proj: np.ndarray      # [d, H*Dv]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope: RopeSpec

    @property
    def hidden_size(self):
        return self.q_proj.shape[1]

    @property
    def value_dim(self):
        return self.v_proj.shape[0] // self.num_kv_heads

    @property
    def softmax_scale(self):
        return 1.0 / np.sqrt(self.head_dim)

    def check(self):
        heads, groups, dim = self.num_heads, self.num_kv_heads, self.head_dim
        for name, value in (("num_heads", heads), ("num_kv_heads", groups), ("head_dim", dim)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ConversionError(f"{name}: expected a positive integer, got {value!r}")
        if heads % groups:
            raise ConversionError(f"num_kv_heads: {groups} does not divide num_heads {heads} (H % G != 0)")
        _check_matrix("q_proj", self.q_proj, heads * dim, None)
        d = self.q_proj.shape[1]
        _check_matrix("k_proj", self.k_proj, groups * dim, d)
        _check_matrix("v_proj", self.v_proj, None, d)
        if self.v_proj.shape[0] % groups:
            raise ConversionError(f"v_proj: {self.v_proj.shape[0]} rows are not num_kv_heads ({groups}) heads")
        _check_matrix("o_proj", self.o_proj, d, heads * self.value_dim)
        if self.rope.rotary_dim > dim or self.rope.layout != "half":
            raise ConversionError(f"rope: expected at most head_dim ({dim}) rotary dims in the 'half' layout, "
                                  f"got {self.rope.rotary_dim} ({self.rope.layout})")

    def heads_output(self, x, positions=None, query_rows=None):
        """Per-head outputs [len(query_rows), H, Dv] in float64."""
        x = np.asarray(x, np.float64)
        pos = np.arange(x.shape[0]) if positions is None else np.asarray(positions)
        rows = _rows(x, query_rows)
        H, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = apply_rope(_linear(x[rows], self.q_proj).reshape(len(rows), H, D), pos[rows], self.rope.inv_freq)
        k = apply_rope(_linear(x, self.k_proj).reshape(-1, G, D), pos, self.rope.inv_freq)
        v = _linear(x, self.v_proj).reshape(-1, G, self.value_dim)
        return causal_attention(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), pos[rows], pos,
                                self.softmax_scale, np.arange(H) // (H // G))

    def output(self, x, positions=None, query_rows=None):
        o = self.heads_output(x, positions, query_rows)
        return o.reshape(o.shape[0], -1) @ np.asarray(self.o_proj, np.float64).T


@dataclass
class DeepseekAttention:
    """A DeepSeek-V2/V3 MLA layer (G = H): the latent c = RMSNorm(first r
    outputs of kv_a_proj_with_mqa), the shared rope key from its last d_r
    outputs, kv_b_proj [H*(d_c+d_v), r] per head d_c key rows then d_v value
    rows. Queries come from q_proj, or q_a_proj -> RMSNorm -> q_b_proj."""

    kv_a_proj_with_mqa: np.ndarray     # [r + d_r, d]
    kv_a_layernorm: np.ndarray         # [r]
    kv_b_proj: np.ndarray              # [H*(d_c+d_v), r]
    o_proj: np.ndarray                 # [d, H*d_v]
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope: RopeSpec
    softmax_scale: float
    q_proj: Optional[np.ndarray] = None        # [H*(d_c+d_r), d]
    q_a_proj: Optional[np.ndarray] = None      # [q_lora, d]
    q_a_layernorm: Optional[np.ndarray] = None  # [q_lora]
    q_b_proj: Optional[np.ndarray] = None      # [H*(d_c+d_r), q_lora]
    rms_norm_eps: float = 1e-6
    kv_a_proj_bias: Optional[np.ndarray] = None  # [r + d_r] (attention_bias)
    o_proj_bias: Optional[np.ndarray] = None     # [d]

    @property
    def hidden_size(self):
        return self.kv_a_proj_with_mqa.shape[1]

    def kv_a(self, x):
        """kv_a_proj_with_mqa's outputs [n, r + d_r] (with its bias)."""
        out = _linear(x, self.kv_a_proj_with_mqa)
        return out if self.kv_a_proj_bias is None else out + np.asarray(self.kv_a_proj_bias, np.float64)

    def check(self):
        H, r, dc, dr, dv = (self.num_heads, self.kv_lora_rank, self.qk_nope_head_dim,
                            self.qk_rope_head_dim, self.v_head_dim)
        for name, value in (("num_heads", H), ("kv_lora_rank", r), ("qk_nope_head_dim", dc),
                            ("qk_rope_head_dim", dr), ("v_head_dim", dv)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ConversionError(f"{name}: expected a positive integer, got {value!r}")
        _check_matrix("kv_a_proj_with_mqa", self.kv_a_proj_with_mqa, r + dr, None)
        d = self.kv_a_proj_with_mqa.shape[1]
        if np.shape(self.kv_a_layernorm) != (r,):
            raise ConversionError(f"kv_a_layernorm: expected shape [{r}], got {np.shape(self.kv_a_layernorm)}")
        _check_matrix("kv_b_proj", self.kv_b_proj, H * (dc + dv), r)
        _check_matrix("o_proj", self.o_proj, d, H * dv)
        for name, bias, size in (("kv_a_proj_with_mqa.bias", self.kv_a_proj_bias, r + dr),
                                 ("o_proj.bias", self.o_proj_bias, d)):
            if bias is not None and np.shape(bias) != (size,):
                raise ConversionError(f"{name}: expected shape [{size}], got {np.shape(bias)}")
        if self.q_proj is not None:
            _check_matrix("q_proj", self.q_proj, H * (dc + dr), d)
        elif self.q_a_proj is not None and self.q_b_proj is not None and self.q_a_layernorm is not None:
            _check_matrix("q_a_proj", self.q_a_proj, None, d)
            _check_matrix("q_b_proj", self.q_b_proj, H * (dc + dr), self.q_a_proj.shape[0])
        else:
            raise ConversionError("q_proj: expected q_proj, or q_a_proj + q_a_layernorm + q_b_proj")
        if self.rope.rotary_dim != dr:
            raise ConversionError(f"rope: expected {dr} rotary dims (qk_rope_head_dim), got {self.rope.rotary_dim}")

    def queries(self, x):
        """Unrotated queries [n, H, d_c+d_r]."""
        if self.q_proj is not None:
            q = _linear(x, self.q_proj)
        else:
            q = _linear(rms_norm(_linear(x, self.q_a_proj), self.q_a_layernorm, self.rms_norm_eps), self.q_b_proj)
        return q.reshape(q.shape[0], self.num_heads, -1)

    def latent(self, x):
        return self._normed_latent(self.kv_a(x))

    def _normed_latent(self, kv_a_out):
        return rms_norm(kv_a_out[:, :self.kv_lora_rank], self.kv_a_layernorm, self.rms_norm_eps)

    def heads_output(self, x, positions=None, query_rows=None):
        x = np.asarray(x, np.float64)
        pos = np.arange(x.shape[0]) if positions is None else np.asarray(positions)
        rows = _rows(x, query_rows)
        H, r, dc, dv = self.num_heads, self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim
        q = self.queries(x[rows])
        q = np.concatenate([q[..., :dc], apply_rope(q[..., dc:], pos[rows], self.rope.inv_freq,
                                                    self.rope.layout)], axis=-1)
        kv_a_out = self.kv_a(x)  # once for the latent and the rope key
        c = self._normed_latent(kv_a_out)
        kr = apply_rope(kv_a_out[:, r:], pos, self.rope.inv_freq, self.rope.layout)
        w = np.asarray(self.kv_b_proj, np.float64).reshape(H, dc + dv, r)
        keys = np.concatenate([np.einsum("hdr,jr->hjd", w[:, :dc], c),
                               np.broadcast_to(kr, (H,) + kr.shape)], axis=-1)
        values = np.einsum("hvr,jr->hjv", w[:, dc:], c)
        return causal_attention(q, keys, values, pos[rows], pos, self.softmax_scale, np.arange(H))

    def output(self, x, positions=None, query_rows=None):
        o = self.heads_output(x, positions, query_rows)
        out = o.reshape(o.shape[0], -1) @ np.asarray(self.o_proj, np.float64).T
        return out if self.o_proj_bias is None else out + np.asarray(self.o_proj_bias, np.float64)


@dataclass
class GQLALayer:
    """A converted attention layer in the form gqla runs.

    Per token: ``kv_a_proj`` [r + d_r, d] gives the latent c (first r
    outputs; RMS-normalized by ``kv_a_layernorm`` when that is set, as in
    DeepSeek) and the rope key (last d_r outputs, then RoPE with
    ``rope``). Per query head: [q_c (d_c) | q_r (d_r)] from ``q_proj`` (or
    q_a_proj -> RMSNorm -> q_b_proj), RoPE on q_r. ``w_ukv`` is gqla's
    W_UKV [G*(d_c+d_v), r]; ``o_proj`` [d, H*d_v]. The softmax scale is
    ``softmax_scale`` (the source layer's): give it to gqla explicitly
    (:meth:`gqla_config` does).
    """

    num_heads: int
    num_groups: int
    latent_dim: int
    nope_dim: int
    rope_dim: int
    value_dim: int
    softmax_scale: float
    kv_a_proj: np.ndarray
    w_ukv: np.ndarray
    o_proj: np.ndarray
    rope: RopeSpec
    q_proj: Optional[np.ndarray] = None
    q_a_proj: Optional[np.ndarray] = None
    q_a_layernorm: Optional[np.ndarray] = None
    q_b_proj: Optional[np.ndarray] = None
    kv_a_layernorm: Optional[np.ndarray] = None
    rms_norm_eps: float = 1e-6

    def __post_init__(self):
        # Row-major weights, as gqla's set_weights and safetensors want them.
        for name in ("kv_a_proj", "w_ukv", "o_proj", "q_proj", "q_a_proj", "q_a_layernorm", "q_b_proj",
                     "kv_a_layernorm"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, np.ascontiguousarray(value))

    @property
    def hidden_size(self):
        return self.kv_a_proj.shape[1]

    def project(self, x, positions=None):
        """What a runtime computes for tokens x [n, d] at `positions`:
        ``(q [n, H, d_c+d_r], c [n, r], kr [n, d_r])`` in float64, RoPE
        applied to q_r and kr: the inputs of gqla's append and decode."""
        c, kr = self.latent_and_rope_key(x, positions)
        return self.queries(x, positions), c, kr

    def latent_and_rope_key(self, x, positions=None):
        """``(c [n, r], kr [n, d_r])`` of tokens x, float64, kr rotated."""
        x = np.asarray(x, np.float64)
        pos = np.arange(x.shape[0]) if positions is None else np.asarray(positions)
        r = self.latent_dim
        latent = _linear(x, self.kv_a_proj[:r])
        if self.kv_a_layernorm is not None:
            latent = rms_norm(latent, self.kv_a_layernorm, self.rms_norm_eps)
        kr = apply_rope(_linear(x, self.kv_a_proj[r:]), pos, self.rope.inv_freq, self.rope.layout)
        return latent, kr

    def queries(self, x, positions=None):
        """Queries [n, H, d_c+d_r] of tokens x, float64, q_r rotated."""
        x = np.asarray(x, np.float64)
        pos = np.arange(x.shape[0]) if positions is None else np.asarray(positions)
        if self.q_proj is not None:
            q = _linear(x, self.q_proj)
        else:
            q = _linear(rms_norm(_linear(x, self.q_a_proj), self.q_a_layernorm, self.rms_norm_eps), self.q_b_proj)
        q = q.reshape(x.shape[0], self.num_heads, self.nope_dim + self.rope_dim)
        q[..., self.nope_dim:] = apply_rope(q[..., self.nope_dim:], pos, self.rope.inv_freq, self.rope.layout)
        return q

    def attend(self, q, c, kr, query_pos, key_pos=None):
        """GQLA attention from projections (q [nq, H, d_c+d_r], c [n, r],
        kr [n, d_r]), per group expanded in float64 -> [nq, H, d_v]."""
        G, dc, dv, r = self.num_groups, self.nope_dim, self.value_dim, self.latent_dim
        key_pos = np.arange(np.shape(c)[0]) if key_pos is None else key_pos
        w = np.asarray(self.w_ukv, np.float64).reshape(G, dc + dv, r)
        c = np.asarray(c, np.float64)
        keys = np.concatenate([np.einsum("gdr,jr->gjd", w[:, :dc], c),
                               np.broadcast_to(np.asarray(kr, np.float64), (G,) + np.shape(kr))], axis=-1)
        values = np.einsum("gvr,jr->gjv", w[:, dc:], c)
        return causal_attention(q, keys, values, query_pos, key_pos, self.softmax_scale,
                                np.arange(self.num_heads) // (self.num_heads // G))

    def heads_output(self, x, positions=None, query_rows=None):
        x = np.asarray(x, np.float64)
        pos = np.arange(x.shape[0]) if positions is None else np.asarray(positions)
        rows = _rows(x, query_rows)
        c, kr = self.latent_and_rope_key(x, pos)
        return self.attend(self.queries(x[rows], pos[rows]), c, kr, pos[rows], pos)

    def output(self, x, positions=None, query_rows=None):
        o = self.heads_output(x, positions, query_rows)
        return o.reshape(o.shape[0], -1) @ np.asarray(self.o_proj, np.float64).T

    def gqla_config(self, **options):
        """A gqla.Config.gqla for this layer, softmax_scale set to the source
        layer's scale; other keywords (cache_dtype, device, ...) pass on."""
        from ._config import Config
        options.setdefault("softmax_scale", float(self.softmax_scale))
        return Config.gqla(num_heads=self.num_heads, num_groups=self.num_groups,
                           latent_dim=self.latent_dim, nope_dim=self.nope_dim, rope_dim=self.rope_dim,
                           value_dim=self.value_dim, **options)

    def kv_elements_per_token(self):
        """Cache elements per token: {'absorb': r + d_r, 'gqa': r + d_r +
        G*(d_c+d_v)} (the GQA path keeps the latent too)."""
        latent = self.latent_dim + self.rope_dim
        return {"absorb": latent, "gqa": latent + self.num_groups * (self.nope_dim + self.value_dim)}
