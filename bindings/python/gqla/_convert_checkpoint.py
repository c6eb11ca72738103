# SPDX-License-Identifier: Apache-2.0
"""Checkpoint directories: reading a LLaMA-family or DeepSeek-V2/V3
checkpoint (config.json + safetensors), writing the compact GQLA checkpoint
and a DeepSeek-V3-compatible one.

The GQLA checkpoint keeps every tensor that is not attention as it was
(same name, same dtype) and replaces each layer's attention by
``<prefix>q_proj.weight`` [H*(d_c+d_r), d] (or q_a_proj, q_a_layernorm,
q_b_proj), ``kv_a_proj_with_mqa.weight`` [r+d_r, d], ``kv_b_proj.weight``
[G*(d_c+d_v), r] (gqla's W_UKV), ``o_proj.weight`` [d, H*d_v],
``rope_inv_freq`` [d_r/2] (float32) and, from an MLA source,
``kv_a_layernorm.weight`` [r]. Its config.json is the source's with
``model_type`` "gqla" and a ``gqla`` section (dims, softmax_scale, RoPE
layout, the per-layer report).
"""

import json
import os
import re

import numpy as np

from ._convert_errors import ConversionError
from ._convert_layers import DeepseekAttention, LlamaAttention
from ._convert_rope import RopeSpec, llama_inv_freq
from ._convert_safetensors import PendingTensor, SafetensorsFile, write_safetensors

_ATTENTION = re.compile(r"^(.*\.)?(layers\.(\d+)\.self_attn\.)")
_SHARD_BYTES = 4 << 30
_DEEPSEEK_SCALING = ("default", "linear", "dynamic", "yarn")


