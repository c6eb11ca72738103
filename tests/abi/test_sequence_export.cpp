// SPDX-License-Identifier: Apache-2.0
// gqla_sequence_export / gqla_sequence_import: bit-exact round trips, the
// expanded cache rebuilt on import, and every damaged or foreign buffer
// refused with the session unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "f32_tensors.hpp"
#include "harness.hpp"
#include "gqla/gqla.h"

namespace {

using abi::random_vector;
using abi::rel_l2;
constexpr void (*ok)(gqla_status) = abi::require_ok;

struct Shape {
    gqla_kind kind;
    gqla_dtype cache;
    int32_t page_size;
};

gqla_config config_of(const Shape& s, int32_t max_tokens = 4096) {
    gqla_config c;
    ok(gqla_config_default(&c, s.kind));
    c.num_heads = 6;
    c.num_kv_heads = s.kind == GQLA_KIND_GQA ? 3 : 2;
    if (s.kind == GQLA_KIND_GQA) {
        c.head_dim = 40;
        c.value_dim = 24;
    } else {
        c.latent_dim = 48;
        c.nope_dim = 16;
        c.rope_dim = 8;
        c.value_dim = 20;
    }
    c.num_layers = 2;
    c.cache_dtype = s.cache;
    c.device = GQLA_DEVICE_CPU;
    c.page_size = s.page_size;
    c.max_tokens = max_tokens;
    return c;
}

gqla_tensor host(std::vector<float>& v, std::vector<int64_t> shape) { return abi::host_f32(v, std::move(shape)); }

// A session whose GQLA weights come from `rng_seed` (so two sessions can hold
// the same weights).
gqla_session* make_session(const gqla_config& c, uint64_t weight_seed) {
    gqla_session* s = nullptr;
    ok(gqla_session_create(&c, &s));
    if (c.kind == GQLA_KIND_GQLA) {
        std::mt19937_64 wrng(weight_seed);
        for (int32_t l = 0; l < c.num_layers; ++l) {
            std::vector<float> w =
                random_vector(wrng, static_cast<size_t>(c.num_kv_heads) * (c.nope_dim + c.value_dim) * c.latent_dim);
            gqla_tensor tw = host(w, {c.num_kv_heads * (c.nope_dim + c.value_dim), c.latent_dim});
            ok(gqla_set_weights(s, l, &tw));
        }
    }
    return s;
}

void append_random(gqla_session* s, const gqla_config& c, std::mt19937_64& rng, gqla_seq_id seq, int32_t layer,
                   int64_t n) {
    const bool gqa = c.kind == GQLA_KIND_GQA;
    std::vector<float> a = random_vector(rng, n * (gqa ? c.num_kv_heads * c.head_dim : c.latent_dim));
    std::vector<float> b = random_vector(rng, n * (gqa ? c.num_kv_heads * c.value_dim : c.rope_dim));
    gqla_tensor ta = gqa ? host(a, {n, c.num_kv_heads, c.head_dim}) : host(a, {n, c.latent_dim});
    gqla_tensor tb = gqa ? host(b, {n, c.num_kv_heads, c.value_dim}) : host(b, {n, c.rope_dim});
    ok(gqla_append(s, layer, seq, &ta, &tb));
}

std::vector<unsigned char> export_all(const gqla_session* s, gqla_seq_id seq) {
    size_t needed = 0;
    ok(gqla_sequence_export(s, seq, nullptr, 0, &needed));
    std::vector<unsigned char> buf(needed, 0xEE);
    size_t again = 0;
    ok(gqla_sequence_export(s, seq, buf.data(), buf.size(), &again));
    CHECK(again == needed);
    return buf;
}

std::vector<float> decode_one(gqla_session* s, const gqla_config& c, gqla_seq_id seq, int32_t layer,
                              std::vector<float>& q) {
    const int32_t dq = c.kind == GQLA_KIND_GQA ? c.head_dim : c.nope_dim + c.rope_dim;
    std::vector<float> o(static_cast<size_t>(c.num_heads) * c.value_dim, NAN);
    gqla_tensor tq = host(q, {1, 1, c.num_heads, dq}), to = host(o, {1, 1, c.num_heads, c.value_dim});
    ok(gqla_decode(s, layer, 1, &seq, &tq, &to, nullptr));
    return o;
}

gqla_stats stats_of(const gqla_session* s) {
    gqla_stats st;
    st.struct_size = sizeof(st);
    ok(gqla_session_stats(s, &st));
    return st;
}

void check_unchanged(const gqla_stats& before, const gqla_stats& after) {
    CHECK(after.sequences == before.sequences);
    CHECK(after.pages_used == before.pages_used);
    CHECK(after.tokens_cached == before.tokens_cached);
}

// Rewrites the checksum of a deliberately changed buffer, from the rule of
// docs/sequence-format.md (64-bit FNV-1a over little-endian words, then the
// tail bytes), so only the change itself is judged.
void reseal(std::vector<unsigned char>& v) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    const size_t n = v.size() - 8;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int k = 0; k < 8; ++k) w |= uint64_t(v[i + k]) << (8 * k);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; ++i) h = (h ^ v[i]) * 0x100000001b3ull;
    for (int k = 0; k < 8; ++k) v[n + k] = static_cast<unsigned char>(h >> (8 * k));
}

