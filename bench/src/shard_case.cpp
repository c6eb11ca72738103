// SPDX-License-Identifier: Apache-2.0
// gqla-bench --shards: see shard_case.hpp.
#include "shard_case.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "build_info.hpp"
#include "cuda_runtime.hpp"
#include "json_writer.hpp"
#include "presets.hpp"

namespace gqla::bench {

namespace {

void check(gqla_status st, const char* what) {
    if (st != GQLA_OK)
        throw std::runtime_error(std::string(what) + ": " + gqla_status_string(st) + ": " + gqla_last_error_message());
}

// A host f32 tensor with explicit strides (elements): a rank's slice of a
// full-layer tensor, read or written in place.
gqla_tensor f32_view(const float* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
    gqla_tensor t;
    check(gqla_tensor_init(&t, const_cast<float*>(data), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()),
                           shape.data()),
          "gqla_tensor_init");
    for (size_t i = 0; i < strides.size(); ++i) t.strides[i] = strides[i];
    return t;
}

// Reads 64 MiB so that the next call finds no cache line of the last one.
void sweep_caches() {
    static std::vector<double> junk(size_t(8) << 20, 1.0);
    double s = 0;
    for (size_t i = 0; i < junk.size(); i += 8) s += junk[i];
    junk[s > 0 ? 0 : 1] += 1.0;
}

// Bound of docs/numerics.md per cache dtype: shards against the full session.
double bound_of(gqla_dtype cache) {
    switch (cache) {
        case GQLA_DTYPE_F32:
            return 1e-5;
        case GQLA_DTYPE_F16:
            return 2e-3;
        case GQLA_DTYPE_BF16:
            return 1e-2;
        default:
            return 6e-2;
    }
}

struct Groups {
    int begin, count;  // count == G: the full session
};

// Where a session runs: the CPU, or one GPU (with its queries and outputs
// in that GPU's memory and its calls timed by CUDA events there).
struct Placement {
    gqla_device_type device = GQLA_DEVICE_CPU;
    int gpu = 0;
};

// One session of the layer serving `g`, holding `batch` sequences of
// `length` tokens drawn from one block of random rows (the same in every
// session of a case).
class RankSession {
public:
    RankSession(const Preset& p, const SessionShape& shape, Placement where, Groups g, int keep_latent,
                const std::vector<float>& w, const std::vector<float>& a, const std::vector<float>& b, int64_t block,
                int batch, int64_t length)
        : p_(p), g_(g), where_(where) {
        gqla_config cfg = make_config(p, shape);
        cfg.device = where.device;
        cfg.device_index = where.gpu;
        cfg.group_begin = g.begin;
        cfg.group_count = g.count;
        if (p.is_gqla()) cfg.keep_latent = keep_latent;
        check(gqla_session_create(&cfg, &s_), "gqla_session_create");
        if (p.is_gqla()) {
            gqla_tensor wt = f32_view(w.data(), {int64_t(p.G) * (p.d_c + p.d_v), p.r}, {p.r, 1});
            check(gqla_set_weights(s_, 0, &wt), "gqla_set_weights");
        }
        for (int i = 0; i < batch; ++i) {
            gqla_seq_id id = 0;
            check(gqla_sequence_add(s_, &id), "gqla_sequence_add");
            ids_.push_back(id);
            for (int64_t done = 0; done < length; done += block) {
                const int64_t n = std::min(block, length - done);
                append(id, a, b, n);
            }
        }
    }
    ~RankSession() { gqla_session_destroy(s_); }
    RankSession(const RankSession&) = delete;
    RankSession& operator=(const RankSession&) = delete;

