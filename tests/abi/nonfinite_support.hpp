// SPDX-License-Identifier: Apache-2.0
// Support of the non-finite tests: sessions under each CPU kernel ISA the
// host has, sequences whose cache rows hold chosen NaN / inf entries (with a
// host mirror of the rows as the cache stores them), and a decode checked
// element by element against both the rule stated by the test (which outputs
// must be finite, which non-finite) and the float64 reference.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "tests/scoped_env.hpp"
#include "harness.hpp"

namespace nonfinite {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------ kernel ISA

// A GQLA_MAX_ISA value and the probe bits its kernel table needs.
struct IsaCap {
    const char* cap;
    uint64_t needs;
};

inline std::vector<IsaCap> isa_caps() {
    const uint64_t avx2 = GQLA_ISA_AVX2 | GQLA_ISA_FMA | GQLA_ISA_F16C;
    const uint64_t avx512 = avx2 | GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL;
    return {{"none", 0}, {"avx2", avx2}, {"avx512_core", avx512}, {"avx512", avx512 | GQLA_ISA_AVX512BF16}};
}

inline uint64_t probed_isa() {
    gqla_probe_info info{};
    info.struct_size = sizeof info;
    REQUIRE(gqla_probe(GQLA_DEVICE_CPU, 0, 0, &info) == GQLA_OK);
    return info.isa_flags;
}

// Calls f(cap) once per kernel table the host (under any outer cap) offers.
template <class F>
void for_each_isa(F&& f) {
    const uint64_t host = probed_isa();
    for (const IsaCap& c : isa_caps()) {
        if ((host & c.needs) != c.needs) continue;
        gqla::test::ScopedEnv scope("GQLA_MAX_ISA", c.cap);  // the CPU backend picks its table at create
        const std::string max_isa = c.cap;
        CAPTURE(max_isa);
        f(c.cap);
    }
}

// ------------------------------------------------------------ session kinds

// GqlaAbsorbWholeSteps: the absorb path with a rope dim of 32, whole
// 32-element key steps in both segments, the shapes the AMX absorb kernel
// takes (GqlaAbsorbPath's 24 runs the AVX-512 kernel on AMX hosts).
enum class Kind { Gqa, GqlaGqaPath, GqlaAbsorbPath, GqlaAbsorbWholeSteps };

inline const char* kind_label(Kind k) {
    switch (k) {
        case Kind::Gqa:
            return "GQA";
        case Kind::GqlaGqaPath:
            return "GQLA, GQA path";
        case Kind::GqlaAbsorbPath:
            return "GQLA, absorb path";
        case Kind::GqlaAbsorbWholeSteps:
            return "GQLA, absorb path, rope dim 32";
    }
    return "?";
}

const Kind kKinds[] = {Kind::Gqa, Kind::GqlaGqaPath, Kind::GqlaAbsorbPath, Kind::GqlaAbsorbWholeSteps};
const gqla_dtype kDtypes[] = {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16};

// Pages of a few sizes, so block, page and vector-lane edges fall differently.
inline int32_t page_size_for(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return 64;
        case GQLA_DTYPE_F16:
            return 16;
        case GQLA_DTYPE_BF16:
            return 32;
        default:
            break;
    }
    return 16;
}

inline double bound_for(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return 1e-5;
        case GQLA_DTYPE_F16:
            return 2e-3;
        case GQLA_DTYPE_BF16:
            return 1e-2;
        default:
            break;
    }
    return 0.0;
}

// x (f32 io) as the cache stores it: IEEE rounding, so an f16 overflow is inf.
inline double as_stored(double x, gqla_dtype t) {
    const float f = static_cast<float>(x);
    switch (t) {
        case GQLA_DTYPE_F32:
            return f;
        case GQLA_DTYPE_F16:
            return gqla::f16_to_f32(gqla::f32_to_f16(f));
        case GQLA_DTYPE_BF16:
            return gqla::bf16_to_f32(gqla::f32_to_bf16(f));
        default:
            break;
    }
    return f;
}