float load_le_f32(const unsigned char* p) {
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) bits |= uint32_t(p[k]) << (8 * k);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
void store_le_f32(unsigned char* p, float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int k = 0; k < 4; ++k) p[k] = static_cast<unsigned char>(bits >> (8 * k));
}

// The e4m3 codes and scale of one row group as docs/fp8-cache.md states
// the rule: scale = amax / 448 (1 for a group without a non-zero element),
// codes e4m3(x / scale). Counts the elements and scales of the buffer that
// differ from it.
int fp8_group_mismatches(const float* x, int n, const unsigned char* codes, const unsigned char* scale_at) {
    float amax = 0.0f;
    for (int k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    int bad = load_le_f32(scale_at) == scale ? 0 : 1;
    for (int k = 0; k < n; ++k) bad += codes[k] != gqla::f32_to_e4m3(x[k] / scale);
    return bad;
}

}  // namespace

TEST_CASE("sequence export: round trips are bit-exact for every kind and cache dtype") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const uint64_t weight_seed = rng();
    for (gqla_kind kind : {GQLA_KIND_GQA, GQLA_KIND_GQLA})
        for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16, GQLA_DTYPE_FP8_E4M3}) {
            CAPTURE(kind);
            CAPTURE(dt);
            const gqla_config ca = config_of({kind, dt, 16});
            gqla_session* a = make_session(ca, weight_seed);
            gqla_seq_id seq, other;
            ok(gqla_sequence_add(a, &other));
            append_random(a, ca, rng, other, 0, 5);
            ok(gqla_sequence_add(a, &seq));
            append_random(a, ca, rng, seq, 0, 37);  // layers of different lengths, a page edge crossed
            append_random(a, ca, rng, seq, 1, 16);
            const std::vector<unsigned char> bytes = export_all(a, seq);

            // Same page size: same stored elements, so bit-identical decodes.
            gqla_session* b = make_session(ca, weight_seed);
            gqla_seq_id imported = 0;
            ok(gqla_sequence_import(b, bytes.data(), bytes.size(), &imported));
            CHECK(export_all(b, imported) == bytes);
            const int32_t dq = kind == GQLA_KIND_GQA ? ca.head_dim : ca.nope_dim + ca.rope_dim;
            std::vector<float> q = random_vector(rng, static_cast<size_t>(ca.num_heads) * dq);
            for (int32_t layer : {0, 1})
                CHECK(decode_one(a, ca, seq, layer, q) == decode_one(b, ca, imported, layer, q));
            int64_t len = -1;
            ok(gqla_sequence_length(b, imported, 1, &len));
            CHECK(len == 16);

            // Another page size (and, for GQLA, the GQA path on, so the
            // expanded cache is rebuilt from the imported latent).
            gqla_config cc = config_of({kind, dt, 7});
            if (kind == GQLA_KIND_GQLA) cc.path = GQLA_PATH_GQA;
            gqla_session* c = make_session(cc, weight_seed);
            gqla_seq_id moved = 0;
            ok(gqla_sequence_import(c, bytes.data(), bytes.size(), &moved));
            CHECK(export_all(c, moved) == bytes);
            // GQLA: another path, whose expanded rows are rounded to the cache
            // dtype. Each path is within the dtype's bound of the float64
            // result, so the two are within twice that bound of each other
            // (8-bit: the bound of the 8-bit rounding, which the expanded rows
            // add a second time: docs/numerics.md).
            const double bound = 2 * (dt == GQLA_DTYPE_F32    ? 1e-5
                                      : dt == GQLA_DTYPE_F16  ? 2e-3
                                      : dt == GQLA_DTYPE_BF16 ? 1e-2
                                                              : 6e-2);
            for (int32_t layer : {0, 1})
                CHECK(rel_l2(decode_one(c, cc, moved, layer, q), decode_one(a, ca, seq, layer, q)) <= bound);
            gqla_session_destroy(c);
            gqla_session_destroy(b);
            gqla_session_destroy(a);
        }
}