    // Decodes q [B, s_q, H, Dq] (all heads; this rank reads its own) into
    // its heads' slice of o [B, s_q, H, Dv]; returns the seconds of the call
    // (on a GPU: device time between CUDA events, with q and o in its memory).
    double decode(const std::vector<float>& q, std::vector<float>& o, int s_q, bool hot) {
        const int64_t H = p_.H, Dq = p_.q_dim(), Dv = p_.out_dim(), B = static_cast<int64_t>(ids_.size());
        const int64_t h0 = int64_t(g_.begin) * (p_.H / p_.G), heads = int64_t(g_.count) * (p_.H / p_.G);
        const bool on_gpu = where_.device == GQLA_DEVICE_CUDA;
        // Ranks on several GPUs take turns: the events and the default
        // stream they are recorded on must be this rank's GPU's.
        if (on_gpu && !cuda_set_device(where_.gpu))
            throw std::runtime_error("bench: cannot select GPU " + std::to_string(where_.gpu));
        if (on_gpu) bind_gpu_io(q, o.size());
        const float* q_base = on_gpu ? static_cast<const float*>(q_dev_->data()) : q.data();
        float* o_base = on_gpu ? static_cast<float*>(o_dev_->data()) : o.data();
        gqla_tensor qt = f32_view(q_base + h0 * Dq, {B, s_q, heads, Dq}, {s_q * H * Dq, H * Dq, Dq, 1});
        gqla_tensor ot = f32_view(o_base + h0 * Dv, {B, s_q, heads, Dv}, {s_q * H * Dv, H * Dv, Dv, 1});
        if (on_gpu) qt.device = ot.device = GQLA_DEVICE_CUDA;
        if (!hot && !on_gpu) sweep_caches();
        const auto t0 = std::chrono::steady_clock::now();
        if (timer_) timer_->start();
        check(gqla_decode(s_, 0, static_cast<int32_t>(B), ids_.data(), &qt, &ot, nullptr), "gqla_decode");
        if (timer_) timer_->stop();
        const double seconds =
            timer_ ? timer_->seconds() : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (on_gpu) gather_heads(o, B * s_q, h0, heads);
        return seconds;
    }

    gqla_stats stats() const {
        gqla_stats st{};
        st.struct_size = sizeof(st);
        check(gqla_session_stats(s_, &st), "gqla_session_stats");
        return st;
    }

private:
    // Copies q to this rank's GPU (the current one) and makes an output
    // buffer and a timer there, once per shape of the case.
    void bind_gpu_io(const std::vector<float>& q, size_t o_elems) {
        if (q_dev_ && q_elems_ == q.size() && o_elems_ == o_elems) return;
        q_dev_ = std::make_unique<CudaIoBuffer>(q.data(), q.size() * sizeof(float));
        const std::vector<float> zeros(o_elems, 0.0f);
        o_dev_ = std::make_unique<CudaIoBuffer>(zeros.data(), o_elems * sizeof(float));
        timer_ = std::make_unique<CudaEventTimer>();
        if (!q_dev_->valid() || !o_dev_->valid() || !timer_->valid())
            throw std::runtime_error("bench: the CUDA runtime could not hold a rank's tensors");
        q_elems_ = q.size();
        o_elems_ = o_elems;
    }

    // Copies this rank's heads of the GPU output into o (rows x H x Dv).
    void gather_heads(std::vector<float>& o, int64_t rows, int64_t h0, int64_t heads) {
        std::vector<float> host(o.size());
        if (!o_dev_->copy_to_host(host.data(), host.size() * sizeof(float)))
            throw std::runtime_error("bench: cannot copy a rank's output back");
        const int64_t H = p_.H, Dv = p_.out_dim();
        for (int64_t r = 0; r < rows; ++r)
            std::copy_n(host.begin() + (r * H + h0) * Dv, heads * Dv, o.begin() + (r * H + h0) * Dv);
    }

    void append(gqla_seq_id id, const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
        gqla_tensor at, bt;
        if (p_.is_gqla()) {
            at = f32_view(a.data(), {n, p_.r}, {p_.r, 1});
            bt = f32_view(b.data(), {n, p_.d_r}, {p_.d_r, 1});
        } else {  // this rank's KV heads of the full k/v rows
            const int64_t G = p_.G, D = p_.D, Dv = p_.Dv;
            at = f32_view(a.data() + g_.begin * D, {n, g_.count, D}, {G * D, D, 1});
            bt = f32_view(b.data() + g_.begin * Dv, {n, g_.count, Dv}, {G * Dv, Dv, 1});
        }
        check(gqla_append(s_, 0, id, &at, &bt), "gqla_append");
    }

    const Preset& p_;
    Groups g_;
    Placement where_;
    gqla_session* s_ = nullptr;
    std::vector<gqla_seq_id> ids_;
    std::unique_ptr<CudaIoBuffer> q_dev_, o_dev_;
    std::unique_ptr<CudaEventTimer> timer_;
    size_t q_elems_ = 0, o_elems_ = 0;
};

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - ref[i];
        num += d * d;
        den += double(ref[i]) * ref[i];
    }
    return std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
}

