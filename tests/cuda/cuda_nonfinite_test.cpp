// SPDX-License-Identifier: Apache-2.0
// GPU tests of how the CUDA backend treats non-finite cache values and
// queries, through its vtable (no core needed):
//   hidden    NaN, +Inf and -Inf in cache rows that the earlier queries of a
//             step may not see (the causal tail, across tile and page
//             edges): those queries stay finite and match a float64
//             reference over their visible rows; the queries that see such
//             a row read its NaN/Inf.
//   visible   NaN in keys, values, rope keys, latents and queries at
//             positions on tile and page edges: exactly the outputs (and,
//             but for a value, the lse) that read them are non-finite.
//   recycled  a released sequence's NaN/Inf rows left past the end of a new
//             sequence that reuses its pages: the new one is finite and
//             correct.
// Every kind and path (GQA; GQLA through the GQA and the absorb path), f32 /
// f16 / bf16 caches, s_q 1-4 and 8 (and 40 for the prefill shapes), one long sequence (split KV merged by the
// combine pass or in a cluster) and many short ones. The knobs of
// tests/cuda/CMakeLists.txt steer the planner to the other kernels.
// The float64 reference here takes each query's visible rows only.
// One doctest case per shape and cache dtype, "<shape> <dtype>" (the names
// the ctest entries filter on). Exit 77 (ctest SKIP_RETURN_CODE) when no GPU
// is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_suite_main.hpp"
#include "run_seed.hpp"
#include "vtable_doctest.hpp"

using namespace gqla::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kPoison = -777.f;  // outputs before a run: finite, far from any result

// Reset to the run's seed before every case (cuda_suite_main.hpp).
std::mt19937 rng;
void reseed_rng() { rng.seed(run_seed()); }

const char* dtype_name(gqla_dtype t) { return t == GQLA_DTYPE_F32 ? "f32" : t == GQLA_DTYPE_F16 ? "f16" : "bf16"; }

double tolerance(gqla_dtype cache) { return cache == GQLA_DTYPE_F32 ? 1e-5 : cache == GQLA_DTYPE_F16 ? 2e-3 : 1e-2; }

