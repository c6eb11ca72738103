# SPDX-License-Identifier: Apache-2.0
"""gqla.convert: GQA -> GQLA and MLA -> GQLA conversion.

The references here are written from the definitions, independently of the
converter: HF LLaMA attention with rotate-half RoPE, DeepSeek MLA attention,
and tests/python/reference.py's GQLA. Every test draws fresh random layers
(GQLA_TEST_SEED replays a run).
"""

import json
import os

import numpy as np
import pytest

import gqla
import reference as ref
from gqla import convert as cv

LOSSLESS = 1e-10


# ------------------------------------------------------------ references
def rotate(x, positions, inv_freq, layout="half"):
    """RoPE on the first 2F dims of x [n, ..., dim]."""
    x = np.array(x, np.float64)
    f = len(inv_freq)
    if layout == "half":
        first, second = np.arange(f), np.arange(f) + f
    else:
        first, second = np.arange(0, 2 * f, 2), np.arange(1, 2 * f, 2)
    angle = np.outer(positions, inv_freq).reshape((len(positions),) + (1,) * (x.ndim - 2) + (f,))
    a, b = x[..., first].copy(), x[..., second].copy()
    x[..., first] = a * np.cos(angle) - b * np.sin(angle)
    x[..., second] = b * np.cos(angle) + a * np.sin(angle)
    return x