struct CaseResult {
    double full_s = 0, rank_median_s = 0, rank_max_s = 0, err = 0;
    gqla_stats full_stats{}, rank_stats{};
    int keep_latent = 1;
    int gpus = 0;  // GPUs the ranks ran on (0: the CPU)
};

CaseResult run_case(const Preset& p, const Options& opt, gqla_path path, gqla_dtype cache, int batch, int64_t T,
                    int s_q) {
    const int N = opt.shards;
    CaseResult res;
    res.keep_latent = p.is_gqla() && path == GQLA_PATH_GQA && !opt.shard_keep_latent ? 0 : 1;
    SessionShape shape;
    shape.path = p.is_gqla() ? path : GQLA_PATH_GQA;
    shape.cache_dtype = cache;
    shape.threads = opt.threads;
    shape.page_size = opt.page_size;
    shape.max_tokens = int64_t(batch) * T + 4096;
    shape.max_sequences = batch;
    shape.max_batch = batch;
    shape.max_q_len = s_q;

    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w;
    if (p.is_gqla()) {
        w.resize(size_t(p.G) * (p.d_c + p.d_v) * p.r);
        for (float& x : w) x = normal(rng) / std::sqrt(float(p.r));
    }
    const int64_t block = std::min<int64_t>(T, 4096);
    const int64_t a_cols = p.is_gqla() ? p.r : int64_t(p.G) * p.D;
    const int64_t b_cols = p.is_gqla() ? p.d_r : int64_t(p.G) * p.Dv;
    std::vector<float> a(size_t(block * a_cols)), b(size_t(block * b_cols));
    for (float& x : a) x = normal(rng);
    for (float& x : b) x = normal(rng);

    // The full session on the first device; rank i on GPU i mod the GPUs
    // visible (all on one GPU when there is one), or on the CPU.
    const int gpus = opt.device == GQLA_DEVICE_CUDA ? std::max(cuda_device_count(), 1) : 0;
    auto place = [&](int rank) { return gpus ? Placement{GQLA_DEVICE_CUDA, rank % gpus} : Placement{}; };
    RankSession full(p, shape, place(0), Groups{0, p.G}, 1, w, a, b, block, batch, T);
    std::vector<std::unique_ptr<RankSession>> ranks;
    for (int i = 0; i < N; ++i)
        ranks.push_back(std::make_unique<RankSession>(p, shape, place(i), Groups{i * (p.G / N), p.G / N},
                                                      res.keep_latent, w, a, b, block, batch, T));
    res.gpus = std::min(gpus, N);

    const int64_t rows = int64_t(batch) * s_q;
    std::vector<float> q(size_t(rows * p.H * p.q_dim()));
    for (float& x : q) x = normal(rng);
    std::vector<float> o_full(size_t(rows * p.H * p.out_dim()), NAN), o_ranks = o_full;
    std::vector<double> t_full;
    std::vector<std::vector<double>> t_rank(static_cast<size_t>(N));
    for (int r = -2; r < opt.reps; ++r) {  // two untimed warm-up calls
        const double tf = full.decode(q, o_full, s_q, opt.hot);
        if (r >= 0) t_full.push_back(tf);
        for (int i = 0; i < N; ++i) {
            const double ti = ranks[size_t(i)]->decode(q, o_ranks, s_q, opt.hot);
            if (r >= 0) t_rank[size_t(i)].push_back(ti);
        }
    }
    res.err = rel_l2(o_ranks, o_full);
    res.full_s = median_of(t_full);
    std::vector<double> per_rank;
    for (const std::vector<double>& t : t_rank) per_rank.push_back(median_of(t));
    res.rank_median_s = median_of(per_rank);
    res.rank_max_s = *std::max_element(per_rank.begin(), per_rank.end());
    res.full_stats = full.stats();
    res.rank_stats = ranks[0]->stats();
    return res;
}

