// SPDX-License-Identifier: Apache-2.0
// Threading promises of gqla.h: distinct sessions run concurrently; one
// session may be used from several threads (it serializes its own calls), so
// both a caller-serialized and an unsynchronized shared session must give the
// reference's answers; the last-error message is per thread. Worker threads
// only record what they saw; the checks run on the test's thread (doctest's
// assertion macros are not used off it). Run under ThreadSanitizer by
// tools/test.sh (test cases named "threads: ...").
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/reference/reference.hpp"
#include "gqla/gqla.h"

namespace {

constexpr int kThreads = 4;

gqla_config small_config(gqla_kind kind, int32_t layers, int32_t max_sequences) {
    gqla_config c;
    gqla_config_default(&c, kind);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    if (kind == GQLA_KIND_GQA) {
        c.head_dim = 24;
        c.value_dim = 16;
    } else {
        c.latent_dim = 40;
        c.nope_dim = 16;
        c.rope_dim = 8;
        c.value_dim = 12;
    }
    c.num_layers = layers;
    c.cache_dtype = GQLA_DTYPE_F32;
    c.io_dtype = GQLA_DTYPE_F32;
    c.device = GQLA_DEVICE_CPU;
    c.page_size = 8;
    c.max_tokens = 4096;
    c.max_sequences = max_sequences;
    c.max_batch = 8;
    c.max_q_len = 4;
    c.num_threads = 2;  // the CPU backend's own parallel regions run too
    c.path = kind == GQLA_KIND_GQLA ? GQLA_PATH_ABSORB : GQLA_PATH_GQA;
    return c;
}

gqla_tensor host(float* data, std::vector<int64_t> shape) {
    gqla_tensor t;
    gqla_tensor_init(&t, data, GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()), shape.data());
    return t;
}