std::vector<float> randn(size_t n, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

struct Shape {
    const char* name;
    gqla_kind kind;
    int H, G;
    int D, Dv;          // GQA
    int r, dc, dr, dv;  // GQLA
    int page_size;
    int64_t long_length;  // one sequence, split KV
    int many;             // sequences of the batched case
    int prefill_s_q = 0;  // > 0: also a prefill chunk of this many queries
};

bool is_gqla(const Shape& s) { return s.kind == GQLA_KIND_GQLA; }
int key_dim(const Shape& s) { return is_gqla(s) ? s.dc + s.dr : s.D; }
int value_dim(const Shape& s) { return is_gqla(s) ? s.dv : s.Dv; }
std::vector<gqla_path> paths_of(const Shape& s) {
    return is_gqla(s) ? std::vector<gqla_path>{GQLA_PATH_GQA, GQLA_PATH_ABSORB} : std::vector<gqla_path>{GQLA_PATH_GQA};
}

// One session over a pool for `tokens` cached tokens of up to `sequences`
// sequences; GQLA: random weights and the expanded cache on, so that both
// paths decode the same rows.
struct RefRows;

struct Session {
    Shape shape;
    gqla_dtype cache;
    Harness h;
    std::map<int, std::shared_ptr<const RefRows>> reference;  // by sequence id, built once

    static gqla_backend_desc desc_of(const Shape& s, gqla_dtype cache, int64_t tokens, int sequences) {
        gqla_backend_desc d{};
        d.kind = s.kind;
        d.num_heads = s.H;
        d.num_kv_heads = s.G;
        d.head_dim = s.D;
        d.value_dim = value_dim(s);
        d.latent_dim = s.r;
        d.nope_dim = s.dc;
        d.rope_dim = s.dr;
        d.num_layers = 1;
        d.keep_latent = 1;  // GQLA: the latent pool exists (backend_api.h)
        d.cache_dtype = cache;
        d.io_dtype = GQLA_DTYPE_F32;
        d.softmax_scale = 1.f / std::sqrt(float(key_dim(s)));
        d.page_size = s.page_size;
        d.num_pages = tokens / s.page_size + 2 * sequences + 2;
        d.max_sequences = std::max(sequences, 2);
        d.max_batch = d.max_sequences;
        d.max_q_len = std::max(8, s.prefill_s_q);
        d.device_index = 0;
        d.num_threads = 1;
        return d;
    }

    Session(const Shape& s, gqla_dtype c, int64_t tokens, int sequences)
        : shape(s), cache(c), h(desc_of(s, c, tokens, sequences)) {
        if (is_gqla(s)) {
            h.set_weights(0, randn(size_t(s.G) * (s.dc + s.dv) * s.r, 1.f / std::sqrt(float(s.r))));
            require_ok(h, h.vt->set_expanded(h.ctx, 1), "set_expanded");
        }
    }

    // A sequence of n random rows, edited by `poke` (row-major a [n][a_width],
    // b [n][b_width]) before they are appended in two calls.
    int add(int64_t n, const std::function<void(std::vector<float>&, std::vector<float>&)>& poke = nullptr) {
        const int id = h.add();
        std::vector<float> a = randn(size_t(n) * h.a_width()), b = randn(size_t(n) * h.b_width());
        if (poke) poke(a, b);
        const int64_t first = n / 3;
        if (first > 0) h.append(0, id, first, a.data(), b.data(), is_gqla(shape));
        h.append(0, id, n - first, a.data() + first * h.a_width(), b.data() + first * h.b_width(), is_gqla(shape));
        return id;
    }
};

// Where rows of the GQA kind's K / V or GQLA's latent / rope key sit in the
// a / b rows the harness appends.
enum class Part { Key, Value, Latent, RopeKey };
void poke(const Shape& s, std::vector<float>& a, std::vector<float>& b, int64_t pos, Part part, int group, int col,
          float v) {
    switch (part) {
        case Part::Key:
            a[(size_t(pos) * s.G + group % s.G) * s.D + col % s.D] = v;
            break;
        case Part::Value:
            b[(size_t(pos) * s.G + group % s.G) * s.Dv + col % s.Dv] = v;
            break;
        case Part::Latent:
            a[size_t(pos) * s.r + col % s.r] = v;
            break;
        case Part::RopeKey:
            b[size_t(pos) * s.dr + col % s.dr] = v;
            break;
    }
}

// ---------------------------------------------------------------------------
// Float64 reference over each query's visible rows, from the rows as the
// cache holds them (f16 overflows to +-inf on append).

double cached(float x, gqla_dtype cache) {
    if (cache == GQLA_DTYPE_F16 && std::isfinite(x) && std::fabs(x) >= 65520.f) return std::copysign(INFINITY, x);
    return x;
}

// Keys [L][G][dk] and values [L][G][dv] of one sequence as the GQA path sees
// them: GQLA's KC = W_UK c | kr and VE = W_UV c, formed from the definition.
struct RefRows {
    int dk = 0, dv = 0;
    std::vector<double> k, v;
};

RefRows expand_reference_rows(const Session& s, int id) {
    const Shape& sh = s.shape;
    const auto& seq = s.h.seqs.at(id);
    const int64_t L = seq.len[0];
    const std::vector<float>& a = seq.a_rows[0];
    const std::vector<float>& b = seq.b_rows[0];
    RefRows rr;
    rr.dk = key_dim(sh);
    rr.dv = value_dim(sh);
    rr.k.resize(size_t(L) * sh.G * rr.dk);
    rr.v.resize(size_t(L) * sh.G * rr.dv);
    if (!is_gqla(sh)) {
        for (size_t i = 0; i < rr.k.size(); ++i) rr.k[i] = cached(a[i], s.cache);
        for (size_t i = 0; i < rr.v.size(); ++i) rr.v[i] = cached(b[i], s.cache);
        return rr;
    }
    const std::vector<float>& W = s.h.weights[0];
    std::vector<double> c(sh.r);
    for (int64_t j = 0; j < L; ++j) {
        for (int x = 0; x < sh.r; ++x) c[x] = cached(a[size_t(j) * sh.r + x], s.cache);
        for (int g = 0; g < sh.G; ++g) {
            double* kr = &rr.k[(size_t(j) * sh.G + g) * rr.dk];
            double* vr = &rr.v[(size_t(j) * sh.G + g) * rr.dv];
            for (int row = 0; row < sh.dc + sh.dv; ++row) {
                const float* w = &W[(size_t(g) * (sh.dc + sh.dv) + row) * sh.r];
                double acc = 0.0;
                for (int x = 0; x < sh.r; ++x) acc += double(w[x]) * c[x];
                if (row < sh.dc)
                    kr[row] = acc;
                else
                    vr[row - sh.dc] = acc;
            }
            for (int x = 0; x < sh.dr; ++x) kr[sh.dc + x] = cached(b[size_t(j) * sh.dr + x], s.cache);
        }
    }
    return rr;
}

const RefRows& reference_rows(Session& s, int id) {
    auto& at = s.reference[id];
    if (!at) at = std::make_shared<const RefRows>(expand_reference_rows(s, id));
    return *at;
}

// o [s_q][H][dv], lse [s_q][H] of one sequence of length L: query i over
// rows j <= L - s_q + i only (no masked term is ever multiplied).
void reference_decode(const RefRows& rr, int H, int G, double scale, int64_t L, int s_q, const float* q, double* o,
                      double* lse) {
    const int n_rep = H / G;
    std::vector<double> sc;
    for (int i = 0; i < s_q; ++i) {
        const int64_t n = L - s_q + i + 1;
        sc.assign(size_t(n), 0.0);
        for (int h = 0; h < H; ++h) {
            const int g = h / n_rep;
            const float* qr = q + (size_t(i) * H + h) * rr.dk;
            double m = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
                const double* kr = &rr.k[(size_t(j) * G + g) * rr.dk];
                double dot = 0.0;
                for (int x = 0; x < rr.dk; ++x) dot += double(qr[x]) * kr[x];
                sc[size_t(j)] = scale * dot;
                m = (std::isnan(sc[size_t(j)]) || std::isnan(m)) ? NAN : std::max(m, sc[size_t(j)]);
            }
            double* orow = o + (size_t(i) * H + h) * rr.dv;
            std::fill(orow, orow + rr.dv, 0.0);
            double l = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                const double p = std::exp(sc[size_t(j)] - m);
                l += p;
                const double* vr = &rr.v[(size_t(j) * G + g) * rr.dv];
                for (int x = 0; x < rr.dv; ++x) orow[x] += p * vr[x];
            }
            for (int x = 0; x < rr.dv; ++x) orow[x] /= l;
            lse[size_t(i) * H + h] = m + std::log(l);
        }
    }
}

