# SPDX-License-Identifier: Apache-2.0
"""Convert GQA (LLaMA family) and MLA (DeepSeek-V2/V3) attention into GQLA
weights that gqla runs. numpy only (torch is used for products when it is
importable). See docs/convert.md for the method.

One layer::

    from gqla import convert
    src = convert.LlamaAttention(q_proj=wq, k_proj=wk, v_proj=wv, o_proj=wo, num_heads=32,
                                 num_kv_heads=8, head_dim=128,
                                 rope=convert.RopeSpec(convert.llama_inv_freq(500000.0, 128)))
    layer, report = convert.convert_gqa_layer(src, latent_dim=512, nope_dim=64, rope_dim=64,
                                              value_dim=128, calibration=hidden_states)
    q, c, kr = layer.project(x)            # what gqla's append / decode take
    session = gqla.Session(layer.gqla_config(cache_dtype="bf16"))   # softmax_scale set

A checkpoint directory (config.json + safetensors)::

    python -m gqla.convert SRC_DIR OUT_DIR --latent-dim 512 --nope-dim 64 --rope-dim 64 \\
        [--calibration hidden.npy] [--deepseek-v3 DS_DIR]
    python -m gqla.convert SRC_DIR OUT_DIR --groups 8      # DeepSeek MLA -> 8 groups
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from ._convert_checkpoint import (
    attention_prefixes, calibration_for, copy_side_files, deepseek_layer, deepseek_softmax_scale, input_norm_max,
    llama_dims,
    llama_layer, load_calibration, output_dtype, passthrough, read_config, rope_settings, shard_and_write,
    source_attention_names, source_kind, write_config,
)
from ._convert_errors import ConversionError
from ._convert_export import (
    LATENT_NORM_MODES, check_deepseek_rope, deepseek_config, deepseek_tensors, gqla_layer_from, gqla_tensor_names,
    gqla_tensor_shapes, gqla_tensors, neutral_bias,
)
from ._convert_gqa import check_gqa_budget, convert_gqa_layer
from ._convert_layers import DeepseekAttention, GQLALayer, LlamaAttention
from ._convert_mla import check_mla_budget, convert_mla_layer
from ._convert_report import LayerReport
from ._convert_rope import RopeSpec, apply_rope, llama_inv_freq
from ._convert_safetensors import (
    Checkpoint, PendingTensor, SafetensorsFile, bf16_bits, bf16_to_float, read_safetensors, write_safetensors,
)

__all__ = [
    "ConversionError", "LlamaAttention", "DeepseekAttention", "GQLALayer", "RopeSpec", "LayerReport",
    "convert_gqa_layer", "convert_mla_layer", "convert_checkpoint", "to_deepseek_v3", "load_gqla_checkpoint",
    "llama_inv_freq", "apply_rope", "read_safetensors", "write_safetensors", "SafetensorsFile", "Checkpoint",
    "bf16_bits", "bf16_to_float", "main",
]


def _print(message):
    print(message, flush=True)


def convert_checkpoint(src_dir, out_dir, *, latent_dim=None, nope_dim=None, rope_dim=None, value_dim=None,
                       num_groups=None, calibration=None, dtype=None, deepseek_v3_dir=None, cache_dtype="bf16",
                       evaluate=True, fold="auto", context_length=4096, dropped_rope="nope", eval_tokens=32,
                       holdout=0, deepseek_latent_norm="neutralize", log=_print):
    """Convert every attention layer of the checkpoint in `src_dir` and write
    the GQLA checkpoint to `out_dir` (and a DeepSeek-V3-compatible one to
    `deepseek_v3_dir` when given). Returns the list of LayerReports.

    LLaMA-family source: ``latent_dim`` (default 512), ``nope_dim`` (64),
    ``rope_dim`` (64), ``value_dim`` (head_dim); the groups are its KV heads.
    DeepSeek source: ``num_groups`` (required), ``nope_dim`` and
    ``value_dim`` per group (default: the source's per-head dims).
    ``calibration``: hidden states (array [n, d] or [layers, n, d], a dict
    layer -> [n, d], or a .npy/.safetensors path), None for weights only;
    the last ``holdout`` rows of each layer's are kept out of the fit and
    measured on instead. ``deepseek_latent_norm``: see :func:`to_deepseek_v3`.
    """
    log = log or (lambda message: None)
    config = read_config(src_dir)
    kind = source_kind(config)
    ckpt = Checkpoint(src_dir)
    prefixes = attention_prefixes(ckpt)
    if isinstance(calibration, (str, os.PathLike)):
        calibration = load_calibration(calibration)
    hidden = int(config.get("hidden_size", 0)) or ckpt.shape(next(iter(prefixes.values())) + "o_proj.weight")[0]
    first = next(iter(prefixes.values()))
    out_dtype = output_dtype(ckpt, first + "o_proj.weight", dtype)
    read_dtype = np.float64 if out_dtype == "F64" else np.float32

    if kind == "gqa":
        heads, groups, head_dim, rope = llama_dims(config)
        if num_groups not in (None, groups):
            raise ConversionError(f"num_groups: a GQA source keeps its {groups} KV heads as groups, got {num_groups}")
        dims = {"num_heads": heads, "num_groups": groups, "latent_dim": 512 if latent_dim is None else latent_dim,
                "nope_dim": 64 if nope_dim is None else nope_dim, "rope_dim": 64 if rope_dim is None else rope_dim,
                "value_dim": head_dim if value_dim is None else value_dim}
        base, scaling = rope_settings(config)
        if deepseek_v3_dir and scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
            raise ConversionError("deepseek_v3_dir: the source's rope_scaling cannot be expressed by DeepSeek's "
                                  "RoPE; write the GQLA checkpoint only")
        q_lora, latent_norm = None, False
        section_extra = {"rope_layout": "half", "rope_theta": base, "source_rope_scaling": scaling}
    else:
        if latent_dim not in (None, config.get("kv_lora_rank")) or rope_dim not in (None, config.get("qk_rope_head_dim")):
            raise ConversionError("latent_dim/rope_dim: an MLA source keeps its kv_lora_rank and qk_rope_head_dim")
        if num_groups is None:
            raise ConversionError("num_groups: required for an MLA (DeepSeek) source")
        heads = int(config["num_attention_heads"])
        dims = {"num_heads": heads, "num_groups": num_groups, "latent_dim": int(config["kv_lora_rank"]),
                "nope_dim": int(config["qk_nope_head_dim"]) if nope_dim is None else nope_dim,
                "rope_dim": int(config["qk_rope_head_dim"]),
                "value_dim": int(config["v_head_dim"]) if value_dim is None else value_dim}
        q_lora = config.get("q_lora_rank") if first + "q_proj.weight" not in ckpt else None
        latent_norm = True
        section_extra = {"rope_layout": "interleaved", "rope_theta": rope_settings(config)[0],
                         "source_rope_scaling": rope_settings(config)[1]}

    # Check the budget on the first layer before anything is written.
    if kind == "gqa":
        probe = llama_layer(ckpt, config, first, read_dtype)
        check_gqa_budget(probe, dims["latent_dim"], dims["nope_dim"], dims["rope_dim"], dims["value_dim"])
        pairs, kept = probe.rope.rotary_dim // 2, dims["rope_dim"] // 2
        if deepseek_v3_dir and (kept > pairs or pairs % kept):
            raise ConversionError(f"rope_dim: {dims['rope_dim']} must divide the {2 * pairs} rotary dims of a head "
                                  f"for a DeepSeek-V3 export (one rope pair per fold of frequencies)")
    else:
        check_mla_budget(deepseek_layer(ckpt, config, first, read_dtype), dims["num_groups"], dims["nope_dim"],
                         dims["value_dim"])
    reports, cache = [], {}
    count = len(prefixes)

    def converted(index, position):
        if index not in cache:
            cache.clear()
            x = calibration_for(calibration, position, index, count)
            start = time.perf_counter()
            if kind == "gqa":
                src = llama_layer(ckpt, config, prefixes[index], read_dtype)
                layer, report = convert_gqa_layer(
                    src, dims["latent_dim"], dims["nope_dim"], dims["rope_dim"], dims["value_dim"], x, fold=fold,
                    context_length=context_length, dropped_rope=dropped_rope, deepseek_rope=bool(deepseek_v3_dir),
                    eval_tokens=eval_tokens, evaluate=evaluate, holdout=holdout, cache_dtype=cache_dtype,
                    layer_index=index)
            else:
                src = deepseek_layer(ckpt, config, prefixes[index], read_dtype)
                layer, report = convert_mla_layer(
                    src, dims["num_groups"], dims["nope_dim"], dims["value_dim"], x, eval_tokens=eval_tokens,
                    evaluate=evaluate, holdout=holdout, cache_dtype=cache_dtype, layer_index=index)
            report.details["wall_seconds_with_io"] = time.perf_counter() - start
            reports.append(report)
            log(report.line())
            cache[index] = (layer, gqla_tensors(layer, prefixes[index]))
        return cache[index][1]

    tensors, dtypes = {}, {}
    for position, (index, prefix) in enumerate(prefixes.items()):
        for name, shape in gqla_tensor_shapes(prefix, dims, hidden, q_lora, latent_norm).items():
            kind_dtype = "F32" if name.endswith("rope_inv_freq") else out_dtype
            tensors[name] = PendingTensor(kind_dtype, shape, lambda n=name, i=index, p=position: converted(i, p)[n])
    rest, rest_dtypes = passthrough(ckpt, source_attention_names(ckpt, prefixes))
    tensors.update(rest)
    dtypes.update(rest_dtypes)
    shard_and_write(out_dir, tensors, metadata={"format": "pt", "gqla": "converted"}, dtypes=dtypes)

    section = dict(dims)
    section.update(section_extra)
    section.update({
        "softmax_scale": reports[0].details["softmax_scale"], "source_kind": kind, "latent_norm": latent_norm,
        "rms_norm_eps": float(config.get("rms_norm_eps", 1e-6)), "cache_dtype": cache_dtype,
        "source_identity": {k: config[k] for k in ("model_type", "architectures") if k in config},
        "layers": [r.as_dict() for r in reports],
    })
    out_config = dict(config)
    out_config.update({"model_type": "gqla", "architectures": ["GQLAForCausalLM"], "gqla": section})
    write_config(out_dir, out_config)
    copy_side_files(src_dir, out_dir)
    if deepseek_v3_dir:
        to_deepseek_v3(out_dir, deepseek_v3_dir, deepseek_latent_norm)
    return reports


def load_gqla_checkpoint(directory, dtype=np.float64):
    """``(config, {layer index: GQLALayer})`` of a GQLA checkpoint."""
    config = read_config(directory)
    section = config.get("gqla")
    if config.get("model_type") != "gqla" or not isinstance(section, dict):
        raise ConversionError(f"checkpoint {directory}: not a GQLA checkpoint (no 'gqla' section in config.json)")
    ckpt = Checkpoint(directory)
    return config, {i: gqla_layer_from(ckpt, section, p, dtype) for i, p in attention_prefixes(ckpt).items()}


def to_deepseek_v3(gqla_dir, out_dir, latent_norm="neutralize"):
    """Write the GQLA checkpoint in `gqla_dir` as a DeepSeek-V3-compatible
    checkpoint: every head's kv_b_proj rows repeated from its group, rope
    rows in DeepSeek's pairing, queries scaled for DeepSeek's softmax scale.

    A LLaMA-sourced layer has no latent norm, but DeepSeek's runtime applies
    kv_a_layernorm (RMSNorm) to the latent. ``latent_norm="neutralize"``
    (default) adds one constant latent dim (kv_lora_rank = r + 1, with
    attention_bias) that turns the norm into a constant factor, so the
    exported model computes the converted function in any runtime that
    builds DeepSeek's attention biases (transformers does); ``"ones"``
    writes the norm weight as ones (kv_lora_rank = r, no biases), exact only
    where the norm is skipped. An MLA-sourced layer keeps its own norm.
    """
    if latent_norm not in LATENT_NORM_MODES:
        raise ConversionError(f"latent_norm: expected one of {', '.join(LATENT_NORM_MODES)}, got {latent_norm!r}")
    config = read_config(gqla_dir)
    section = config.get("gqla")
    if not isinstance(section, dict):
        raise ConversionError(f"gqla_dir: {gqla_dir} is not a GQLA checkpoint (no 'gqla' section)")
    ckpt = Checkpoint(gqla_dir)
    prefixes = attention_prefixes(ckpt)
    neutral = latent_norm == "neutralize" and not section["latent_norm"]
    if neutral and ckpt.dtype(next(iter(prefixes.values())) + "o_proj.weight") == "F16":
        raise ConversionError("latent_norm: the neutralized latent norm scales kv_b_proj by the constant "
                              "dim's bias, past f16's range; convert with dtype bf16/f32 or latent_norm='ones'")
    ds_config = deepseek_config(config, section, neutralized=neutral)
    if section["source_kind"] == "mla":
        ds_scale = deepseek_softmax_scale(ds_config, section["nope_dim"], section["rope_dim"])
    else:
        ds_scale = 1.0 / np.sqrt(section["nope_dim"] + section["rope_dim"])
        for prefix in prefixes.values():  # fail before writing anything
            check_deepseek_rope(ckpt.float(prefix + "rope_inv_freq"), "half", section["rope_theta"])
    cache = {}
    wide = ckpt.dtype(next(iter(prefixes.values())) + "o_proj.weight") == "F64"

    def exported(index):
        if index not in cache:
            cache.clear()
            layer = gqla_layer_from(ckpt, section, prefixes[index], np.float64 if wide else np.float32)
            s = None
            if neutral:
                s = neutral_bias(layer.kv_a_proj[:layer.latent_dim], input_norm_max(ckpt, prefixes[index]))
            cache[index] = deepseek_tensors(layer, prefixes[index], ds_scale, s)
        return cache[index]

    H = section["num_heads"]
    dc, dv, r = section["nope_dim"], section["value_dim"], section["latent_dim"]
    tensors, dtypes = {}, {}
    attention = set()
    for index, prefix in prefixes.items():
        names = gqla_tensor_names(prefix, prefix + "q_proj.weight" not in ckpt, section["latent_norm"])
        attention.update(names)
        weight_dtype = ckpt.dtype(prefix + "o_proj.weight")
        for name in names:
            if name.endswith("rope_inv_freq"):
                continue
            shape = ckpt.shape(name)
            if name.endswith("kv_b_proj.weight"):
                shape = (H * (dc + dv), r + neutral)
            elif name.endswith("kv_a_proj_with_mqa.weight"):
                shape = (shape[0] + neutral, shape[1])
            tensors[name] = PendingTensor(weight_dtype, shape, lambda n=name, i=index: exported(i)[n])
        extra = {}
        if not section["latent_norm"]:
            extra["kv_a_layernorm.weight"] = (r + neutral,)
        if neutral:
            extra["kv_a_proj_with_mqa.bias"] = (r + 1 + section["rope_dim"],)
            extra["o_proj.bias"] = (ckpt.shape(prefix + "o_proj.weight")[0],)
        for suffix, shape in extra.items():
            tensors[prefix + suffix] = PendingTensor(weight_dtype, shape,
                                                     lambda n=prefix + suffix, i=index: exported(i)[n])
    rest, rest_dtypes = passthrough(ckpt, attention)
    tensors.update(rest)
    dtypes.update(rest_dtypes)
    shard_and_write(out_dir, tensors, metadata={"format": "pt"}, dtypes=dtypes)
    write_config(out_dir, ds_config)
    copy_side_files(gqla_dir, out_dir)


# ----------------------------------------------------------------------- CLI
def _parser():
    p = argparse.ArgumentParser(
        prog="python -m gqla.convert",
        description="Convert a LLaMA-family (GQA) or DeepSeek (MLA) checkpoint into GQLA weights.")
    p.add_argument("source", help="checkpoint directory (config.json + *.safetensors), or with "
                                  "--to-deepseek-v3 a GQLA checkpoint")
    p.add_argument("output", help="directory for the GQLA checkpoint")
    p.add_argument("--latent-dim", type=int, help="r, latent rank (GQA source; default 512)")
    p.add_argument("--nope-dim", type=int, help="d_c, NoPE key dims per group (GQA default 64; MLA: per-head dim)")
    p.add_argument("--rope-dim", type=int, help="d_r, shared rope key dims (GQA source; default 64)")
    p.add_argument("--value-dim", type=int, help="d_v, value dims per group (default: the source's)")
    p.add_argument("--groups", type=int, help="G', groups of an MLA source (required there)")
    p.add_argument("--calibration", help="hidden states at the attention input: .npy [n, d] or [layers, n, d], "
                                         "or .safetensors; default: weights only")
    p.add_argument("--deepseek-v3", metavar="DIR", help="also write a DeepSeek-V3-compatible checkpoint")
    p.add_argument("--deepseek-latent-norm", default="neutralize", choices=LATENT_NORM_MODES,
                   help="DeepSeek-V3 export of a LLaMA source: 'neutralize' (default; one constant latent dim "
                        "and attention biases make kv_a_layernorm a constant factor) or 'ones' (norm weight "
                        "ones; exact only where the runtime skips the norm)")
    p.add_argument("--to-deepseek-v3", action="store_true",
                   help="only export an existing GQLA checkpoint (SOURCE) as DeepSeek-V3 to OUTPUT")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32", "f64"], help="dtype of the converted tensors "
                                                                         "(default: the source's)")
    p.add_argument("--cache-dtype", default="bf16", choices=["bf16", "f16", "f32"],
                   help="cache dtype of the KV bytes report (default bf16)")
    p.add_argument("--fold", default="auto", help="FreqFold: 'auto' or adjacent rotary pairs folded together")
    p.add_argument("--context-length", type=int, default=4096, help="distances RoRoPE weighs (default 4096)")
    p.add_argument("--dropped-rope", default="nope", choices=["nope", "mean"],
                   help="what a rotary pair left out of the rope key becomes (default nope: unrotated)")
    p.add_argument("--eval-tokens", type=int, default=32, help="query rows measured per layer (default 32)")
    p.add_argument("--holdout", type=int, default=0,
                   help="keep the last N calibration tokens out of the fit and measure the error on them")
    p.add_argument("--no-eval", action="store_true", help="skip the per-layer error measurement")
    p.add_argument("--report", help="write the per-layer report as JSON here")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        if args.to_deepseek_v3:
            to_deepseek_v3(args.source, args.output, args.deepseek_latent_norm)
            print(f"wrote a DeepSeek-V3-compatible checkpoint to {args.output}")
            return 0
        fold = args.fold if args.fold == "auto" else int(args.fold)
        start = time.perf_counter()
        reports = convert_checkpoint(
            args.source, args.output, latent_dim=args.latent_dim, nope_dim=args.nope_dim, rope_dim=args.rope_dim,
            value_dim=args.value_dim, num_groups=args.groups, calibration=args.calibration, dtype=args.dtype,
            deepseek_v3_dir=args.deepseek_v3, cache_dtype=args.cache_dtype, evaluate=not args.no_eval,
            fold=fold, context_length=args.context_length, dropped_rope=args.dropped_rope,
            eval_tokens=args.eval_tokens, holdout=args.holdout, deepseek_latent_norm=args.deepseek_latent_norm)
    except ConversionError as e:
        print(f"gqla.convert: error: {e}", file=sys.stderr)
        return 2
    errors = [r.relative_error for r in reports if r.relative_error is not None]
    first = reports[0]
    summary = (f"{len(reports)} layers in {time.perf_counter() - start:.1f} s; KV bytes/token/layer "
               f"({first.cache_dtype}) {first.kv_bytes_before} -> {first.kv_bytes_after}")
    if errors:
        summary += f"; relative error mean {np.mean(errors):.3e}, max {np.max(errors):.3e}"
    print(summary)
    print(f"softmax_scale {first.details['softmax_scale']:.8g}: set gqla's config.softmax_scale to it")
    if args.report:
        with open(args.report, "w") as f:
            json.dump([r.as_dict() for r in reports], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
