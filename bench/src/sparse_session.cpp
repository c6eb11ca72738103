// SPDX-License-Identifier: Apache-2.0
// See sparse_session.hpp.
#include "sparse_session.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>

#include "core/dtype.hpp"
#include "cuda_runtime.hpp"
#include "support.hpp"

namespace gqla::bench {

namespace {

double process_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Reads 64 MiB so that the next call finds no cache line of the last one.
double sweep_caches() {
    static std::vector<double> junk(size_t(8) << 20, 1.0);
    double s = 0;
    for (size_t i = 0; i < junk.size(); i += 8) s += junk[i];
    junk[s > 0 ? 0 : 1] += 1.0;
    return s;
}

}  // namespace

SparseSession::SparseSession(const Preset& p, gqla_path path, gqla_dtype cache, const Options& opt, int batch,
                             int64_t length, int max_q)
    : p_(p), io_(opt.io_dtype), batch_(batch), length_(length) {
    SessionShape s;
    s.device = opt.device == GQLA_DEVICE_CUDA ? GQLA_DEVICE_CUDA : GQLA_DEVICE_CPU;
    s.path = path == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
    s.cache_dtype = cache;
    s.io_dtype = io_;
    s.threads = opt.threads;
    s.page_size = opt.page_size;
    s.max_tokens = int64_t(batch) * length + 4096;
    s.max_sequences = batch;
    s.max_batch = batch;
    s.max_q_len = max_q;
    s.max_q_tokens = int64_t(batch) * max_q;
    gqla_config cfg = make_config(p, s);
    check(gqla_session_create(&cfg, &s_), "gqla_session_create");
    on_gpu_ = s.device == GQLA_DEVICE_CUDA;
    if (p.is_gqla()) {
        std::vector<float> w = random_vector(size_t(p.G) * (p.d_c + p.d_v) * p.r, 7, 1.0f / std::sqrt(float(p.r)));
        gqla_tensor wt = host_tensor(w.data(), {int64_t(p.G) * (p.d_c + p.d_v), p.r});
        check(gqla_set_weights(s_, 0, &wt), "gqla_set_weights");
    }
    // One block of random rows appended chunk by chunk: the timing does
    // not depend on the values.
    const int64_t a_cols = p.is_gqla() ? p.r : int64_t(p.G) * p.D;
    const int64_t b_cols = p.is_gqla() ? p.d_r : int64_t(p.G) * p.Dv;
    const int64_t chunk = std::min<int64_t>(4096, length);
    std::vector<unsigned char> a = to_dtype(random_vector(size_t(chunk * a_cols), 11), io_);
    std::vector<unsigned char> b = to_dtype(random_vector(size_t(chunk * b_cols), 13), io_);
    for (int i = 0; i < batch; ++i) {
        gqla_seq_id id = 0;
        check(gqla_sequence_add(s_, &id), "gqla_sequence_add");
        ids_.push_back(id);
        for (int64_t done = 0; done < length; done += chunk) {
            const int64_t n = std::min(chunk, length - done);
            gqla_tensor at =
                p.is_gqla() ? host_tensor(a.data(), io_, {n, p.r}) : host_tensor(a.data(), io_, {n, p.G, p.D});
            gqla_tensor bt =
                p.is_gqla() ? host_tensor(b.data(), io_, {n, p.d_r}) : host_tensor(b.data(), io_, {n, p.G, p.Dv});
            check(gqla_append(s_, 0, id, &at, &bt), "gqla_append");
        }
    }
}

SparseSession::~SparseSession() { gqla_session_destroy(s_); }

double SparseSession::time(gqla_path path, int s_q, std::vector<int32_t>& idx, int topk, int reps, bool hot,
                           gqla_path* taken, double* cpu_median) {
    const int64_t rows = int64_t(batch_) * s_q;
    std::vector<unsigned char> q = to_dtype(random_vector(size_t(rows * p_.H * p_.q_dim()), 17, 0.1f), io_);
    std::vector<unsigned char> o(size_t(rows * p_.H * p_.out_dim()) * dtype_size(io_));
    gqla_tensor qt = host_tensor(q.data(), io_, {batch_, s_q, p_.H, p_.q_dim()});
    gqla_tensor ot = host_tensor(o.data(), io_, {batch_, s_q, p_.H, p_.out_dim()});
    gqla_tensor it;
    if (topk > 0) {
        const int64_t shape[2] = {rows, topk};
        check(gqla_tensor_init(&it, idx.data(), GQLA_DTYPE_I32, 2, shape), "gqla_tensor_init");
    }
    std::unique_ptr<CudaIoBuffer> q_dev, o_dev, i_dev;
    std::unique_ptr<CudaEventTimer> timer;
    if (on_gpu_) {
        q_dev = std::make_unique<CudaIoBuffer>(q.data(), q.size());
        o_dev = std::make_unique<CudaIoBuffer>(o.data(), o.size());
        if (topk > 0) i_dev = std::make_unique<CudaIoBuffer>(idx.data(), idx.size() * sizeof(int32_t));
        timer = std::make_unique<CudaEventTimer>();
        if (!q_dev->valid() || !o_dev->valid() || (i_dev && !i_dev->valid()) || !timer->valid())
            throw std::runtime_error("bench: the CUDA runtime could not hold the call's tensors");
        qt.data = q_dev->data();
        ot.data = o_dev->data();
        qt.device = ot.device = GQLA_DEVICE_CUDA;
        if (i_dev) {
            it.data = i_dev->data();
            it.device = GQLA_DEVICE_CUDA;
        }
    }
    gqla_attention_args args;
    check(gqla_attention_args_default(&args), "gqla_attention_args_default");
    args.batch = batch_;
    args.seqs = ids_.data();
    args.q = &qt;
    args.o = &ot;
    args.path = p_.is_gqla() ? path : GQLA_PATH_GQA;
    args.path_taken = taken;
    args.indices = topk > 0 ? &it : nullptr;
    std::vector<double> times, cpu;
    for (int r = -2; r < reps; ++r) {  // two untimed warm-up calls
        if (!hot && !on_gpu_) sweep_caches();
        const double c0 = process_cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        if (timer) timer->start();
        check(gqla_attention(s_, &args), "gqla_attention");
        if (timer) timer->stop();
        const double device_s = timer ? timer->seconds() : 0.0;
        const auto t1 = std::chrono::steady_clock::now();
        const double c1 = process_cpu_seconds();
        if (r >= 0) {
            times.push_back(timer ? device_s : std::chrono::duration<double>(t1 - t0).count());
            cpu.push_back(c1 - c0);
        }
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu.begin(), cpu.end());
    *cpu_median = cpu[cpu.size() / 2];
    return times[times.size() / 2];
}

gqla_cost_report SparseSession::predict(int s_q, int topk) const {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = batch_;
    w.context = length_;
    w.q_len = s_q;
    w.topk = topk;
    gqla_cost_report r{};
    r.struct_size = sizeof(r);
    check(gqla_session_predict_cost(s_, &w, &r), "gqla_session_predict_cost");
    return r;
}

// Lists as an indexer gives them: K distinct positions of each query's
// visible prefix (all of it when shorter, padded with -1), sorted.
std::vector<int32_t> indexer_lists(int batch, int s_q, int64_t length, int topk, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> out(size_t(batch) * s_q * topk, -1);
    std::vector<int32_t> pool;
    for (int64_t row = 0; row < int64_t(batch) * s_q; ++row) {
        const int64_t visible = length - s_q + 1 + row % s_q;
        int32_t* dst = &out[size_t(row) * topk];
        if (visible <= topk) {
            std::iota(dst, dst + visible, 0);
            continue;
        }
        pool.resize(size_t(visible));
        std::iota(pool.begin(), pool.end(), 0);
        for (int t = 0; t < topk; ++t) {  // partial Fisher-Yates
            const int64_t j = t + static_cast<int64_t>(rng() % uint64_t(visible - t));
            std::swap(pool[size_t(t)], pool[size_t(j)]);
        }
        std::copy(pool.begin(), pool.begin() + topk, dst);
        std::sort(dst, dst + topk);
    }
    return out;
}

}  // namespace gqla::bench
