// SPDX-License-Identifier: Apache-2.0
// 8-bit (e4m3) caches on CUDA sessions: the GQA-kind cases of
// tests/abi/test_fp8_cache.cpp on the GPU (ctest passes the case names),
// plus the GPU's own: LLaMA-3-8B shapes through 16-byte copies and several
// 16-row blocks per group, prefill chunks through the wgmma prefill kernel
// (over pages widened to bf16 or on its 8-bit variant: ctests
// cuda.fp8_widened, cuda.fp8_tiles), and the refusals of what the CUDA
// kernels do not read. Both bounds of docs/numerics.md: the bf16 bound
// against the float64 reference on the dequantized cache, 6e-2 against the
// inputs as given.
// Exits 77 (skipped) where no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gqla/gqla.h"
#include "tests/cuda/gpu_doctest_main.hpp"
#include "tests/abi/f32_tensors.hpp"
#include "tests/abi/fp8_support.hpp"
#include "tests/abi/harness.hpp"
#include "tests/scoped_env.hpp"

namespace {

using fp8test::Errors;
using fp8test::Fp8Session;

void check(const Errors& e, const std::string& what) {
    CAPTURE(what);
    CHECK(e.stored <= fp8test::kStoredBound);
    CHECK(e.lse <= fp8test::kStoredBound);
    CHECK(e.given <= fp8test::kGivenBound);
    MESSAGE(what << ": stored " << e.stored << ", given " << e.given << ", lse " << e.lse);
}

gqla_config llama3_8b() {
    gqla_config c;
    gqla_config_default(&c, GQLA_KIND_GQA);
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.max_tokens = 8192;
    c.max_q_len = 8;
    c.max_sequences = 8;
    c.max_batch = 8;
    c.io_dtype = GQLA_DTYPE_BF16;
    return c;
}

// The latent kernel's shape (abi::deepseek_latent_config), small pools.
gqla_config latent_config(int32_t heads, int32_t groups, int32_t page_size) {
    gqla_config c = abi::deepseek_latent_config(heads, groups);
    c.page_size = page_size;
    c.max_tokens = 4096;
    c.max_q_len = 48;
    c.max_sequences = 8;
    c.max_batch = 8;
    c.io_dtype = GQLA_DTYPE_BF16;
    return c;
}

// A NaN written into element `col` of KV head `kv_head`'s value of token `token`.
struct ValueNan {
    int64_t token, kv_head, col;
};

// A GPU session's config of the GQA kind with an 8-bit cache: H heads over
// G KV heads, keys and values D wide, room for max_tokens tokens and calls
// of up to n queries per sequence.
gqla_config gpu_fp8_config(int64_t H, int64_t G, int64_t D, int64_t max_tokens, int64_t n) {
    gqla_config c;
    gqla_config_default(&c, GQLA_KIND_GQA);
    c.num_heads = static_cast<int32_t>(H);
    c.num_kv_heads = static_cast<int32_t>(G);
    c.head_dim = static_cast<int32_t>(D);
    c.max_tokens = max_tokens;
    c.max_q_len = std::max<int32_t>(c.max_q_len, static_cast<int32_t>(n));
    c.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    c.device = GQLA_DEVICE_CUDA;
    return c;
}

// The outputs (f32, [n][H][D]) of one call of n random queries on a GPU
// session of the GQA kind with an 8-bit cache (H heads over G KV heads, keys
// and values D wide) over one sequence of L random tokens whose values have
// NaN at `nans` (each row's scale comes from its finite elements).
std::vector<float> outputs_over_nans(int64_t H, int64_t G, int64_t D, int64_t L, int64_t n,
                                     const std::vector<ValueNan>& nans, uint64_t seed) {
    const gqla_config c = gpu_fp8_config(H, G, D, 1024, n);
    gqla_session* s = nullptr;
    REQUIRE(gqla_session_create(&c, &s) == GQLA_OK);
    gqla_seq_id seq = 0;
    REQUIRE(gqla_sequence_add(s, &seq) == GQLA_OK);
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> k(L * G * D), v(L * G * D), q(n * H * D), o(n * H * D, -7.f);
    for (float& x : k) x = dist(gen);
    for (float& x : v) x = dist(gen);
    for (float& x : q) x = dist(gen);
    for (const ValueNan& at : nans)
        v[(at.token * G + at.kv_head) * D + at.col] = std::numeric_limits<float>::quiet_NaN();
    const int64_t kv_shape[3] = {L, G, D}, q_shape[4] = {1, n, H, D};
    gqla_tensor tk, tv, tq, to;
    REQUIRE(gqla_tensor_init(&tk, k.data(), GQLA_DTYPE_F32, 3, kv_shape) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&tv, v.data(), GQLA_DTYPE_F32, 3, kv_shape) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&tq, q.data(), GQLA_DTYPE_F32, 4, q_shape) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&to, o.data(), GQLA_DTYPE_F32, 4, q_shape) == GQLA_OK);
    REQUIRE(gqla_append(s, 0, seq, &tk, &tv) == GQLA_OK);
    REQUIRE(gqla_decode(s, 0, 1, &seq, &tq, &to, nullptr) == GQLA_OK);
    REQUIRE(gqla_session_synchronize(s) == GQLA_OK);
    gqla_session_destroy(s);
    return o;
}

