# SPDX-License-Identifier: Apache-2.0
"""GPU tests through torch tensors (skipped without torch, CUDA, or the
gqla CUDA module): zero-copy device tensors, outputs allocated on q's
device, the current torch stream honoured, and results against the float64
reference."""

import numpy as np
import pytest

import gqla
import cases
import reference as ref

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or gqla.device_count("cuda") == 0,
    reason="needs torch with CUDA and the gqla CUDA module")


def to_torch(x, dtype=torch.float32):
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to("cuda", dtype)


@pytest.mark.parametrize("path", ["gqa", "absorb"])
@pytest.mark.parametrize("cache_dtype", ["f32", "bf16"])
def test_gqla_decode_on_gpu(rng, path, cache_dtype):
    config = gqla.Config.gqla(**cases.ODD_GQLA, device="cuda", path=path,
                              cache_dtype=cache_dtype, page_size=16)
    filled = cases.Filled(gqla.Session(config), rng)
    with filled.session as s:
        w = (rng.standard_normal((3 * (96 + 80), 384)) / np.sqrt(384)).astype(np.float32)
        filled.weights[0] = w
        s.set_weights(0, to_torch(w))
        seqs = []
        for n in (1, 17, 200):
            seq = s.add_sequence()
            a, b = filled.random_rows(n)
            s.append(0, seq, to_torch(a), to_torch(b))
            filled.record(seq, 0, a, b)
            seqs.append(seq)
        q = filled.random_queries(len(seqs), 1)
        o, lse = s.decode(0, seqs, to_torch(q), return_lse=True)
        assert o.is_cuda and o.dtype == torch.float32 and lse.is_cuda
        o_ref, lse_ref = filled.reference(seqs, q)
        assert ref.relative_error(o.cpu().numpy(), o_ref) <= ref.TOLERANCE[cache_dtype]
        assert ref.relative_error(lse.cpu().numpy(), lse_ref) <= max(ref.TOLERANCE[cache_dtype], 1e-5)