// ---------------------------------------------------------------------------
// Decode and compare.

struct Decoded {
    std::vector<float> q, o, lse;
};

Decoded decode(Session& s, const std::vector<int>& ids, int s_q, gqla_path path,
               const std::function<void(std::vector<float>&)>& poke_q = nullptr) {
    const Shape& sh = s.shape;
    const int B = static_cast<int>(ids.size()), H = sh.H, dq = key_dim(sh), dv = value_dim(sh);
    Decoded r;
    r.q = randn(size_t(B) * s_q * H * dq);
    if (poke_q) poke_q(r.q);
    r.o.assign(size_t(B) * s_q * H * dv, kPoison);
    r.lse.assign(size_t(B) * s_q * H, kPoison);
    auto seqs = s.h.decode_seqs(ids, 0);
    gqla_decode_args a{};
    a.layer = 0;
    a.path = path;
    a.batch = B;
    a.q_len = s_q;
    a.seqs = seqs.data();
    a.q = host_view(r.q.data(), GQLA_DTYPE_F32, {B, s_q, H, dq});
    a.o = host_view(r.o.data(), GQLA_DTYPE_F32, {B, s_q, H, dv});
    a.lse = host_view(r.lse.data(), GQLA_DTYPE_F32, {B, s_q, H});
    require_ok(s.h, s.h.vt->decode(s.h.ctx, &a), "decode");
    return r;
}

bool all_finite(const double* x, int n) {
    for (int i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) return false;
    return true;
}
bool all_finite(const float* x, int n) {
    for (int i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) return false;
    return true;
}

