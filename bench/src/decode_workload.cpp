// SPDX-License-Identifier: Apache-2.0
#include "decode_workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "support.hpp"

namespace gqla::bench {

namespace {

// Reads a buffer of twice the last-level cache (at least 32 MiB, allocated
// once per process) so that nothing a decode call read stays cached; one
// slice per hardware thread, so every core's private caches are swept too.
// Plain threads, joined before the call is timed: an OpenMP team would stay
// spinning into the timed call (libgomp's default wait policy) and take a
// core from the library's threads - on a 2-vCPU host that inflated cold
// GQA 32/8 T=4096 calls by 1.1x (B=1) to 1.7x (B=8).
void sweep_last_level_cache() {
    static const std::vector<float> buffer = [] {
        gqla_probe_info info;
        std::memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        const int64_t l3 = gqla_probe(GQLA_DEVICE_CPU, 0, 0, &info) == GQLA_OK ? int64_t(info.l3_kb) * 1024 : 0;
        const int64_t bytes = std::max<int64_t>(2 * l3, int64_t(32) << 20);
        return std::vector<float>(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
    }();
    const int64_t n = static_cast<int64_t>(buffer.size());
    const int slices = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 256u));
    std::vector<float> sums(static_cast<size_t>(slices), 0.0f);
    auto sweep = [&](int i) {
        const float* f = buffer.data();
        float sum = 0;
        const int64_t lines = n / 16;
        for (int64_t k = lines * i / slices; k < lines * (i + 1) / slices; ++k) sum += f[k * 16];  // one load per line
        sums[static_cast<size_t>(i)] = sum;
    };
    std::vector<std::thread> helpers;
    for (int i = 1; i < slices; ++i) helpers.emplace_back(sweep, i);
    sweep(0);
    for (std::thread& t : helpers) t.join();
    volatile float keep = std::accumulate(sums.begin(), sums.end(), 0.0f);
    (void)keep;
}

// n values in the io dtype: a random block repeated. Prefill buffers reach
// gigabytes; the timing does not depend on the values, and generating that
// much noise would take seconds.
std::vector<unsigned char> patterned_random(size_t n, uint64_t seed, gqla_dtype io) {
    constexpr size_t kBlock = size_t(1) << 22;
    if (n <= kBlock) return to_dtype(random_vector(n, seed), io);
    const std::vector<unsigned char> block = to_dtype(random_vector(kBlock, seed), io);
    std::vector<unsigned char> out(n * dtype_size(io));
    for (size_t at = 0; at < out.size(); at += block.size())
        std::memcpy(out.data() + at, block.data(), std::min(block.size(), out.size() - at));
    return out;
}

}  // namespace

int64_t CallShape::query_rows() const {
    if (q_lens.empty()) return static_cast<int64_t>(batch) * s_q;
    int64_t n = 0;
    for (int32_t q : q_lens) n += q;
    return n;
}

CallShape CallShape::decode(int batch, int s_q) {
    CallShape c;
    c.batch = batch;
    c.s_q = s_q;
    return c;
}

CallShape CallShape::uniform(int batch, int s_q, gqla_path path) {
    CallShape c = decode(batch, s_q);
    c.attention = true;
    c.path = path;
    return c;
}

CallShape CallShape::ragged(std::vector<int32_t> q_lens, gqla_path path) {
    CallShape c;
    c.batch = static_cast<int>(q_lens.size());
    c.s_q = 0;
    for (int32_t q : q_lens) c.s_q = std::max(c.s_q, static_cast<int>(q));
    c.q_lens = std::move(q_lens);
    c.attention = true;
    c.path = path;
    return c;
}

int sets_for_cold(const Preset& p, gqla_path path, gqla_dtype cache, int batch, int64_t context, double cold_bytes,
                  bool hot) {
    if (hot) return 1;
    const gqla_path read_path = p.is_gqla() && path == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
    const double per_set = read_bytes_per_token(p, read_path, cache) * batch * static_cast<double>(context);
    // At least 2 so consecutive calls never read the same lines.
    return std::max(2, static_cast<int>(std::ceil(cold_bytes / per_set)));
}

DecodeWorkload::DecodeWorkload(const WorkloadSpec& spec) : spec_(spec) {
    const Preset& p = *spec.preset;
    const int64_t nseq = static_cast<int64_t>(spec.sets) * spec.batch;
    SessionShape shape = spec.shape;
    // Append everything on the absorb path (cheap copies), then expand once.
    const gqla_path wanted = shape.path;
    if (p.is_gqla()) shape.path = GQLA_PATH_ABSORB;
    const int64_t page = shape.page_size > 0 ? shape.page_size : 64;
    shape.max_tokens = nseq * ((spec.context + page - 1) / page) * page;
    if (!spec.lengths.empty()) {
        int64_t per_batch = 0;
        for (int64_t len : spec.lengths) per_batch += (len + page - 1) / page * page;
        shape.max_tokens = spec.sets * per_batch;
    }
    shape.max_sequences = static_cast<int>(nseq);
    shape.max_batch = std::max(spec.batch, 1);
    shape.max_q_len = std::max(spec.max_s_q, 1);
    // The library's workspaces scale with it: a ragged mix states its own.
    shape.max_q_tokens =
        spec.max_q_tokens > 0 ? spec.max_q_tokens : static_cast<int64_t>(shape.max_batch) * shape.max_q_len;
    gqla_config cfg = make_config(p, shape);
    check(gqla_session_create(&cfg, &session_), "gqla_session_create");
    try {
        fill(p, shape, wanted);
    } catch (...) {
        // The destructor does not run for a constructor that throws; the
        // session may hold gigabytes the next case needs.
        gqla_session_destroy(session_);
        session_ = nullptr;
        throw;
    }
}

