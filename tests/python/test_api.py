# SPDX-License-Identifier: Apache-2.0
"""The non-numeric surface: version, config round trip, probe, cost
prediction, stats, context manager and threads."""

import threading

import numpy as np
import pytest

import gqla
import cases

LLAMA3_8B_GQLA = dict(num_heads=32, num_groups=8, latent_dim=512, nope_dim=64, rope_dim=64,
                      value_dim=128)


def test_version():
    assert gqla.__version__.count(".") == 2
    major = int(gqla.__version__.split(".")[0])
    assert major == gqla._gqla.ABI_VERSION // 10000 == gqla._gqla.version() // 10000


def test_resolved_config():
    config = gqla.Config.gqla(**cases.ODD_GQLA, device="cpu", page_size=16, max_tokens=100)
    with gqla.Session(config) as s:
        resolved = s.config
        assert resolved.kind == "gqla" and resolved.device == "cpu"
        assert resolved.num_groups == 3 and resolved.query_dim == 128 and resolved.output_dim == 80
        assert resolved.max_tokens >= 100 and resolved.max_tokens % 16 == 0
        assert resolved.softmax_scale == pytest.approx(1 / np.sqrt(128), rel=1e-6)
        assert resolved.threads >= 1
        assert resolved.path in ("gqa", "absorb")
    assert "gqla" in repr(config)


def test_probe_cpu():
    info = gqla.probe("cpu")
    assert info["device"] == "cpu"
    assert info["logical_cores"] >= 1
    assert info["read_gbps"] > 0 and info["peak_gflops_f32"] > 0
    assert isinstance(info["isa"], list)
    assert gqla.device_count("cpu") == 1
    assert gqla.device_count("cuda") >= 0


def test_probe_calibrated():
    estimated = gqla.probe("cpu")
    info = gqla.probe("cpu", calibrate=True)
    assert info["read_gbps"] > 0 and info["peak_gflops_f32"] > 0
    # A measurement that fails (busy or tiny machine) falls back to the
    # estimate and says so.
    assert isinstance(info["calibrated"], bool)
    if not info["calibrated"]:
        assert (info["read_gbps"] == estimated["read_gbps"]
                or info["peak_gflops_f32"] == estimated["peak_gflops_f32"])
    assert gqla.probe("cpu", calibrate=True) == info  # measured once per process


def test_predict_cost_worked_checks():
    """docs/cost-model.md, worked checks: H100-like specs pick absorb for s_q 1 and 2; H20-like specs
    pick absorb for s_q 1 and the GQA path for s_q 2."""
    config = gqla.Config.gqla(**LLAMA3_8B_GQLA, cache_dtype="bf16", device="cpu")
    h100 = {"device": "cuda", "read_gbps": 3350.0, "peak_gflops_bf16": 990e3, "peak_gflops_f32": 67e3}
    h20 = {"device": "cuda", "read_gbps": 4000.0, "peak_gflops_bf16": 148e3, "peak_gflops_f32": 44e3}
    picks = {name: [gqla.predict_cost(config, 64, 4096, s_q, probe=p)["chosen"] for s_q in (1, 2)]
             for name, p in (("h100", h100), ("h20", h20))}
    assert picks == {"h100": ["absorb", "absorb"], "h20": ["absorb", "gqa"]}


def test_session_predict_cost_and_stats(rng):
    filled = cases.gqla_session(rng, page_size=16, path="absorb")
    with filled.session as s:
        report = s.predict_cost(batch=4, context=1000, s_q=1)
        for path in ("gqa", "absorb"):
            cost = report[path]
            assert cost["bytes"] > 0 and cost["flops"] > 0 and cost["time_s"] > 0
            assert cost["bound"] in ("memory", "compute")
        assert report["chosen"] in ("gqa", "absorb") and report["expand_flops"] > 0

        before = s.stats()
        seq = filled.new_sequence(40)
        after = s.stats()
        assert after["device"] == "cpu" and after["path"] == "absorb" and after["page_size"] == 16
        assert after["sequences"] == before["sequences"] + 1
        assert after["tokens_cached"] == before["tokens_cached"] + 40
        assert after["pages_used"] == before["pages_used"] + 3
        assert after["weight_bytes"] > 0 and after["expanded_bytes"] == 0
        s.release(seq)
        assert s.stats()["pages_used"] == before["pages_used"]
        s.synchronize()


def test_gqa_kind_cost_has_one_path():
    config = gqla.Config.gqa(num_heads=8, num_kv_heads=2, head_dim=64, device="cpu")
    report = gqla.predict_cost(config, batch=1, context=100)
    assert report["absorb"] is None and report["chosen"] == "gqa"


def test_threads_share_a_session(rng):
    filled = cases.gqa_session(rng, page_size=16)
    with filled.session as s:
        seqs = [filled.new_sequence(n) for n in (5, 50, 120)]
        q = filled.random_queries(len(seqs), 1)
        expected = s.decode(0, seqs, q)
        results, errors = [], []

        def worker():
            try:
                for _ in range(20):
                    results.append(s.decode(0, seqs, q))
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert all(np.array_equal(r, expected) for r in results)


def test_isa_names_come_from_the_library():
    info = gqla.probe("cpu", calibrate=False)
    flags = info["isa_flags"]
    # One name per set bit the library knows, in bit order, spelled as /proc/cpuinfo does.
    expected = [gqla._gqla.isa_name(1 << b) for b in range(64) if flags >> b & 1]
    assert info["isa"] == [n for n in expected if n is not None]
    assert gqla._gqla.isa_name(1 << 8) == "avx512_bf16"
    assert gqla._gqla.isa_name(0) is None
    assert gqla._gqla.isa_name(3) is None