def test_bf16_io_out_in_place_and_stream(rng):
    config = gqla.Config.gqa(num_heads=8, num_kv_heads=2, head_dim=64, device="cuda",
                             io_dtype="bf16", cache_dtype="bf16")
    with gqla.Session(config) as s:
        seq = s.add_sequence()
        k = torch.randn(50, 2, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(50, 2, 64, device="cuda", dtype=torch.bfloat16)
        s.append(0, seq, k, v)
        q = torch.randn(1, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            out = torch.full((1, 2, 8, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
            pointer = out.data_ptr()
            o = s.decode(0, [seq], q, out=out)
            assert s._s.stream == stream.cuda_stream
        stream.synchronize()
        assert o is out and out.data_ptr() == pointer and not out.isnan().any()
        # Reference: causal SDPA over the cache (the last s_q positions query).
        kk = k.float().permute(1, 0, 2).repeat_interleave(4, 0)
        vv = v.float().permute(1, 0, 2).repeat_interleave(4, 0)
        qq = q.float()[0].permute(1, 0, 2)
        scores = qq @ kk.transpose(1, 2) / 8.0
        mask = torch.arange(50, device="cuda")[None, :] <= (48 + torch.arange(2, device="cuda"))[:, None]
        expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ vv
        err = (out.float()[0].permute(1, 0, 2) - expected).norm() / expected.norm()
        assert err.item() <= 1e-2


def test_strided_device_view(rng):
    config = gqla.Config.gqa(num_heads=4, num_kv_heads=2, head_dim=32, device="cuda", cache_dtype="f32")
    with gqla.Session(config) as s:
        seq = s.add_sequence()
        kv = torch.randn(10, 2, 2, 32, device="cuda")
        s.append(0, seq, kv[:, :, 0], kv[:, :, 1])  # strided views, no copy
        q_big = torch.randn(1, 1, 4, 48, device="cuda")
        q_view = q_big[..., 8:40]
        assert gqla._gqla.describe_tensor(q_view)["data"] == q_view.data_ptr()
        o = s.decode(0, [seq], q_view)
        o2 = s.decode(0, [seq], q_view.contiguous())
        torch.cuda.synchronize()
        assert torch.equal(o, o2)


def test_decode_captured_in_a_torch_cuda_graph():
    """A decode captured with torch.cuda.graph: the session follows torch's
    stream into the capture and back out, and the replays after appends (on
    torch's stream, outside the graph) read the new tokens."""
    config = gqla.Config.gqa(num_heads=8, num_kv_heads=2, head_dim=64, device="cuda",
                             io_dtype="bf16", cache_dtype="bf16", max_tokens=4096)
    with gqla.Session(config) as s:
        seq = s.add_sequence()
        k = torch.randn(3000, 2, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(3000, 2, 64, device="cuda", dtype=torch.bfloat16)
        s.append(0, seq, k[:1000], v[:1000])
        q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
        s.decode(0, [seq], q, out=out)  # outside the capture first, as torch recommends
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s.decode(0, [seq], q, out=out)
        for n in (1000, 3000):
            if n > 1000:
                s.append(0, seq, k[1000:n], v[1000:n])
            q.copy_(torch.randn_like(q))
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            kk = k[:n].float().permute(1, 0, 2).repeat_interleave(4, 0)
            vv = v[:n].float().permute(1, 0, 2).repeat_interleave(4, 0)
            qq = q.float()[0].permute(1, 0, 2)
            expected = torch.softmax(qq @ kk.transpose(1, 2) / 8.0, -1) @ vv
            err = (out.float()[0].permute(1, 0, 2) - expected).norm() / expected.norm()
            assert err.item() <= 1e-2, (n, err.item())


def test_sparse_attend_with_device_index_lists():
    """Top-k attention with torch int32 index lists on the GPU (docs/sparse-
    attention.md): -1 padding, a causal-tail position and a repeat in the
    lists; each query row against torch over exactly its visible entries."""
    config = gqla.Config.gqa(num_heads=8, num_kv_heads=2, head_dim=64, device="cuda",
                             io_dtype="bf16", cache_dtype="bf16", page_size=16)
    with gqla.Session(config) as s:
        seq = s.add_sequence()
        n_tok, s_q, topk = 300, 3, 40
        k = torch.randn(n_tok, 2, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(n_tok, 2, 64, device="cuda", dtype=torch.bfloat16)
        s.append(0, seq, k, v)
        gen = torch.Generator().manual_seed(5)
        idx = torch.randint(0, n_tok, (s_q, topk), generator=gen, dtype=torch.int32)
        idx[:, 0] = -1                       # padding
        idx[0, 1] = n_tok - 1                # invisible to query 0 (causal tail)
        idx[:, 2] = idx[:, 3]                # a repeat counts twice
        q = torch.randn(1, s_q, 8, 64, device="cuda", dtype=torch.bfloat16)
        o = s.attend(0, [seq], q, indices=idx.to("cuda"))
        torch.cuda.synchronize()
        for i in range(s_q):
            limit = n_tok - s_q + i
            keep = [int(j) for j in idx[i] if 0 <= int(j) <= limit]
            sel = torch.tensor(keep, device="cuda")
            kk = k[sel].float().permute(1, 0, 2).repeat_interleave(4, 0)
            vv = v[sel].float().permute(1, 0, 2).repeat_interleave(4, 0)
            qq = q.float()[0, i][:, None, :]
            expected = (torch.softmax(qq @ kk.transpose(1, 2) / 8.0, -1) @ vv)[:, 0, :]
            err = (o.float()[0, i] - expected).norm() / expected.norm()
            assert err.item() <= 1e-2, (i, err.item())


def test_merge_states_refuses_device_tensors_and_merges_their_host_copies():
    # gqla_merge_attention_states takes host memory in this version: device
    # tensors get Unsupported (naming the argument), never a crash or a read
    # of device memory from the host; their host copies merge exactly.
    o = torch.randn(2, 3, 16, device="cuda")
    lse = torch.randn(2, 3, device="cuda")
    with pytest.raises(gqla.Unsupported, match="outputs"):
        gqla.merge_attention_states([o, o], [lse, lse])
    merged, merged_lse = gqla.merge_attention_states([o.cpu().numpy()] * 2, [lse.cpu().numpy()] * 2)
    np.testing.assert_allclose(merged, o.cpu().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(merged_lse, lse.cpu().numpy() + np.log(2.0), rtol=1e-6, atol=1e-6)
