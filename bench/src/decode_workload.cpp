// SPDX-License-Identifier: Apache-2.0
#include "decode_workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"
#include "support.hpp"

namespace gqla::bench {

namespace {

// Reads a buffer of twice the last-level cache (at least 32 MiB, allocated
// once per process) so that nothing a decode call read stays cached.
void sweep_last_level_cache() {
    static const std::vector<float> buffer = [] {
        gqla_probe_info info;
        std::memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        const int64_t l3 = gqla_probe(GQLA_DEVICE_CPU, 0, 0, &info) == GQLA_OK ? int64_t(info.l3_kb) * 1024 : 0;
        const int64_t bytes = std::max<int64_t>(2 * l3, int64_t(32) << 20);
        return std::vector<float>(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
    }();
    const float* f = buffer.data();
    const int64_t n = static_cast<int64_t>(buffer.size());
    float sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t k = 0; k < n; k += 16) sum += f[k];  // one load per 64-byte line
    volatile float keep = sum;
    (void)keep;
}

}  // namespace

int sets_for_cold(const Preset& p, gqla_path path, gqla_dtype cache, int batch, int64_t context,
                  double cold_bytes, bool hot) {
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
    const int64_t n = spec.lengths.empty() ? spec.context
                                           : *std::max_element(spec.lengths.begin(), spec.lengths.end());
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

    q_ = to_dtype(random_vector(static_cast<size_t>(spec.batch) * shape.max_q_len * p.H * p.q_dim(), 17), io);
    o_.assign(static_cast<size_t>(spec.batch) * shape.max_q_len * p.H * p.out_dim() * dtype_size(io), 0);
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
    const Preset& p = *spec_.preset;
    const gqla_dtype io = spec_.shape.io_dtype;
    gqla_tensor tq = host_tensor(q_.data(), io, {batch, s_q, p.H, p.q_dim()});
    gqla_tensor to = host_tensor(o_.data(), io, {batch, s_q, p.H, p.out_dim()});
    if (q_dev_) {
        tq.data = q_dev_->data();
        to.data = o_dev_->data();
        tq.device = to.device = GQLA_DEVICE_CUDA;
        tq.device_index = to.device_index = 0;
    }
    if (timed && timer_) timer_->start();
    check(gqla_decode(session_, 0, batch, seqs_.data() + first, &tq, &to, nullptr), "gqla_decode");
    if (timed && timer_) timer_->stop();
    check(gqla_session_synchronize(session_), "gqla_session_synchronize");
}

double DecodeWorkload::time_decode(int batch, int s_q, int reps, double max_total_s, bool hot, double min_total_s) {
    const int64_t groups = hot ? 1 : std::max<int64_t>(1, static_cast<int64_t>(seqs_.size()) / batch);
    auto next = [&]() {
        const int64_t g = next_group_ % groups;
        next_group_ = g + 1;
        return g * batch;
    };
    const int64_t warmup = std::min<int64_t>(groups, 2);
    for (int64_t i = 0; i < warmup; ++i) decode(next(), batch, s_q);
    const bool flush = !hot && device() == GQLA_DEVICE_CPU;
    std::vector<double> times, device_times;
    double spent = 0;
    constexpr int kMaxReps = 100000;
    for (int i = 0; i < kMaxReps && (i < reps || spent < min_total_s); ++i) {
        const int64_t first = next();
        if (flush) {
            const double f0 = now_s();
            sweep_last_level_cache();
            spent += now_s() - f0;
        }
        const double t0 = now_s();
        decode(first, batch, s_q, true);
        const double dt = now_s() - t0;
        if (timer_) {
            const double dev = timer_->seconds();
            if (dev > 0) device_times.push_back(dev);
        }
        times.push_back(dt);
        spent += dt;
        if (spent > max_total_s && times.size() >= 3) break;
    }
    last_device_s_ = device_times.size() == times.size() ? median(device_times) : 0.0;
    last_p99_s_ = percentile(times, 99.0);
    last_calls_ = static_cast<int>(times.size());
    return median(times);
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
