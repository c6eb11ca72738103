// SPDX-License-Identifier: Apache-2.0
// gqla-bench --topk: see sparse_case.hpp.
#include "sparse_case.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "cuda_runtime.hpp"
#include "presets.hpp"
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

// A session of `preset` on `path` holding `batch` sequences of `length`
// random tokens (rows in the io dtype), with random weights. On a CUDA
// session q, o and the index lists live in GPU memory (as an engine keeps
// them) and calls are timed by CUDA events around them.
class SparseSession {
public:
    SparseSession(const Preset& p, gqla_path path, gqla_dtype cache, const Options& opt, int batch, int64_t length,
                  int max_q)
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
    ~SparseSession() { gqla_session_destroy(s_); }
    SparseSession(const SparseSession&) = delete;
    SparseSession& operator=(const SparseSession&) = delete;

    // Median seconds of `reps` calls with s_q queries per sequence; indices
    // (may be empty: dense) [batch * s_q, topk].
    // *cpu_median: the median CPU time of the process over a call (all
    // threads), which a loaded machine inflates less than wall time. On the
    // GPU the median is of device time between CUDA events around each call.
    double time(gqla_path path, int s_q, std::vector<int32_t>& idx, int topk, int reps, bool hot, gqla_path* taken,
                double* cpu_median) {
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

    int64_t length() const { return length_; }

private:
    const Preset& p_;
    gqla_dtype io_;
    gqla_session* s_ = nullptr;
    bool on_gpu_ = false;
    int batch_;
    int64_t length_;
    std::vector<gqla_seq_id> ids_;
};

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

}  // namespace

int run_sparse_bench(const Options& opt) {
    const int threads = opt.threads;
    const int K = opt.topk;
    if (!opt.json)
        std::printf("%-16s %-10s %-5s %5s %7s %6s %4s  %12s  %12s  %6s  %8s %8s\n", "preset", "path", "cache", "batch",
                    "T", "K", "s_q", "sparse ms", "dense ms", "ratio", "cpu ms", "cpu ms");
    for (const std::string& name : opt.presets) {
        const Preset* p = find_preset(name);
        if (p == nullptr) throw std::runtime_error("unknown preset " + name);
        for (gqla_path path : opt.paths) {
            if (!p->is_gqla() && path != GQLA_PATH_GQA) continue;
            for (gqla_dtype cache : opt.dtypes)
                for (int batch : opt.batches)
                    for (int64_t T : opt.contexts)
                        for (int s_q : opt.s_qs) {
                            SparseSession sparse(*p, path, cache, opt, batch, T, s_q);
                            const int64_t dense_len = std::min<int64_t>(K, T);
                            SparseSession dense(*p, path, cache, opt, batch, dense_len, s_q);
                            std::vector<int32_t> idx = indexer_lists(batch, s_q, T, K, 42);
                            std::vector<int32_t> none;
                            gqla_path ts = GQLA_PATH_AUTO, td = GQLA_PATH_AUTO;
                            double c_sparse = 0, c_dense = 0;
                            const double t_sparse = sparse.time(path, s_q, idx, K, opt.reps, opt.hot, &ts, &c_sparse);
                            const double t_dense = dense.time(path, s_q, none, 0, opt.reps, opt.hot, &td, &c_dense);
                            if (opt.json)
                                std::printf(
                                    "{\"device\": \"%s\", \"preset\": \"%s\", \"path\": \"%s\", \"dense_path\": "
                                    "\"%s\", "
                                    "\"cache\": \"%s\", \"batch\": %d, \"context\": %lld, \"topk\": %d, "
                                    "\"s_q\": %d, \"threads\": %d, \"hot\": %s, \"sparse_median_s\": %.6e, "
                                    "\"dense_context\": %lld, \"dense_median_s\": %.6e, \"sparse_cpu_s\": %.6e, "
                                    "\"dense_cpu_s\": %.6e}\n",
                                    opt.device == GQLA_DEVICE_CUDA ? "cuda" : "cpu", p->name, path_name(ts),
                                    path_name(td), dtype_label(cache), batch, static_cast<long long>(T), K, s_q,
                                    threads, opt.hot ? "true" : "false", t_sparse, static_cast<long long>(dense_len),
                                    t_dense, c_sparse, c_dense);
                            else
                                std::printf("%-16s %-10s %-5s %5d %7lld %6d %4d  %12.3f  %12.3f  %6.2f  %8.3f %8.3f\n",
                                            p->name, path_name(ts), dtype_label(cache), batch,
                                            static_cast<long long>(T), K, s_q, t_sparse * 1e3, t_dense * 1e3,
                                            t_sparse / t_dense, c_sparse * 1e3, c_dense * 1e3);
                            std::fflush(stdout);
                        }
        }
    }
    return 0;
}

}  // namespace gqla::bench