void DecodeWorkload::fill(const Preset& p, const SessionShape& shape, gqla_path wanted) {
    const WorkloadSpec& spec = spec_;
    const int64_t nseq = static_cast<int64_t>(spec.sets) * spec.batch;
    if (p.is_gqla()) {
        // Weights of a trained layer have rows of norm ~1; scale so scores stay O(1).
        std::vector<float> w = random_vector(static_cast<size_t>(p.G) * (p.d_c + p.d_v) * p.r, 7,
                                             1.0f / std::sqrt(static_cast<float>(p.r)));
        gqla_tensor tw = host_tensor(w.data(), {static_cast<int64_t>(p.G) * (p.d_c + p.d_v), p.r});
        check(gqla_set_weights(session_, 0, &tw), "gqla_set_weights");
    }

    // One block of random tokens, appended (whole or a prefix) to every
    // sequence: the timing does not depend on the values, and generating
    // gigabytes of noise would.
    const int64_t n = spec.lengths.empty() ? spec.context : *std::max_element(spec.lengths.begin(), spec.lengths.end());
    const int64_t a_row = p.is_gqla() ? p.r : static_cast<int64_t>(p.G) * p.D;
    const int64_t b_row = p.is_gqla() ? p.d_r : static_cast<int64_t>(p.G) * p.Dv;
    const gqla_dtype io = shape.io_dtype;
    std::vector<unsigned char> a = to_dtype(random_vector(static_cast<size_t>(n * a_row), 11), io);
    std::vector<unsigned char> b = to_dtype(random_vector(static_cast<size_t>(n * b_row), 13), io);
    gqla_tensor ta = p.is_gqla() ? host_tensor(a.data(), io, {n, p.r}) : host_tensor(a.data(), io, {n, p.G, p.D});
    gqla_tensor tb = p.is_gqla() ? host_tensor(b.data(), io, {n, p.d_r}) : host_tensor(b.data(), io, {n, p.G, p.Dv});
    seqs_.resize(static_cast<size_t>(nseq));
    for (size_t i = 0; i < seqs_.size(); ++i) {
        check(gqla_sequence_add(session_, &seqs_[i]), "gqla_sequence_add");
        if (!spec.lengths.empty()) ta.shape[0] = tb.shape[0] = spec.lengths[i % spec.lengths.size()];
        check(gqla_append(session_, 0, seqs_[i], &ta, &tb), "gqla_append");
    }
    if (p.is_gqla() && wanted != GQLA_PATH_ABSORB) select_path(wanted);

    const size_t rows = static_cast<size_t>(shape.max_q_tokens);
    q_ = patterned_random(rows * p.H * p.q_dim(), 17, io);
    o_.assign(rows * p.H * p.out_dim() * dtype_size(io), 0);
    if (device() == GQLA_DEVICE_CUDA) {
        q_dev_ = std::make_unique<CudaIoBuffer>(q_.data(), q_.size());
        o_dev_ = std::make_unique<CudaIoBuffer>(o_.data(), o_.size());
        if (!q_dev_->valid() || !o_dev_->valid()) {  // no runtime: host tensors (copies included in the time)
            q_dev_.reset();
            o_dev_.reset();
        } else {
            timer_ = std::make_unique<CudaEventTimer>();
            if (!timer_->valid()) timer_.reset();
        }
    }
}

DecodeWorkload::~DecodeWorkload() { gqla_session_destroy(session_); }

void DecodeWorkload::decode(int64_t first, int batch, int s_q, bool timed) {
    call(first, CallShape::decode(batch, s_q), timed);
}