TEST_CASE("sequence export: size queries, small buffers and forked sequences") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const gqla_config c = config_of({GQLA_KIND_GQA, GQLA_DTYPE_BF16, 16});
    gqla_session* s = make_session(c, 1);
    gqla_seq_id seq, child;
    ok(gqla_sequence_add(s, &seq));
    append_random(s, c, rng, seq, 0, 20);
    ok(gqla_sequence_fork(s, seq, &child));
    append_random(s, c, rng, child, 0, 3);  // copy-on-write of the shared partial page
    size_t needed = 0;
    ok(gqla_sequence_export(s, seq, nullptr, 0, &needed));
    CHECK(needed == 64 + 2 * 8 + 20 * (3 * 40 + 3 * 24) * 2 + 8);
    std::vector<unsigned char> small(needed - 1);
    size_t reported = 0;
    CHECK(gqla_sequence_export(s, seq, small.data(), small.size(), &reported) == GQLA_ERR_CAPACITY);
    CHECK(reported == needed);
    CHECK(std::string(gqla_last_error_message()).find("capacity") != std::string::npos);
    CHECK(gqla_sequence_export(s, seq, nullptr, 0, nullptr) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(gqla_sequence_export(s, 12345, nullptr, 0, &needed) == GQLA_ERR_NOT_FOUND);

    const std::vector<unsigned char> parent = export_all(s, seq), forked = export_all(s, child);
    CHECK(forked.size() == parent.size() + 3 * (3 * 40 + 3 * 24) * 2);
    // The child's first 20 tokens are the parent's.
    const size_t header = 64 + 16;
    CHECK(std::memcmp(parent.data() + header, forked.data() + header, 20 * 3 * 40 * 2) == 0);
    gqla_session_destroy(s);
}