def softmax_attention(q, k, v, scale):
    """Causal attention of one sequence: q [n, H, Dk], k/v [n, H, *]."""
    s = scale * np.einsum("ihd,jhd->hij", q, k)
    s = np.where(np.tril(np.ones((q.shape[0], k.shape[0]), bool))[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hij,jhv->ihv", p, v)


def llama_heads(src, x):
    """Per-head outputs [n, H, Dv] of a LLaMA layer, from the definition."""
    H, G, D = src.num_heads, src.num_kv_heads, src.head_dim
    pos = np.arange(x.shape[0])
    q = rotate((x @ src.q_proj.T).reshape(-1, H, D), pos, src.rope.inv_freq)
    k = rotate((x @ src.k_proj.T).reshape(-1, G, D), pos, src.rope.inv_freq)
    v = (x @ src.v_proj.T).reshape(x.shape[0], G, -1)
    group = np.arange(H) // (H // G)
    return softmax_attention(q, k[:, group], v[:, group], 1 / np.sqrt(D))


def gqla_heads(layer, x):
    """Per-head outputs of a converted layer: its weights applied by hand,
    then reference.gqla (all tokens as causal queries)."""
    pos = np.arange(x.shape[0])
    r, dc = layer.latent_dim, layer.nope_dim
    latent = x @ layer.kv_a_proj.T
    c = latent[:, :r]
    if layer.kv_a_layernorm is not None:
        c = c / np.sqrt(np.mean(c * c, -1, keepdims=True) + layer.rms_norm_eps) * layer.kv_a_layernorm
    kr = rotate(latent[:, r:], pos, layer.rope.inv_freq, layer.rope.layout)
    q = (x @ layer.q_proj.T).reshape(x.shape[0], layer.num_heads, -1)
    q = np.concatenate([q[..., :dc], rotate(q[..., dc:], pos, layer.rope.inv_freq, layer.rope.layout)], -1)
    o, _ = ref.gqla(q, c, kr, layer.w_ukv, layer.num_groups, dc, layer.value_dim, layer.softmax_scale)
    return o


def rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b)


# --------------------------------------------------------------- layers
def llama_layer(rng, heads=8, groups=2, head_dim=16, hidden=96, rotary=None, base=10000.0, dtype=np.float64):
    s = 1 / np.sqrt(hidden)
    w = lambda rows, cols: (rng.standard_normal((rows, cols)) * s).astype(dtype)
    return cv.LlamaAttention(
        q_proj=w(heads * head_dim, hidden), k_proj=w(groups * head_dim, hidden),
        v_proj=w(groups * head_dim, hidden), o_proj=w(hidden, heads * head_dim),
        num_heads=heads, num_kv_heads=groups, head_dim=head_dim,
        rope=cv.RopeSpec(cv.llama_inv_freq(base, rotary or head_dim)))


def deepseek_layer(rng, heads=8, rank=24, nope=8, rope=8, value=8, hidden=48, q_lora=None):
    s = 1 / np.sqrt(hidden)
    queries = {"q_proj": rng.standard_normal((heads * (nope + rope), hidden)) * s}
    if q_lora:
        queries = {"q_a_proj": rng.standard_normal((q_lora, hidden)) * s,
                   "q_a_layernorm": 1 + 0.1 * rng.standard_normal(q_lora),
                   "q_b_proj": rng.standard_normal((heads * (nope + rope), q_lora)) / np.sqrt(q_lora)}
    return cv.DeepseekAttention(
        kv_a_proj_with_mqa=rng.standard_normal((rank + rope, hidden)) * s,
        kv_a_layernorm=1 + 0.1 * rng.standard_normal(rank),
        kv_b_proj=rng.standard_normal((heads * (nope + value), rank)) / np.sqrt(rank),
        o_proj=rng.standard_normal((hidden, heads * value)) * s, num_heads=heads, kv_lora_rank=rank,
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=value,
        rope=cv.RopeSpec(cv.llama_inv_freq(10000.0, rope), "interleaved"),
        softmax_scale=1 / np.sqrt(nope + rope), **queries)


def deepseek_heads(src, x):
    """Per-head outputs of a DeepSeek MLA layer, from the definition."""
    H, r, dc, dv = src.num_heads, src.kv_lora_rank, src.qk_nope_head_dim, src.v_head_dim
    pos = np.arange(x.shape[0])
    norm = lambda y, w: y / np.sqrt(np.mean(y * y, -1, keepdims=True) + src.rms_norm_eps) * w
    kv = x @ src.kv_a_proj_with_mqa.T
    c = norm(kv[:, :r], src.kv_a_layernorm)
    kr = rotate(kv[:, r:], pos, src.rope.inv_freq, "interleaved")
    if src.q_proj is not None:
        q = x @ src.q_proj.T
    else:
        q = norm(x @ src.q_a_proj.T, src.q_a_layernorm) @ src.q_b_proj.T
    q = q.reshape(x.shape[0], H, -1)
    q = np.concatenate([q[..., :dc], rotate(q[..., dc:], pos, src.rope.inv_freq, "interleaved")], -1)
    w = src.kv_b_proj.reshape(H, dc + dv, r)
    k = np.concatenate([np.einsum("hdr,jr->jhd", w[:, :dc], c), np.repeat(kr[:, None], H, 1)], -1)
    v = np.einsum("hvr,jr->jhv", w[:, dc:], c)
    return softmax_attention(q, k, v, src.softmax_scale)


# ----------------------------------------------------- GQA -> GQLA math
@pytest.mark.parametrize("rotary", [16, 8])
@pytest.mark.parametrize("with_calibration", [True, False])
def test_gqa_lossless_limit(rng, rotary, with_calibration):
    """d_r = G * rotary_dim (every rotary dim of every key head), d_c = the
    NoPE dims left per group, r = rank of the joint NoPE-K/V map: exact."""
    src = llama_layer(rng, rotary=rotary)
    G, D = src.num_kv_heads, src.head_dim
    x = rng.standard_normal((40, src.hidden_size))
    nope = max(D - rotary, 1)
    rank = G * (D - rotary) + G * D
    layer, report = cv.convert_gqa_layer(src, rank, nope, G * rotary, D,
                                         calibration=x if with_calibration else None)
    expected = llama_heads(src, x)
    assert rel(gqla_heads(layer, x), expected) < LOSSLESS
    if with_calibration:
        assert report.relative_error < LOSSLESS
    assert layer.softmax_scale == pytest.approx(1 / np.sqrt(D), rel=1e-15)
    assert report.kv_bytes_before == {"gqa": 2 * G * D * 2}
    assert report.kv_bytes_after == {"absorb": (rank + G * rotary) * 2,
                                     "gqa": (rank + G * rotary + G * (nope + D)) * 2}


def test_gqa_error_falls_as_latent_and_rope_dims_grow(rng):
    """With the distances RoRoPE weighs matching the calibration length, the
    error falls monotonically in r (fixed d_r) and in d_r (full r)."""
    src = llama_layer(rng)
    n = 48
    x = rng.standard_normal((n, src.hidden_size))
    convert = lambda r, dr: cv.convert_gqa_layer(src, r, 16, dr, 16, x, fold=1, context_length=n,
                                                 eval_tokens=n)[1].relative_error
    by_rank = [convert(r, 16) for r in (8, 16, 32, 48, 64)]
    by_rope = [convert(64, dr) for dr in (4, 8, 16, 24, 32)]
    for errors in (by_rank, by_rope):
        assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(errors, errors[1:])), errors
        assert errors[0] > 10 * errors[-2]
    assert by_rope[-1] < LOSSLESS