void DecodeWorkload::call(int64_t first, const CallShape& c, bool timed) {
    const Preset& p = *spec_.preset;
    const gqla_dtype io = spec_.shape.io_dtype;
    const int64_t rows = c.query_rows();
    if (rows * p.H * p.q_dim() * static_cast<int64_t>(dtype_size(io)) > static_cast<int64_t>(q_.size()))
        throw GqlaError(GQLA_ERR_INVALID_ARGUMENT,
                        "bench: a call of " + std::to_string(rows) + " query rows exceeds the workload's max_q_tokens");
    gqla_tensor tq = c.q_lens.empty() ? host_tensor(q_.data(), io, {c.batch, c.s_q, p.H, p.q_dim()})
                                      : host_tensor(q_.data(), io, {rows, p.H, p.q_dim()});
    gqla_tensor to = c.q_lens.empty() ? host_tensor(o_.data(), io, {c.batch, c.s_q, p.H, p.out_dim()})
                                      : host_tensor(o_.data(), io, {rows, p.H, p.out_dim()});
    if (q_dev_) {
        tq.data = q_dev_->data();
        to.data = o_dev_->data();
        tq.device = to.device = GQLA_DEVICE_CUDA;
        tq.device_index = to.device_index = 0;
    }
    gqla_attention_args args;
    if (c.attention) {
        check(gqla_attention_args_default(&args), "gqla_attention_args_default");
        args.layer = 0;
        args.batch = c.batch;
        args.seqs = seqs_.data() + first;
        args.q_lens = c.q_lens.empty() ? nullptr : c.q_lens.data();
        args.q = &tq;
        args.o = &to;
        args.path = c.path;
        args.path_taken = &last_taken_;
    }
    if (timed && timer_) timer_->start();
    if (c.attention)
        check(gqla_attention(session_, &args), "gqla_attention");
    else
        check(gqla_decode(session_, 0, c.batch, seqs_.data() + first, &tq, &to, nullptr), "gqla_decode");
    if (timed && timer_) timer_->stop();
    check(gqla_session_synchronize(session_), "gqla_session_synchronize");
}

double DecodeWorkload::time_decode(int batch, int s_q, int reps, double max_total_s, bool hot, double min_total_s) {
    return time_calls(CallShape::decode(batch, s_q), reps, max_total_s, hot, min_total_s);
}

double DecodeWorkload::time_calls(const CallShape& shape, int reps, double max_total_s, bool hot, double min_total_s) {
    begin_timing(shape, hot);
    double spent = 0;
    constexpr int kMaxReps = 100000;
    for (int i = 0; i < kMaxReps && (i < reps || spent < min_total_s); ++i) {
        spent += timed_call(shape);
        if (spent > max_total_s && timed_calls() >= 3) break;
    }
    return end_timing();
}

void DecodeWorkload::begin_timing(const CallShape& shape, bool hot) {
    const int64_t groups = hot ? 1 : std::max<int64_t>(1, static_cast<int64_t>(seqs_.size()) / shape.batch);
    const int64_t warmup = std::min<int64_t>(groups, 2);
    for (int64_t i = 0; i < warmup; ++i) call(next_first(shape.batch, hot), shape);
    times_.clear();
    device_times_.clear();
    hot_ = hot;
    sweep_caches_ = !hot && device() == GQLA_DEVICE_CPU;
}

int64_t DecodeWorkload::next_first(int batch, bool hot) {
    const int64_t groups = hot ? 1 : std::max<int64_t>(1, static_cast<int64_t>(seqs_.size()) / batch);
    const int64_t g = next_group_ % groups;
    next_group_ = g + 1;
    return g * batch;
}

double DecodeWorkload::timed_call(const CallShape& shape) {
    const int64_t first = next_first(shape.batch, hot_);
    double spent = 0;
    if (sweep_caches_) {
        const double f0 = now_s();
        sweep_last_level_cache();
        spent += now_s() - f0;
    }
    const double t0 = now_s();
    call(first, shape, true);
    const double dt = now_s() - t0;
    if (timer_) {
        const double dev = timer_->seconds();
        if (dev > 0) device_times_.push_back(dev);
    }
    times_.push_back(dt);
    return spent + dt;
}

double DecodeWorkload::end_timing() {
    last_device_s_ = device_times_.size() == times_.size() ? median(device_times_) : 0.0;
    last_p99_s_ = percentile(times_, 99.0);
    last_calls_ = static_cast<int>(times_.size());
    return median(times_);
}

std::vector<double> time_interleaved(const std::vector<DecodeWorkload*>& works, const CallShape& shape, int reps,
                                     double max_total_s, bool hot) {
    for (DecodeWorkload* w : works) w->begin_timing(shape, hot);
    double spent = 0;
    const double budget = max_total_s * static_cast<double>(works.size());
    for (int i = 0; i < reps; ++i) {
        for (DecodeWorkload* w : works) spent += w->timed_call(shape);
        if (spent > budget && i + 1 >= 3) break;
    }
    std::vector<double> medians;
    for (DecodeWorkload* w : works) medians.push_back(w->end_timing());
    return medians;
}

void DecodeWorkload::select_path(gqla_path p) { check(gqla_select_path(session_, p), "gqla_select_path"); }

gqla_path DecodeWorkload::active_path() const {
    gqla_path active = GQLA_PATH_AUTO;
    check(gqla_get_path(session_, &active, nullptr), "gqla_get_path");
    return active;
}

gqla_device_type DecodeWorkload::device() const {
    gqla_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    check(gqla_session_stats(session_, &st), "gqla_session_stats");
    return st.device;
}

gqla_cost_report DecodeWorkload::predict(int batch, int s_q) const {
    gqla_workload w;
    std::memset(&w, 0, sizeof w);  // fields appended later (topk) keep their defaults
    w.struct_size = sizeof w;
    w.batch = batch;
    w.context = spec_.context;
    w.q_len = s_q;
    gqla_cost_report r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    check(gqla_session_predict_cost(session_, &w, &r), "gqla_session_predict_cost");
    return r;
}

}  // namespace gqla::bench