// o ([B][n][H][D] f32) and lse of one prefill call of n queries over three
// sequences (lengths 300, 1000, 517, appended in turns of 64 tokens so that
// their pages interleave in the pool) of a GPU session of the GQA kind with
// an 8-bit cache, H 8 over G 2, D 128, pages of 16: 4 n / 128 row blocks
// per group. widen: every such launch over widened pages, or none
// (GQLA_CUDA_FP8_WIDEN for the session).
void widened_prefill(bool widen, int64_t n, uint64_t seed, std::vector<float>* o, std::vector<float>* lse) {
    const int64_t G = 2, H = 8, D = 128;
    const std::vector<int64_t> lengths{300, 1000, 517};
    gqla_config c = gpu_fp8_config(H, G, D, 2048, n);
    c.page_size = 16;
    gqla_session* s = nullptr;
    {
        gqla::test::ScopedEnv knob("GQLA_CUDA_FP8_WIDEN", widen ? "1" : "0");  // read at create
        REQUIRE(gqla_session_create(&c, &s) == GQLA_OK);
    }
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<gqla_seq_id> seqs(lengths.size());
    for (gqla_seq_id& id : seqs) REQUIRE(gqla_sequence_add(s, &id) == GQLA_OK);
    std::vector<int64_t> written(lengths.size(), 0);
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < lengths.size(); ++i) {
            const int64_t take = std::min<int64_t>(64, lengths[i] - written[i]);
            if (take == 0) continue;
            std::vector<float> k(take * G * D), v(take * G * D);
            for (float& x : k) x = dist(gen);
            for (float& x : v) x = 3.f * dist(gen);
            const gqla_tensor tk = abi::host_f32(k, {take, G, D}), tv = abi::host_f32(v, {take, G, D});
            REQUIRE(gqla_append(s, 0, seqs[i], &tk, &tv) == GQLA_OK);
            written[i] += take;
            more = true;
        }
    }
    const int64_t B = static_cast<int64_t>(lengths.size());
    std::vector<float> q(B * n * H * D);
    for (float& x : q) x = dist(gen);
    o->assign(q.size(), -7.f);
    lse->assign(B * n * H, -7.f);
    const gqla_tensor tq = abi::host_f32(q, {B, n, H, D});
    gqla_tensor to = abi::host_f32(*o, {B, n, H, D}), tl = abi::host_f32(*lse, {B, n, H});
    REQUIRE(gqla_decode(s, 0, static_cast<int32_t>(B), seqs.data(), &tq, &to, &tl) == GQLA_OK);
    REQUIRE(gqla_session_synchronize(s) == GQLA_OK);
    gqla_session_destroy(s);
}

}  // namespace