def test_freqfold_and_deepseek_rope(rng):
    """FreqFold: the auto choice is the fold with the lowest estimate; with
    deepseek_rope the kept frequencies are rope_theta^(-2i/d_r)."""
    src = llama_layer(rng, head_dim=32, base=500000.0)
    x = rng.standard_normal((64, src.hidden_size))
    layer, report = cv.convert_gqa_layer(src, 48, 16, 8, 32, x)
    estimates = report.details["fold_estimates"]
    assert report.details["fold"] == min(estimates, key=lambda m: (estimates[m], m))
    assert set(estimates) == {1, 2, 4, 8}
    _, mean = cv.convert_gqa_layer(src, 48, 16, 8, 32, x, dropped_rope="mean")
    assert mean.details["dropped_rope"] == "mean" and 0 < mean.relative_error < 1
    layer, report = cv.convert_gqa_layer(src, 48, 16, 8, 32, x, deepseek_rope=True)
    assert report.details["fold"] == 4
    np.testing.assert_allclose(layer.rope.inv_freq, cv.llama_inv_freq(500000.0, 8), rtol=1e-12)
    assert np.isfinite(report.relative_error) and report.relative_error < 1


def test_held_out_tokens(rng):
    """The report can measure on calibration rows the fit never saw."""
    src = llama_layer(rng)
    x = rng.standard_normal((60, src.hidden_size))
    _, exact = cv.convert_gqa_layer(src, 32, 4, 32, 16, x, holdout=20)
    assert exact.details["held_out_tokens"] == 20 and exact.relative_error < LOSSLESS
    _, seen = cv.convert_gqa_layer(src, 24, 8, 8, 16, x[:40], context_length=40)
    _, unseen = cv.convert_gqa_layer(src, 24, 8, 8, 16, x, holdout=20, context_length=40)
    assert 0 < seen.relative_error < 1 and 0 < unseen.relative_error < 1
    _, mla = cv.convert_mla_layer(deepseek_layer(rng), 2, 24, 24, rng.standard_normal((30, 48)), holdout=10)
    assert mla.details["held_out_tokens"] == 10 and mla.relative_error < LOSSLESS


def test_gqa_float32_weights_work_in_float32(rng):
    src = llama_layer(rng, dtype=np.float32)
    x = rng.standard_normal((40, src.hidden_size)).astype(np.float32)
    layer, report = cv.convert_gqa_layer(src, 64, 16, 32, 16, x)
    assert layer.kv_a_proj.dtype == np.float32 and layer.w_ukv.dtype == np.float32
    assert report.details["working_dtype"] == "float32"
    assert report.relative_error < 1e-5


# ----------------------------------------------------- MLA -> GQLA math
@pytest.mark.parametrize("q_lora", [None, 16])
def test_mla_lossless_and_smaller_groups(rng, q_lora):
    src = deepseek_layer(rng, q_lora=q_lora)
    x = rng.standard_normal((40, src.hidden_size))
    expected = deepseek_heads(src, x)
    # G' = H is the identity; G' < H with d_c' = min(H/G' * d_c, r) is exact.
    for groups, dims in ((8, 8), (4, 16), (2, 24)):
        layer, report = cv.convert_mla_layer(src, groups, dims, dims, calibration=x)
        assert report.relative_error < LOSSLESS
        back = layer.heads_output(x)  # [n, H, dv'] in the converted value coordinates
        assert back.shape[-1] == dims
        assert rel(layer.output(x), expected.reshape(40, -1) @ src.o_proj.T) < LOSSLESS
        assert report.kv_bytes_after["gqa"] == (24 + 8 + groups * 2 * dims) * 2
    errors = [cv.convert_mla_layer(src, 2, k, k, calibration=x)[1].relative_error for k in (4, 8, 16, 24)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(errors, errors[1:])), errors
    assert errors[0] > 1e-3 and errors[-1] < LOSSLESS


