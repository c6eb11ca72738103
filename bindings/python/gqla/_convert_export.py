# SPDX-License-Identifier: Apache-2.0
"""A converted layer as checkpoint tensors: the compact GQLA form (and back)
and the DeepSeek-V3 form.

DeepSeek-V3 has one kv_b_proj block per head, so each head gets its group's
W_UK/W_UV rows (the GQA-path saving of GQLA is lost there, the latent cache
is the same). DeepSeek pairs rope dims (2i, 2i+1) and computes the softmax
scale as 1/sqrt(d_c+d_r) (times YaRN's mscale^2): the rope rows are
permuted to that layout and the queries scaled so the product is the
converted layer's scale.

DeepSeek's runtime RMS-normalizes the latent (kv_a_layernorm), which a
LLaMA-sourced latent never was. The "neutralized" export (the default)
makes that norm a constant factor: the latent gets one more dim, fed by a
bias s of kv_a_proj_with_mqa that dwarfs every |c| the layer can produce
(its input is RMS-normalized, so |c| <= sigma_max(W_c) * max|w_norm| *
sqrt(d)), with a norm weight of 0 so it never reaches kv_b_proj. The norm
then divides c by s/sqrt(r+1) up to a relative 2^-17 * (|c|/bound)^2, and
kv_b_proj is multiplied by s/sqrt(r+1). That needs attention_bias (the
biases of kv_a_proj_with_mqa and o_proj), which transformers and
DeepSeek's reference code build; "ones" writes the norm weight as ones
instead, exact only in a runtime that skips the norm (gqla does).
"""

import numpy as np

from ._convert_errors import ConversionError
from ._convert_layers import GQLALayer
from ._convert_rope import RopeSpec, llama_inv_freq, pair_index


def gqla_tensor_names(prefix, lora, latent_norm):
    names = ["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"] if lora else ["q_proj.weight"]
    names += ["kv_a_proj_with_mqa.weight", "kv_b_proj.weight", "o_proj.weight", "rope_inv_freq"]
    if latent_norm:
        names.append("kv_a_layernorm.weight")
    return [prefix + n for n in names]