TEST_CASE("sequence export: an 8-bit cache travels as its codes and scales") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const size_t header = 64 + 2 * 8;  // two layers' lengths

    // GQA kind: per layer K codes [n][G][D], their scales [n][G], V codes
    // [n][G][Dv], their scales [n][G].
    const gqla_config g = config_of({GQLA_KIND_GQA, GQLA_DTYPE_FP8_E4M3, 16});
    gqla_session* s = make_session(g, 1);
    gqla_seq_id seq;
    ok(gqla_sequence_add(s, &seq));
    const int64_t n = 21, G = g.num_kv_heads, D = g.head_dim, Dv = g.value_dim;
    std::vector<float> k = random_vector(rng, n * G * D), v = random_vector(rng, n * G * Dv);
    std::fill(k.begin() + (2 * G + 1) * D, k.begin() + (2 * G + 2) * D, 0.0f);  // a group of zeros: scale 1
    gqla_tensor tk = host(k, {n, G, D}), tv = host(v, {n, G, Dv});
    ok(gqla_append(s, 0, seq, &tk, &tv));
    std::vector<unsigned char> bytes = export_all(s, seq);
    REQUIRE(bytes.size() == header + n * (G * D + G * 4 + G * Dv + G * 4) + 8);
    const size_t k_codes = header, k_scales = k_codes + n * G * D, v_codes = k_scales + n * G * 4,
                 v_scales = v_codes + n * G * Dv;
    int bad = 0;
    for (int64_t i = 0; i < n * G; ++i) {
        bad += fp8_group_mismatches(k.data() + i * D, int(D), bytes.data() + k_codes + i * D,
                                    bytes.data() + k_scales + 4 * i);
        bad += fp8_group_mismatches(v.data() + i * Dv, int(Dv), bytes.data() + v_codes + i * Dv,
                                    bytes.data() + v_scales + 4 * i);
    }
    CHECK(bad == 0);
    CHECK(load_le_f32(bytes.data() + k_scales + 4 * (2 * G + 1)) == 1.0f);

    // Imported elsewhere, from an odd address (every scale unaligned): the
    // same codes and scales, so the same decodes.
    gqla_session* t = make_session(config_of({GQLA_KIND_GQA, GQLA_DTYPE_FP8_E4M3, 7}), 1);
    gqla_seq_id copy = 0;
    std::vector<unsigned char> shifted(bytes.size() + 1);
    std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
    ok(gqla_sequence_import(t, shifted.data() + 1, bytes.size(), &copy));
    CHECK(export_all(t, copy) == bytes);
    std::vector<float> q = random_vector(rng, static_cast<size_t>(g.num_heads) * D);
    CHECK(rel_l2(decode_one(t, g, copy, 0, q), decode_one(s, g, seq, 0, q)) <= 1e-5);

    // A scale the library never writes is refused, even under a valid
    // checksum, and changes nothing.
    const gqla_stats before = stats_of(t);
    for (float wrong : {0.0f, -1.0f, 1e-39f, INFINITY, NAN}) {
        CAPTURE(wrong);
        std::vector<unsigned char> bad_scale = bytes;
        store_le_f32(bad_scale.data() + v_scales + 4 * 5, wrong);
        reseal(bad_scale);
        gqla_seq_id out = -7;
        CHECK(gqla_sequence_import(t, bad_scale.data(), bad_scale.size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
        const std::string msg = gqla_last_error_message();
        CHECK_MESSAGE(msg.find("scale") != std::string::npos, msg);
        CHECK(out == -7);
    }
    check_unchanged(before, stats_of(t));
    gqla_session_destroy(t);
    gqla_session_destroy(s);

    // GQLA: per layer latent codes [n][r], one scale per 128-element block
    // [n][ceil(r / 128)], then kr in bf16 [n][d_r] (no scales).
    gqla_config c = config_of({GQLA_KIND_GQLA, GQLA_DTYPE_FP8_E4M3, 16});
    c.latent_dim = 301;  // blocks of 128, 128 and 45; odd, so the scales and kr after 19 rows are unaligned
    const int64_t r = c.latent_dim, dr = c.rope_dim, blocks = 3, m = 19;
    s = make_session(c, 2);
    ok(gqla_sequence_add(s, &seq));
    std::vector<float> lat = random_vector(rng, m * r), kr = random_vector(rng, m * dr);
    gqla_tensor tc = host(lat, {m, r}), tkr = host(kr, {m, dr});
    ok(gqla_append(s, 0, seq, &tc, &tkr));
    append_random(s, c, rng, seq, 1, 4);
    bytes = export_all(s, seq);
    REQUIRE(bytes.size() == header + (m + 4) * (r + 4 * blocks + 2 * dr) + 8);
    const size_t c_scales = header + m * r, kr_at = c_scales + m * blocks * 4;
    bad = 0;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t w = std::min<int64_t>(128, r - 128 * b);
            bad += fp8_group_mismatches(lat.data() + i * r + 128 * b, int(w), bytes.data() + header + i * r + 128 * b,
                                        bytes.data() + c_scales + 4 * (i * blocks + b));
        }
        for (int64_t e = 0; e < dr; ++e) {
            const uint16_t h = gqla::f32_to_bf16(kr[size_t(i * dr + e)]);
            bad += bytes[kr_at + 2 * (i * dr + e)] != (h & 0xff) || bytes[kr_at + 2 * (i * dr + e) + 1] != (h >> 8);
        }
    }
    CHECK(bad == 0);

    // Into a session on the GQA path and one without the latent: both build
    // their expanded rows from the same stored latent, so they decode alike
    // bit for bit, and within the 8-bit bound of the absorb path.
    gqla_config kept = c, dropped = c;
    kept.path = GQLA_PATH_GQA;
    dropped.path = GQLA_PATH_GQA;
    dropped.keep_latent = 0;
    gqla_session* a = make_session(kept, 2);
    gqla_session* b = make_session(dropped, 2);
    gqla_seq_id in_a = 0, in_b = 0;
    ok(gqla_sequence_import(a, bytes.data(), bytes.size(), &in_a));
    shifted.assign(bytes.size() + 1, 0);  // the whole buffer at an odd address
    std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
    ok(gqla_sequence_import(b, shifted.data() + 1, bytes.size(), &in_b));
    CHECK(export_all(a, in_a) == bytes);
    q = random_vector(rng, static_cast<size_t>(c.num_heads) * (c.nope_dim + c.rope_dim));
    for (int32_t layer : {0, 1}) {
        const std::vector<float> oa = decode_one(a, kept, in_a, layer, q);
        CHECK(oa == decode_one(b, dropped, in_b, layer, q));
        CHECK(rel_l2(oa, decode_one(s, c, seq, layer, q)) <= 2 * 6e-2);
    }
    gqla_session_destroy(b);
    gqla_session_destroy(a);
    gqla_session_destroy(s);
}