def test_mla_weights_only(rng):
    src = deepseek_layer(rng)
    layer, report = cv.convert_mla_layer(src, 2, 24, 24)
    x = rng.standard_normal((30, src.hidden_size))
    assert report.relative_error < LOSSLESS
    assert rel(layer.output(x), deepseek_heads(src, x).reshape(30, -1) @ src.o_proj.T) < LOSSLESS


# ------------------------------------------------- end to end with gqla
def decode_all_paths(layer, x, s_q):
    """Append the converted layer's c/kr to a gqla session (f32 cache) and
    decode the last s_q tokens on both paths; returns {path: o [s_q, H, dv]}
    and the f32 inputs."""
    q, c, kr = (a.astype(np.float32) for a in layer.project(x))
    outputs = {}
    for path in ("gqa", "absorb"):
        config = layer.gqla_config(cache_dtype="f32", device="cpu", path=path, max_tokens=256)
        with gqla.Session(config) as session:
            session.set_weights(0, layer.w_ukv.astype(np.float32))
            seq = session.add_sequence()
            session.append(0, seq, c[:17], kr[:17])   # two appends: a prefill and the rest
            session.append(0, seq, c[17:], kr[17:])
            assert session.path == path
            outputs[path] = session.decode(0, [seq], q[None, -s_q:])[0]
    return outputs, (q, c, kr)


@pytest.mark.parametrize("lossless", [True, False])
def test_gqa_converted_layer_decodes_in_gqla(rng, lossless):
    src = llama_layer(rng)
    G, D = src.num_kv_heads, src.head_dim
    x = rng.standard_normal((45, src.hidden_size))
    budget = (G * D, 8, G * D, D) if lossless else (40, 12, 12, 16)
    layer, _ = cv.convert_gqa_layer(src, *budget, calibration=x)
    with gqla.Session(layer.gqla_config(device="cpu", max_tokens=64)) as session:
        assert session.config.softmax_scale == pytest.approx(1 / np.sqrt(D))
    s_q = 4
    outputs, (q, c, kr) = decode_all_paths(layer, x, s_q)
    given, _ = ref.gqla(q[-s_q:], c, kr, layer.w_ukv.astype(np.float32), G, layer.nope_dim, layer.value_dim,
                        layer.softmax_scale)
    converted = layer.heads_output(x)[-s_q:]
    for o in outputs.values():
        assert rel(o, given) <= ref.TOLERANCE["f32"]
        assert rel(o, converted) <= 2 * ref.TOLERANCE["f32"]
    assert rel(outputs["gqa"], outputs["absorb"]) <= ref.TOLERANCE["f32"]
    if lossless:
        assert rel(outputs["gqa"], llama_heads(src, x)[-s_q:]) <= 2 * ref.TOLERANCE["f32"]


def test_mla_converted_layer_decodes_in_gqla(rng):
    src = deepseek_layer(rng, q_lora=16)
    x = rng.standard_normal((40, src.hidden_size))
    layer, _ = cv.convert_mla_layer(src, 2, 24, 24, calibration=x)
    outputs, _ = decode_all_paths(layer, x, 3)
    converted = layer.heads_output(x)[-3:]
    for o in outputs.values():
        assert rel(o, converted) <= 2 * ref.TOLERANCE["f32"]


# ------------------------------------------------------------ safetensors
def test_safetensors_round_trip(tmp_path, rng):
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((4,)).astype(np.float16),
        "f64": rng.standard_normal((2, 3, 2)),
        "bf16": cv.bf16_bits(rng.standard_normal((6, 2))),
        "i64": np.arange(7, dtype=np.int64),
        "scalar": np.array(1.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "t.safetensors"
    cv.write_safetensors(path, tensors, metadata={"format": "pt"}, dtypes={"bf16": "BF16"})
    back, dtypes, metadata = cv.read_safetensors(path)
    assert metadata == {"format": "pt"}
    assert dtypes == {"f32": "F32", "f16": "F16", "f64": "F64", "bf16": "BF16", "i64": "I64", "scalar": "F32",
                      "empty": "F32"}
    for name, value in tensors.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        np.testing.assert_array_equal(back[name], value)
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert (8 + header_len) % 8 == 0 and json.loads(raw[8:8 + header_len])["f32"]["shape"] == [3, 5]
    # A float64 array written as BF16 is rounded to nearest even.
    cv.write_safetensors(path, {"w": np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5])}, dtypes={"w": "BF16"})
    f = cv.SafetensorsFile(path)
    np.testing.assert_array_equal(f.float("w"), [1.0, 1.0, 1 + 2 ** -6, -2.5])