def gqla_tensor_shapes(prefix, dims, hidden, q_lora=None, latent_norm=False):
    """Shapes of a layer's tensors from the dims alone (known before converting)."""
    H, G, r, dc, dr, dv = (dims[k] for k in ("num_heads", "num_groups", "latent_dim", "nope_dim", "rope_dim",
                                             "value_dim"))
    shapes = {}
    if q_lora:
        shapes.update({"q_a_proj.weight": (q_lora, hidden), "q_a_layernorm.weight": (q_lora,),
                       "q_b_proj.weight": (H * (dc + dr), q_lora)})
    else:
        shapes["q_proj.weight"] = (H * (dc + dr), hidden)
    shapes.update({"kv_a_proj_with_mqa.weight": (r + dr, hidden), "kv_b_proj.weight": (G * (dc + dv), r),
                   "o_proj.weight": (hidden, H * dv), "rope_inv_freq": (dr // 2,)})
    if latent_norm:
        shapes["kv_a_layernorm.weight"] = (r,)
    return {prefix + k: v for k, v in shapes.items()}


def gqla_tensors(layer, prefix):
    """name -> float array of a converted layer in the GQLA checkpoint."""
    out = {}
    if layer.q_proj is not None:
        out["q_proj.weight"] = layer.q_proj
    else:
        out.update({"q_a_proj.weight": layer.q_a_proj, "q_a_layernorm.weight": layer.q_a_layernorm,
                    "q_b_proj.weight": layer.q_b_proj})
    out.update({"kv_a_proj_with_mqa.weight": layer.kv_a_proj, "kv_b_proj.weight": layer.w_ukv,
                "o_proj.weight": layer.o_proj, "rope_inv_freq": np.asarray(layer.rope.inv_freq, np.float32)})
    if layer.kv_a_layernorm is not None:
        out["kv_a_layernorm.weight"] = layer.kv_a_layernorm
    return {prefix + k: v for k, v in out.items()}


def gqla_layer_from(ckpt, section, prefix, dtype=np.float64):
    """Rebuild a GQLALayer from a GQLA checkpoint's tensors and config section."""
    get = lambda n: ckpt.float(prefix + n, dtype)
    lora = prefix + "q_proj.weight" not in ckpt
    norm = prefix + "kv_a_layernorm.weight" in ckpt
    return GQLALayer(
        num_heads=section["num_heads"], num_groups=section["num_groups"], latent_dim=section["latent_dim"],
        nope_dim=section["nope_dim"], rope_dim=section["rope_dim"], value_dim=section["value_dim"],
        softmax_scale=section["softmax_scale"], kv_a_proj=get("kv_a_proj_with_mqa.weight"),
        w_ukv=get("kv_b_proj.weight"), o_proj=get("o_proj.weight"),
        rope=RopeSpec(ckpt.float(prefix + "rope_inv_freq", np.float64), section["rope_layout"]),
        q_proj=None if lora else get("q_proj.weight"),
        q_a_proj=get("q_a_proj.weight") if lora else None,
        q_a_layernorm=get("q_a_layernorm.weight") if lora else None,
        q_b_proj=get("q_b_proj.weight") if lora else None,
        kv_a_layernorm=get("kv_a_layernorm.weight") if norm else None,
        rms_norm_eps=float(section.get("rms_norm_eps", 1e-6)))


def _to_interleaved(rows, rope_dim):
    """Reorder the last rope_dim rows of each block from the 'half' pairing
    to DeepSeek's (2i, 2i+1)."""
    first, second = pair_index(rope_dim, "half")
    order = np.empty(rope_dim, np.int64)
    order[0::2], order[1::2] = first, second
    return rows[..., order, :]


def check_deepseek_rope(inv_freq, layout, base):
    """The kept frequencies must be DeepSeek's base^(-2i/d_r)."""
    if layout == "interleaved":
        return
    rope_dim = 2 * len(inv_freq)
    expected = llama_inv_freq(base, rope_dim)
    if not np.allclose(inv_freq, expected, rtol=1e-6, atol=0):
        raise ConversionError(
            f"deepseek_v3 output: the converted layer's RoPE frequencies are not rope_theta^(-2i/d_r) "
            f"(d_r = {rope_dim}), which is all DeepSeek's RoPE can express; convert with "
            f"deepseek_rope=True (one rope pair per fold of rotary_dim/d_r frequencies) and a source "
            f"without llama3/linear RoPE scaling")


# The constant latent dim's bias is 2^NEUTRAL_MARGIN_BITS times the bound on |c|.
NEUTRAL_MARGIN_BITS = 8
LATENT_NORM_MODES = ("neutralize", "ones")


def neutral_bias(kv_c, norm_max):
    """The power of two s the constant latent dim carries: >= 2^8 times the
    largest |c| = |W_c x| for an RMS-normalized x (|x| <= norm_max sqrt(d))."""
    bound = np.linalg.norm(np.asarray(kv_c, np.float64), 2) * norm_max * np.sqrt(kv_c.shape[1])
    return float(2.0 ** (np.ceil(np.log2(max(bound, 2.0 ** -60))) + NEUTRAL_MARGIN_BITS))


def deepseek_tensors(layer, prefix, ds_scale, neutral_s=None):
    """name -> float array of a converted layer in DeepSeek-V3's layout;
    `neutral_s`: the constant latent dim's bias (neutralized norm), or None."""
    H, G, r, dc, dr, dv = (layer.num_heads, layer.num_groups, layer.latent_dim, layer.nope_dim, layer.rope_dim,
                           layer.value_dim)
    factor = layer.softmax_scale / ds_scale
    out = {}
    q_weight = layer.q_proj if layer.q_proj is not None else layer.q_b_proj
    q = np.asarray(q_weight, np.float64).reshape(H, dc + dr, -1)
    if layer.rope.layout == "half":
        q = np.concatenate([q[:, :dc], _to_interleaved(q[:, dc:], dr)], axis=1)
    q = (q * factor).reshape(H * (dc + dr), -1)
    if layer.q_proj is not None:
        out["q_proj.weight"] = q
    else:
        out.update({"q_a_proj.weight": layer.q_a_proj, "q_a_layernorm.weight": layer.q_a_layernorm,
                    "q_b_proj.weight": q})
    kv_a = np.asarray(layer.kv_a_proj, np.float64)
    if layer.rope.layout == "half":
        kv_a = np.concatenate([kv_a[:r], _to_interleaved(kv_a[r:], dr)])
    blocks = np.asarray(layer.w_ukv, np.float64).reshape(G, dc + dv, r)
    kv_b = blocks[np.arange(H) // (H // G)].reshape(H * (dc + dv), r)
    if neutral_s is None:
        out["kv_a_layernorm.weight"] = (np.ones(r) if layer.kv_a_layernorm is None
                                        else np.asarray(layer.kv_a_layernorm))
    else:
        # Latent dim r is the constant: a zero weight row with bias s, and a
        # zero norm weight and kv_b column; the norm's 1/rms ~ sqrt(r+1)/s
        # is undone in kv_b.
        kv_a = np.concatenate([kv_a[:r], np.zeros((1, kv_a.shape[1])), kv_a[r:]])
        bias = np.zeros(kv_a.shape[0])
        bias[r] = neutral_s
        out["kv_a_proj_with_mqa.bias"] = bias
        out["kv_a_layernorm.weight"] = np.concatenate([np.ones(r), [0.0]])
        kv_b = np.concatenate([kv_b * (neutral_s / np.sqrt(r + 1)), np.zeros((kv_b.shape[0], 1))], axis=1)
        out["o_proj.bias"] = np.zeros(np.shape(layer.o_proj)[0])
    out["kv_a_proj_with_mqa.weight"] = kv_a
    out["kv_b_proj.weight"] = kv_b
    out["o_proj.weight"] = layer.o_proj
    return {prefix + k: v for k, v in out.items()}


# Source config fields a DeepSeek-V3 config takes over unchanged.
_CARRIED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "max_position_embeddings",
            "rms_norm_eps", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
            "hidden_act", "initializer_range", "torch_dtype", "rope_theta", "use_cache")


def deepseek_config(config, section, neutralized=False):
    """A DeepSeek-V3 config.json for a GQLA checkpoint's config
    (`neutralized`: the latent carries the constant dim, biases on)."""
    if section["source_kind"] == "mla":
        out = {k: v for k, v in config.items() if k not in ("gqla", "model_type", "architectures")}
        out.update(section.get("source_identity", {}))
    else:
        out = {k: config[k] for k in _CARRIED if k in config}
        out.update({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                    "q_lora_rank": None, "rope_scaling": None, "attention_bias": False,
                    "attention_dropout": 0.0, "first_k_dense_replace": config.get("num_hidden_layers", 0),
                    # Every layer dense; the MoE fields only need valid values
                    # (transformers 5 rejects None for them).
                    "moe_layer_freq": 1, "n_routed_experts": 1, "n_shared_experts": 1,
                    "num_experts_per_tok": 1, "n_group": 1, "topk_group": 1,
                    "moe_intermediate_size": config.get("intermediate_size"),
                    "rope_theta": section["rope_theta"]})
    out.update({"num_attention_heads": section["num_heads"], "num_key_value_heads": section["num_heads"],
                "kv_lora_rank": section["latent_dim"] + (1 if neutralized else 0),
                "qk_nope_head_dim": section["nope_dim"],
                "qk_rope_head_dim": section["rope_dim"], "v_head_dim": section["value_dim"]})
    if neutralized:
        out["attention_bias"] = True
    return out