TEST_CASE("sequence import: every single-byte mutation is refused and changes nothing") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    for (gqla_dtype dt : {GQLA_DTYPE_BF16, GQLA_DTYPE_FP8_E4M3}) {
        CAPTURE(dt);
        const gqla_config c = config_of({GQLA_KIND_GQLA, dt, 16});
        gqla_session* s = make_session(c, 3);
        gqla_seq_id seq;
        ok(gqla_sequence_add(s, &seq));
        append_random(s, c, rng, seq, 0, 9);
        append_random(s, c, rng, seq, 1, 4);
        const std::vector<unsigned char> bytes = export_all(s, seq);
        const gqla_stats before = stats_of(s);
        std::vector<unsigned char> damaged = bytes;
        int refused = 0;
        for (size_t i = 0; i < bytes.size(); ++i) {
            for (unsigned char flip : {0x01, 0x80, 0xFF}) {
                damaged[i] = static_cast<unsigned char>(bytes[i] ^ flip);
                gqla_seq_id out = -7;
                const gqla_status st = gqla_sequence_import(s, damaged.data(), damaged.size(), &out);
                refused += st == GQLA_ERR_INVALID_ARGUMENT;
                if (st != GQLA_ERR_INVALID_ARGUMENT) FAIL("byte " << i << " ^ " << int(flip) << " was accepted");
                CHECK(out == -7);
            }
            damaged[i] = bytes[i];
        }
        CHECK(refused == static_cast<int>(3 * bytes.size()));
        check_unchanged(before, stats_of(s));

        // Every truncation too.
        for (size_t n = 0; n < bytes.size(); ++n) {
            gqla_seq_id out = -7;
            CHECK(gqla_sequence_import(s, bytes.data(), n, &out) == GQLA_ERR_INVALID_ARGUMENT);
        }
        check_unchanged(before, stats_of(s));
        gqla_seq_id fine = 0;
        ok(gqla_sequence_import(s, bytes.data(), bytes.size(), &fine));
        gqla_session_destroy(s);
    }
}