// Small odd sizes (vector tails everywhere); s_q up to 4, or 40 for the
// prefill-chunk case (the kernels for many query rows).
inline gqla_config config_for(Kind kind, gqla_dtype dtype, int64_t max_tokens) {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, kind == Kind::Gqa ? GQLA_KIND_GQA : GQLA_KIND_GQLA) == GQLA_OK);
    cfg.num_heads = 6;
    if (kind == Kind::Gqa) {
        cfg.num_kv_heads = 3;
        cfg.head_dim = 72;
        cfg.value_dim = 40;
    } else {
        cfg.num_kv_heads = 2;
        cfg.latent_dim = 96;
        cfg.nope_dim = 40;
        cfg.rope_dim = kind == Kind::GqlaAbsorbWholeSteps ? 32 : 24;
        cfg.value_dim = 40;
        cfg.path = kind == Kind::GqlaGqaPath ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
    }
    cfg.num_layers = 1;
    cfg.cache_dtype = dtype;
    cfg.io_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.page_size = page_size_for(dtype);
    cfg.max_tokens = max_tokens;
    cfg.max_sequences = 48;
    cfg.max_batch = 48;
    cfg.max_q_len = 40;
    cfg.num_threads = 2;  // long sequences are split over threads and merged
    return cfg;
}

// ------------------------------------------------------------ sequences

// One entry put into a cache row: tensor a (k, or the latent c) or b (v, or
// kr), at position pos, one element (elem >= 0) or the whole row (elem < 0).
struct Injection {
    bool in_b;
    int64_t pos;
    int64_t elem;
    double value;
};

struct SequenceSpec {
    int64_t length;
    std::vector<Injection> injections;
};

// A NaN entry of q: element dim of query token `query`, head `head`.
struct QueryNaN {
    int32_t query;
    int32_t head;
    int32_t dim;
};

// What the test's own rule says of one output element.
enum class Expect { Finite, NonFinite, AsReference };

