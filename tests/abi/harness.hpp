// SPDX-License-Identifier: Apache-2.0
// Test harness for the C ABI suite: random inputs in any io dtype, poisoned
// outputs, and a host mirror of every sequence's cache so each decode can be
// checked against the float64 reference.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gqla/gqla.h"
#include "tests/test_seed.hpp"

namespace abi {

// Fresh random numbers per run; the seed is printed with every failure of a
// decode check, and GQLA_TEST_SEED=<seed> replays it (every Rng of the
// process then starts from that seed).
class Rng {
public:
    Rng();
    std::vector<double> normal(size_t n, double stddev = 1.0);
    uint64_t seed() const { return seed_; }

private:
    uint64_t seed_;
    std::mt19937_64 gen_;
};

// Values stored in a gqla dtype: the bytes handed to gqla and, per element,
// the exact number those bytes represent (so io rounding is not counted as
// error).
struct Buffer {
    gqla_dtype dtype = GQLA_DTYPE_F32;
    std::vector<unsigned char> bytes;
    size_t size() const;
    void* data() { return bytes.data(); }
    double get(size_t i) const;
    void set(size_t i, double v);
};
Buffer make_input(Rng& rng, gqla_dtype dtype, size_t n, double stddev = 1.0);
Buffer make_poisoned(gqla_dtype dtype, size_t n);  // all NaN
std::vector<double> values_of(const Buffer& b);

// Host tensor over `b` with explicit shape and (optional) strides in elements.
gqla_tensor view(Buffer& b, std::vector<int64_t> shape, std::vector<int64_t> strides = {});

// x (an io-dtype value) as the cache holds it after append: rounded to the
// cache dtype, round-to-nearest-even, exactly like the library's conversion.
double as_stored(double x, gqla_dtype cache_dtype);

// Bound of o (rel-L2) and lse (see lse_error) against the reference computed
// on the inputs as the cache stores them: the cache dtype's bound, widened by
// the io dtype's own rounding of q/o when the io dtype is narrower.
double tolerance(gqla_dtype cache_dtype, gqla_dtype io_dtype);
// Looser bound against the reference on the inputs as the caller gave them:
// it also covers the rounding of K/V (or c/kr) into the cache (up to 2^-8
// relative per element for bf16, 2^-11 for f16), so it is twice the cache
// dtype's bound.
double quantization_tolerance(gqla_dtype cache_dtype, gqla_dtype io_dtype);

// Error of lse against ref over n values: ||lse - ref|| / ||max(1, |ref|)||
// (L2 norms, max taken per element). lse is a log, so a relative error of
// values near zero would be fragile: there the absolute error counts, where
// every |ref| >= 1 this is the relative L2 error. +inf on a NaN or inf.
double lse_error(const double* lse, const double* ref, size_t n);

// GQLA_TEST_SEED when set, otherwise a fresh seed per call; and the line
// that tells how to replay a failure (tests/test_seed.hpp).
using gqla::test::replay_hint;
using gqla::test::test_seed;

// Names for CAPTURE and INFO: std::string, as doctest prints a const char*
// as an address.
std::string dtype_label(gqla_dtype t);
std::string path_label(gqla_path p);

// Elements spanned by a strided view, and the offset of each element in
// row-major logical order.
size_t span_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);
std::vector<size_t> offsets_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);

// Odd sizes: nothing a power of two.
gqla_config odd_gqla_config(int32_t groups = 3);  // H=6, G, r=384, d_c=96, d_r=32, d_v=80
gqla_config odd_gqa_config(int32_t groups = 3);   // H=6, G, D=72, Dv=40
// DeepSeek-V3's latent shape (r=512, d_c=128, d_r=64, d_v=128: the CUDA
// latent kernel's) with `heads` query heads over `groups` groups; the other
// fields are gqla_config_default's.
gqla_config deepseek_latent_config(int32_t heads, int32_t groups);

// How q/o/lse lie in memory for a decode.
enum class Layout {
    Contiguous,
    Padded,     // every outer stride has a gap; gaps must stay untouched
    Transposed  // [s_q, B, ...] memory viewed as [B, s_q, ...]
};

// Strides (elements) of `shape` laid out as `layout`; innermost always 1.
std::vector<int64_t> strides_for(const std::vector<int64_t>& shape, Layout layout);

// Written into the gaps of strided outputs, which a call must leave alone;
// exactly representable in every dtype.
constexpr double kGapSentinel = 7.0;

struct DecodeResult {
    gqla_status status = GQLA_ERR_INTERNAL;
    uint64_t seed = 0;  // of the harness that drew the inputs
    // Against the reference on the inputs as the cache stores them:
    double o_err = 0.0;    // worst rel-L2 over the batch's sequences
    double lse_err = 0.0;  // worst lse_error over the batch's sequences
    // Against the reference on the inputs as given (before cache rounding),
    // bounded by quantization_tolerance.
    double o_err_given = 0.0;
    double lse_err_given = 0.0;
    double given_tol = 0.0;
    bool gaps_untouched = true;
    std::vector<double> o;  // [B, s_q, H, Dv] as returned
};

// A live session plus a host mirror of its cache contents.
class Harness {
public:
    explicit Harness(const gqla_config& cfg, bool set_all_weights = true);
    ~Harness();
    Harness(const Harness&) = delete;
    Harness& operator=(const Harness&) = delete;