// Checks every (sequence, query, head) row against the reference: where the
// reference row is finite, the row is finite and inside the dtype's bound
// (relative L2 over all such rows); where it is not, the row has a
// non-finite element. The same for the lse, but non-finite reference lse
// values bind only with strict_lse (NaN inputs: an Inf key may give the
// absorb path a -inf score where the definition sums +inf and -inf).
// Returns the number of rows whose reference is non-finite.
int64_t check(const std::string& name, Session& s, const std::vector<int>& ids, int s_q, const Decoded& d,
              bool strict_lse) {
    const Shape& sh = s.shape;
    const int H = sh.H, dq = key_dim(sh), dv = value_dim(sh);
    std::vector<double> ro(size_t(s_q) * H * dv), rl(size_t(s_q) * H);
    double o_err = 0, o_ref = 0, l_err = 0, l_ref = 0;
    int64_t wrong = 0, nonfinite_rows = 0;
    std::string first_wrong;
    auto flag = [&](const std::string& what) {
        if (wrong++ == 0) first_wrong = what;
    };
    for (size_t bi = 0; bi < ids.size(); ++bi) {
        const int64_t L = s.h.seqs.at(ids[bi]).len[0];
        const RefRows& rr = reference_rows(s, ids[bi]);
        reference_decode(rr, H, sh.G, s.h.desc.softmax_scale, L, s_q, d.q.data() + bi * s_q * H * dq, ro.data(),
                         rl.data());
        for (int i = 0; i < s_q; ++i)
            for (int h = 0; h < H; ++h) {
                const size_t row = (bi * s_q + i) * H + h, ref_row = size_t(i) * H + h;
                const float* o = d.o.data() + row * dv;
                const double* ref = ro.data() + ref_row * dv;
                char where[96];
                std::snprintf(where, sizeof where, "seq %zu (L=%lld) query %d head %d", bi, (long long)L, i, h);
                if (all_finite(ref, dv)) {
                    if (!all_finite(o, dv)) flag(std::string(where) + ": non-finite output, expected finite");
                    for (int x = 0; x < dv; ++x) {
                        o_err += (o[x] - ref[x]) * (o[x] - ref[x]);
                        o_ref += ref[x] * ref[x];
                    }
                } else {
                    ++nonfinite_rows;
                    if (all_finite(o, dv)) flag(std::string(where) + ": finite output, expected non-finite");
                }
                const float lse = d.lse[row];
                if (std::isfinite(rl[ref_row])) {
                    if (!std::isfinite(lse))
                        flag(std::string(where) + ": non-finite lse, expected finite");
                    else {
                        l_err += (lse - rl[ref_row]) * (lse - rl[ref_row]);
                        l_ref += rl[ref_row] * rl[ref_row];
                    }
                } else if (strict_lse && std::isfinite(lse)) {
                    flag(std::string(where) + ": finite lse, expected non-finite");
                }
            }
    }
    const double tol = tolerance(s.cache);
    const double oe = o_ref > 0 ? std::sqrt(o_err / o_ref) : 0.0, le = l_ref > 0 ? std::sqrt(l_err / l_ref) : 0.0;
    INFO(name << ", " << nonfinite_rows << " non-finite rows");
    INFO("first wrong row: " << first_wrong);
    CHECK(wrong == 0);
    CHECK(oe <= tol);  // o's relative L2 over the finite reference rows
    CHECK(le <= tol);  // the lse's
    return nonfinite_rows;
}

std::string case_name(const char* what, const Session& s, size_t batch, int s_q, gqla_path path) {
    char name[160];
    std::snprintf(name, sizeof name, "%s %s %s B=%zu s_q=%d %s", what, s.shape.name, dtype_name(s.cache), batch, s_q,
                  path == GQLA_PATH_ABSORB ? "absorb" : "gqa-path");
    return name;
}

// Lengths of the batched case: ends on and next to 16-token boundaries.
std::vector<int64_t> many_lengths(const Shape& sh) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < sh.many; ++i) lengths.push_back(16 * (i + 2) + (i % 4) + (i % 5 == 0 ? 48 : 0));
    return lengths;
}
int64_t total(const std::vector<int64_t>& lengths) {
    int64_t t = 0;
    for (int64_t L : lengths) t += L;
    return t;
}

// ---------------------------------------------------------------------------
// The cases.