def read_config(directory):
    path = os.path.join(os.fspath(directory), "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise ConversionError(f"checkpoint: no config.json in {directory}") from None
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ConversionError(f"{path}: expected a JSON object")
    return config


def source_kind(config):
    """'mla' for DeepSeek-V2/V3 (MLA) configs, 'gqa' for LLaMA-family ones."""
    if config.get("model_type") == "gqla":
        raise ConversionError("checkpoint: already a GQLA checkpoint (model_type 'gqla')")
    if "kv_lora_rank" in config or str(config.get("model_type", "")).startswith("deepseek"):
        return "mla"
    return "gqa"


def _field(config, name, default=None, required=True):
    value = config.get(name, default)
    if value is None and required:
        raise ConversionError(f"config.json: missing field {name!r}")
    return value


def _int_field(config, name, default=None):
    value = _field(config, name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise ConversionError(f"config.json: {name} must be a positive integer, got {value!r}")
    return int(value)


def rope_settings(config):
    """(rope_theta, rope_scaling) of a config, old or new style
    (``rope_parameters``)."""
    params = config.get("rope_parameters")
    if isinstance(params, dict):
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        if scaling.get("rope_type", "default") == "default" and len(scaling) <= 1:
            scaling = None
        return params.get("rope_theta", config.get("rope_theta", 10000.0)), scaling
    return config.get("rope_theta", 10000.0), config.get("rope_scaling")


def llama_dims(config):
    heads = _int_field(config, "num_attention_heads")
    hidden = _int_field(config, "hidden_size")
    groups = _int_field(config, "num_key_value_heads", heads)
    head_dim = _int_field(config, "head_dim", hidden // heads if hidden % heads == 0 else None)
    if heads % groups:
        raise ConversionError(f"config.json: num_key_value_heads {groups} does not divide num_attention_heads "
                              f"{heads} (H % G != 0)")
    if config.get("attention_bias") or config.get("qkv_bias"):
        raise ConversionError("config.json: attention_bias is set; q/k/v biases are not supported")
    factor = float(config.get("partial_rotary_factor", 1.0))
    rotary = int(head_dim * factor)
    rotary -= rotary % 2
    base, scaling = rope_settings(config)
    inv_freq = llama_inv_freq(base, rotary, scaling)
    return heads, groups, head_dim, RopeSpec(inv_freq, "half")


def deepseek_softmax_scale(config, nope_dim, rope_dim):
    """DeepSeek's softmax scale: 1/sqrt(d_c+d_r), times mscale^2 under YaRN."""
    scale = 1.0 / np.sqrt(nope_dim + rope_dim)
    _, scaling = rope_settings(config)
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in _DEEPSEEK_SCALING:
            raise ConversionError(f"rope_scaling: unknown RoPE scaling type {kind!r} for a DeepSeek config "
                                  f"(known: {', '.join(_DEEPSEEK_SCALING)})")
        mscale_all = float(scaling.get("mscale_all_dim", 0) or 0)
        factor = float(scaling.get("factor", 1.0))
        if kind == "yarn" and mscale_all and factor > 1:
            mscale = 0.1 * mscale_all * np.log(factor) + 1.0
            scale *= mscale * mscale
    return float(scale)


def attention_prefixes(ckpt):
    """{layer index: '<...>layers.<i>.self_attn.'} of every layer with attention."""
    found = {}
    for name in ckpt.keys():
        match = _ATTENTION.match(name)
        if match:
            found[int(match.group(3))] = (match.group(1) or "") + match.group(2)
    if not found:
        raise ConversionError(f"checkpoint {ckpt.directory}: no '<...>layers.<i>.self_attn.*' tensors")
    return dict(sorted(found.items()))


def llama_layer(ckpt, config, prefix, dtype=np.float64):
    heads, groups, head_dim, rope = llama_dims(config)
    get = lambda n: ckpt.float(prefix + n + ".weight", dtype)
    for name in ("q_proj", "k_proj", "v_proj"):
        if prefix + name + ".bias" in ckpt:
            raise ConversionError(f"{prefix}{name}.bias: q/k/v biases are not supported")
    layer = LlamaAttention(q_proj=get("q_proj"), k_proj=get("k_proj"), v_proj=get("v_proj"), o_proj=get("o_proj"),
                           num_heads=heads, num_kv_heads=groups, head_dim=head_dim, rope=rope)
    layer.check()
    return layer


def input_norm_max(ckpt, attention_prefix):
    """max |weight| of the RMSNorm in front of the attention at
    `attention_prefix` ('...layers.N.self_attn.'), 1 when the checkpoint has
    none there (inputs are then taken as RMS-normalized with unit weight)."""
    name = attention_prefix[:-len("self_attn.")] + "input_layernorm.weight"
    if not attention_prefix.endswith("self_attn.") or name not in ckpt:
        return 1.0
    return float(np.max(np.abs(ckpt.float(name, np.float64))))


def deepseek_layer(ckpt, config, prefix, dtype=np.float64):
    nope, rope_dim = _int_field(config, "qk_nope_head_dim"), _int_field(config, "qk_rope_head_dim")
    base, _ = rope_settings(config)
    get = lambda n: ckpt.float(prefix + n, dtype)
    lora = prefix + "q_proj.weight" not in ckpt
    layer = DeepseekAttention(
        kv_a_proj_with_mqa=get("kv_a_proj_with_mqa.weight"), kv_a_layernorm=get("kv_a_layernorm.weight"),
        kv_b_proj=get("kv_b_proj.weight"), o_proj=get("o_proj.weight"),
        kv_a_proj_bias=get("kv_a_proj_with_mqa.bias") if prefix + "kv_a_proj_with_mqa.bias" in ckpt else None,
        o_proj_bias=get("o_proj.bias") if prefix + "o_proj.bias" in ckpt else None,
        num_heads=_int_field(config, "num_attention_heads"), kv_lora_rank=_int_field(config, "kv_lora_rank"),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope_dim, v_head_dim=_int_field(config, "v_head_dim"),
        # The rope part is carried over unchanged; a plain RoPE of the same
        # dims stands in for the model's (maybe YaRN-scaled) one when measuring.
        rope=RopeSpec(llama_inv_freq(base, rope_dim), "interleaved"),
        softmax_scale=deepseek_softmax_scale(config, nope, rope_dim),
        q_proj=None if lora else get("q_proj.weight"),
        q_a_proj=get("q_a_proj.weight") if lora else None,
        q_a_layernorm=get("q_a_layernorm.weight") if lora else None,
        q_b_proj=get("q_b_proj.weight") if lora else None,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)))
    layer.check()
    return layer


def load_calibration(path):
    """Hidden states from .npy ([n, d] for every layer, or [L, n, d] one per
    layer) or .safetensors (a tensor 'hidden_states' of either shape, or
    'layers.<i>' per layer)."""
    if path is None:
        return None
    path = os.fspath(path)
    if path.endswith(".npy"):
        return np.load(path)
    if path.endswith(".safetensors"):
        f = SafetensorsFile(path)
        if "hidden_states" in f:
            return f.float("hidden_states")
        per_layer = {int(k.split(".")[1]): k for k in f.keys() if re.fullmatch(r"layers\.\d+", k)}
        if not per_layer:
            raise ConversionError(f"calibration: {path} has neither 'hidden_states' nor 'layers.<i>' tensors")
        return {i: f.float(k) for i, k in per_layer.items()}
    raise ConversionError(f"calibration: expected a .npy or .safetensors file, got {path!r}")


def calibration_for(calibration, position, layer_index, count):
    if calibration is None:
        return None
    if isinstance(calibration, dict):
        if layer_index not in calibration:
            raise ConversionError(f"calibration: no hidden states for layer {layer_index}")
        return calibration[layer_index]
    x = np.asarray(calibration)
    if x.ndim == 3:
        if x.shape[0] != count:
            raise ConversionError(f"calibration: {x.shape[0]} layers of hidden states for {count} layers")
        return x[position]
    return x


def output_dtype(ckpt, name, requested):
    if requested:
        requested = requested.upper()
        if requested not in ("F32", "F16", "BF16", "F64"):
            raise ConversionError(f"dtype: expected one of f32, f16, bf16, f64, got {requested.lower()!r}")
        return requested
    stored = ckpt.dtype(name)
    return stored if stored in ("F32", "F16", "BF16", "F64") else "BF16"


def shard_and_write(directory, tensors, metadata=None, dtypes=None, max_bytes=_SHARD_BYTES):
    """Write tensors (name -> array or PendingTensor) as one
    model.safetensors or as shards with model.safetensors.index.json."""
    from ._convert_safetensors import _describe, _STORAGE
    dtypes = dtypes or {}
    sizes = {}
    for name, value in tensors.items():
        dtype, shape = _describe(name, value, dtypes)
        sizes[name] = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
    shards, current, used = [], [], 0
    for name in tensors:
        if current and used + sizes[name] > max_bytes:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += sizes[name]
    shards.append(current)
    os.makedirs(directory, exist_ok=True)
    if len(shards) == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, metadata, dtypes)
        return
    weight_map = {}
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, file), {n: tensors[n] for n in names}, metadata, dtypes)
        weight_map.update({n: file for n in names})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}, f, indent=2)


def passthrough(ckpt, attention_names):
    """Every tensor that is not attention, raw, in checkpoint order."""
    out, dtypes = {}, {}
    for name in ckpt.keys():
        if name in attention_names:
            continue
        shape, dtype = ckpt.shape(name), ckpt.dtype(name)
        out[name] = PendingTensor(dtype, shape, lambda n=name: ckpt.raw(n))
        dtypes[name] = dtype
    return out, dtypes


def source_attention_names(ckpt, prefixes):
    names = set()
    for prefix in prefixes.values():
        names.update(n for n in ckpt.keys() if n.startswith(prefix))
    return names


def write_config(directory, config):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=False)
        f.write("\n")


def copy_side_files(src_dir, out_dir):
    """Tokenizer and generation files travel with the weights."""
    import shutil
    for name in sorted(os.listdir(src_dir)):
        if name.startswith(("tokenizer", "special_tokens", "generation_config")) or name.endswith(".model"):
            path = os.path.join(src_dir, name)
            if os.path.isfile(path):
                shutil.copyfile(path, os.path.join(out_dir, name))