TEST_CASE("cuda fp8: LLaMA-3-8B shapes, s_q 1 to 8 (up to two 16-row blocks per group), forks") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (bool outlier : {false, true}) {
        CAPTURE(outlier);
        Fp8Session s(llama3_8b(), seed, outlier);
        std::vector<gqla_seq_id> ids;
        for (int64_t len : {1, 63, 64, 65, 1000, 3000}) {
            ids.push_back(s.add());
            s.append(ids.back(), len);
        }
        check(s.attend(ids, {1}, GQLA_PATH_AUTO, false), "s_q 1");
        std::vector<gqla_seq_id> longer(ids.begin() + 4, ids.end());
        for (int32_t s_q : {2, 5, 8})
            check(s.attend(longer, {s_q}, GQLA_PATH_AUTO, false), "s_q " + std::to_string(s_q));
        check(s.attend({ids[5], ids[1], ids[4]}, {8, 1, 3}, GQLA_PATH_AUTO, true), "ragged");
        const gqla_seq_id child = s.fork(ids[4]);
        s.append(child, 7);
        s.append(ids[4], 1);
        check(s.attend({ids[4], child}, {1}, GQLA_PATH_AUTO, false), "fork");
    }
}

TEST_CASE("cuda fp8: key and value widths, page sizes and row counts of the narrow kernel and beyond") {
    // Widths of an odd and an even number of 16-byte pieces (the slots'
    // row strides differ), pages not a multiple of 16 tokens (rows looked up
    // one by one), groups of 2 to 64 rows (1 to 8 row blocks; past 32 the
    // per-warp kernel), sequences around the 16-token chunks and 64-token
    // steps, and long enough to be split.
    struct Shape {
        int32_t heads, kv_heads, head_dim, value_dim, page_size;
    };
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (const Shape& sh : {Shape{4, 2, 16, 16, 24}, Shape{6, 3, 48, 80, 16}, Shape{12, 3, 80, 112, 40},
                            Shape{8, 1, 256, 128, 64}, Shape{32, 8, 128, 128, 7}}) {
        CAPTURE(sh.head_dim);
        CAPTURE(sh.value_dim);
        CAPTURE(sh.page_size);
        gqla_config c = llama3_8b();
        c.num_heads = sh.heads;
        c.num_kv_heads = sh.kv_heads;
        c.head_dim = sh.head_dim;
        c.value_dim = sh.value_dim;
        c.page_size = sh.page_size;
        c.max_tokens = 16384;
        Fp8Session s(c, seed, sh.heads == 12);
        std::vector<gqla_seq_id> ids;
        for (int64_t len : {1, 15, 17, 64, 200, 5000}) {
            ids.push_back(s.add());
            s.append(ids.back(), len);
        }
        check(s.attend(ids, {1}, GQLA_PATH_AUTO, false), "s_q 1");
        std::vector<gqla_seq_id> longer(ids.begin() + 3, ids.end());
        for (int32_t s_q : {2, 3, 8})
            check(s.attend(longer, {s_q}, GQLA_PATH_AUTO, false), "s_q " + std::to_string(s_q));
        check(s.attend({ids[5], ids[2], ids[4]}, {8, 1, 5}, GQLA_PATH_AUTO, true), "ragged");
    }
}

TEST_CASE("cuda fp8: prefill chunks of 128-wide heads (the wgmma prefill kernel, pages widened or 8-bit tiles)") {
    // Rows per group (4 heads x s_q) of a whole 128-row block or more take
    // the prefill kernel: its staging double buffer over several tiles,
    // causal diagonal tiles, sequences ending inside a tile, a whole prompt
    // in one chunk (n = L), ragged calls beside decode steps, pages of 16
    // and of 40 tokens (rows looked up one by one), and long sequences that
    // split their tiles.
    // H 8, G 2: LLaMA-3-8B's four heads per group with a quarter of its
    // groups, which keeps the float64 reference short.
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (int32_t page : {16, 40}) {
        const bool outlier = page == 40;
        CAPTURE(page);
        CAPTURE(outlier);
        gqla_config c = llama3_8b();
        c.num_heads = 8;
        c.num_kv_heads = 2;
        c.page_size = page;
        c.max_q_len = 256;
        c.max_tokens = 8192;
        Fp8Session s(c, seed, outlier);
        std::vector<gqla_seq_id> ids;
        for (int64_t len : {32, 129, 300, 700, 1500}) {
            ids.push_back(s.add());
            s.append(ids.back(), len);
        }
        check(s.attend(ids, {32}, GQLA_PATH_AUTO, false), "s_q 32");
        check(s.attend({ids[2], ids[3]}, {160}, GQLA_PATH_AUTO, false), "s_q 160");
        check(s.attend({ids[1]}, {129}, GQLA_PATH_AUTO, false), "whole prompt");
        check(s.attend({ids[4], ids[0], ids[2]}, {256, 1, 40}, GQLA_PATH_AUTO, true), "ragged");
    }
}