TEST_CASE("sequence import: foreign shapes, versions and full sessions are refused") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const gqla_config c = config_of({GQLA_KIND_GQLA, GQLA_DTYPE_F16, 16});
    gqla_session* s = make_session(c, 5);
    gqla_seq_id seq;
    ok(gqla_sequence_add(s, &seq));
    append_random(s, c, rng, seq, 0, 40);
    const std::vector<unsigned char> bytes = export_all(s, seq);

    auto refused_by = [&](gqla_config other, const char* needle) {
        gqla_session* t = make_session(other, 5);
        const gqla_stats before = stats_of(t);
        gqla_seq_id out = 0;
        CHECK(gqla_sequence_import(t, bytes.data(), bytes.size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
        const std::string msg = gqla_last_error_message();
        CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
        check_unchanged(before, stats_of(t));
        gqla_session_destroy(t);
    };
    gqla_config other = c;
    other.latent_dim = 64;
    refused_by(other, "latent_dim");
    other = c;
    other.cache_dtype = GQLA_DTYPE_BF16;
    refused_by(other, "cache_dtype");
    other = c;
    other.num_layers = 3;
    refused_by(other, "num_layers");
    refused_by(config_of({GQLA_KIND_GQA, GQLA_DTYPE_F16, 16}), "kind");

    // A newer format version (checksum recomputed so only the version differs).
    {
        std::vector<unsigned char> v2 = bytes;
        v2[8] = 2;
        reseal(v2);
        gqla_seq_id out = 0;
        CHECK(gqla_sequence_import(s, v2.data(), v2.size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(std::string(gqla_last_error_message()).find("version 2") != std::string::npos);
    }

    // Not enough pages: CAPACITY, and the session (and its next id) unchanged.
    {
        gqla_session* full = make_session(config_of({GQLA_KIND_GQLA, GQLA_DTYPE_F16, 16}, 32), 5);
        const gqla_stats before = stats_of(full);
        gqla_seq_id out = 0;
        CHECK(gqla_sequence_import(full, bytes.data(), bytes.size(), &out) == GQLA_ERR_CAPACITY);
        check_unchanged(before, stats_of(full));
        gqla_seq_id next = 0, expected = 0;
        ok(gqla_sequence_add(full, &next));
        gqla_session* fresh = make_session(config_of({GQLA_KIND_GQLA, GQLA_DTYPE_F16, 16}, 32), 5);
        ok(gqla_sequence_add(fresh, &expected));
        CHECK(next == expected);
        gqla_session_destroy(fresh);
        gqla_session_destroy(full);
    }
    // Weights missing on a layer that holds tokens.
    {
        gqla_session* bare = nullptr;
        ok(gqla_session_create(&c, &bare));
        gqla_seq_id out = 0;
        CHECK(gqla_sequence_import(bare, bytes.data(), bytes.size(), &out) == GQLA_ERR_INVALID_STATE);
        gqla_session_destroy(bare);
    }
    gqla_session_destroy(s);
}

#include "gqla/gqla.hpp"

TEST_CASE("gqla.hpp: export, import and merge through the C++ wrapper") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    gqla_config cfg = gqla::make_gqa_config(4, 2, 16);
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 256;
    gqla::Session a(cfg), b(cfg);
    const gqla_seq_id seq = a.add_sequence();
    std::vector<float> k = random_vector(rng, 5 * 2 * 16), v = random_vector(rng, 5 * 2 * 16);
    a.append(0, seq, gqla::tensor(k.data(), {5, 2, 16}), gqla::tensor(v.data(), {5, 2, 16}));
    const std::vector<unsigned char> bytes = a.export_sequence(seq);
    const gqla_seq_id copy = b.import_sequence(bytes);
    CHECK(b.length(copy) == 5);
    CHECK(b.export_sequence(copy) == bytes);
    std::vector<unsigned char> broken = bytes;
    broken[100] ^= 1;
    CHECK_THROWS_AS(b.import_sequence(broken), gqla::Error);

    // Merging a part with itself leaves it as it is and adds ln 2 to its lse.
    std::vector<float> q = random_vector(rng, 4 * 16), o(4 * 16), lse(4), merged(4 * 16), merged_lse(4);
    gqla_tensor tl = gqla::tensor(lse.data(), {1, 1, 4});
    a.decode(0, {seq}, gqla::tensor(q.data(), {1, 1, 4, 16}), gqla::tensor(o.data(), {1, 1, 4, 16}), &tl);
    gqla_tensor to = gqla::tensor(o.data(), {1, 1, 4, 16});
    gqla_tensor ml = gqla::tensor(merged_lse.data(), {1, 1, 4});
    gqla::merge_attention_states({to, to}, {tl, tl}, gqla::tensor(merged.data(), {1, 1, 4, 16}), &ml);
    CHECK(rel_l2(merged, o) <= 1e-6);
    for (int h = 0; h < 4; ++h) CHECK(std::fabs(merged_lse[h] - (lse[h] + std::log(2.0f))) <= 1e-5f);
    CHECK_THROWS_AS(gqla::merge_attention_states({to}, {tl, tl}, to), gqla::Error);
}