    gqla_session* session() const { return session_; }
    const gqla_config& config() const { return cfg_; }  // resolved by the session
    Rng& rng() { return rng_; }
    bool is_gqla() const { return cfg_.kind == GQLA_KIND_GQLA; }
    int64_t a_cols() const;  // elements per token of tensor a (k or c)
    int64_t b_cols() const;  // elements per token of tensor b (v or kr)
    std::vector<int64_t> a_shape(int64_t n) const;
    std::vector<int64_t> b_shape(int64_t n) const;
    int32_t q_dim() const;
    int32_t out_dim() const;
    double tol() const { return tolerance(cfg_.cache_dtype, cfg_.io_dtype); }
    // False when the cache is f32 or has the io dtype: it stores what it is given.
    bool cache_rounds_inputs() const { return cfg_.cache_dtype != GQLA_DTYPE_F32 && cfg_.cache_dtype != cfg_.io_dtype; }

    void set_weights(int32_t layer);  // fresh random W_UKV, REQUIREs success
    gqla_seq_id add();
    // Random rows; mirrored only when gqla accepts them.
    gqla_status append(gqla_seq_id seq, int32_t layer, int64_t n);
    void append_ok(gqla_seq_id seq, int32_t layer, int64_t n);
    // Several sequences in one gqla_append_batch call.
    gqla_status append_batch(int32_t layer, const std::vector<gqla_seq_id>& seqs, const std::vector<int64_t>& counts);
    // Mirror bookkeeping for calls made outside the harness: the rows as
    // given to gqla (io-dtype values); their stored form is derived here.
    void record(gqla_seq_id seq, int32_t layer, const std::vector<double>& a, const std::vector<double>& b);
    gqla_seq_id fork(gqla_seq_id parent);
    void release(gqla_seq_id seq);
    int64_t mirrored_length(gqla_seq_id seq, int32_t layer) const;
    int64_t length(gqla_seq_id seq, int32_t layer) const;  // through gqla

    // Decode with fresh random q, compared with the reference per sequence.
    DecodeResult decode(int32_t layer, const std::vector<gqla_seq_id>& seqs, int32_t s_q,
                        Layout layout = Layout::Contiguous, bool with_lse = true);
    // Same q for a given call of decode_with: lets tests compare two paths.
    DecodeResult decode_with(int32_t layer, const std::vector<gqla_seq_id>& seqs, int32_t s_q, Buffer& q, Layout layout,
                             bool with_lse);
    Buffer random_q(int32_t batch, int32_t s_q);

    // Reference output of one sequence for queries qv [s_q, H, Dq], on the
    // cache rows as stored (rounded to the cache dtype) or as given.
    void reference(gqla_seq_id seq, int32_t layer, int32_t s_q, const double* qv, double* o, double* lse,
                   bool as_stored = true) const;

    gqla_stats stats() const;

private:
    struct Rows {
        // Per token a_cols() and b_cols() values, as given and as stored.
        std::vector<double> a_given, b_given, a, b;
    };
    gqla_config cfg_{};
    gqla_session* session_ = nullptr;
    Rng rng_;
    std::map<int32_t, std::vector<double>> weights_;
    std::map<std::pair<gqla_seq_id, int32_t>, Rows> rows_;
    std::vector<gqla_seq_id> live_;
};

// One sequence per length, appended in uneven chunks so appends cross pages.
std::vector<gqla_seq_id> sequences_of_lengths(Harness& h, const std::vector<int64_t>& lengths, int32_t layer = 0);

// True when `message` contains one of `names` as a whole identifier (not
// glued to letters, digits or '_' on either side).
bool names_argument(const std::string& message, const std::vector<std::string>& names);

// REQUIREs st == GQLA_OK; a failure shows gqla's message after `call`, the
// function that returned st.
void require_ok(gqla_status st, const char* call);

// Leaves a known message behind so that a call which fails without setting
// its own message cannot pass on a stale one; returns that message.
std::string plant_marker_message();

// A further condition of an expected refusal: what is wrong when it is false.
struct RefusalCheck {
    const char* failure;
    bool ok;
};

// The checks of an expected refusal (the EXPECT_*_ERROR macros of the error
// tests): status `expected`, a message `msg` (gqla_last_error_message() read
// right after the call) set by the call (not `marker`) that names one of
// `names`, and every check in `more`. Out of line, so a call
// site expands to one function call instead of doctest's assertion code
// (those files have hundreds); a failure is reported at `file`:`line` with
// `call`, the status and the message.
void expect_refusal(const char* file, int line, const char* call, gqla_status got, gqla_status expected,
                    const std::string& marker, const std::string& msg, const std::vector<std::string>& names,
                    const std::vector<RefusalCheck>& more = {});

// The session's active path (gqla_get_path), and the requested one through
// `requested` when given.
gqla_path active_path(gqla_session* s, gqla_path* requested = nullptr);

}  // namespace abi

// Assert a call (named `call` in the report) succeeded and its result
// matched the reference on the stored inputs within `tol` (and the one on the
// given inputs within the looser bound). Result types: abi::DecodeResult,
// attention::Result (same fields).
#define CHECK_RESULT_MATCHES(call, result, tol)                                    \
    do {                                                                           \
        const auto& r_ = (result);                                                 \
        INFO(std::string(call) << ": " << std::string(gqla_last_error_message())); \
        INFO(::abi::replay_hint(r_.seed));                                         \
        REQUIRE(r_.status == GQLA_OK);                                             \
        CHECK(r_.o_err <= (tol));                                                  \
        CHECK(r_.lse_err <= (tol));                                                \
        CHECK(r_.o_err_given <= r_.given_tol);                                     \
        CHECK(r_.lse_err_given <= r_.given_tol);                                   \
        CHECK(r_.gaps_untouched);                                                  \
    } while (0)

#define CHECK_DECODE_MATCHES(result, tol) CHECK_RESULT_MATCHES("gqla_decode", result, tol)
