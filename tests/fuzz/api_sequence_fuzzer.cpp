// SPDX-License-Identifier: Apache-2.0
// API-sequence fuzzer: random valid and invalid calls over the public C ABI,
// on random configs (both kinds, every dtype, odd sizes, tiny page pools).
// After every call the session is compared with a shadow model (sequences,
// lengths, pages with sharing and copy-on-write); a refused call must leave
// the session exactly as it was; every accepted decode is compared with the
// float64 reference. Exits non-zero on the first mismatch, printing the seed
// and the call index so the run can be replayed.
//
//   gqla_api_sequence_fuzzer [--seconds N] [--calls N] [--seed S|time] [--verbose]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"
#include "gqla/gqla.h"
#include "tests/fuzz/fuzz_inputs.hpp"
#include "tests/fuzz/shadow_session.hpp"

namespace {

using fuzz::ShadowSession;
using fuzz::TypedBuffer;

// ------------------------------------------------------------ run state

struct Run {
    uint64_t seed = 0;
    int64_t calls = 0;  // gqla calls made
    int64_t sessions = 0;
    int64_t decodes_checked = 0;
    int64_t refused = 0;  // calls that returned an error (as expected)
    bool verbose = false;
    const char* op = "";  // what is being exercised now
};
Run run;

[[noreturn]] void fail(const char* fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "\nFUZZ FAILURE (seed %llu, call %lld, op %s): ", static_cast<unsigned long long>(run.seed),
                 static_cast<long long>(run.calls), run.op);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\nreplay: gqla_api_sequence_fuzzer --seed %llu --calls %lld\n",
                 static_cast<unsigned long long>(run.seed), static_cast<long long>(run.calls));
    std::exit(1);
}

class Random {
public:
    explicit Random(uint64_t seed) : gen_(seed) {}
    int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(gen_) < p; }
    double normal(double sd) { return std::normal_distribution<double>(0, sd)(gen_); }
    template <class T>
    T pick(const std::vector<T>& v) {
        return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
    }
    std::mt19937_64& gen() { return gen_; }

private:
    std::mt19937_64 gen_;
};

// Statuses a call may return: none = it must succeed.
struct Expect {
    uint32_t allowed = 0;
    void error(gqla_status s) { allowed |= 1u << s; }
    bool must_succeed() const { return allowed == 0; }
};

// Checks one call's status against the expectation; true when it succeeded.
bool check_status(const char* call, gqla_status st, const Expect& e) {
    ++run.calls;
    if (st < GQLA_OK || st > GQLA_ERR_INTERNAL) fail("%s returned %d, outside the gqla_status values", call, int(st));
    if (st == GQLA_ERR_INTERNAL) fail("%s returned GQLA_ERR_INTERNAL: %s", call, gqla_last_error_message());
    if (st != GQLA_OK) {
        const char* msg = gqla_last_error_message();
        if (msg == nullptr || msg[0] == '\0') fail("%s failed with %d but left no error message", call, int(st));
        if (e.must_succeed()) fail("%s: expected success, got %s: %s", call, gqla_status_string(st), msg);
        if (!(e.allowed & (1u << st))) fail("%s: unexpected %s: %s", call, gqla_status_string(st), msg);
        ++run.refused;
        if (run.verbose) std::printf("  %s refused as expected: %s\n", call, msg);
        return false;
    }
    if (!e.must_succeed()) fail("%s succeeded, but an error was expected (mask 0x%x)", call, e.allowed);
    if (run.verbose) std::printf("  %s ok\n", call);
    return true;
}

double tolerance(gqla_dtype cache, gqla_dtype io) {
    auto of = [](gqla_dtype t) { return t == GQLA_DTYPE_F32 ? 1e-5 : t == GQLA_DTYPE_F16 ? 2e-3 : 1e-2; };
    return std::max(of(cache), of(io));
}

// ------------------------------------------------------------ configs

const std::vector<gqla_dtype> kDtypes = {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16};

gqla_config random_config(Random& r) {
    const gqla_kind kind = r.chance(0.5) ? GQLA_KIND_GQA : GQLA_KIND_GQLA;
    gqla_config c;
    if (gqla_config_default(&c, kind) != GQLA_OK) fail("gqla_config_default refused kind %d", int(kind));
    const int32_t heads = static_cast<int32_t>(r.pick<int64_t>({1, 2, 3, 4, 6, 8}));
    std::vector<int64_t> divisors;
    for (int32_t g = 1; g <= heads; ++g)
        if (heads % g == 0) divisors.push_back(g);
    c.num_heads = heads;
    c.num_kv_heads = static_cast<int32_t>(r.pick(divisors));
    if (kind == GQLA_KIND_GQA) {
        c.head_dim = static_cast<int32_t>(r.pick<int64_t>({1, 3, 8, 16, 31, 64, 72, 128}));
        c.value_dim = static_cast<int32_t>(r.pick<int64_t>({0, 0, 5, 40, 64}));
    } else if (r.chance(0.2)) {  // the odd sizes of real models' shape family
        c.latent_dim = 384, c.nope_dim = 96, c.rope_dim = 32, c.value_dim = 80;
    } else {
        c.latent_dim = static_cast<int32_t>(r.pick<int64_t>({1, 7, 16, 64, 130}));
        c.nope_dim = static_cast<int32_t>(r.pick<int64_t>({1, 8, 24, 33}));
        c.rope_dim = static_cast<int32_t>(r.pick<int64_t>({1, 4, 16, 17}));
        c.value_dim = static_cast<int32_t>(r.pick<int64_t>({1, 8, 20, 32}));
    }
    c.num_layers = static_cast<int32_t>(r.range(1, 3));
    c.cache_dtype = r.pick(kDtypes);
    c.io_dtype = r.pick(kDtypes);
    c.softmax_scale = r.chance(0.7) ? 0.0f : static_cast<float>(r.range(5, 60)) / 100.0f;
    c.page_size = static_cast<int32_t>(r.pick<int64_t>({1, 2, 3, 7, 15, 16, 17, 64}));
    if (r.chance(0.85)) {
        c.max_tokens = r.range(1, 600);
    } else {  // capacity from a byte budget: a few pages' worth
        c.max_tokens = 0;
        const int64_t per_token =
            (kind == GQLA_KIND_GQA ? int64_t(c.num_kv_heads) * (c.head_dim + (c.value_dim ? c.value_dim : c.head_dim))
                                   : int64_t(c.latent_dim) + c.rope_dim) *
            (c.cache_dtype == GQLA_DTYPE_F32 ? 4 : 2) * c.num_layers;
        c.memory_budget_bytes = per_token * c.page_size * r.range(1, 12) + r.range(0, per_token);
    }
    c.max_sequences = static_cast<int32_t>(r.range(1, 12));
    c.max_batch = static_cast<int32_t>(r.range(1, 8));
    c.max_q_len = static_cast<int32_t>(r.range(1, 6));
    c.device = r.chance(0.8) ? GQLA_DEVICE_CPU : GQLA_DEVICE_AUTO;
    const std::vector<gqla_path> paths = kind == GQLA_KIND_GQA
                                             ? std::vector<gqla_path>{GQLA_PATH_AUTO, GQLA_PATH_GQA}
                                             : std::vector<gqla_path>{GQLA_PATH_AUTO, GQLA_PATH_GQA, GQLA_PATH_ABSORB};
    c.path = r.pick(paths);
    c.num_threads = static_cast<int32_t>(r.range(0, 3));
    return c;
}