TEST_CASE("cuda fp8: prefill chunks over pages widened to bf16 give the 8-bit prefill kernel's outputs") {
    // Both read the same bf16 tiles (each element the bf16 nearest to its
    // dequantized value) and multiply them alike; only split counts may
    // differ, which changes the order of a few f32 sums. s_q 32 is one row
    // block per group, 100 four and 250 eight.
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (int64_t n : {32, 100, 250}) {
        CAPTURE(n);
        std::vector<float> o_wide, lse_wide, o_fp8, lse_fp8;
        widened_prefill(true, n, seed, &o_wide, &lse_wide);
        widened_prefill(false, n, seed, &o_fp8, &lse_fp8);
        double lse_diff = 0.0;
        for (size_t i = 0; i < lse_wide.size(); ++i)
            lse_diff = std::max(lse_diff, std::abs(double(lse_wide[i]) - lse_fp8[i]));
        const double rel = abi::rel_l2(o_wide, o_fp8);
        MESSAGE("s_q " << n << ": widened vs 8-bit kernel rel_l2(o) " << rel << ", lse max diff " << lse_diff);
        CHECK(std::isfinite(rel));
        CHECK(rel <= 1e-5);
        CHECK(lse_diff <= 1e-5);
    }
}

TEST_CASE("cuda fp8: a NaN in a prefill chunk's causal tail reaches only the queries that see it") {
    // H 8, G 2, D = Dv = 128, L = 300, s_q 64: each group's 256 rows are
    // two blocks of the prefill kernel. Token 299's value has NaN in column
    // 3 of KV head 1: only the last query sees it. Token 10's value has NaN
    // in column 5 of KV head 0: every query sees it, in that column only.
    const int64_t L = 300, G = 2, H = 8, D = 128, n = 64;
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    const std::vector<float> o = outputs_over_nans(H, G, D, L, n, {{L - 1, 1, 3}, {10, 0, 5}}, seed);
    int64_t wrong = 0;  // counted, not CHECKed per element: 65536 outputs
    for (int64_t qi = 0; qi < n; ++qi)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t col = 0; col < D; ++col) {
                const float x = o[(qi * H + h) * D + col];
                bool ok;
                if (h / 4 == 0)
                    ok = std::isnan(x) == (col == 5);  // token 10: visible to every query
                else if (qi < n - 1)
                    ok = std::isfinite(x);  // token 299 is hidden from all but the last query
                else
                    ok = col != 3 || std::isnan(x);
                if (!ok && wrong++ < 8) MESSAGE("query " << qi << " head " << h << " column " << col << ": " << x);
            }
    CHECK(wrong == 0);
}

// The sm_90a latent kernel over an 8-bit latent: 32-row blocks (16 heads:
// one; 40 heads in 4 groups at s_q 1: a partial second), 64-row blocks in
// half tiles (40 heads ragged; 128 heads: two, and six at s_q 3; ctest
// cuda.fp8_latent_transposed runs them all in 32-row blocks, and
// cuda.fp8_latent_rows64 all in 64-row ones), tiles widened from stored
// bytes with their block scales, page sizes that split tiles (7, 16) or hold
// whole ones (64); the GQA_TRANSIENT form over bf16 rows widened from the
// same bytes.
TEST_CASE("cuda fp8 GQLA: an 8-bit latent on the absorb path and GQA_TRANSIENT, ragged calls and forks") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    struct Shape {
        int32_t heads, groups, page;
    };
    for (const Shape sh : {Shape{16, 1, 64}, Shape{40, 4, 7}, Shape{128, 1, 16}})
        for (bool outlier : {false, true}) {
            CAPTURE(sh.heads);
            CAPTURE(sh.page);
            CAPTURE(outlier);
            Fp8Session s(latent_config(sh.heads, sh.groups, sh.page), seed, outlier);
            std::vector<gqla_seq_id> ids;
            for (int64_t len : {1, 63, 64, 65, 300, 1000}) {
                ids.push_back(s.add());
                s.append(ids.back(), len);
            }
            check(s.attend(ids, {1}, GQLA_PATH_ABSORB, false), "absorb s_q 1");
            std::vector<gqla_seq_id> longer(ids.begin() + 3, ids.end());
            check(s.attend(longer, {3}, GQLA_PATH_ABSORB, false), "absorb s_q 3");
            check(s.attend({ids[5], ids[0], ids[3]}, {9, 1, 2}, GQLA_PATH_ABSORB, true), "absorb ragged");
            check(s.attend({ids[5], ids[4]}, {40, 1}, GQLA_PATH_GQA_TRANSIENT, true), "transient ragged");
            const gqla_seq_id child = s.fork(ids[4]);
            s.append(child, 7);
            s.append(ids[4], 1);
            check(s.attend({ids[4], child}, {1}, GQLA_PATH_AUTO, false), "fork");
        }
}