// NaN, +Inf, -Inf (f16 GQA: a value past f16's range instead of +Inf) in
// keys and values at the positions query 0 may not see: L - s_q + 1 .. L - 1.
void test_hidden(const Shape& sh, gqla_dtype cache, const std::vector<int64_t>& lengths, int s_q) {
    Session s(sh, cache, total(lengths), static_cast<int>(lengths.size()));
    const float plus = cache == GQLA_DTYPE_F16 && !is_gqla(sh) ? 1e5f : kInf;
    const float specials[3] = {kNaN, plus, -kInf};
    std::vector<int> ids;
    for (int64_t L : lengths)
        ids.push_back(s.add(L, [&](std::vector<float>& a, std::vector<float>& b) {
            for (int64_t j = L - s_q + 1; j < L; ++j) {
                const float v = specials[(j - (L - s_q + 1)) % 3];
                const int at = static_cast<int>(j);
                if (is_gqla(sh)) {
                    poke(sh, a, b, j, Part::Latent, 0, 7 * at, v);
                    poke(sh, a, b, j, Part::RopeKey, 0, 3 * at, v);
                } else {
                    poke(sh, a, b, j, Part::Value, at, 5 * at, v);
                    poke(sh, a, b, j, Part::Key, at + 1, 3 * at, v);
                }
            }
        }));
    for (gqla_path path : paths_of(sh)) {
        const Decoded d = decode(s, ids, s_q, path);
        const int64_t bad = check(case_name("hidden", s, ids.size(), s_q, path), s, ids, s_q, d, false);
        // The queries after the first see the tail: some rows must read it.
        CHECK_MESSAGE(bad > 0, case_name("hidden (later queries read the tail)", s, ids.size(), s_q, path));
    }
}

// NaN at visible positions: sequence i % 3 == 0 on a tile/page edge in the
// bulk (every query sees it), i % 3 == 1 at L - 1 (the last query only),
// i % 3 == 2 clean; and one query element of sequence 2.
void test_visible(const Shape& sh, gqla_dtype cache, const std::vector<int64_t>& lengths, int s_q) {
    Session s(sh, cache, total(lengths), static_cast<int>(lengths.size()));
    std::vector<int> ids;
    for (size_t i = 0; i < lengths.size(); ++i) {
        const int64_t L = lengths[i];
        const int k = static_cast<int>(i);
        ids.push_back(s.add(L, [&](std::vector<float>& a, std::vector<float>& b) {
            if (i % 3 == 2) return;
            const int64_t edges[] = {63, 64, 15, 16, 0, sh.page_size - 1, sh.page_size, L / 2, L - s_q};
            const int64_t j = i % 3 == 1 ? L - 1 : std::min<int64_t>(edges[(i / 3) % 9], L - s_q);
            Part part =
                is_gqla(sh) ? ((i / 3) % 2 ? Part::RopeKey : Part::Latent) : ((i / 3) % 2 ? Part::Key : Part::Value);
            poke(sh, a, b, j, part, k, 11 * k, kNaN);
        }));
    }
    for (gqla_path path : paths_of(sh)) {
        const Decoded d = decode(s, ids, s_q, path, [&](std::vector<float>& q) {
            if (ids.size() > 2) q[(size_t(2) * s_q * sh.H + std::min(1, sh.H - 1)) * key_dim(sh) + 3] = kNaN;
        });
        const int64_t bad = check(case_name("visible", s, ids.size(), s_q, path), s, ids, s_q, d, true);
        CHECK_MESSAGE(bad > 0, case_name("visible (some rows read a NaN)", s, ids.size(), s_q, path));
    }
}

// A sequence of NaN / +Inf / -Inf rows (keys and values alike) released; a
// new one reuses its pages and ends mid-page, over the old rows.
void test_recycled(const Shape& sh, gqla_dtype cache, int64_t old_length, int64_t new_length) {
    Session s(sh, cache, old_length + 2 * sh.page_size, 2);
    const int old_id = s.add(old_length, [&](std::vector<float>& a, std::vector<float>& b) {
        const float specials[3] = {kNaN, kInf, -kInf};
        for (size_t i = 0; i < a.size(); ++i) a[i] = specials[i % 3];
        for (size_t i = 0; i < b.size(); ++i) b[i] = specials[(i + 1) % 3];
    });
    const std::vector<int32_t> old_pages = s.h.seqs.at(old_id).pages;
    s.h.release(old_id);
    const int id = s.add(new_length);
    const std::vector<int32_t>& pages = s.h.seqs.at(id).pages;
    int reused = 0;
    for (int32_t p : pages) reused += std::count(old_pages.begin(), old_pages.end(), p) > 0;
    CHECK_MESSAGE((new_length % sh.page_size != 0 && reused == static_cast<int>(pages.size())),
                  case_name("recycled (the new sequence ends mid-page in reused pages)", s, 1, 1, GQLA_PATH_GQA));
    for (int s_q : {1, 2, 4})
        for (gqla_path path : paths_of(sh)) {
            const Decoded d = decode(s, {id}, s_q, path);
            check(case_name("recycled", s, 1, s_q, path), s, {id}, s_q, d, true);
        }
}