def test_safetensors_rejects_corrupt_files(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((10 ** 9).to_bytes(8, "little") + b"{}")
    with pytest.raises(cv.ConversionError, match="header length"):
        cv.SafetensorsFile(path)
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(cv.ConversionError, match="data_offsets"):
        cv.SafetensorsFile(path)


def test_fp8_e4m3_decodes():
    from gqla._convert_safetensors import decode_float
    codes = np.array([0x00, 0x38, 0xB8, 0x7E, 0x01, 0x7F], np.uint8)   # 0, 1, -1, 448, 2^-9, NaN
    values = decode_float(codes, "F8_E4M3")
    np.testing.assert_array_equal(values[:5], [0.0, 1.0, -1.0, 448.0, 2.0 ** -9])
    assert np.isnan(values[5])


# -------------------------------------------------------- checkpoints, CLI
def write_llama_checkpoint(directory, rng, layers=2, heads=4, groups=2, head_dim=16, hidden=48, **extra):
    os.makedirs(directory, exist_ok=True)
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden,
                  num_attention_heads=heads, num_key_value_heads=groups, head_dim=head_dim,
                  num_hidden_layers=layers, intermediate_size=40, vocab_size=30, rope_theta=10000.0,
                  max_position_embeddings=512, rms_norm_eps=1e-5)
    config.update(extra)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    s = 1 / np.sqrt(hidden)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((30, hidden)), "model.norm.weight": np.ones(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": rng.standard_normal((heads * head_dim, hidden)) * s,
            p + "self_attn.k_proj.weight": rng.standard_normal((groups * head_dim, hidden)) * s,
            p + "self_attn.v_proj.weight": rng.standard_normal((groups * head_dim, hidden)) * s,
            p + "self_attn.o_proj.weight": rng.standard_normal((hidden, heads * head_dim)) * s,
            p + "mlp.down_proj.weight": rng.standard_normal((hidden, 40)),
            p + "input_layernorm.weight": 1 + rng.standard_normal(hidden) * 0.1})
    cv.write_safetensors(os.path.join(directory, "model.safetensors"), tensors,
                         dtypes={k: "BF16" for k in tensors})
    return config