// One field pushed out of its range; every such config must be refused.
void break_config(Random& r, gqla_config& c) {
    switch (r.range(0, 14)) {
        case 0:
            c.num_heads = 0;
            break;
        case 1:
            c.num_kv_heads = c.num_heads + 1;
            break;
        case 2:
            c.kind = static_cast<gqla_kind>(7);
            break;
        case 3:
            c.num_layers = 0;
            break;
        case 4:
            c.cache_dtype = static_cast<gqla_dtype>(9);
            break;
        case 5:
            c.io_dtype = static_cast<gqla_dtype>(0);
            break;
        case 6:
            c.softmax_scale = -1.0f;
            break;
        case 7:
            c.page_size = 0;
            break;
        case 8:
            c.max_tokens = -5;
            break;
        case 9:
            c.max_sequences = 0;
            break;
        case 10:
            c.max_q_len = 0;
            break;
        case 11:
            c.path = static_cast<gqla_path>(3);
            break;
        case 12:
            c.num_threads = -1;
            break;
        case 13:
            c.struct_size = 8;
            break;
        default:
            if (c.kind == GQLA_KIND_GQA)
                c.head_dim = 0;
            else
                c.latent_dim = -3;
            break;
    }
}

// ------------------------------------------------------------ fuzzed session

// Tensor mistakes a caller can make; each must be refused with INVALID_ARGUMENT.
enum class Flaw { None, Dtype, Ndim, Extent, InnerStride, Null, StructSize, Device, Negative, Overlap, DataNull };

class SessionFuzz {
public:
    SessionFuzz(Random& r, gqla_session* s, const gqla_config& resolved)
        : r_(r), s_(s), shadow_(resolved), cfg_(resolved) {
        // The resolved config carries the active path; what was requested
        // decides whether decodes may switch it (AUTO on a GQLA session).
        gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
        Expect ok;
        check_status("gqla_get_path", gqla_get_path(s_, &active, &requested), ok);
        requested_ = requested;
        if (cfg_.kind == GQLA_KIND_GQA)
            expected_path_ = GQLA_PATH_GQA;
        else if (requested != GQLA_PATH_AUTO)
            expected_path_ = requested;
        verify(true, nullptr);
    }

    void step() {
        gqla_stats before = stats();
        bool accepted = false;
        const int64_t what = r_.range(0, 99);
        if (what < 10)
            accepted = op_add();
        else if (what < 15)
            accepted = op_release();
        else if (what < 20)
            accepted = op_fork();
        else if (what < 45)
            accepted = op_append();
        else if (what < 55)
            accepted = op_append_batch();
        else if (what < 80)
            accepted = op_decode();
        else if (what < 84)
            accepted = op_select_path();
        else if (what < 88)
            accepted = op_set_weights();
        else if (what < 95)
            accepted = op_getters();
        else
            accepted = op_bad_pointers();
        verify(accepted, &before);
    }

private:
    // ---- checks

    gqla_stats stats() {
        gqla_stats st;
        std::memset(&st, 0, sizeof(st));
        st.struct_size = sizeof(st);
        gqla_status rc = gqla_session_stats(s_, &st);
        if (rc != GQLA_OK) fail("gqla_session_stats: %s", gqla_last_error_message());
        return st;
    }