// o [n][H][128] of one absorb call of n queries over one sequence of L
// tokens of an 8-bit latent GPU session (H heads, one group, pages of 16,
// f32 io), its latent NaN at column 7 of token `nan_token` (none: -1). The
// same seed gives the same weights, rows and queries.
std::vector<float> latent_outputs_over_nan(int32_t heads, int64_t L, int32_t n, int64_t nan_token, uint64_t seed) {
    gqla_config c = latent_config(heads, 1, 16);
    c.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    c.device = GQLA_DEVICE_CUDA;
    c.io_dtype = GQLA_DTYPE_F32;
    c.num_layers = 1;
    gqla_session* s = nullptr;
    abi::require_ok(gqla_session_create(&c, &s));
    std::mt19937_64 rng(seed);
    const int64_t r = c.latent_dim, dr = c.rope_dim, dq = c.nope_dim + c.rope_dim, dv = c.value_dim;
    std::vector<float> w = abi::random_vector(rng, size_t((c.nope_dim + dv) * r));
    for (float& x : w) x /= std::sqrt(float(r));
    gqla_tensor wt = abi::host_f32(w, {c.nope_dim + dv, r});
    abi::require_ok(gqla_set_weights(s, 0, &wt));
    gqla_seq_id seq = 0;
    abi::require_ok(gqla_sequence_add(s, &seq));
    std::vector<float> latent = abi::random_vector(rng, size_t(L * r)), rope = abi::random_vector(rng, size_t(L * dr));
    if (nan_token >= 0) latent[size_t(nan_token * r + 7)] = std::numeric_limits<float>::quiet_NaN();
    gqla_tensor lt = abi::host_f32(latent, {L, r}), rt = abi::host_f32(rope, {L, dr});
    abi::require_ok(gqla_append(s, 0, seq, &lt, &rt));
    std::vector<float> q = abi::random_vector(rng, size_t(n) * heads * dq), o(size_t(n) * heads * dv, -7.f);
    gqla_tensor qt = abi::host_f32(q, {1, n, heads, dq}), ot = abi::host_f32(o, {1, n, heads, dv});
    gqla_attention_args args;
    abi::require_ok(gqla_attention_args_default(&args));
    args.batch = 1;
    args.seqs = &seq;
    args.q = &qt;
    args.o = &ot;
    args.path = GQLA_PATH_ABSORB;
    abi::require_ok(gqla_attention(s, &args));
    abi::require_ok(gqla_session_synchronize(s));
    gqla_session_destroy(s);
    return o;
}