void print_row(const Preset& p, const Options& opt, gqla_path path, gqla_dtype cache, int batch, int64_t T, int s_q,
               const CaseResult& r) {
    const double es = cache == GQLA_DTYPE_FP8_E4M3 ? 1.0 : (cache == GQLA_DTYPE_F32 ? 4.0 : 2.0);
    const gqla_stats& rs = r.rank_stats;
    const gqla_stats& fs = r.full_stats;
    // Elements a rank keeps per token and layer: with the latent, the GQA
    // path adds its groups' expanded rows to the replica; without it the
    // expanded rows are all there is beside kr.
    const bool expanded_kept = p.is_gqla() && (path == GQLA_PATH_GQA || r.keep_latent == 0);
    const double rank_elems = (rs.kept_bytes_per_token + (expanded_kept ? rs.expanded_bytes_per_token : 0)) / es;
    const double full_elems = (fs.kept_bytes_per_token + (expanded_kept ? fs.expanded_bytes_per_token : 0)) / es;
    const double per_rank_full = r.full_s / opt.shards;
    if (opt.json) {
        JsonObject j;
        j.str("mode", "shards")
            .str("device", r.gpus ? "cuda" : "cpu")
            .integer("gpus", r.gpus)
            .str("preset", p.name)
            .str("path", path_name(path))
            .str("cache", dtype_label(cache))
            .integer("batch", batch)
            .integer("context", T)
            .integer("s_q", s_q)
            .integer("threads", opt.threads)
            .boolean("hot", opt.hot)
            .integer("shards", opt.shards)
            .integer("keep_latent", r.keep_latent)
            .integer("rank_kept_bytes_per_token", rs.kept_bytes_per_token)
            .integer("rank_expanded_bytes_per_token", rs.expanded_bytes_per_token)
            .num("rank_elements_per_token", rank_elems)
            .num("full_elements_per_token", full_elems)
            .num("full_median_s", r.full_s)
            .num("rank_median_s", r.rank_median_s)
            .num("rank_max_s", r.rank_max_s)
            .num("rank_over_full_per_rank", r.rank_median_s / per_rank_full)
            .num("rel_l2_vs_full", r.err);
        add_build_info(j);
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("%-15s %-7s %-5s %4d %6lld %3d %6d %4d  %6.0f %6.0f  %10.3f %10.3f %10.3f %10.3f %6.2f  %8.1e\n",
                    p.name, path_name(path), dtype_label(cache), batch, static_cast<long long>(T), s_q, opt.shards,
                    r.keep_latent, rank_elems, full_elems, r.full_s * 1e3, per_rank_full * 1e3, r.rank_median_s * 1e3,
                    r.rank_max_s * 1e3, r.rank_median_s / per_rank_full, r.err);
    }
    std::fflush(stdout);
}

}  // namespace

int run_shard_bench(const Options& opt) {
    // Ranks run one after another (one process): on several GPUs each
    // rank's time is its own device time, not an overlapped step;
    // examples/python/tp_decode.py runs one process per GPU with NCCL.
    if (opt.device == GQLA_DEVICE_CUDA && cuda_device_count() < 1)
        throw std::runtime_error("--shards --device cuda: no GPU visible to the CUDA runtime");
    if (!opt.json)
        std::printf("%-15s %-7s %-5s %4s %6s %3s %6s %4s  %6s %6s  %10s %10s %10s %10s %6s  %8s\n", "preset", "path",
                    "cache", "B", "T", "s_q", "shards", "keep", "el/tok", "full", "full ms", "full/N ms", "rank ms",
                    "max ms", "ratio", "rel err");
    int failures = 0;
    for (const std::string& name : opt.presets) {
        const Preset* p = find_preset(name);
        if (p == nullptr) throw std::runtime_error("unknown preset " + name);
        if (p->G % opt.shards != 0)
            throw std::runtime_error("--shards " + std::to_string(opt.shards) + " does not divide the " +
                                     std::to_string(p->G) + " groups of " + name);
        for (gqla_path path : opt.paths) {
            if (path == GQLA_PATH_GQA_TRANSIENT || (!p->is_gqla() && path != GQLA_PATH_GQA)) continue;
            for (gqla_dtype cache : opt.dtypes)
                for (int batch : opt.batches)
                    for (int64_t T : opt.contexts)
                        for (int s_q : opt.s_qs) {
                            const CaseResult r = run_case(*p, opt, path, cache, batch, T, s_q);
                            print_row(*p, opt, path, cache, batch, T, s_q, r);
                            if (!(r.err <= bound_of(cache))) {
                                std::fprintf(stderr, "gqla-bench: shards differ from the full session: rel_l2 %.3e\n",
                                             r.err);
                                ++failures;
                            }
                        }
        }
    }
    return failures ? 1 : 0;
}

}  // namespace gqla::bench