    void verify(bool accepted, const gqla_stats* before) {
        const char* saved = run.op;
        run.op = accepted ? "verify after an accepted call" : "verify after a refused call";
        gqla_stats st = stats();
        if (!accepted && before != nullptr && std::memcmp(&st, before, sizeof(st)) != 0)
            fail(
                "a refused call changed the session's stats (pages_used %lld -> %lld, sequences %lld -> %lld, "
                "tokens %lld -> %lld, path %d -> %d, expanded %lld -> %lld)",
                (long long)before->pages_used, (long long)st.pages_used, (long long)before->sequences,
                (long long)st.sequences, (long long)before->tokens_cached, (long long)st.tokens_cached,
                int(before->path), int(st.path), (long long)before->expanded_bytes, (long long)st.expanded_bytes);
        auto expect_eq = [](const char* field, int64_t got, int64_t want) {
            if (got != want)
                fail("stats.%s is %lld, the shadow model says %lld", field, (long long)got, (long long)want);
        };
        expect_eq("pages_total", st.pages_total, shadow_.pages_total());
        expect_eq("pages_used", st.pages_used, shadow_.pages_used());
        expect_eq("pages_free", st.pages_free, shadow_.pages_total() - shadow_.pages_used());
        expect_eq("sequences", st.sequences, shadow_.sequences());
        expect_eq("tokens_cached", st.tokens_cached, shadow_.tokens_cached());
        expect_eq("token_capacity_left", st.token_capacity_left, st.pages_free * cfg_.page_size);
        expect_eq("page_size", st.page_size, cfg_.page_size);
        if (st.device != GQLA_DEVICE_CPU) fail("stats.device is %d, expected CPU", int(st.device));
        if (expected_path_ != GQLA_PATH_AUTO) expect_eq("path", st.path, expected_path_);
        if (st.path != GQLA_PATH_GQA && st.path != GQLA_PATH_ABSORB) fail("stats.path is %d", int(st.path));
        if (cfg_.kind == GQLA_KIND_GQLA && st.path == GQLA_PATH_ABSORB && st.expanded_bytes != 0)
            fail("absorb path active but %lld expanded bytes allocated", (long long)st.expanded_bytes);
        if (st.latent_bytes < 0 || st.expanded_bytes < 0 || st.weight_bytes < 0 || st.workspace_bytes < 0)
            fail("negative byte counts in stats");
        for (gqla_seq_id id : shadow_.live())
            for (int32_t l = 0; l < cfg_.num_layers; ++l) {
                int64_t len = -1;
                gqla_status rc = gqla_sequence_length(s_, id, l, &len);
                if (rc != GQLA_OK)
                    fail("gqla_sequence_length(%lld, %d): %s", (long long)id, l, gqla_last_error_message());
                if (len != shadow_.length(id, l))
                    fail("sequence %lld layer %d has length %lld, the shadow model says %lld", (long long)id, l,
                         (long long)len, (long long)shadow_.length(id, l));
            }
        run.op = saved;
    }

    // ---- choosing ids and layers

    gqla_seq_id unknown_id() { return r_.chance(0.5) ? next_unused_id_ + r_.range(0, 3) : -r_.range(0, 5); }

    gqla_seq_id some_id(Expect& e) {  // a live id, or (rarely, or when none) an unknown one
        auto live = shadow_.live();
        if (live.empty() || r_.chance(0.04)) {
            e.error(GQLA_ERR_NOT_FOUND);
            return unknown_id();
        }
        return r_.pick(live);
    }

    int32_t some_layer(Expect& e) {
        if (r_.chance(0.03)) {
            e.error(GQLA_ERR_INVALID_ARGUMENT);
            return r_.chance(0.5) ? -1 : cfg_.num_layers;
        }
        return static_cast<int32_t>(r_.range(0, cfg_.num_layers - 1));
    }

    static bool layer_ok(int32_t layer, int32_t layers) { return layer >= 0 && layer < layers; }

    // ---- tensors

    // A host tensor of `shape` in a random layout: the buffer is poisoned
    // (NaN) everywhere, then the view's elements get `values` (row-major;
    // empty = fresh normal numbers) rounded to the dtype, read back into *stored.
    struct Tensor {
        TypedBuffer buf;
        gqla_tensor t;
        std::vector<double> stored;  // row-major view values as the dtype holds them
        std::vector<char> in_view;   // per buffer element
    };

