# SPDX-License-Identifier: Apache-2.0
"""The Python examples run on the CPU and report their own errors.

Each example checks its results against a float64 reference and prints the
worst error; here they run as a user would start them (a fresh interpreter,
the package found through PYTHONPATH) and must exit 0 within a time limit.
torch_gpu.py needs torch and a GPU and is left to the GPU suite; the
Hugging Face examples need torch and transformers (the GPU machine has
them) and are skipped where either is missing; tp_decode.py needs torch
(torch.distributed) and runs here on CPU ranks over gloo.
"""

import os
import subprocess
import sys

import pytest

import gqla

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gqla.__file__)))


def run_example(script, timeout, args=()):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("GQLA_PROBE_CALIBRATE", "0")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("script", ["decode_loop.py", "convert_llama.py"])
def test_example_runs(script):
    run_example(script, 120)


@pytest.mark.parametrize("script", ["hf_generate.py", "hf_convert_logits.py"])
def test_hugging_face_example_runs(script):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    print(run_example(script, 900))


def test_tensor_parallel_example_runs_on_cpu_ranks():
    pytest.importorskip("torch")
    out = run_example("tp_decode.py", 600, ["--device", "cpu", "--ranks", "2", "--batch", "2", "--context", "200",
                                            "--timed", "5"])
    print(out)
    assert "gathered vs one-device session" in out