class Session {
public:
    Session(Kind kind, gqla_dtype dtype, int64_t max_tokens = 1 << 14)
        : kind_(kind), cfg_(config_for(kind, dtype, max_tokens)) {
        CAPTURE(rng_.seed());
        INFO("gqla_session_create: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_session_create(&cfg_, &session_) == GQLA_OK);
        if (gqla()) {
            const int64_t rows = int64_t(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
            abi::Buffer w = abi::make_input(rng_, GQLA_DTYPE_F32, size_t(rows * cfg_.latent_dim),
                                            1.0 / std::sqrt(double(cfg_.latent_dim)));
            gqla_tensor t = abi::view(w, {rows, cfg_.latent_dim});
            INFO("gqla_set_weights: " << std::string(gqla_last_error_message()));
            REQUIRE(gqla_set_weights(session_, 0, &t) == GQLA_OK);
            weights_ = abi::values_of(w);
        }
    }
    ~Session() { gqla_session_destroy(session_); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    bool gqla() const { return kind_ != Kind::Gqa; }
    int32_t page_size() const { return cfg_.page_size; }
    double bound() const { return bound_for(cfg_.cache_dtype); }
    int H() const { return cfg_.num_heads; }
    int n_rep() const { return cfg_.num_heads / cfg_.num_kv_heads; }
    int64_t a_cols() const { return gqla() ? cfg_.latent_dim : int64_t(cfg_.num_kv_heads) * cfg_.head_dim; }
    int64_t b_cols() const { return gqla() ? cfg_.rope_dim : int64_t(cfg_.num_kv_heads) * cfg_.value_dim; }
    int q_dim() const { return gqla() ? cfg_.nope_dim + cfg_.rope_dim : cfg_.head_dim; }
    int out_dim() const { return cfg_.value_dim; }
    uint64_t seed() const { return rng_.seed(); }

    // A new sequence of spec.length random rows with the injections, appended
    // in two calls (the second starts mid-page).
    gqla_seq_id add(const SequenceSpec& spec) {
        gqla_seq_id id = -1;
        INFO("gqla_sequence_add: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_sequence_add(session_, &id) == GQLA_OK);
        const int64_t L = spec.length;
        abi::Buffer a = abi::make_input(rng_, GQLA_DTYPE_F32, size_t(L * a_cols()));
        abi::Buffer b = abi::make_input(rng_, GQLA_DTYPE_F32, size_t(L * b_cols()));
        for (const Injection& inj : spec.injections) {
            REQUIRE(inj.pos < L);
            abi::Buffer& t = inj.in_b ? b : a;
            const int64_t cols = inj.in_b ? b_cols() : a_cols();
            for (int64_t e = 0; e < cols; ++e)
                if (inj.elem < 0 || inj.elem == e) t.set(size_t(inj.pos * cols + e), inj.value);
        }
        const int64_t first = std::max<int64_t>(1, L / 2 + 1);
        append(id, a, b, 0, first);
        if (first < L) append(id, a, b, first, L - first);
        Mirror m;
        m.length = L;
        m.spec = spec;
        m.a = abi::values_of(a);
        m.b = abi::values_of(b);
        for (double& x : m.a) x = as_stored(x, cfg_.cache_dtype);
        for (double& x : m.b) x = as_stored(x, cfg_.cache_dtype);
        mirrors_.push_back({id, m});
        return id;
    }

    void release(gqla_seq_id id) {
        INFO("gqla_sequence_release: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_sequence_release(session_, id) == GQLA_OK);
        mirrors_.erase(std::remove_if(mirrors_.begin(), mirrors_.end(), [&](const auto& m) { return m.first == id; }),
                       mirrors_.end());
    }

    // Decodes `seqs` with s_q fresh random queries each (plus the NaNs of
    // q_nans, applied to every sequence) and checks every output element:
    // the test's rule first (expect), then the float64 reference, which must
    // agree on which elements are finite and match the finite ones within
    // the cache dtype's bound (lse likewise).
    void decode_and_check(const std::vector<gqla_seq_id>& seqs, int32_t s_q, const std::vector<QueryNaN>& q_nans = {}) {
        CAPTURE(rng_.seed());
        CAPTURE(s_q);
        const int64_t B = int64_t(seqs.size()), Hh = H();
        abi::Buffer q = abi::make_input(rng_, GQLA_DTYPE_F32, size_t(B * s_q * Hh * q_dim()));
        for (int64_t bi = 0; bi < B; ++bi)
            for (const QueryNaN& n : q_nans)
                q.set(size_t(((bi * s_q + n.query) * Hh + n.head) * q_dim() + n.dim), kNaN);
        abi::Buffer o = abi::make_poisoned(GQLA_DTYPE_F32, size_t(B * s_q * Hh * out_dim()));
        abi::Buffer lse = abi::make_poisoned(GQLA_DTYPE_F32, size_t(B * s_q * Hh));
        gqla_tensor tq = abi::view(q, {B, s_q, Hh, q_dim()}), to = abi::view(o, {B, s_q, Hh, out_dim()}),
                    tl = abi::view(lse, {B, s_q, Hh});
        INFO("gqla_decode: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_decode(session_, 0, int32_t(B), seqs.data(), &tq, &to, &tl) == GQLA_OK);

        const size_t q_per = size_t(s_q * Hh * q_dim()), o_per = size_t(s_q * Hh * out_dim()), l_per = size_t(s_q * Hh);
        for (int64_t bi = 0; bi < B; ++bi) {
            const Mirror& m = mirror(seqs[size_t(bi)]);
            CAPTURE(m.length);
            CAPTURE(describe(m.spec));
            std::vector<double> qv(q_per), ref_o(o_per), ref_l(l_per), got_o(o_per), got_l(l_per);
            for (size_t i = 0; i < q_per; ++i) qv[i] = q.get(bi * q_per + i);
            for (size_t i = 0; i < o_per; ++i) got_o[i] = o.get(bi * o_per + i);
            for (size_t i = 0; i < l_per; ++i) got_l[i] = lse.get(bi * l_per + i);
            reference(m, s_q, qv.data(), ref_o.data(), ref_l.data());
            check(m, s_q, q_nans, got_o, got_l, ref_o, ref_l);
        }
    }

private:
    struct Mirror {
        int64_t length = 0;
        SequenceSpec spec;
        std::vector<double> a, b;  // as stored
    };

    void append(gqla_seq_id id, abi::Buffer& a, abi::Buffer& b, int64_t from, int64_t n) {
        abi::Buffer pa = abi::make_poisoned(GQLA_DTYPE_F32, size_t(n * a_cols()));
        abi::Buffer pb = abi::make_poisoned(GQLA_DTYPE_F32, size_t(n * b_cols()));
        for (int64_t i = 0; i < n * a_cols(); ++i) pa.set(size_t(i), a.get(size_t(from * a_cols() + i)));
        for (int64_t i = 0; i < n * b_cols(); ++i) pb.set(size_t(i), b.get(size_t(from * b_cols() + i)));
        std::vector<int64_t> sa = gqla() ? std::vector<int64_t>{n, cfg_.latent_dim}
                                         : std::vector<int64_t>{n, cfg_.num_kv_heads, cfg_.head_dim};
        std::vector<int64_t> sb = gqla() ? std::vector<int64_t>{n, cfg_.rope_dim}
                                         : std::vector<int64_t>{n, cfg_.num_kv_heads, cfg_.value_dim};
        gqla_tensor ta = abi::view(pa, sa), tb = abi::view(pb, sb);
        INFO("gqla_append: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_append(session_, 0, id, &ta, &tb) == GQLA_OK);
    }

    const Mirror& mirror(gqla_seq_id id) const {
        for (const auto& m : mirrors_)
            if (m.first == id) return m.second;
        FAIL("unknown sequence");
        return mirrors_.front().second;
    }

    static std::string describe(const SequenceSpec& s) {
        std::string out;
        for (const Injection& i : s.injections)
            out += std::string(i.in_b ? "b" : "a") + "[" + std::to_string(i.pos) + "]" +
                   (i.elem < 0 ? std::string("[:]") : "[" + std::to_string(i.elem) + "]") + "=" +
                   std::to_string(i.value) + " ";
        return out;
    }

    void reference(const Mirror& m, int32_t s_q, const double* q, double* o, double* lse) const {
        if (gqla()) {
            const double scale = 1.0 / std::sqrt(double(cfg_.nope_dim + cfg_.rope_dim));
            gqla::ref::gqla_decode(H(), cfg_.num_kv_heads, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim,
                                   cfg_.value_dim, m.length, s_q, scale, q, weights_.data(), m.a.data(), m.b.data(), o,
                                   lse);
        } else {
            const double scale = 1.0 / std::sqrt(double(cfg_.head_dim));
            gqla::ref::gqa_decode(H(), cfg_.num_kv_heads, cfg_.head_dim, cfg_.value_dim, m.length, s_q, scale, q,
                                  m.a.data(), m.b.data(), o, lse);
        }
    }

    // The rule for output element e of (query i, head h): an injection the
    // query sees makes the elements it feeds non-finite when it is a NaN, or
    // an inf (stored) in a value or latent row; an inf in a key row follows
    // IEEE softmax (+inf: NaN, -inf: weight 0), which only the reference
    // tells. Nothing the query may not see changes anything.
    std::vector<Expect> expectations(const Mirror& m, int32_t s_q, const std::vector<QueryNaN>& q_nans) const {
        const int Hh = H(), dv = out_dim();
        std::vector<Expect> ex(size_t(s_q * Hh * dv), Expect::Finite);
        auto mark = [&](int i, int h, int e, Expect x) {
            Expect& cur = ex[size_t((i * Hh + h) * dv + e)];
            if (cur == Expect::NonFinite) return;
            if (x == Expect::NonFinite || cur == Expect::Finite) cur = x;
        };
        for (int i = 0; i < s_q; ++i) {
            const int64_t limit = m.length - s_q + i;
            for (const Injection& inj : m.spec.injections) {
                if (inj.pos > limit) continue;
                const double stored = as_stored(inj.value, cfg_.cache_dtype);
                if (std::isfinite(stored)) continue;
                const bool nan = std::isnan(stored);
                // Which heads and output elements the entry feeds.
                int g_first = 0, g_count = cfg_.num_kv_heads, e_only = -1;
                bool is_value = false;
                if (gqla()) {
                    is_value = !inj.in_b;  // the latent is key and value; kr a key
                } else if (inj.elem >= 0) {
                    const int per = inj.in_b ? cfg_.value_dim : cfg_.head_dim;
                    g_first = int(inj.elem / per);
                    g_count = 1;
                    is_value = inj.in_b;
                    if (inj.in_b) e_only = int(inj.elem % per);
                } else {
                    is_value = inj.in_b;
                }
                const Expect x = nan || is_value ? Expect::NonFinite : Expect::AsReference;
                for (int g = g_first; g < g_first + g_count; ++g)
                    for (int h = g * n_rep(); h < (g + 1) * n_rep(); ++h)
                        for (int e = 0; e < dv; ++e)
                            if (e_only < 0 || e == e_only) mark(i, h, e, x);
            }
        }
        for (const QueryNaN& n : q_nans)
            for (int e = 0; e < dv; ++e) mark(n.query, n.head, e, Expect::NonFinite);
        return ex;
    }

    void check(const Mirror& m, int32_t s_q, const std::vector<QueryNaN>& q_nans, const std::vector<double>& o,
               const std::vector<double>& lse, const std::vector<double>& ref_o,
               const std::vector<double>& ref_l) const {
        const std::vector<Expect> ex = expectations(m, s_q, q_nans);
        const int Hh = H(), dv = out_dim();
        size_t broken_rule = 0, reference_disagrees = 0, finite_elems = 0;
        std::string first_broken;
        double diff = 0.0, norm = 0.0;
        for (size_t k = 0; k < o.size(); ++k) {
            const bool fin = std::isfinite(o[k]), ref_fin = std::isfinite(ref_o[k]);
            const bool ok = ex[k] == Expect::Finite ? fin : ex[k] == Expect::NonFinite ? !fin : true;
            if (!ok && broken_rule++ == 0)
                first_broken = "query " + std::to_string(k / dv / Hh) + " head " + std::to_string(k / dv % Hh) +
                               " element " + std::to_string(k % dv) + " = " + std::to_string(o[k]) +
                               (ex[k] == Expect::Finite ? " (must be finite)" : " (must be non-finite)");
            if (fin != ref_fin) ++reference_disagrees;
            if (fin && ref_fin) {
                diff += (o[k] - ref_o[k]) * (o[k] - ref_o[k]);
                norm += ref_o[k] * ref_o[k];
                ++finite_elems;
            }
        }
        INFO(first_broken);
        CHECK(broken_rule == 0);
        CHECK(reference_disagrees == 0);
        if (finite_elems > 0) CHECK(std::sqrt(diff / norm) <= bound());
        // lse: finite exactly where the reference's is, and close there.
        double lse_err = 0.0;
        size_t lse_disagrees = 0;
        size_t lse_broken_rule = 0;
        for (size_t k = 0; k < lse.size(); ++k) {
            if (std::isfinite(lse[k]) != std::isfinite(ref_l[k]))
                ++lse_disagrees;
            else if (std::isfinite(lse[k]))
                lse_err = std::max(lse_err, std::abs(lse[k] - ref_l[k]) / std::max(1.0, std::abs(ref_l[k])));
            // A head whose outputs must all be finite has a finite lse too.
            bool all_finite = true;
            for (int e = 0; e < dv; ++e) all_finite &= ex[k * dv + size_t(e)] == Expect::Finite;
            if (all_finite && !std::isfinite(lse[k])) ++lse_broken_rule;
        }
        CHECK(lse_broken_rule == 0);
        CHECK(lse_disagrees == 0);
        CHECK(lse_err <= bound());
    }

    Kind kind_;
    gqla_config cfg_;
    gqla_session* session_ = nullptr;
    abi::Rng rng_;
    std::vector<double> weights_;
    std::vector<std::pair<gqla_seq_id, Mirror>> mirrors_;
};

}  // namespace nonfinite
