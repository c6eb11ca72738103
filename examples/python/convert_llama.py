# SPDX-License-Identifier: Apache-2.0
"""Convert a small LLaMA-shaped model to GQLA and decode it with gqla.

Builds a 4-layer model with random weights (embedding, then per layer
RMSNorm -> GQA attention with RoPE -> residual), saves it as a Hugging Face
style checkpoint (config.json + model.safetensors), records each layer's
attention input on a calibration prompt, converts the checkpoint with
gqla.convert, and then runs the converted model through a gqla session:
a prefill of the prompt and a few decode steps, every layer's latent c and
rope key kr appended to the cache, attention on the GQA path and on the
absorb path. Prints the conversion report and how far the outputs are from
the float64 converted model and from the original.

    PYTHONPATH=build/bindings/python /usr/bin/python3 examples/python/convert_llama.py
"""

import json
import os
import tempfile

import numpy as np

import gqla
from gqla import convert

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4, 256, 8, 2, 32, 100
# GQLA dims per layer: the lossless limit (every rotary dim of every key head
# in the rope key, the latent as wide as the values' rank: exact, no smaller
# than the GQA cache) and a budget that shrinks the cache to 5/8 (on random
# weights, the hardest case, that costs accuracy; trained layers compress
# much better).
BUDGETS = {
    "lossless": dict(latent_dim=KV_HEADS * HEAD_DIM, nope_dim=8, rope_dim=KV_HEADS * HEAD_DIM, value_dim=HEAD_DIM),
    "5/8 cache": dict(latent_dim=64, nope_dim=16, rope_dim=16, value_dim=HEAD_DIM),
}
rng = np.random.default_rng(0)


def rms_norm(x, weight, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def make_checkpoint(directory):
    """Random LLaMA-shaped weights in Hugging Face names and layout."""
    s = 1 / np.sqrt(HIDDEN)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN))}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(HIDDEN)
        tensors[p + "self_attn.q_proj.weight"] = rng.standard_normal((HEADS * HEAD_DIM, HIDDEN)) * s
        tensors[p + "self_attn.k_proj.weight"] = rng.standard_normal((KV_HEADS * HEAD_DIM, HIDDEN)) * s
        tensors[p + "self_attn.v_proj.weight"] = rng.standard_normal((KV_HEADS * HEAD_DIM, HIDDEN)) * s
        tensors[p + "self_attn.o_proj.weight"] = rng.standard_normal((HIDDEN, HEADS * HEAD_DIM)) * s
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=HIDDEN,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                  num_hidden_layers=LAYERS, vocab_size=VOCAB, rope_theta=500000.0, rms_norm_eps=1e-5,
                  max_position_embeddings=2048)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    convert.write_safetensors(os.path.join(directory, "model.safetensors"),
                              {k: v.astype(np.float32) for k, v in tensors.items()})
    return tensors


def run_original(tensors, tokens):
    """The source model in float64; returns the final hidden states and each
    layer's attention input (the calibration the converter wants)."""
    rope = convert.RopeSpec(convert.llama_inv_freq(500000.0, HEAD_DIM))
    h = tensors["model.embed_tokens.weight"][tokens]
    inputs = []
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        layer = convert.LlamaAttention(
            *(tensors[p + f"self_attn.{n}_proj.weight"] for n in "qkvo"),
            num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, rope=rope)
        x = rms_norm(h, tensors[p + "input_layernorm.weight"])
        inputs.append(x)
        h = h + layer.output(x)
    return h, inputs


def run_converted_float64(tensors, layers, tokens):
    h = tensors["model.embed_tokens.weight"][tokens]
    for i in range(LAYERS):
        h = h + layers[i].output(rms_norm(h, tensors[f"model.layers.{i}.input_layernorm.weight"]))
    return h


def run_with_gqla(tensors, layers, tokens, prompt, path):
    """Prefill `prompt` tokens in one call per layer, then decode the rest one
    token at a time; attention from gqla, everything else in numpy."""
    first = layers[0]
    config = first.gqla_config(num_layers=LAYERS, cache_dtype="f32", device="cpu", path=path,
                               max_tokens=1024, max_q_len=prompt)
    out = np.empty((len(tokens), HIDDEN))
    with gqla.Session(config) as session:
        for i, layer in layers.items():
            session.set_weights(i, layer.w_ukv.astype(np.float32))
        seq = session.add_sequence()
        for start, stop in [(0, prompt)] + [(t, t + 1) for t in range(prompt, len(tokens))]:
            positions = np.arange(start, stop)
            h = tensors["model.embed_tokens.weight"][tokens[start:stop]]
            for i, layer in layers.items():
                x = rms_norm(h, tensors[f"model.layers.{i}.input_layernorm.weight"])
                q, c, kr = layer.project(x, positions)
                session.append(i, seq, c.astype(np.float32), kr.astype(np.float32))
                o = session.decode(i, [seq], q[None].astype(np.float32))[0]       # [s_q, H, d_v]
                h = h + o.reshape(len(positions), -1) @ layer.o_proj.T
            out[start:stop] = h
        assert session.path == path
    return out


def relative(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


with tempfile.TemporaryDirectory() as work:
    source_dir = os.path.join(work, "llama")
    tensors = make_checkpoint(source_dir)
    tensors = {k: v.astype(np.float32).astype(np.float64) for k, v in tensors.items()}  # as stored
    calibration_tokens = rng.integers(0, VOCAB, 256)
    _, calibration = run_original(tensors, calibration_tokens)
    tokens = rng.integers(0, VOCAB, 40)
    prompt = 32
    # Compare what the attention layers added to the residual stream.
    embedded = tensors["model.embed_tokens.weight"][tokens]
    original = run_original(tensors, tokens)[0] - embedded

    for name, budget in BUDGETS.items():
        print(f"--- {name}: {budget}")
        gqla_dir = os.path.join(work, "gqla-" + name.split()[0].replace("/", "_"))
        convert.convert_checkpoint(source_dir, gqla_dir, calibration=np.stack(calibration), context_length=256,
                                   **budget)
        config, layers = convert.load_gqla_checkpoint(gqla_dir)
        print(f"softmax_scale {config['gqla']['softmax_scale']:.6f} (the source's 1/sqrt({HEAD_DIM}), "
              f"given to gqla explicitly)")
        converted = run_converted_float64(tensors, layers, tokens) - embedded
        for path in ("gqa", "absorb"):
            decoded = run_with_gqla(tensors, layers, tokens, prompt, path) - embedded
            gap = relative(decoded, converted)
            print(f"gqla {path:6s} path: attention's share of the last hidden states vs the float64 "
                  f"converted model {gap:.2e}, vs the original model {relative(decoded, original):.2e}")
            assert gap < 1e-5, "gqla disagrees with the converted model's float64 reference"