def test_llama_checkpoint_cli_and_deepseek_export(tmp_path, rng, capsys):
    src_dir, out_dir, ds_dir = tmp_path / "llama", tmp_path / "gqla", tmp_path / "ds"
    write_llama_checkpoint(src_dir, rng)
    x = rng.standard_normal((30, 48))
    np.save(tmp_path / "calib.npy", x)
    assert cv.main([str(src_dir), str(out_dir), "--latent-dim", "40", "--nope-dim", "8", "--rope-dim", "16",
                    "--calibration", str(tmp_path / "calib.npy"), "--deepseek-v3", str(ds_dir),
                    "--report", str(tmp_path / "report.json")]) == 0
    printed = capsys.readouterr().out
    assert "layer 0: rel. error" in printed and "softmax_scale 0.25" in printed
    source = cv.Checkpoint(src_dir)
    out = cv.Checkpoint(out_dir)
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"):
        assert out.dtype(name) == "BF16"
        np.testing.assert_array_equal(out.raw(name), source.raw(name))
    assert out.dtype("model.layers.0.self_attn.kv_b_proj.weight") == "BF16"
    assert out.shape("model.layers.0.self_attn.kv_b_proj.weight") == (2 * (8 + 16), 40)
    assert not any(name.endswith(("k_proj.weight", "v_proj.weight")) for name in out.keys())
    config, layers = cv.load_gqla_checkpoint(out_dir)
    assert config["gqla"]["softmax_scale"] == pytest.approx(0.25)
    assert len(json.load(open(tmp_path / "report.json"))) == 2
    # The stored (bf16) layer reproduces what the converter returns for the same source layer.
    from gqla._convert_checkpoint import llama_layer as read_llama
    src = read_llama(source, json.load(open(src_dir / "config.json")), "model.layers.1.self_attn.")
    fresh, _ = cv.convert_gqa_layer(src, 40, 8, 16, 16, calibration=x, deepseek_rope=True)
    assert rel(layers[1].output(x), fresh.output(x)) < 2e-2
    # DeepSeek-V3 export: per-head kv_b_proj rows from the group, interleaved rope, q scaled for
    # DeepSeek's 1/sqrt(d_c+d_r). Neutralized latent norm (default): one constant latent dim
    # (r + 1 = 41) with a bias, so DeepSeek's own RMSNorm of the latent is a constant factor and
    # the MLA layer, norm included, computes the GQLA layer on RMS-normalized inputs.
    from gqla._convert_checkpoint import deepseek_layer as read_deepseek
    ds_config = json.load(open(ds_dir / "config.json"))
    assert ds_config["model_type"] == "deepseek_v3" and ds_config["kv_lora_rank"] == 41
    assert ds_config["attention_bias"] is True
    assert ds_config["num_attention_heads"] == 4 and ds_config["qk_rope_head_dim"] == 16
    ds = cv.Checkpoint(ds_dir)
    p = "model.layers.1.self_attn."
    kv_b = ds.float(p + "kv_b_proj.weight").reshape(4, 24, 41)
    np.testing.assert_array_equal(kv_b[0], kv_b[1])
    np.testing.assert_array_equal(kv_b[2], kv_b[3])
    assert not kv_b[..., 40].any() and ds.float(p + "kv_a_layernorm.weight")[40] == 0
    norm_w = ds.float("model.layers.1.input_layernorm.weight", np.float64)
    normed = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-5) * norm_w
    mla = read_deepseek(ds, ds_config, p)
    assert mla.kv_a_proj_bias is not None and mla.kv_a_proj_bias[40] > 0
    # The gap is the bf16 storage of the exported weights, not the norm (f32 export below).
    assert rel(mla.output(normed), layers[1].output(normed)) < 2e-2
    exact_dir, exact_ds = tmp_path / "gqla32", tmp_path / "ds32"
    cv.convert_checkpoint(src_dir, exact_dir, latent_dim=40, nope_dim=8, rope_dim=16, calibration=x,
                          dtype="f32", deepseek_v3_dir=exact_ds, log=None)
    _, layers32 = cv.load_gqla_checkpoint(exact_dir)
    mla32 = read_deepseek(cv.Checkpoint(exact_ds), json.load(open(exact_ds / "config.json")), p)
    assert rel(mla32.output(normed), layers32[1].output(normed)) < 1e-5
    # Without the norm neutralized ("ones"): the latent keeps r dims and no biases; the layer is
    # the GQLA layer only where the runtime skips the norm.
    ones_dir = tmp_path / "ds_ones"
    assert cv.main([str(out_dir), str(ones_dir), "--to-deepseek-v3", "--deepseek-latent-norm", "ones"]) == 0
    ones_config = json.load(open(ones_dir / "config.json"))
    assert ones_config["kv_lora_rank"] == 40 and not ones_config.get("attention_bias")
    ones = cv.Checkpoint(ones_dir)
    assert p + "kv_a_proj_with_mqa.bias" not in ones
    equivalent = cv.GQLALayer(
        num_heads=4, num_groups=4, latent_dim=40, nope_dim=8, rope_dim=16, value_dim=16,
        softmax_scale=1 / np.sqrt(8 + 16), kv_a_proj=ones.float(p + "kv_a_proj_with_mqa.weight"),
        w_ukv=ones.float(p + "kv_b_proj.weight"), o_proj=ones.float(p + "o_proj.weight"),
        rope=cv.RopeSpec(cv.llama_inv_freq(10000.0, 16), "interleaved"), q_proj=ones.float(p + "q_proj.weight"))
    assert rel(equivalent.output(x), layers[1].output(x)) < 2e-2
    # The neutralized form cannot be read back as an MLA source (biases): a clear error.
    with pytest.raises(cv.ConversionError, match="attention biases"):
        cv.convert_mla_layer(mla, 2, 8, 16)


