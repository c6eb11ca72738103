// SPDX-License-Identifier: Apache-2.0
// Ragged calls of gqla_cuda_backend_test (cuda_backend_ragged.hpp): one call
// over per-sequence query counts, checked against the float64 reference and
// against uniform calls.
#include "cuda_backend_ragged.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace gqla::test {

namespace {

// Float64 reference o [s_q, H, dv] and lse [s_q, H] of one sequence's last
// s_q queries q [s_q, H, dq], over the rows the harness recorded.
void reference_rows(const Harness& h, int id, int layer, int s_q, const double* q, double* o, double* lse) {
    const gqla_backend_desc& d = h.desc;
    const auto& s = h.seqs.at(id);
    const int64_t L = s.len[size_t(layer)];
    const std::vector<double> A(s.a_rows[size_t(layer)].begin(), s.a_rows[size_t(layer)].end());
    const std::vector<double> Bv(s.b_rows[size_t(layer)].begin(), s.b_rows[size_t(layer)].end());
    if (d.kind == GQLA_KIND_GQA) {
        gqla::ref::gqa_decode(d.num_heads, d.num_kv_heads, d.head_dim, d.value_dim, L, s_q, d.softmax_scale, q,
                              A.data(), Bv.data(), o, lse);
    } else {
        const std::vector<double> W(h.weights[size_t(layer)].begin(), h.weights[size_t(layer)].end());
        gqla::ref::gqla_decode(d.num_heads, d.num_kv_heads, d.latent_dim, d.nope_dim, d.rope_dim, d.value_dim, L, s_q,
                               d.softmax_scale, q, W.data(), A.data(), Bv.data(), o, lse);
    }
}

}  // namespace