// docs/numerics.md on the 8-bit latent kernels: a NaN in a latent row reaches
// every output of the queries that see its token (its score is NaN) and
// nothing of those that may not, which equal a run without it. 16 heads at
// s_q 4 fill one 64-row block with four queries (the 64-row kernel's half
// tiles; ctest cuda.fp8_latent_transposed runs the 32-row blocks), 128 heads
// at s_q 2 give each query its own blocks; the token sits before, at and past
// half-tile and page edges.
TEST_CASE("cuda fp8 GQLA: a NaN latent row reaches exactly the queries that see its token") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    struct Case {
        int32_t heads, n;
        int64_t L, nan_token;
    };
    for (const Case k : {Case{16, 4, 33, 31}, Case{16, 4, 98, 96}, Case{16, 4, 70, 68}, Case{16, 4, 130, 129},
                         Case{128, 2, 97, 96}, Case{128, 2, 64, 63}}) {
        CAPTURE(k.heads);
        CAPTURE(k.L);
        CAPTURE(k.nan_token);
        const std::vector<float> with = latent_outputs_over_nan(k.heads, k.L, k.n, k.nan_token, seed);
        const std::vector<float> without = latent_outputs_over_nan(k.heads, k.L, k.n, -1, seed);
        const size_t per_query = with.size() / size_t(k.n);
        for (int32_t qi = 0; qi < k.n; ++qi) {
            CAPTURE(qi);
            const bool sees = k.nan_token <= k.L - k.n + qi;
            int64_t wrong = 0;
            for (size_t e = qi * per_query; e < (qi + 1) * per_query; ++e) {
                const bool ok = sees ? std::isnan(with[e])
                                     : std::isfinite(with[e]) && std::fabs(with[e] - without[e]) <=
                                                                     1e-6f * std::max(1.f, std::fabs(without[e]));
                if (!ok && wrong++ < 4)
                    MESSAGE("element " << e << ": " << with[e] << " (without the NaN " << without[e] << ")");
            }
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("cuda fp8: GQLA sessions and shapes the kernels do not read are refused naming the field") {
    gqla_config g = latent_config(16, 1, 16);
    g.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    g.device = GQLA_DEVICE_CUDA;
    gqla_session* s = nullptr;
    // The kept expanded cache is not served: a switch to the GQA path is
    // refused and leaves the session decoding on the absorb path.
    REQUIRE(gqla_session_create(&g, &s) == GQLA_OK);
    CHECK(gqla_select_path(s, GQLA_PATH_GQA) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("path") != std::string::npos);
    gqla_session_destroy(s);
    s = nullptr;
    g.latent_dim = 384;  // not the latent kernel's width
    CHECK(gqla_session_create(&g, &s) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("latent_dim") != std::string::npos);
    g.latent_dim = 512;
    g.keep_latent = 0;
    CHECK(gqla_session_create(&g, &s) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("keep_latent") != std::string::npos);

    gqla_config a = llama3_8b();
    a.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    a.device = GQLA_DEVICE_CUDA;
    a.head_dim = 100;  // not a multiple of 8
    CHECK(gqla_session_create(&a, &s) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("head_dim") != std::string::npos);
    a.head_dim = 128;
    a.value_dim = 256;  // wider than the kernel's 128
    CHECK(gqla_session_create(&a, &s) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("value_dim") != std::string::npos);
}

TEST_CASE("cuda fp8: a NaN reaches exactly the outputs that read it, and never an earlier query") {
    // H 4, G 2, D = Dv = 16, one sequence of 70 tokens, s_q 2: query 0 may
    // not see token 69, query 1 sees it. Token 69's value has NaN in column
    // 3 of KV head 1 (its row's scale comes from the finite elements), token
    // 10's in column 5 of KV head 0. docs/numerics.md: a visible NaN value
    // element reaches its own column of every row that reads it; one in the
    // causal tail (scrubbed for the queries that may not see it) reaches the
    // whole rows of those that may.
    const int64_t L = 70, G = 2, H = 4, D = 16;
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    const std::vector<float> o = outputs_over_nans(H, G, D, L, 2, {{L - 1, 1, 3}, {10, 0, 5}}, seed);
    for (int64_t qi = 0; qi < 2; ++qi)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t col = 0; col < D; ++col) {
                const float x = o[(qi * H + h) * D + col];
                CAPTURE(qi);
                CAPTURE(h);
                CAPTURE(col);
                if (h / 2 == 0) {
                    CHECK(std::isnan(x) == (col == 5));  // token 10: visible to every query
                    if (col != 5) CHECK(std::isfinite(x));
                } else if (qi == 0) {
                    CHECK(std::isfinite(x));  // token 69 is hidden from query 0
                } else if (col == 3) {
                    CHECK(std::isnan(x));
                }
            }
}

int main(int argc, char** argv) { return gpu_doctest_main(argc, argv, fp8test::use_device); }