def test_deepseek_checkpoint_to_fewer_groups(tmp_path, rng):
    src = deepseek_layer(rng, heads=4, rank=24, q_lora=12)
    directory = tmp_path / "ds"
    os.makedirs(directory)
    config = dict(model_type="deepseek_v3", hidden_size=48, num_attention_heads=4, num_key_value_heads=4,
                  kv_lora_rank=24, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                  num_hidden_layers=1, rope_theta=10000.0, rms_norm_eps=1e-6,
                  rope_scaling={"type": "yarn", "factor": 40, "mscale_all_dim": 1.0, "mscale": 1.0,
                                "original_max_position_embeddings": 4096})
    json.dump(config, open(directory / "config.json", "w"))
    p = "model.layers.0.self_attn."
    tensors = {p + n + ".weight": getattr(src, n) for n in (
        "q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")}
    cv.write_safetensors(directory / "model.safetensors", tensors)
    out = tmp_path / "gqla"
    reports = cv.convert_checkpoint(directory, out, num_groups=2, nope_dim=16, value_dim=16, log=None)
    assert reports[0].relative_error < LOSSLESS
    mscale = 0.1 * np.log(40) + 1
    _, layers = cv.load_gqla_checkpoint(out)
    assert layers[0].softmax_scale == pytest.approx(mscale ** 2 / 4)
    assert layers[0].num_groups == 2 and layers[0].kv_a_layernorm is not None
    # Back to DeepSeek-V3 (per-head rows repeated): the MLA math of the source, exactly.
    cv.to_deepseek_v3(out, tmp_path / "ds2")
    from gqla._convert_checkpoint import deepseek_layer as read_deepseek
    ds2 = read_deepseek(cv.Checkpoint(tmp_path / "ds2"), json.load(open(tmp_path / "ds2" / "config.json")), p)
    x = rng.standard_normal((20, 48))
    src.softmax_scale = mscale ** 2 / 4
    assert rel(ds2.output(x), src.output(x)) < LOSSLESS


# ------------------------------------------------------------ bad inputs
def test_bad_inputs_raise_value_errors_naming_the_argument(rng, tmp_path):
    src = llama_layer(rng)
    x = rng.standard_normal((20, src.hidden_size))
    cases = [
        (lambda: cv.convert_gqa_layer(cv.LlamaAttention(**{**vars(src), "k_proj": src.k_proj[:-1]}), 32, 8, 8, 16),
         "k_proj"),
        (lambda: cv.convert_gqa_layer(cv.LlamaAttention(**{**vars(src), "num_kv_heads": 3}), 32, 8, 8, 16),
         "num_kv_heads"),
        (lambda: cv.convert_gqa_layer(src, 65, 16, 8, 16), "latent_dim: 65 is larger than possible"),
        (lambda: cv.convert_gqa_layer(src, 32, 8, 34, 16), "rope_dim: 34 is larger than possible"),
        (lambda: cv.convert_gqa_layer(src, 32, 8, 7, 16), "rope_dim"),
        (lambda: cv.convert_gqa_layer(src, 32, 17, 8, 16), "nope_dim"),
        (lambda: cv.convert_gqa_layer(src, 32, 8, 8, 16, calibration=x[:, :10]), "calibration"),
        (lambda: cv.convert_gqa_layer(src, 32, 8, 8, 16, fold=3), "fold"),
        (lambda: cv.convert_gqa_layer(src, 32, 8, 8, 16, calibration=x, holdout=20), "holdout"),
        (lambda: cv.convert_mla_layer(deepseek_layer(rng), 3, 8, 8), "num_groups"),
        (lambda: cv.convert_mla_layer(deepseek_layer(rng), 2, 25, 8), "nope_dim: 25 is larger than possible"),
        (lambda: cv.llama_inv_freq(10000.0, 16, {"rope_type": "longrope", "factor": 4.0}), "rope_scaling"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words):
            call()
    # An unknown RoPE scaling in config.json stops a checkpoint conversion before it writes.
    write_llama_checkpoint(tmp_path / "yarn", rng, layers=1, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(cv.ConversionError, match="rope_scaling: unknown or unsupported RoPE scaling type 'yarn'"):
        cv.convert_checkpoint(tmp_path / "yarn", tmp_path / "out", log=None)
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")
    write_llama_checkpoint(tmp_path / "ok", rng, layers=1)
    with pytest.raises(cv.ConversionError, match="latent_dim: 4096 is larger than possible"):
        cv.convert_checkpoint(tmp_path / "ok", tmp_path / "out", latent_dim=4096, nope_dim=8, rope_dim=16, log=None)
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")
    write_llama_checkpoint(tmp_path / "odd", rng, layers=1, num_attention_heads=4, num_key_value_heads=3)
    assert cv.main([str(tmp_path / "odd"), str(tmp_path / "out")]) == 2
