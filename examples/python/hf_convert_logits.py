# SPDX-License-Identifier: Apache-2.0
"""Convert a Hugging Face LlamaForCausalLM with gqla.convert, load the
DeepSeek-V3 export in transformers' DeepseekV3ForCausalLM, and measure how
far its logits are from the original model's at several GQLA budgets.

The model has LLaMA-3-8B's attention shape (hidden 4096, 32 heads, 8 KV
heads of 128) in two layers with a small MLP and vocabulary, and the
random weights transformers initializes (no hub access). Calibration: each
layer's attention input on 256 random tokens, captured with forward hooks.
The export repeats each group's kv_b_proj rows for its heads, reorders the
rope rows to DeepSeek's pairing and neutralizes kv_a_layernorm with one
constant latent dim (docs/convert.md), so transformers runs the converted
function with its own MLA code. Logits on 2 x 64 other random tokens, in
float64, against the original's.

Random weights have no low-rank structure, so the errors at a budget are a
floor on what the method does, not a quality claim; the full-rank budget
shows what is left when nothing is cut but the shared rope key (DeepSeek's
RoPE holds one frequency per kept pair, so the 8 heads' 128 rotary dims
fold into d_r).

    PYTHONPATH=build/bindings/python python3 examples/python/hf_convert_logits.py
"""

import sys
import tempfile
import time

import numpy as np

from gqla import convert


def nothing_to_run(why):
    print(f"{why}: nothing to run")
    sys.exit(0)


try:
    import torch
    import transformers
except ImportError as e:
    nothing_to_run(f"{e.name} is not installed")

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 4096, 32, 8, 128, 2, 1024
# (name, latent_dim r, nope_dim d_c, rope_dim d_r); value_dim = 128.
BUDGETS = [
    ("LLaMA-3-8B-GQLA (r 512)", 512, 64, 64),
    ("r 1024", 1024, 128, 64),
    ("full rank (r 2048)", 2048, 128, 128),
]


def llama_model(device):
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=1024,
                                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, rope_theta=500000.0,
                                      max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config).to(device).eval()


def attention_inputs(model, tokens):
    """Each layer's attention input (after input_layernorm) on `tokens`."""
    seen, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        def keep(_module, args, kwargs, i=i):
            x = kwargs.get("hidden_states", args[0] if args else None)
            seen[i] = x.reshape(-1, x.shape[-1]).double().cpu().numpy()
        hooks.append(layer.self_attn.register_forward_pre_hook(keep, with_kwargs=True))
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    return seen


def logits(model, tokens):
    with torch.no_grad():
        return model(tokens, use_cache=False).logits.double()


def converted_logits(model, layers, tokens):
    """The original model with each attention replaced by the converted
    GQLA layer (gqla.convert's float64 definition): the function the export
    must compute."""
    def replace(index):
        def hook(_module, args, kwargs, output):
            x = kwargs.get("hidden_states", args[0] if args else None)
            rows = [layers[index].output(xb.double().cpu().numpy()) for xb in x]
            return (torch.from_numpy(np.stack(rows)).to(x.device, x.dtype),) + tuple(output[1:])
        return hook
    hooks = [layer.self_attn.register_forward_hook(replace(i), with_kwargs=True)
             for i, layer in enumerate(model.model.layers)]
    try:
        return logits(model, tokens)
    finally:
        for hook in hooks:
            hook.remove()


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {device}")
    torch.manual_seed(0)
    model = llama_model(device)
    calib_tokens = torch.randint(0, VOCAB, (1, 256), device=device)
    eval_tokens = torch.randint(0, VOCAB, (2, 64), device=device)
    calibration = attention_inputs(model, calib_tokens)
    kv_before = 2 * KV_HEADS * HEAD_DIM
    print(f"original: LlamaForCausalLM, {LAYERS} layers, H {HEADS}, G {KV_HEADS}, D {HEAD_DIM}: "
          f"{kv_before} cached elements per token and layer")
    print(f"{'budget':26s} {'KV elems':>8s} {'attn err (conv.)':>16s} {'logits rel err':>14s} "
          f"{'top-1 agree':>11s} {'export vs conv.':>15s} {'convert s':>9s}")
    errors, exports = [], []
    with tempfile.TemporaryDirectory() as work:
        src = f"{work}/llama"
        model.save_pretrained(src, safe_serialization=True)
        want = logits(model.double(), eval_tokens)
        for name, r, dc, dr in BUDGETS:
            gqla_dir, ds_dir = f"{work}/gqla-{r}", f"{work}/ds-{r}"
            t0 = time.perf_counter()
            reports = convert.convert_checkpoint(src, gqla_dir, latent_dim=r, nope_dim=dc, rope_dim=dr,
                                                 value_dim=HEAD_DIM, calibration=calibration, dtype="f32",
                                                 deepseek_v3_dir=ds_dir, log=None)
            seconds = time.perf_counter() - t0
            ds = transformers.DeepseekV3ForCausalLM.from_pretrained(ds_dir).to(device=device,
                                                                               dtype=torch.float64).eval()
            got = logits(ds, eval_tokens)
            err = ((got - want).norm() / want.norm()).item()
            agree = (got.argmax(-1) == want.argmax(-1)).double().mean().item()
            layer_err = max(rep.relative_error for rep in reports)
            _, layers = convert.load_gqla_checkpoint(gqla_dir)
            reference = converted_logits(model, layers, eval_tokens)
            export_err = ((got - reference).norm() / reference.norm()).item()
            print(f"{name:26s} {r + dr:8d} {layer_err:16.3e} {err:14.3e} {agree:11.1%} {export_err:15.3e} "
                  f"{seconds:9.1f}")
            errors.append(err)
            exports.append(export_err)
            del ds
    print("attn err (conv.): the converter's own report, the largest per-layer relative error of the "
          "attention output on the calibration tokens; logits: transformers' DeepseekV3ForCausalLM on the "
          "export vs the original LlamaForCausalLM, float64; export vs conv.: the same logits vs the "
          "original model with its attention replaced by the converted layers (gqla.convert's float64 "
          "definition): what the DeepSeek-V3 form itself adds (f32 weights, the neutralized norm)")
    if not all(np.isfinite(errors)) or any(b >= a for a, b in zip(errors, errors[1:])):
        sys.exit("the logits error must be finite and fall as the budget grows")
    if max(exports) > 1e-5:
        sys.exit("transformers' DeepseekV3ForCausalLM does not compute the converted layers")


if __name__ == "__main__":
    main()