std::vector<float> normal(std::mt19937_64& gen, size_t n, double sd = 1.0) {
    std::normal_distribution<double> dist(0.0, sd);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(dist(gen));
    return v;
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// One sequence driven by one thread: its rows, kept for the reference.
struct Stream {
    gqla_seq_id id = 0;
    std::vector<float> a, b;  // all appended rows, per token a_cols then b_cols
    int64_t length = 0;
};

// A session's dims and weights, and the worst error a thread saw.
class Model {
public:
    Model(const gqla_config& c, uint64_t seed) : c_(c), gen_(seed) {}

    const gqla_config& config() const { return c_; }
    bool gqla() const { return c_.kind == GQLA_KIND_GQLA; }
    int64_t a_cols() const { return gqla() ? c_.latent_dim : int64_t(c_.num_kv_heads) * c_.head_dim; }
    int64_t b_cols() const { return gqla() ? c_.rope_dim : int64_t(c_.num_kv_heads) * c_.value_dim; }
    int64_t q_dim() const { return gqla() ? c_.nope_dim + c_.rope_dim : c_.head_dim; }

    // Weights of every layer (GQLA); the same on every call so all threads agree.
    gqla_status upload_weights(gqla_session* s) {
        if (!gqla()) return GQLA_OK;
        const int64_t rows = int64_t(c_.num_kv_heads) * (c_.nope_dim + c_.value_dim);
        if (weights_.empty()) weights_ = normal(gen_, static_cast<size_t>(rows * c_.latent_dim), 0.15);
        for (int32_t l = 0; l < c_.num_layers; ++l) {
            gqla_tensor w = host(weights_.data(), {rows, c_.latent_dim});
            gqla_status st = gqla_set_weights(s, l, &w);
            if (st != GQLA_OK) return st;
        }
        return GQLA_OK;
    }

    // Append n random rows to layer 0 of `st`.
    gqla_status append(gqla_session* s, Stream& st, int64_t n, std::mt19937_64& gen) const {
        std::vector<float> a = normal(gen, static_cast<size_t>(n * a_cols()));
        std::vector<float> b = normal(gen, static_cast<size_t>(n * b_cols()));
        gqla_tensor ta =
            gqla() ? host(a.data(), {n, c_.latent_dim}) : host(a.data(), {n, c_.num_kv_heads, c_.head_dim});
        gqla_tensor tb = gqla() ? host(b.data(), {n, c_.rope_dim}) : host(b.data(), {n, c_.num_kv_heads, c_.value_dim});
        gqla_status rc = gqla_append(s, 0, st.id, &ta, &tb);
        if (rc != GQLA_OK) return rc;
        st.a.insert(st.a.end(), a.begin(), a.end());
        st.b.insert(st.b.end(), b.begin(), b.end());
        st.length += n;
        return GQLA_OK;
    }

    // Decode the last s_q tokens of `st` in layer 0; returns the rel-L2 error
    // against the reference (+inf on failure).
    double decode_error(gqla_session* s, const Stream& st, int32_t s_q, std::mt19937_64& gen) const {
        const int64_t H = c_.num_heads, Dv = c_.value_dim;
        std::vector<float> q = normal(gen, static_cast<size_t>(s_q * H * q_dim()));
        std::vector<float> o(static_cast<size_t>(s_q * H * Dv), NAN);
        gqla_tensor tq = host(q.data(), {1, s_q, H, q_dim()});
        gqla_tensor to = host(o.data(), {1, s_q, H, Dv});
        if (gqla_decode(s, 0, 1, &st.id, &tq, &to, nullptr) != GQLA_OK) return INFINITY;
        std::vector<double> ref(o.size());
        const std::vector<double> qd = widen(q), ad = widen(st.a), bd = widen(st.b);
        const double scale = 1.0 / std::sqrt(double(q_dim()));
        if (gqla()) {
            const std::vector<double> wd = widen(weights_);
            gqla::ref::gqla_decode(c_.num_heads, c_.num_kv_heads, c_.latent_dim, c_.nope_dim, c_.rope_dim, c_.value_dim,
                                   st.length, s_q, scale, qd.data(), wd.data(), ad.data(), bd.data(), ref.data(),
                                   nullptr);
        } else {
            gqla::ref::gqa_decode(c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.value_dim, st.length, s_q, scale,
                                  qd.data(), ad.data(), bd.data(), ref.data(), nullptr);
        }
        return gqla::ref::rel_l2(o.data(), ref.data(), o.size());
    }

private:
    gqla_config c_;
    std::mt19937_64 gen_;
    std::vector<float> weights_;
};

// What one worker saw: failed calls (with the message) and the worst error.
struct Outcome {
    std::vector<std::string> failures;
    double worst = 0.0;
    int decodes = 0;
    void record(const char* call, gqla_status st) {
        if (st != GQLA_OK) failures.push_back(std::string(call) + ": " + gqla_last_error_message());
    }
};

void check_outcomes(const std::vector<Outcome>& outcomes, double tol) {
    for (size_t t = 0; t < outcomes.size(); ++t) {
        INFO("thread " << t);
        for (const std::string& f : outcomes[t].failures) FAIL_CHECK(f);
        CHECK(outcomes[t].decodes > 0);
        CHECK(outcomes[t].worst <= tol);
    }
}

// One worker's round on a session: a sequence, appends of varying length,
// decodes after each, a fork that is released again. `lock` (may be null)
// serializes the worker's calls with the other workers'.
void work(gqla_session* s, const Model& m, uint64_t seed, std::mutex* lock, Outcome& out) {
    std::mt19937_64 gen(seed);
    auto guarded = [&](auto&& call) {
        if (lock == nullptr) return call();
        std::lock_guard<std::mutex> g(*lock);
        return call();
    };
    Stream st;
    out.record("sequence_add", guarded([&] { return gqla_sequence_add(s, &st.id); }));
    if (!out.failures.empty()) return;
    for (int round = 0; round < 12; ++round) {
        const int64_t n = 1 + static_cast<int64_t>(gen() % 11);
        out.record("append", guarded([&] { return m.append(s, st, n, gen); }));
        const int32_t s_q = static_cast<int32_t>(1 + gen() % std::min<int64_t>(4, st.length));
        const double err = guarded([&] { return m.decode_error(s, st, s_q, gen); });
        out.worst = std::max(out.worst, err);
        ++out.decodes;
        if (round % 4 == 3) {
            gqla_seq_id child = 0;
            out.record("sequence_fork", guarded([&] { return gqla_sequence_fork(s, st.id, &child); }));
            out.record("sequence_release(child)", guarded([&] { return gqla_sequence_release(s, child); }));
        }
        gqla_stats stats;
        stats.struct_size = sizeof(stats);
        out.record("session_stats", guarded([&] { return gqla_session_stats(s, &stats); }));
    }
    out.record("sequence_release", guarded([&] { return gqla_sequence_release(s, st.id); }));
}

}  // namespace

