# SPDX-License-Identifier: Apache-2.0
"""GQA decode on the GPU with torch tensors, checked against
torch.nn.functional.scaled_dot_product_attention(enable_gqa=True).

Tensors go to gqla without copies (DLPack), outputs are allocated on the
query's device, and the work is queued on torch's current stream. Exits
with a message when torch, a GPU or the gqla CUDA module is missing.

    PYTHONPATH=build/bindings/python python3 examples/python/torch_gpu.py
"""

import sys

import gqla


def nothing_to_run(why):
    print(f"{why}: nothing to run")
    sys.exit(0)


try:
    import torch
    import torch.nn.functional as F
except ImportError:
    nothing_to_run("torch is not installed")
if not torch.cuda.is_available():
    nothing_to_run("no CUDA GPU visible to torch")
if gqla.device_count("cuda") == 0:
    nothing_to_run("gqla has no CUDA device (libgqla_cuda.so missing or no GPU)")

H, G, D, BATCH, PROMPT, STEPS = 32, 8, 128, 4, 500, 16
device = torch.device("cuda")
torch.manual_seed(0)

config = gqla.Config.gqa(num_heads=H, num_kv_heads=G, head_dim=D, device="cuda",
                         io_dtype="bf16", cache_dtype="bf16", max_tokens=BATCH * 1024)
print("device:", gqla.probe("cuda")["name"])

with gqla.Session(config) as session:
    seqs = [session.add_sequence() for _ in range(BATCH)]
    keys = torch.randn(BATCH, PROMPT, G, D, device=device, dtype=torch.bfloat16)
    values = torch.randn(BATCH, PROMPT, G, D, device=device, dtype=torch.bfloat16)
    # One call for the whole prefill: rows packed sequence after sequence.
    session.append_many(0, seqs, keys.reshape(-1, G, D), values.reshape(-1, G, D),
                        counts=[PROMPT] * BATCH)

    out = torch.empty(BATCH, 1, H, D, device=device, dtype=torch.bfloat16)
    worst = 0.0
    for _ in range(STEPS):
        k_new = torch.randn(BATCH, 1, G, D, device=device, dtype=torch.bfloat16)
        v_new = torch.randn(BATCH, 1, G, D, device=device, dtype=torch.bfloat16)
        session.append_many(0, seqs, k_new.reshape(-1, G, D), v_new.reshape(-1, G, D),
                            counts=[1] * BATCH)
        keys = torch.cat([keys, k_new], dim=1)
        values = torch.cat([values, v_new], dim=1)
        q = torch.randn(BATCH, 1, H, D, device=device, dtype=torch.bfloat16)
        session.decode(0, seqs, q, out=out)  # written in place, on torch's stream

        expected = F.scaled_dot_product_attention(
            q.transpose(1, 2).float(), keys.transpose(1, 2).float(),
            values.transpose(1, 2).float(), enable_gqa=True).transpose(1, 2)
        error = ((out.float() - expected).norm() / expected.norm()).item()
        worst = max(worst, error)

    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        session.decode(0, seqs, q, out=out)
    end.record()
    end.synchronize()
    print(f"batch {BATCH}, context {PROMPT + STEPS}: {start.elapsed_time(end) * 10:.1f} us per decode")
    print(f"worst relative error vs scaled_dot_product_attention: {worst:.2e}")
    if worst > 1e-2:
        sys.exit("gqla disagrees with torch")
