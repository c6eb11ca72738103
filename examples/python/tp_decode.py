# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel GQLA decode: one process per GPU, each holding the
group-sharded session of its groups (docs/sharding.md).

Rank k of N serves groups [k G/N, (k+1) G/N) and their heads. With
``keep_latent=False`` (the default here) a rank keeps only its groups'
expanded keys and values plus the rope key: 256 cache elements per token
and layer for LLaMA-3-8B-GQLA on 8 ranks, against 576 for the latent that
every rank of an absorb-path (MLA-style) split would have to replicate.
Each decode step, every rank attends with its heads' queries and the ranks
all-gather their heads' outputs (torch.distributed; NCCL on GPUs, with
NVLink multicast off as NCCL_NVLS_ENABLE=0, gloo on CPUs). Rank 0 checks
the gathered output against a full one-device session of the same layer
and against a float64 reference, then every rank reports its step time
and cache bytes per token beside the full session's.

    python3 examples/python/tp_decode.py                      # one rank per visible GPU
    python3 examples/python/tp_decode.py --ranks 2 --device cpu --batch 2 --context 256

Exits 0 with a message when torch (or, for --device cuda, a GPU or the
gqla CUDA module) is missing, 1 when a check fails.
"""

import argparse
import os
import socket
import sys

import gqla

# LLaMA-3-8B-GQLA (gqla-bench --preset llama3-8b-gqla).
H, G, R, D_C, D_R, D_V = 32, 8, 512, 64, 64, 128
BF16_BOUND = 1e-2  # docs/numerics.md


def nothing_to_run(why):
    print(f"{why}: nothing to run")
    sys.exit(0)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--ranks", type=int, default=0, help="processes (default: visible GPUs; cpu: 2)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=2048, help="cached tokens per sequence before the steps")
    p.add_argument("--steps", type=int, default=4, help="decode steps checked")
    p.add_argument("--timed", type=int, default=50, help="timed decode calls per rank")
    p.add_argument("--keep-latent", action="store_true", help="ranks keep the latent replica too")
    return p.parse_args()


def layer_data(torch, args):
    """The same weights, cached rows and queries on every rank (one seed)."""
    gen = torch.Generator().manual_seed(1234)
    n = args.batch * args.context
    w = torch.randn(G * (D_C + D_V), R, generator=gen) / R**0.5
    c = torch.randn(n + args.batch * args.steps, R, generator=gen)
    kr = torch.randn(n + args.batch * args.steps, D_R, generator=gen)
    q = torch.randn(args.steps, args.batch, 1, H, D_C + D_R, generator=gen)
    return w, c, kr, q


def make_session(args, rank, world, shard):
    device = f"cuda:{rank}" if args.device == "cuda" else "cpu"
    cfg = gqla.Config.gqla(num_heads=H, num_groups=G, latent_dim=R, nope_dim=D_C, rope_dim=D_R, value_dim=D_V,
                           device=device, cache_dtype="bf16", io_dtype="bf16" if args.device == "cuda" else "f32",
                           path="gqa", max_tokens=args.batch * (args.context + args.steps + 128),  # partial last pages
                           max_batch=args.batch)
    if args.device == "cpu":
        cfg.threads = max(1, (os.cpu_count() or 2) // world)
    if shard:
        per = G // world
        cfg.group_begin, cfg.group_count = rank * per, per
        cfg.keep_latent = 1 if args.keep_latent else 0
    return gqla.Session(cfg)


def fill(session, torch, args, w, c, kr, dev, dtype):
    session.set_weights(0, w.to(dev, dtype))  # a shard takes its groups' rows of the full W_UKV
    seqs = [session.add_sequence() for _ in range(args.batch)]
    n = args.batch * args.context
    session.append_many(0, seqs, c[:n].to(dev, dtype), kr[:n].to(dev, dtype), counts=[args.context] * args.batch)
    return seqs


def step_rows(c, kr, args, step, dev, dtype):
    first = args.batch * (args.context + step)
    rows = slice(first, first + args.batch)
    return c[rows].to(dev, dtype), kr[rows].to(dev, dtype)


def reference(torch, w, c, kr, q, args, seq, steps_done):
    """float64 attention of the last step's query of sequence `seq` over its
    tokens, with keys and values expanded per group from the bf16-rounded
    latent (what the cache stores)."""
    f64 = torch.float64
    rnd = lambda t: t.to(torch.bfloat16).to(f64)  # noqa: E731
    n = args.batch * args.context
    rows = list(range(seq * args.context, (seq + 1) * args.context))
    rows += [n + s * args.batch + seq for s in range(steps_done)]
    cs, krs = rnd(c[rows]), rnd(kr[rows])
    wg = rnd(w).view(G, D_C + D_V, R)
    qq = rnd(q[steps_done - 1, seq, 0])  # [H, D_C + D_R]
    out = torch.empty(H, D_V, dtype=f64)
    for h in range(H):
        g = h // (H // G)
        kc = cs @ wg[g, :D_C].T
        v = cs @ wg[g, D_C:].T
        s = (kc @ qq[h, :D_C] + krs @ qq[h, D_C:]) / (D_C + D_R) ** 0.5
        out[h] = torch.softmax(s, 0) @ v
    return out


def timed_ms(torch, session, seqs, q, out, calls, on_cuda):
    import time
    times = []
    for _ in range(calls):
        if on_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        session.decode(0, seqs, q, out=out)
        if on_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def run_rank(rank, world, args, port):
    import torch
    import torch.distributed as dist

    on_cuda = args.device == "cuda"
    if on_cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if on_cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dev = torch.device("cuda", rank) if on_cuda else torch.device("cpu")
    dtype = torch.bfloat16 if on_cuda else torch.float32
    w, c, kr, q = layer_data(torch, args)
    heads = slice(rank * H // world, (rank + 1) * H // world)

    shard = make_session(args, rank, world, shard=True)
    seqs = fill(shard, torch, args, w, c, kr, dev, dtype)
    full = full_seqs = None
    if rank == 0:
        full = make_session(args, 0, world, shard=False)
        full_seqs = fill(full, torch, args, w, c, kr, dev, dtype)

    worst_full = worst_ref = 0.0
    out = torch.empty(args.batch, 1, H // world, D_V, device=dev, dtype=dtype)
    for step in range(args.steps):
        c_new, kr_new = step_rows(c, kr, args, step, dev, dtype)
        shard.append_many(0, seqs, c_new, kr_new, counts=[1] * args.batch)
        q_step = q[step].to(dev, dtype)
        shard.decode(0, seqs, q_step[:, :, heads].contiguous(), out=out)
        parts = [torch.empty_like(out) for _ in range(world)]
        dist.all_gather(parts, out)
        if rank != 0:
            continue
        gathered = torch.cat(parts, dim=2).float()
        full.append_many(0, full_seqs, c_new, kr_new, counts=[1] * args.batch)
        want = full.decode(0, full_seqs, q_step).float()
        worst_full = max(worst_full, ((gathered - want).norm() / want.norm()).item())
        if step == args.steps - 1:
            for seq in (0, args.batch - 1):
                ref = reference(torch, w, c, kr, q, args, seq, step + 1)
                got = gathered[seq, 0].cpu().double()
                worst_ref = max(worst_ref, ((got - ref).norm() / ref.norm()).item())

    q_last = q[args.steps - 1].to(dev, dtype)
    rank_ms = timed_ms(torch, shard, seqs, q_last[:, :, heads].contiguous(), out, args.timed, on_cuda)
    stats = shard.stats()
    report = torch.tensor([rank_ms, float(stats["kept_bytes_per_token"] + stats["expanded_bytes_per_token"])],
                          dtype=torch.float64, device=dev)
    reports = [torch.empty_like(report) for _ in range(world)]
    dist.all_gather(reports, report)
    failed = torch.zeros(1, device=dev)
    if rank == 0:
        full_out = torch.empty(args.batch, 1, H, D_V, device=dev, dtype=dtype)
        full_ms = timed_ms(torch, full, full_seqs, q_last, full_out, args.timed, on_cuda)
        fstats = full.stats()
        full_bytes = fstats["kept_bytes_per_token"] + fstats["expanded_bytes_per_token"]
        where = torch.cuda.get_device_name(0) if on_cuda else f"CPU, {os.cpu_count()} cores"
        print(f"{world} ranks on {where}: LLaMA-3-8B-GQLA layer, bf16 cache, batch {args.batch}, "
              f"context {args.context + args.steps}, keep_latent={int(args.keep_latent)}")
        print(f"gathered vs one-device session: {worst_full:.2e}; vs float64 reference: {worst_ref:.2e} "
              f"(bound {BF16_BOUND:g})")
        print("rank  groups   bytes/token/layer  decode ms")
        for k, r in enumerate(reports):
            per = G // world
            print(f"{k:4d}  [{k * per},{(k + 1) * per})  {int(r[1].item()):17d}  {r[0].item():9.3f}")
        slowest = max(r[0].item() for r in reports)
        print(f"full  [0,{G})  {full_bytes:17d}  {full_ms:9.3f}   slowest rank / (full / {world}) = "
              f"{slowest / (full_ms / world):.2f}")
        if not (worst_full <= BF16_BOUND and worst_ref <= BF16_BOUND):
            print("FAILED: the gathered output is off")
            failed[0] = 1
    dist.broadcast(failed, 0)
    shard.close()
    if full is not None:
        full.close()
    dist.destroy_process_group()
    if failed.item():
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        nothing_to_run("torch is not installed")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            nothing_to_run("no CUDA GPU visible to torch")
        if gqla.device_count("cuda") == 0:
            nothing_to_run("gqla has no CUDA device (libgqla_cuda.so missing or no GPU)")
        world = args.ranks or torch.cuda.device_count()
        if world > torch.cuda.device_count():
            sys.exit(f"--ranks {world}: only {torch.cuda.device_count()} GPUs visible (one rank per GPU)")
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    else:
        world = args.ranks or 2
    if G % world:
        sys.exit(f"--ranks {world} must divide the {G} groups")
    mp.spawn(run_rank, args=(world, args, free_port()), nprocs=world, join=True)


if __name__ == "__main__":
    main()