    Tensor make_tensor(gqla_dtype dtype, const std::vector<int64_t>& shape, double sd, bool fill) {
        Tensor x;
        std::vector<int> order;
        for (int d = 0; d + 1 < static_cast<int>(shape.size()); ++d) order.push_back(d);
        if (r_.chance(0.25)) std::shuffle(order.begin(), order.end(), r_.gen());
        std::vector<int64_t> pad(shape.size(), 0);
        if (r_.chance(0.3))
            for (auto& p : pad) p = r_.range(0, 3);
        int64_t span = 0;
        x.t = fuzz::strided_tensor(dtype, shape, order, pad, &span);
        x.buf = TypedBuffer(dtype, static_cast<size_t>(std::max<int64_t>(span, 1)));
        x.t.data = x.buf.data();
        x.in_view.assign(x.buf.size(), 0);
        int64_t numel = 1;
        for (int64_t e : shape) numel *= e;
        x.stored.resize(static_cast<size_t>(numel));
        std::vector<int64_t> idx(shape.size(), 0);
        for (int64_t flat = 0; flat < numel; ++flat) {
            int64_t rem = flat;
            for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
                idx[static_cast<size_t>(d)] = rem % shape[static_cast<size_t>(d)];
                rem /= shape[static_cast<size_t>(d)];
            }
            const size_t off = static_cast<size_t>(fuzz::element_offset(x.t, idx.data()));
            x.in_view[off] = 1;
            if (fill) {
                x.buf.set(off, r_.normal(sd));
                x.stored[static_cast<size_t>(flat)] = x.buf.get(off);
            }
        }
        return x;
    }

    // Read the view back row-major.
    static std::vector<double> read_view(const Tensor& x) {
        std::vector<double> v(x.stored.size());
        int64_t numel = static_cast<int64_t>(v.size());
        std::vector<int64_t> idx(static_cast<size_t>(x.t.ndim), 0);
        for (int64_t flat = 0; flat < numel; ++flat) {
            int64_t rem = flat;
            for (int d = x.t.ndim - 1; d >= 0; --d) {
                idx[static_cast<size_t>(d)] = rem % x.t.shape[d];
                rem /= x.t.shape[d];
            }
            v[static_cast<size_t>(flat)] = x.buf.get(static_cast<size_t>(fuzz::element_offset(x.t, idx.data())));
        }
        return v;
    }

    Flaw maybe_flaw(double p) {
        if (!r_.chance(p)) return Flaw::None;
        return static_cast<Flaw>(r_.range(1, 10));
    }

    // Apply a flaw to a tensor descriptor (the pointer may become NULL).
    // Returns false when the flaw cannot apply to this tensor (it stays valid).
    bool apply_flaw(Flaw f, gqla_tensor& t, const gqla_tensor** ptr, gqla_dtype expected_dtype, bool any_dtype) {
        const int inner = t.ndim - 1;
        switch (f) {
            case Flaw::None:
                return false;
            case Flaw::Dtype:
                if (any_dtype) return false;
                t.dtype = expected_dtype == GQLA_DTYPE_F32 ? GQLA_DTYPE_BF16 : GQLA_DTYPE_F32;
                return true;
            case Flaw::Ndim:
                t.ndim = t.ndim == 2 ? 3 : 2;
                return true;
            case Flaw::Extent:
                t.shape[inner] += 1;
                return true;
            case Flaw::InnerStride:
                if (t.shape[inner] <= 1) return false;
                t.strides[inner] = 2;
                return true;
            case Flaw::Null:
                *ptr = nullptr;
                return true;
            case Flaw::StructSize:
                t.struct_size = 4;
                return true;
            case Flaw::Device:
                t.device = static_cast<gqla_device_type>(5);
                return true;
            case Flaw::Negative:
                t.shape[0] = -1;
                return true;
            case Flaw::Overlap: {
                // An outer dim (extent > 1) with a stride that revisits elements
                // (a tensor without elements overlaps nothing).
                for (int d = 0; d <= inner; ++d)
                    if (t.shape[d] == 0) return false;
                for (int d = 0; d < inner; ++d)
                    if (t.shape[d] > 1 && t.shape[inner] > 1) {
                        t.strides[d] = 1;
                        return true;
                    }
                return false;
            }
            case Flaw::DataNull: {
                int64_t numel = 1;
                for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
                if (numel == 0) return false;
                t.data = nullptr;
                return true;
            }
        }
        return false;
    }

    // ---- operations (each returns whether gqla accepted the call)

    bool op_add() {
        run.op = "sequence_add";
        Expect e;
        if (shadow_.sequences() >= cfg_.max_sequences) e.error(GQLA_ERR_CAPACITY);
        gqla_seq_id id = -1;
        if (!check_status("gqla_sequence_add", gqla_sequence_add(s_, &id), e)) return false;
        if (id < next_unused_id_) fail("sequence_add returned id %lld, reused or decreasing", (long long)id);
        next_unused_id_ = id + 1;
        shadow_.add(id);
        return true;
    }

    bool op_release() {
        run.op = "sequence_release";
        Expect e;
        gqla_seq_id id = some_id(e);
        if (run.verbose) std::printf("release %lld\n", (long long)id);
        if (!check_status("gqla_sequence_release", gqla_sequence_release(s_, id), e)) return false;
        shadow_.release(id);
        return true;
    }

    bool op_fork() {
        run.op = "sequence_fork";
        Expect e;
        gqla_seq_id parent = some_id(e);
        if (shadow_.sequences() >= cfg_.max_sequences) e.error(GQLA_ERR_CAPACITY);
        gqla_seq_id child = -1;
        if (!check_status("gqla_sequence_fork", gqla_sequence_fork(s_, parent, &child), e)) return false;
        if (run.verbose) std::printf("fork %lld -> %lld\n", (long long)parent, (long long)child);
        if (child < next_unused_id_) fail("sequence_fork returned id %lld, reused or decreasing", (long long)child);
        next_unused_id_ = child + 1;
        shadow_.fork(parent, child);
        return true;
    }

    int64_t random_rows() {
        const int64_t P = cfg_.page_size;
        const int64_t free_tokens = (shadow_.pages_total() - shadow_.pages_used()) * P;
        switch (r_.range(0, 9)) {
            case 0:
                return r_.range(1, 3);
            case 1:
                return std::max<int64_t>(1, P - 1);
            case 2:
                return P;
            case 3:
                return P + 1;
            case 4:
                return free_tokens + r_.range(1, P);  // over what is left
            case 5:
                return r_.range(1, 40);
            default:
                return r_.range(1, std::max<int64_t>(2, std::min<int64_t>(2 * P, 24)));
        }
    }

    bool op_append() {
        run.op = "append";
        Expect e;
        const int32_t layer = some_layer(e);
        const gqla_seq_id id = some_id(e);
        if (layer_ok(layer, cfg_.num_layers) && shadow_.is_gqla() && !shadow_.weights_set(layer))
            e.error(GQLA_ERR_INVALID_STATE);
        int64_t n = r_.chance(0.03) ? 0 : random_rows();
        if (n == 0) e.error(GQLA_ERR_INVALID_ARGUMENT);
        if (n > 0 && shadow_.has(id) && layer_ok(layer, cfg_.num_layers) &&
            shadow_.pages_needed(layer, {id}, {n}) > shadow_.pages_total() - shadow_.pages_used())
            e.error(GQLA_ERR_CAPACITY);
        Tensor a = make_tensor(cfg_.io_dtype, a_shape(n), 1.0, true);
        Tensor b = make_tensor(cfg_.io_dtype, b_shape(r_.chance(0.03) ? n + 1 : n), 1.0, true);
        if (b.t.shape[0] != n) e.error(GQLA_ERR_INVALID_ARGUMENT);
        const gqla_tensor* pa = &a.t;
        const gqla_tensor* pb = &b.t;
        const Flaw flaw = maybe_flaw(0.1);
        bool flawed = r_.chance(0.5) ? apply_flaw(flaw, a.t, &pa, cfg_.io_dtype, false)
                                     : apply_flaw(flaw, b.t, &pb, cfg_.io_dtype, false);
        if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
        // A huge row count over a small buffer: must be refused before any row is read.
        if (!flawed && n > 0 && r_.chance(0.01)) {
            a.t.shape[0] = b.t.shape[0] = int64_t(1) << 40;
            e.error(GQLA_ERR_CAPACITY);
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        if (run.verbose) std::printf("append layer %d seq %lld n %lld\n", layer, (long long)id, (long long)n);
        if (!check_status("gqla_append", gqla_append(s_, layer, id, pa, pb), e)) return false;
        shadow_.append(layer, {id}, {n}, a.stored, b.stored);
        return true;
    }

    bool op_append_batch() {
        run.op = "append_batch";
        Expect e;
        const int32_t layer = some_layer(e);
        if (layer_ok(layer, cfg_.num_layers) && shadow_.is_gqla() && !shadow_.weights_set(layer))
            e.error(GQLA_ERR_INVALID_STATE);
        auto live = shadow_.live();
        std::shuffle(live.begin(), live.end(), r_.gen());
        size_t k = live.empty() ? 1 : static_cast<size_t>(r_.range(1, std::min<int64_t>(5, int64_t(live.size()))));
        std::vector<gqla_seq_id> ids(live.begin(), live.begin() + static_cast<long>(std::min(k, live.size())));
        if (ids.empty() || r_.chance(0.03)) {
            ids.push_back(unknown_id());
            e.error(GQLA_ERR_NOT_FOUND);
        }
        if (ids.size() > 1 && r_.chance(0.03)) {
            ids.back() = ids.front();
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        if (static_cast<int64_t>(ids.size()) > cfg_.max_sequences) e.error(GQLA_ERR_INVALID_ARGUMENT);
        std::vector<int64_t> counts;
        int64_t total = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            counts.push_back(r_.chance(0.2) ? 0 : r_.range(1, cfg_.page_size + 1));
            total += counts.back();
        }
        if (r_.chance(0.02)) {
            counts[0] = -1;
            total -= 1;
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        const bool valid_ids = e.must_succeed() || !(e.allowed & (1u << GQLA_ERR_NOT_FOUND));
        if (valid_ids && layer_ok(layer, cfg_.num_layers) && counts[0] >= 0) {
            bool distinct = true;
            for (size_t i = 1; i < ids.size(); ++i) distinct = distinct && ids[i] != ids[0];
            if (distinct && shadow_.pages_needed(layer, ids, counts) > shadow_.pages_total() - shadow_.pages_used())
                e.error(GQLA_ERR_CAPACITY);
        }
        const int64_t rows = std::max<int64_t>(total, 0);
        Tensor a = make_tensor(cfg_.io_dtype, a_shape(rows), 1.0, true);
        Tensor b = make_tensor(cfg_.io_dtype, b_shape(rows), 1.0, true);
        const gqla_tensor* pa = &a.t;
        const gqla_tensor* pb = &b.t;
        const Flaw flaw = maybe_flaw(0.08);
        const bool flawed = r_.chance(0.5) ? apply_flaw(flaw, a.t, &pa, cfg_.io_dtype, false)
                                           : apply_flaw(flaw, b.t, &pb, cfg_.io_dtype, false);
        if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
        const int64_t* pcounts = counts.data();
        int32_t num = static_cast<int32_t>(ids.size());
        if (r_.chance(0.02)) {
            pcounts = nullptr;
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        } else if (r_.chance(0.02)) {
            num = 0;
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        if (run.verbose)
            for (size_t i = 0; i < ids.size(); ++i)
                std::printf("append_batch layer %d seq %lld n %lld\n", layer, (long long)ids[i], (long long)counts[i]);
        if (!check_status("gqla_append_batch", gqla_append_batch(s_, layer, num, ids.data(), pcounts, pa, pb), e))
            return false;
        shadow_.append(layer, ids, counts, a.stored, b.stored);
        return true;
    }

    std::vector<int64_t> a_shape(int64_t n) const {
        if (shadow_.is_gqla()) return {n, cfg_.latent_dim};
        return {n, cfg_.num_kv_heads, cfg_.head_dim};
    }
    std::vector<int64_t> b_shape(int64_t n) const {
        if (shadow_.is_gqla()) return {n, cfg_.rope_dim};
        return {n, cfg_.num_kv_heads, cfg_.value_dim};
    }

    bool op_decode() {
        run.op = "decode";
        Expect e;
        const int32_t layer = some_layer(e);
        const bool layer_valid = layer_ok(layer, cfg_.num_layers);
        if (layer_valid && shadow_.is_gqla() && !shadow_.weights_set(layer)) e.error(GQLA_ERR_INVALID_STATE);
        // Prefer sequences that hold tokens in this layer.
        std::vector<gqla_seq_id> filled, all = shadow_.live();
        for (gqla_seq_id id : all)
            if (layer_valid && shadow_.length(id, layer) > 0) filled.push_back(id);
        std::vector<gqla_seq_id>& pool = (!filled.empty() && r_.chance(0.9)) ? filled : all;
        std::shuffle(pool.begin(), pool.end(), r_.gen());
        int64_t batch = pool.empty() ? 1 : r_.range(1, std::min<int64_t>(cfg_.max_batch, int64_t(pool.size())));
        std::vector<gqla_seq_id> ids(pool.begin(),
                                     pool.begin() + static_cast<long>(std::min<size_t>(batch, pool.size())));
        if (ids.empty() || r_.chance(0.02)) {
            if (ids.empty())
                ids.push_back(unknown_id());
            else
                ids.back() = unknown_id();
            e.error(GQLA_ERR_NOT_FOUND);
        }
        if (ids.size() > 1 && r_.chance(0.02)) {
            ids.back() = ids.front();
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        if (r_.chance(0.01)) {  // more than max_batch
            while (static_cast<int64_t>(ids.size()) <= cfg_.max_batch) ids.push_back(unknown_id());
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        batch = static_cast<int64_t>(ids.size());
        int64_t shortest = INT64_MAX;
        for (gqla_seq_id id : ids)
            if (shadow_.has(id) && layer_valid) shortest = std::min(shortest, shadow_.length(id, layer));
        int64_t s_q = r_.range(1, std::max<int64_t>(1, std::min<int64_t>(cfg_.max_q_len, shortest)));
        if (r_.chance(0.04)) s_q = r_.pick<int64_t>({0, cfg_.max_q_len + 1, shortest == INT64_MAX ? 1 : shortest + 1});
        if (s_q < 1 || s_q > cfg_.max_q_len || (shortest != INT64_MAX && s_q > shortest))
            e.error(GQLA_ERR_INVALID_ARGUMENT);

        const int32_t H = cfg_.num_heads;
        Tensor q = make_tensor(cfg_.io_dtype, {batch, s_q, H, shadow_.q_dim()}, 1.0, true);
        Tensor o = make_tensor(cfg_.io_dtype, {batch, s_q, H, shadow_.out_dim()}, 0, false);
        const bool with_lse = r_.chance(0.7);
        Tensor lse = make_tensor(GQLA_DTYPE_F32, {batch, s_q, H}, 0, false);
        const std::vector<unsigned char> o_before = o.buf.bytes, lse_before = lse.buf.bytes;
        const gqla_tensor* pq = &q.t;
        const gqla_tensor* po = &o.t;
        const gqla_tensor* pl = with_lse ? &lse.t : nullptr;
        const Flaw flaw = maybe_flaw(0.08);
        const int which = static_cast<int>(r_.range(0, with_lse ? 2 : 1));
        bool flawed = which == 0   ? apply_flaw(flaw, q.t, &pq, cfg_.io_dtype, false)
                      : which == 1 ? apply_flaw(flaw, o.t, &po, cfg_.io_dtype, false)
                                   : (flaw != Flaw::Null && apply_flaw(flaw, lse.t, &pl, GQLA_DTYPE_F32, false));
        if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
        const gqla_seq_id* pids = ids.data();
        if (r_.chance(0.01)) {
            pids = nullptr;
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        gqla_status st = gqla_decode(s_, layer, static_cast<int32_t>(batch), pids, pq, const_cast<gqla_tensor*>(po),
                                     const_cast<gqla_tensor*>(pl));
        if (!check_status("gqla_decode", st, e)) return false;
        check_decode(layer, ids, static_cast<int32_t>(s_q), q, o, o_before, with_lse ? &lse : nullptr, lse_before);
        return true;
    }

    void check_decode(int32_t layer, const std::vector<gqla_seq_id>& ids, int32_t s_q, const Tensor& q, const Tensor& o,
                      const std::vector<unsigned char>& o_before, const Tensor* lse,
                      const std::vector<unsigned char>& lse_before) {
        auto gaps_untouched = [](const Tensor& x, const std::vector<unsigned char>& before) {
            const size_t esz = fuzz::dtype_bytes(x.buf.dtype);
            for (size_t i = 0; i < x.in_view.size(); ++i)
                if (!x.in_view[i] && std::memcmp(&x.buf.bytes[i * esz], &before[i * esz], esz) != 0) return false;
            return true;
        };
        if (!gaps_untouched(o, o_before)) fail("decode wrote outside o's view (into the gaps of its strides)");
        if (lse != nullptr && !gaps_untouched(*lse, lse_before)) fail("decode wrote outside lse's view");
        const double tol = tolerance(cfg_.cache_dtype, cfg_.io_dtype);
        const int64_t H = cfg_.num_heads, Dq = shadow_.q_dim(), Dv = shadow_.out_dim();
        const std::vector<double> got = read_view(o);
        const std::vector<double> got_lse = lse ? read_view(*lse) : std::vector<double>();
        std::vector<double> ref_o(static_cast<size_t>(s_q * H * Dv)), ref_lse(static_cast<size_t>(s_q * H));
        // On the GQA path a GQLA session attends over its expanded cache,
        // stored in the cache dtype: the reference reads it as stored.
        const bool expanded = shadow_.is_gqla() && stats().path == GQLA_PATH_GQA;
        for (size_t b = 0; b < ids.size(); ++b) {
            const double* qb = q.stored.data() + b * static_cast<size_t>(s_q * H * Dq);
            shadow_.reference(ids[b], layer, s_q, qb, ref_o.data(), ref_lse.data(), expanded);
            const double* ob = got.data() + b * static_cast<size_t>(s_q * H * Dv);
            // Relative L2, except that the denominator never drops below half
            // the values' own scale: an output whose terms cancel to almost
            // zero is judged against the size of what was averaged (the
            // rounding error of the cache is relative to that, not to o).
            double diff = 0, norm = 0;
            for (size_t i = 0; i < ref_o.size(); ++i) {
                if (!std::isfinite(ob[i])) diff = INFINITY;
                diff += (ob[i] - ref_o[i]) * (ob[i] - ref_o[i]);
                norm += ref_o[i] * ref_o[i];
            }
            const double floor = 0.5 * shadow_.value_rms(ids[b], layer) * std::sqrt(double(ref_o.size()));
            const double err = std::sqrt(diff) / std::max(std::sqrt(norm), floor);
            if (!(err <= tol))
                fail(
                    "decode of sequence %lld (batch index %zu, layer %d, length %lld, s_q %d, path %d): o rel-L2 "
                    "%.3g > %.3g",
                    (long long)ids[b], b, layer, (long long)shadow_.length(ids[b], layer), s_q, int(stats().path), err,
                    tol);
            // lse: absolute error, scaled by |lse| away from zero. Twice the o
            // bound: a 16-bit kernel may round q as well as the cached keys, and
            // both errors land in every score.
            if (lse != nullptr)
                for (size_t i = 0; i < ref_lse.size(); ++i) {
                    const double g = got_lse[b * ref_lse.size() + i], want = ref_lse[i];
                    if (!(std::fabs(g - want) <= 2 * tol * std::max(1.0, std::fabs(want))))
                        fail("decode of sequence %lld (batch index %zu, layer %d): lse[%zu] %.9g, reference %.9g",
                             (long long)ids[b], b, layer, i, g, want);
                }
        }
        ++run.decodes_checked;
    }

    bool op_select_path() {
        run.op = "select_path";
        Expect e;
        const int64_t pick = r_.range(0, 12);
        const gqla_path p =
            pick == 12 ? static_cast<gqla_path>(r_.chance(0.5) ? -1 : 3) : static_cast<gqla_path>(pick % 3);
        const bool known = p == GQLA_PATH_AUTO || p == GQLA_PATH_GQA || p == GQLA_PATH_ABSORB;
        if (!known || (cfg_.kind == GQLA_KIND_GQA && p == GQLA_PATH_ABSORB)) e.error(GQLA_ERR_INVALID_ARGUMENT);
        if (!check_status("gqla_select_path", gqla_select_path(s_, p), e)) return false;
        requested_ = p;
        if (cfg_.kind == GQLA_KIND_GQA)
            expected_path_ = GQLA_PATH_GQA;
        else
            expected_path_ = p;  // AUTO: either, checked as "unknown"
        gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
        Expect ok;
        check_status("gqla_get_path", gqla_get_path(s_, &active, &requested), ok);
        if (requested != p) fail("get_path: requested %d after selecting %d", int(requested), int(p));
        if (expected_path_ != GQLA_PATH_AUTO && active != expected_path_)
            fail("get_path: active %d after selecting %d", int(active), int(p));
        return true;
    }

    bool op_set_weights() {
        run.op = "set_weights";
        Expect e;
        const int32_t layer = some_layer(e);
        if (!shadow_.is_gqla()) e.error(GQLA_ERR_INVALID_STATE);
        const int64_t rows = int64_t(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
        const int64_t cols = shadow_.is_gqla() ? cfg_.latent_dim : 4;
        Tensor w =
            make_tensor(r_.pick(kDtypes), {std::max<int64_t>(rows, 1), cols}, 1.0 / std::sqrt(double(cols)), true);
        const gqla_tensor* pw = &w.t;
        if (apply_flaw(maybe_flaw(0.1), w.t, &pw, w.t.dtype, true)) e.error(GQLA_ERR_INVALID_ARGUMENT);
        if (!check_status("gqla_set_weights", gqla_set_weights(s_, layer, pw), e)) return false;
        shadow_.set_weights(layer, w.stored);
        return true;
    }

    bool op_getters() {
        run.op = "getters";
        const int64_t what = r_.range(0, 5);
        if (what == 0) {
            gqla_config got;
            std::memset(&got, 0, sizeof(got));
            got.struct_size = sizeof(got);
            Expect ok;
            check_status("gqla_session_get_config", gqla_session_get_config(s_, &got), ok);
            gqla_config want = cfg_;
            want.path = got.path;
            if (std::memcmp(&got, &want, sizeof(got)) != 0) fail("session_get_config changed between calls");
            if (expected_path_ != GQLA_PATH_AUTO && got.path != expected_path_)
                fail("session_get_config: path %d, expected %d", int(got.path), int(expected_path_));
        } else if (what == 1) {
            Expect e;
            const gqla_seq_id id = some_id(e);
            const int32_t layer = some_layer(e);
            int64_t len = -7;
            if (check_status("gqla_sequence_length", gqla_sequence_length(s_, id, layer, &len), e) &&
                len != shadow_.length(id, layer))
                fail("sequence_length %lld, expected %lld", (long long)len, (long long)shadow_.length(id, layer));
        } else if (what <= 3) {
            gqla_workload w{sizeof(gqla_workload), static_cast<int32_t>(r_.range(1, 64)), r_.range(1, 8192),
                            static_cast<int32_t>(r_.range(1, 8)), 0};
            Expect e;
            if (w.q_len > w.context) e.error(GQLA_ERR_INVALID_ARGUMENT);  // queries are cached tokens
            if (r_.chance(0.2)) {
                switch (r_.range(0, 3)) {
                    case 0:
                        w.batch = 0;
                        break;
                    case 1:
                        w.context = -1;
                        break;
                    case 2:
                        w.q_len = 0;
                        break;
                    default:
                        w.struct_size = 3;
                        break;
                }
                e.error(GQLA_ERR_INVALID_ARGUMENT);
            }
            gqla_cost_report rep;
            std::memset(&rep, 0, sizeof(rep));
            rep.struct_size = sizeof(rep);
            gqla_status st =
                what == 2 ? gqla_session_predict_cost(s_, &w, &rep) : gqla_predict_cost(&cfg_, nullptr, &w, &rep);
            if (check_status(what == 2 ? "gqla_session_predict_cost" : "gqla_predict_cost", st, e)) {
                for (const gqla_path_cost* c : {&rep.gqa, &rep.absorb})
                    if (!(std::isfinite(c->time_s) && c->time_s >= 0 && std::isfinite(c->bytes) && c->bytes >= 0 &&
                          std::isfinite(c->flops) && c->flops >= 0))
                        fail("predict_cost: non-finite or negative cost (time %g, bytes %g, flops %g)", c->time_s,
                             c->bytes, c->flops);
                if (rep.chosen != GQLA_PATH_GQA && rep.chosen != GQLA_PATH_ABSORB)
                    fail("predict_cost chose %d", int(rep.chosen));
                if (cfg_.kind == GQLA_KIND_GQA && rep.chosen != GQLA_PATH_GQA)
                    fail("predict_cost chose %d for a GQA-kind config", int(rep.chosen));
            }
        } else {
            gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
            Expect ok;
            check_status("gqla_get_path", gqla_get_path(s_, &active, r_.chance(0.5) ? &requested : nullptr), ok);
            if (expected_path_ != GQLA_PATH_AUTO && active != expected_path_)
                fail("get_path: active %d, expected %d", int(active), int(expected_path_));
        }
        return false;  // nothing changed: the state must be as before
    }

    bool op_bad_pointers() {
        run.op = "bad pointers";
        Expect bad;
        bad.error(GQLA_ERR_INVALID_ARGUMENT);
        gqla_stats st;
        st.struct_size = sizeof(st);
        switch (r_.range(0, 8)) {
            case 0:
                check_status("gqla_sequence_add(out NULL)", gqla_sequence_add(s_, nullptr), bad);
                break;
            case 1:
                check_status("gqla_session_stats(NULL)", gqla_session_stats(nullptr, &st), bad);
                break;
            case 2:
                check_status("gqla_session_stats(out NULL)", gqla_session_stats(s_, nullptr), bad);
                break;
            case 3: {
                Expect e = bad;
                e.error(GQLA_ERR_NOT_FOUND);
                check_status("gqla_sequence_fork(child NULL)", gqla_sequence_fork(s_, some_id(e), nullptr), e);
                break;
            }
            case 4: {
                Expect e = bad;
                e.error(GQLA_ERR_NOT_FOUND);
                check_status("gqla_sequence_length(out NULL)", gqla_sequence_length(s_, some_id(e), 0, nullptr), e);
                break;
            }
            case 5:
                check_status("gqla_select_path(NULL)", gqla_select_path(nullptr, GQLA_PATH_AUTO), bad);
                break;
            case 6: {
                st.struct_size = 1;
                check_status("gqla_session_stats(struct_size 1)", gqla_session_stats(s_, &st), bad);
                break;
            }
            case 7: {
                Expect e = bad;
                e.error(GQLA_ERR_NOT_FOUND);
                e.error(GQLA_ERR_INVALID_STATE);
                gqla_seq_id id = some_id(e);
                check_status("gqla_decode(q NULL)", gqla_decode(s_, 0, 1, &id, nullptr, nullptr, nullptr), e);
                break;
            }
            default:
                check_status("gqla_get_path(NULL)", gqla_get_path(nullptr, nullptr, nullptr), bad);
                break;
        }
        return false;
    }

    Random& r_;
    gqla_session* s_;
    ShadowSession shadow_;
    gqla_config cfg_;                           // resolved
    gqla_path expected_path_ = GQLA_PATH_AUTO;  // AUTO: not known (the cost model decides)
    gqla_path requested_ = GQLA_PATH_AUTO;
    gqla_seq_id next_unused_id_ = 1;
};

// ------------------------------------------------------------ driver

struct Options {
    double seconds = -1;
    int64_t calls = -1;
    uint64_t seed = 1;
    bool seed_from_time = false;
    bool verbose = false;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--seconds")
            o.seconds = std::atof(value().c_str());
        else if (a == "--calls")
            o.calls = std::atoll(value().c_str());
        else if (a == "--seed") {
            std::string v = value();
            if (v == "time")
                o.seed_from_time = true;
            else
                o.seed = std::strtoull(v.c_str(), nullptr, 10);
        } else if (a == "--verbose")
            o.verbose = true;
        else {
            std::fprintf(stderr, "usage: %s [--seconds N] [--calls N] [--seed S|time] [--verbose]\n", argv[0]);
            std::exit(2);
        }
    }
    if (o.seconds < 0 && o.calls < 0) o.seconds = 10;
    if (o.seed_from_time) o.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    // A seed replays exactly only if every AUTO choice does, and those price
    // paths on the probe: calibrated readings vary from run to run and with
    // the host's load (a 30-minute run's failure did not replay). So the
    // fuzzer prices on the spec estimates unless told otherwise.
    if (std::getenv("GQLA_PROBE_CALIBRATE") == nullptr) setenv("GQLA_PROBE_CALIBRATE", "0", 1);
    run.seed = opt.seed;
    run.verbose = opt.verbose;
    std::printf("api_sequence_fuzzer: seed %llu, budget %s%g s, %lld calls\n", (unsigned long long)opt.seed,
                opt.seconds < 0 ? "unlimited " : "", opt.seconds < 0 ? 0.0 : opt.seconds, (long long)opt.calls);
    std::fflush(stdout);
    Random r(opt.seed);
    const auto start = std::chrono::steady_clock::now();
    auto out_of_budget = [&] {
        if (opt.calls >= 0 && run.calls >= opt.calls) return true;
        if (opt.seconds < 0) return false;
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= opt.seconds;
    };
    while (!out_of_budget()) {
        run.op = "config";
        gqla_config cfg = random_config(r);
        if (r.chance(0.1)) {  // a config that must be refused, by validate and by create
            break_config(r, cfg);
            Expect bad;
            bad.error(GQLA_ERR_INVALID_ARGUMENT);
            check_status("gqla_config_validate", gqla_config_validate(&cfg), bad);
            gqla_session* s = reinterpret_cast<gqla_session*>(&cfg);  // must be reset to NULL
            check_status("gqla_session_create", gqla_session_create(&cfg, &s), bad);
            if (s != nullptr) fail("gqla_session_create failed but left *out non-NULL");
            continue;
        }
        Expect ok;
        check_status("gqla_config_validate", gqla_config_validate(&cfg), ok);
        gqla_session* s = nullptr;
        run.op = "session_create";
        check_status("gqla_session_create", gqla_session_create(&cfg, &s), ok);
        gqla_config resolved;
        std::memset(&resolved, 0, sizeof(resolved));
        resolved.struct_size = sizeof(resolved);
        check_status("gqla_session_get_config", gqla_session_get_config(s, &resolved), ok);
        ++run.sessions;
        if (run.verbose)
            std::printf(
                "session %lld: kind %d H %d G %d dims %d/%d/%d/%d/%d layers %d cache %d io %d page %d "
                "tokens %lld seqs %d batch %d q %d\n",
                (long long)run.sessions, int(resolved.kind), resolved.num_heads, resolved.num_kv_heads,
                resolved.head_dim, resolved.value_dim, resolved.latent_dim, resolved.nope_dim, resolved.rope_dim,
                resolved.num_layers, int(resolved.cache_dtype), int(resolved.io_dtype), resolved.page_size,
                (long long)resolved.max_tokens, resolved.max_sequences, resolved.max_batch, resolved.max_q_len);
        {
            SessionFuzz f(r, s, resolved);
            const int64_t steps = r.range(20, 400);
            for (int64_t i = 0; i < steps && !out_of_budget(); ++i) f.step();
        }
        gqla_session_destroy(s);
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "api_sequence_fuzzer: seed %llu: %lld calls (%lld refused as expected), %lld sessions, "
        "%lld decodes checked against the reference, %.1f s, no failure\n",
        (unsigned long long)opt.seed, (long long)run.calls, (long long)run.refused, (long long)run.sessions,
        (long long)run.decodes_checked, took);
    return 0;
}