void test_shape(const Shape& sh, gqla_dtype cache) {
    const std::vector<int64_t> many = many_lengths(sh);
    const std::vector<int64_t> single = {sh.long_length};
    // s_q 8 where the narrow kernel takes it (GQA groups of <= 4 heads).
    std::vector<int> s_qs = {2, 3, 4};
    if (sh.H / sh.G <= 4) s_qs.push_back(8);
    for (int s_q : s_qs) {
        test_hidden(sh, cache, single, s_q);
        test_hidden(sh, cache, many, s_q);
    }
    for (int s_q : {1, 4}) {
        // Few sequences (the long one split, with its NaN at L - 1), then many.
        test_visible(sh, cache, {200, sh.long_length, 131}, s_q);
        test_visible(sh, cache, many, s_q);
    }
    test_recycled(sh, cache, sh.long_length + 5, sh.long_length - 2 * sh.page_size + 7);
    if (sh.prefill_s_q > 0) {
        test_hidden(sh, cache, single, sh.prefill_s_q);
        test_hidden(sh, cache, many, sh.prefill_s_q);
        test_visible(sh, cache, {200, sh.long_length, 131}, sh.prefill_s_q);
    }
}

// GQA 32/8 (head dim 128: the narrow kernel's TMA boxes on Hopper); odd
// GQA dims with padded rows and pages of 63 (row-by-row copies); GQLA
// with MLA's latent (the sm_90a latent kernel on the absorb path, keys
// 192 wide on the GQA path); odd GQLA dims (the generic tensor-core
// kernel on the absorb path).
const Shape kGqa32_8 = {"gqa 32/8", GQLA_KIND_GQA, 32, 8, 128, 128, 0, 0, 0, 0, 64, 2562, 48};
const Shape kGqaOdd = {"gqa odd", GQLA_KIND_GQA, 6, 2, 40, 72, 0, 0, 0, 0, 63, 2017, 40};
const Shape kGqlaMla = {"gqla mla", GQLA_KIND_GQLA, 16, 2, 0, 0, 512, 128, 64, 128, 64, 1282, 20};
const Shape kGqlaOdd = {"gqla odd", GQLA_KIND_GQLA, 6, 3, 0, 0, 96, 48, 16, 40, 16, 1201, 30};
// Prefill chunks of 40 queries x 4 heads per group (160 rows: the
// sm_90a prefill kernel on Hopper, its causal tail spanning tiles),
// keys 128 (GQA) and 128 + 64 wide (the GQLA GQA path).
const Shape kGqaPrefill = {"gqa prefill", GQLA_KIND_GQA, 8, 2, 128, 128, 0, 0, 0, 0, 48, 1500, 6, 40};
const Shape kGqlaPrefill = {"gqla prefill", GQLA_KIND_GQLA, 8, 2, 0, 0, 256, 128, 64, 128, 64, 900, 6, 40};

void gqa_32_8(gqla_dtype t) { test_shape(kGqa32_8, t); }
void gqa_odd(gqla_dtype t) { test_shape(kGqaOdd, t); }
void gqla_mla(gqla_dtype t) { test_shape(kGqlaMla, t); }
void gqla_odd(gqla_dtype t) { test_shape(kGqlaOdd, t); }
void gqa_prefill(gqla_dtype t) { test_shape(kGqaPrefill, t); }
void gqla_prefill(gqla_dtype t) { test_shape(kGqlaPrefill, t); }

}  // namespace

GQLA_CASES_PER_CACHE_DTYPE("gqa 32/8", gqa_32_8)
GQLA_CASES_PER_CACHE_DTYPE("gqa odd", gqa_odd)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla", gqla_mla)
GQLA_CASES_PER_CACHE_DTYPE("gqla odd", gqla_odd)
GQLA_CASES_PER_CACHE_DTYPE("gqa prefill", gqa_prefill)
GQLA_CASES_PER_CACHE_DTYPE("gqla prefill", gqla_prefill)

int main(int argc, char** argv) {
    // The backend's own device count: this executable links the CUDA
    // module, not libgqla (no gqla_device_count).
    const gqla_backend_vtable* vt = gqla_cuda_backend_get(GQLA_BACKEND_ABI_VERSION);
    int32_t n = 0;
    const bool gpu = vt && vt->device_count(&n) == GQLA_OK && n > 0;
    return cuda_suite_main(argc, argv, gpu, "no CUDA device visible: skipping", reseed_rng);
}