CallOutput attention_call(Harness& h, int layer, const std::vector<int>& ids, const std::vector<int>& q_lens,
                          const std::vector<float>& q, gqla_path path, bool transient, bool ragged, bool device_io) {
    const gqla_backend_desc& d = h.desc;
    const int H = d.num_heads, dq = query_dim(d), dv = d.value_dim, B = static_cast<int>(ids.size());
    const int64_t N = sum_of(q_lens);
    const auto seqs = h.ragged_seqs(ids, layer, q_lens);
    const int64_t qh = device_io ? dq + 4 : dq, qt = H * qh + (device_io ? 8 : 0);
    const int64_t oh = device_io ? dv + 4 : dv, ot = H * oh + (device_io ? 8 : 0);
    const int64_t lt = device_io ? H + 3 : H;
    std::vector<float> hq(size_t(N * qt), 0.f), ho(size_t(N * ot), std::numeric_limits<float>::quiet_NaN()),
        hl(size_t(N * lt), std::numeric_limits<float>::quiet_NaN());
    for (int64_t t = 0; t < N; ++t)
        for (int hh = 0; hh < H; ++hh) std::copy_n(q.begin() + (t * H + hh) * dq, dq, hq.begin() + t * qt + hh * qh);
    void *pq = hq.data(), *po = ho.data(), *pl = hl.data();
    if (device_io) {
        REQUIRE_MESSAGE(
            (cudaMalloc(&pq, hq.size() * 4) == cudaSuccess && cudaMalloc(&po, ho.size() * 4) == cudaSuccess &&
             cudaMalloc(&pl, hl.size() * 4) == cudaSuccess),
            "cudaMalloc of the call's tensors");
        cudaMemcpy(pq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(po, ho.data(), ho.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(pl, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice);
    }
    gqla_decode_args a{};
    a.layer = layer;
    a.path = path;
    a.batch = B;
    a.q_len = *std::max_element(q_lens.begin(), q_lens.end());
    a.seqs = seqs.data();
    a.ragged = ragged ? 1 : 0;
    a.transient = transient ? 1 : 0;
    a.total_q = N;
    if (ragged) {
        a.q = host_view(pq, GQLA_DTYPE_F32, {N, H, dq});
        a.q.strides[0] = qt;
        a.q.strides[1] = qh;
        a.o = host_view(po, GQLA_DTYPE_F32, {N, H, dv});
        a.o.strides[0] = ot;
        a.o.strides[1] = oh;
        a.lse = host_view(pl, GQLA_DTYPE_F32, {N, H});
        a.lse.strides[0] = lt;
    } else {
        const int64_t s_q = q_lens[0];
        a.q = host_view(pq, GQLA_DTYPE_F32, {B, s_q, H, dq});
        a.q.strides[0] = s_q * qt;
        a.q.strides[1] = qt;
        a.q.strides[2] = qh;
        a.o = host_view(po, GQLA_DTYPE_F32, {B, s_q, H, dv});
        a.o.strides[0] = s_q * ot;
        a.o.strides[1] = ot;
        a.o.strides[2] = oh;
        a.lse = host_view(pl, GQLA_DTYPE_F32, {B, s_q, H});
        a.lse.strides[0] = s_q * lt;
        a.lse.strides[1] = lt;
    }
    a.q.on_device = a.o.on_device = a.lse.on_device = device_io ? 1 : 0;
    const gqla_status st = h.vt->decode(h.ctx, &a);
    if (device_io) {
        cudaMemcpy(ho.data(), po, ho.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hl.data(), pl, hl.size() * 4, cudaMemcpyDeviceToHost);
        cudaFree(pq);
        cudaFree(po);
        cudaFree(pl);
    }
    require_ok(h, st, ragged ? "decode (ragged)" : "decode (uniform)");
    CallOutput out;
    out.o.resize(size_t(N) * H * dv);
    out.lse.resize(size_t(N) * H);
    for (int64_t t = 0; t < N; ++t)
        for (int hh = 0; hh < H; ++hh) {
            std::copy_n(ho.begin() + t * ot + hh * oh, dv, out.o.begin() + (t * H + hh) * dv);
            out.lse[size_t(t * H + hh)] = hl[size_t(t * lt + hh)];
        }
    return out;
}

void check_reference(const Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                     const std::vector<int>& q_lens, const std::vector<float>& q, const CallOutput& out) {
    const gqla_backend_desc& d = h.desc;
    const int H = d.num_heads, dq = query_dim(d), dv = d.value_dim;
    std::vector<double> ro(out.o.size()), rl(out.lse.size());
    int64_t row = 0;
    for (size_t b = 0; b < ids.size(); ++b) {
        const std::vector<double> qd(q.begin() + row * H * dq, q.begin() + (row + q_lens[b]) * H * dq);
        reference_rows(h, ids[b], layer, q_lens[b], qd.data(), ro.data() + row * H * dv, rl.data() + row * H);
        row += q_lens[b];
    }
    const double tol = tolerance(d.cache_dtype);
    check_error(name + " o", gqla::ref::rel_l2(out.o.data(), ro.data(), ro.size()), tol);
    check_error(name + " lse", gqla::ref::rel_l2(out.lse.data(), rl.data(), rl.size()), tol);
}

void check_agree(const std::string& name, const CallOutput& a, const CallOutput& b, double tol) {
    const std::vector<double> bo(b.o.begin(), b.o.end()), bl(b.lse.begin(), b.lse.end());
    check_error(name + " o", gqla::ref::rel_l2(a.o.data(), bo.data(), bo.size()), tol);
    check_error(name + " lse", gqla::ref::rel_l2(a.lse.data(), bl.data(), bl.size()), tol);
}

void check_ragged(Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                  const std::vector<int>& q_lens, gqla_path path, bool transient) {
    const int H = h.desc.num_heads, dq = query_dim(h.desc);
    const std::vector<float> q = randn(size_t(sum_of(q_lens)) * H * dq);
    const CallOutput host = attention_call(h, layer, ids, q_lens, q, path, transient, true, false);
    check_reference(h, name + " host", layer, ids, q_lens, q, host);
    const CallOutput device = attention_call(h, layer, ids, q_lens, q, path, transient, true, true);
    check_reference(h, name + " device", layer, ids, q_lens, q, device);
    CallOutput runs;
    int64_t row = 0;
    for (size_t first = 0; first < ids.size();) {
        size_t end = first + 1;
        while (end < ids.size() && q_lens[end] == q_lens[first]) ++end;
        const std::vector<int> run_ids(ids.begin() + first, ids.begin() + end);
        const std::vector<int> run_lens(q_lens.begin() + first, q_lens.begin() + end);
        const int64_t n = sum_of(run_lens);
        const std::vector<float> run_q(q.begin() + row * H * dq, q.begin() + (row + n) * H * dq);
        const CallOutput r = attention_call(h, layer, run_ids, run_lens, run_q, path, transient, false, false);
        runs.o.insert(runs.o.end(), r.o.begin(), r.o.end());
        runs.lse.insert(runs.lse.end(), r.lse.begin(), r.lse.end());
        row += n;
        first = end;
    }
    // A transient run expands only its own sequences, in other GEMM shapes
    // than the whole call: its expanded rows may round differently by an ulp.
    check_agree(name + " = uniform runs", host, runs, transient ? tolerance(h.desc.cache_dtype) : 1e-5);
}

void test_ragged_gqla(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
                      const std::vector<int>& q_lens, const std::vector<int64_t>& lengths) {
    gqla_backend_desc d = gqla_desc(cache, H, G, r, dc, dr, dv, page_size, lengths);
    d.max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
    d.max_q_tokens = sum_of(q_lens);
    Harness h(d);
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    char shape[96];
    std::snprintf(shape, sizeof shape, "H=%d G=%d r=%d dc=%d dr=%d dv=%d P=%d %s", H, G, r, dc, dr, dv, page_size,
                  gqla::dtype_name(cache));
    const std::string sh = shape;
    check_ragged(h, "gqla ragged absorb " + sh, 1, ids, q_lens, GQLA_PATH_ABSORB, false);
    check_ragged(h, "gqla ragged transient " + sh, 1, ids, q_lens, GQLA_PATH_GQA, true);
    require_ok(h, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    std::vector<gqla_append_item> items;
    for (int id : ids) items.push_back({h.seqs[id].pages.data(), h.seqs[id].slot, 0, h.seqs[id].len[1], 0});
    gqla_expand_args e{1, static_cast<int32_t>(items.size()), items.data()};
    require_ok(h, h.vt->expand(h.ctx, &e), "expand");
    check_ragged(h, "gqla ragged kept gqa " + sh, 1, ids, q_lens, GQLA_PATH_GQA, false);
    // The transient rows are expanded and rounded like the kept ones, in the
    // same chunks (the sequences in the same order): the two GQA forms agree
    // to f32 rounding, and both agree with absorb within the cache's tolerance.
    const std::vector<float> q = randn(size_t(sum_of(q_lens)) * H * (dc + dr));
    const CallOutput transient = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, true, true, true);
    const CallOutput kept = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, false, true, true);
    const CallOutput absorb = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_ABSORB, false, true, true);
    check_agree("gqla transient = kept gqa " + sh, transient, kept);
    check_agree("gqla transient ~ absorb " + sh, transient, absorb, tolerance(cache));
}

}  // namespace gqla::test