TEST_CASE("threads: each thread on its own session, both kinds") {
    std::vector<Outcome> outcomes(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([t, &outcomes] {
            Model m(small_config(t % 2 ? GQLA_KIND_GQLA : GQLA_KIND_GQA, 1, 8), 100 + t);
            gqla_session* s = nullptr;
            outcomes[t].record("session_create", gqla_session_create(&m.config(), &s));
            if (s == nullptr) return;
            outcomes[t].record("set_weights", m.upload_weights(s));
            work(s, m, 200 + t, nullptr, outcomes[t]);
            gqla_session_destroy(s);
        });
    for (auto& th : threads) th.join();
    check_outcomes(outcomes, 1e-5);
}

TEST_CASE("threads: one session shared, calls serialized by the caller") {
    for (gqla_kind kind : {GQLA_KIND_GQA, GQLA_KIND_GQLA}) {
        INFO("kind " << int(kind));
        Model m(small_config(kind, 1, 2 * kThreads), 7);
        gqla_session* s = nullptr;
        REQUIRE(gqla_session_create(&m.config(), &s) == GQLA_OK);
        REQUIRE(m.upload_weights(s) == GQLA_OK);
        std::mutex lock;
        std::vector<Outcome> outcomes(kThreads);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { work(s, m, 300 + t, &lock, outcomes[t]); });
        for (auto& th : threads) th.join();
        check_outcomes(outcomes, 1e-5);
        gqla_stats st;
        st.struct_size = sizeof(st);
        REQUIRE(gqla_session_stats(s, &st) == GQLA_OK);
        CHECK(st.sequences == 0);
        CHECK(st.pages_used == 0);
        gqla_session_destroy(s);
    }
}

TEST_CASE("threads: one session shared without a caller lock (the session serializes itself)") {
    for (gqla_kind kind : {GQLA_KIND_GQA, GQLA_KIND_GQLA}) {
        INFO("kind " << int(kind));
        Model m(small_config(kind, 1, 2 * kThreads), 11);
        gqla_session* s = nullptr;
        REQUIRE(gqla_session_create(&m.config(), &s) == GQLA_OK);
        REQUIRE(m.upload_weights(s) == GQLA_OK);
        std::vector<Outcome> outcomes(kThreads);
        std::vector<std::thread> threads;
        std::atomic<bool> done{false};
        for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { work(s, m, 400 + t, nullptr, outcomes[t]); });
        // Meanwhile: path switches (GQLA: expand and free the expanded cache
        // under the workers' feet), weight re-uploads of the same values, stats
        // and cost predictions; none may change what a decode returns.
        Outcome side;
        std::thread switcher([&] {
            const gqla_path paths[] = {GQLA_PATH_GQA, GQLA_PATH_ABSORB, GQLA_PATH_AUTO};
            for (int i = 0; !done.load(); ++i) {
                if (kind == GQLA_KIND_GQLA) {
                    side.record("select_path", gqla_select_path(s, paths[i % 3]));
                    if (i % 5 == 0) side.record("set_weights", const_cast<Model&>(m).upload_weights(s));
                }
                gqla_stats st;
                st.struct_size = sizeof(st);
                side.record("session_stats", gqla_session_stats(s, &st));
                gqla_workload w{sizeof(gqla_workload), 1 + i % 8, 64 + 8 * i, 1, 0};
                gqla_cost_report rep;
                rep.struct_size = sizeof(rep);
                side.record("session_predict_cost", gqla_session_predict_cost(s, &w, &rep));
                std::this_thread::yield();
            }
        });
        for (auto& th : threads) th.join();
        done = true;
        switcher.join();
        check_outcomes(outcomes, 1e-5);
        for (const std::string& f : side.failures) FAIL_CHECK(f);
        gqla_stats st;
        st.struct_size = sizeof(st);
        REQUIRE(gqla_session_stats(s, &st) == GQLA_OK);
        CHECK(st.sequences == 0);
        CHECK(st.pages_used == 0);
        gqla_session_destroy(s);
    }
}

TEST_CASE("threads: the last-error message belongs to the thread that failed") {
    std::vector<std::string> messages(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([t, &messages] {
            gqla_config c = small_config(GQLA_KIND_GQA, 1, 4);
            for (int i = 0; i < 50; ++i) {
                c.num_heads = 5 + t;  // each thread its own bad value
                c.num_kv_heads = 100 + t;
                gqla_config_validate(&c);
                gqla_seq_id id = 0;
                gqla_session* none = nullptr;
                gqla_sequence_add(none, &id);  // another failure on other threads in between
                gqla_config_validate(&c);
            }
            messages[t] = gqla_last_error_message();
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t << ": " << messages[t]);
        CHECK(messages[t].find(std::to_string(100 + t)) != std::string::npos);
    }
}
