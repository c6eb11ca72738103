// SPDX-License-Identifier: Apache-2.0
// Chunked prefill on the CPU backend, driven through its vtable against the
// float64 reference: ragged calls (q [N, H, .]) mixing decode steps with
// prefill chunks (q_len 1, 7, 65, n == L), uniform calls with many queries,
// every ISA and cache dtype, page sizes 1, 5 and 64, the GQLA absorb path
// and both GQA forms (over the kept expanded cache and GQA_TRANSIENT), calls
// cut into query ranges, and the non-finite rule on the wide kernels.
// Outputs are poisoned with NaN before every call.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "tests/core/test_cpu_backend_support.hpp"

using namespace cpu_backend_test;

namespace {

struct Call {
    std::vector<int> seqs;    // indices into the driver's sequences
    std::vector<int> q_lens;  // queries of each (all equal for a uniform call)
    bool ragged = true;
    gqla_path path = GQLA_PATH_GQA;
    bool transient = false;
};

struct Outcome {
    gqla_status st = GQLA_ERR_INTERNAL;
    double out = 0.0;              // rel L2 of o over the call
    double lse = 0.0;              // lse error over the call
    std::vector<double> o, ref_o;  // [query row][H][dv] in call order
};

// GQLA keys [L][G][d_c + d_r] and values [L][G][d_v] in float64, from the
// latent as the cache stores it (the reference then runs the GQA form).
class ExpandedReference {
public:
    const std::pair<std::vector<double>, std::vector<double>>& of(const Driver& drv, const Sequence& s) {
        auto& e = cache_[std::make_pair(s.slot, s.length)];
        if (!e.first.empty()) return e;
        const gqla_backend_desc& d = drv.desc();
        const int64_t G = d.num_kv_heads, r = d.latent_dim, dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim;
        e.first.resize(static_cast<size_t>(s.length * G * (dc + dr)));
        e.second.resize(static_cast<size_t>(s.length * G * dv));
        gqla::ref::gqla_expanded_rows(int(G), int(r), int(dc), int(dr), int(dv), s.length, drv.weights().data(),
                                      s.a.data(), s.b.data(), e.first.data(), e.second.data());
        return e;
    }

private:
    std::map<std::pair<int32_t, int64_t>, std::pair<std::vector<double>, std::vector<double>>> cache_;
};

// Float64 o [n][H][dv] and lse [n][H] of sequence s for its last n tokens.
void reference(const Driver& drv, ExpandedReference& expanded, const Sequence& s, int n, const double* q, double* o,
               double* lse) {
    const gqla_backend_desc& d = drv.desc();
    const int H = d.num_heads, G = d.num_kv_heads, dv = d.value_dim;
    if (d.kind == GQLA_KIND_GQA) {
        gqla::ref::gqa_decode(H, G, d.head_dim, dv, s.length, n, d.softmax_scale, q, s.a.data(), s.b.data(), o, lse);
    } else if (s.length <= 64) {
        gqla::ref::gqla_decode(H, G, d.latent_dim, d.nope_dim, d.rope_dim, dv, s.length, n, d.softmax_scale, q,
                               drv.weights().data(), s.a.data(), s.b.data(), o, lse);
    } else {
        const auto& e = expanded.of(drv, s);
        gqla::ref::gqa_decode(H, G, d.nope_dim + d.rope_dim, dv, s.length, n, d.softmax_scale, q, e.first.data(),
                              e.second.data(), o, lse);
    }
}

// Runs one call with queries drawn from q_seed and compares it with the
// reference.
Outcome run(Driver& drv, ExpandedReference& expanded, const Call& c, uint64_t q_seed) {
    const gqla_backend_desc& d = drv.desc();
    const bool gqa = d.kind == GQLA_KIND_GQA;
    const int64_t B = static_cast<int64_t>(c.seqs.size()), H = d.num_heads;
    const int64_t dq = gqa ? d.head_dim : d.nope_dim + d.rope_dim, dv = d.value_dim;
    int64_t N = 0;
    int32_t longest = 0;
    for (int n : c.q_lens) {
        N += n;
        longest = std::max(longest, n);
    }
    const int64_t s_q = c.q_lens.empty() ? 0 : c.q_lens[0];
    HostTensor q = c.ragged ? HostTensor(d.io_dtype, {N, H, dq}, 5) : HostTensor(d.io_dtype, {B, s_q, H, dq}, 5);
    HostTensor o = c.ragged ? HostTensor(d.io_dtype, {N, H, dv}, 2) : HostTensor(d.io_dtype, {B, s_q, H, dv}, 2);
    HostTensor lse = c.ragged ? HostTensor(GQLA_DTYPE_F32, {N, H}, 1) : HostTensor(GQLA_DTYPE_F32, {B, s_q, H}, 1);
    std::mt19937_64 rng(q_seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> qv(static_cast<size_t>(N * H * dq));
    q.poison();  // the gaps between rows must not be read
    int64_t row = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < c.q_lens[static_cast<size_t>(b)]; ++i, ++row)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t k = 0; k < dq; ++k) {
                    const double v = round_to(normal(rng), d.io_dtype);
                    qv[static_cast<size_t>((row * H + h) * dq + k)] = v;
                    if (c.ragged)
                        q.set({row, h, k}, v);
                    else
                        q.set({b, i, h, k}, v);
                }
    o.poison();
    lse.poison();
    std::vector<gqla_decode_seq> ds;
    row = 0;
    for (int64_t b = 0; b < B; ++b) {
        Sequence& s = drv.sequences()[static_cast<size_t>(c.seqs[static_cast<size_t>(b)])];
        const int32_t n = c.q_lens[static_cast<size_t>(b)];
        ds.push_back(gqla_decode_seq{s.pages.data(), static_cast<int32_t>(s.pages.size()), s.slot, s.length, n, row});
        row += n;
    }
    gqla_decode_args args{};
    args.layer = drv.layer();
    args.path = c.path;
    args.batch = static_cast<int32_t>(B);
    args.q_len = c.ragged ? longest : static_cast<int32_t>(s_q);
    args.seqs = ds.data();
    args.q = q.view;
    args.o = o.view;
    args.lse = lse.view;
    args.ragged = c.ragged ? 1 : 0;
    args.transient = c.transient ? 1 : 0;
    args.total_q = N;
    Outcome out;
    out.st = drv.vt()->decode(drv.ctx(), &args);
    if (out.st != GQLA_OK) return out;
    std::vector<double> got_lse, ref_lse;
    row = 0;
    for (int64_t b = 0; b < B; ++b) {
        const Sequence& s = drv.sequences()[static_cast<size_t>(c.seqs[static_cast<size_t>(b)])];
        const int n = c.q_lens[static_cast<size_t>(b)];
        std::vector<double> ro(static_cast<size_t>(n * H * dv)), rl(static_cast<size_t>(n * H));
        reference(drv, expanded, s, n, qv.data() + row * H * dq, ro.data(), rl.data());
        out.ref_o.insert(out.ref_o.end(), ro.begin(), ro.end());
        ref_lse.insert(ref_lse.end(), rl.begin(), rl.end());
        for (int64_t i = 0; i < n; ++i)
            for (int64_t h = 0; h < H; ++h) {
                got_lse.push_back(c.ragged ? lse.get({row + i, h}) : lse.get({b, i, h}));
                for (int64_t k = 0; k < dv; ++k)
                    out.o.push_back(c.ragged ? o.get({row + i, h, k}) : o.get({b, i, h, k}));
            }
        row += n;
    }
    out.out = gqla::ref::rel_l2(out.o.data(), out.ref_o.data(), out.o.size());
    out.lse = core_test::lse_error(got_lse.data(), ref_lse.data(), got_lse.size());
    return out;
}

std::string path_label(const Call& c) {
    if (c.path == GQLA_PATH_ABSORB) return "absorb";
    return c.transient ? "gqa-transient" : "gqa";
}

void check(Driver& drv, ExpandedReference& expanded, const Call& c, double tol, const std::string& what,
           Outcome* keep = nullptr, uint64_t q_seed = 0) {
    if (q_seed == 0) q_seed = drv.rng()();
    Outcome r = run(drv, expanded, c, q_seed);
    std::string lens;
    for (int n : c.q_lens) lens += std::to_string(n) + " ";
    INFO(what << " path=" << path_label(c) << std::string(c.ragged ? " ragged" : " uniform") << " q_lens=" << lens
              << " rel_l2(o)=" << r.out << " lse error=" << r.lse);
    INFO(drv.replay_hint());
    REQUIRE(r.st == GQLA_OK);
    CHECK(r.out <= tol);
    CHECK(r.lse <= tol);
    if (keep) *keep = std::move(r);
}

// Lengths 1, 7, 65, 133 and 320, appended in two calls so that the second
// starts mid-page.
void fill_five(Driver& drv, int write_expanded) {
    for (int i = 0; i < 5; ++i) drv.add_sequence();
    REQUIRE(drv.append({0, 1, 2, 3, 4}, {1, 7, 65, 130, 300}, write_expanded) == GQLA_OK);
    REQUIRE(drv.append({3, 4}, {3, 20}, write_expanded) == GQLA_OK);
}

// The calls every configuration runs: a ragged mix (n == L for the first
// three and the last), the same sequences in another order, a uniform
// prefill call and a uniform decode step.
std::vector<Call> standard_calls(gqla_path path, bool transient) {
    std::vector<Call> calls;
    calls.push_back(Call{{0, 1, 2, 3, 4}, {1, 7, 65, 40, 320}, true, path, transient});
    calls.push_back(Call{{4, 2, 0}, {17, 16, 1}, true, path, transient});
    calls.push_back(Call{{2, 3, 4}, {65, 65, 65}, false, path, transient});
    calls.push_back(Call{{1, 2, 3, 4}, {5, 5, 5, 5}, false, path, transient});
    return calls;
}

gqla_backend_desc prefill_desc(gqla_backend_desc d, int page_size) {
    d.page_size = page_size;
    d.num_pages = 720 / page_size + 32;
    d.max_batch = 8;
    d.max_q_len = 320;
    d.max_q_tokens = 700;
    return d;
}

std::string label(KernelChoice kernels, gqla_dtype dt) {
    return std::string("kernels=") + kernels_label(kernels) + " cache=" + gqla::dtype_name(dt);
}

}  // namespace

TEST_CASE("cpu prefill: GQA kind, ragged and uniform calls of many queries, every ISA, dtype and page size") {
    for (KernelChoice kernels : kAllKernels)
        for (gqla_dtype dt : kAllDtypes)
            for (int page : {1, 5, 64}) {
                Driver drv(prefill_desc(gqa_desc(dt, 3), page));
                REQUIRE(drv.status() == GQLA_OK);
                if (!use_kernels(drv.ctx(), kernels)) {
                    MESSAGE("host lacks " << kernels_label(kernels) << "; skipped");
                    break;
                }
                fill_five(drv, 0);
                ExpandedReference expanded;
                for (const Call& c : standard_calls(GQLA_PATH_GQA, false))
                    check(drv, expanded, c, tolerance(dt), label(kernels, dt) + " page=" + std::to_string(page));
            }
}

namespace {

// Every kernel table and group count over one cache dtype (a test case per
// dtype: each takes tens of seconds under the sanitizers).
void gqla_forms_match(gqla_dtype dt) {
    for (KernelChoice kernels : kAllKernels)
        for (int G : {3, 6}) {
            Driver drv(prefill_desc(gqla_desc(dt, G), G == 3 ? 5 : 64));
            REQUIRE(drv.status() == GQLA_OK);
            if (!use_kernels(drv.ctx(), kernels)) {
                MESSAGE("host lacks " << kernels_label(kernels) << "; skipped");
                break;
            }
            REQUIRE(!drv.set_random_weights(GQLA_DTYPE_BF16).empty());
            REQUIRE(drv.vt()->set_expanded(drv.ctx(), 1) == GQLA_OK);
            fill_five(drv, 1);
            ExpandedReference expanded;
            const std::string what = label(kernels, dt) + " G=" + std::to_string(G);
            for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA})
                for (const Call& c : standard_calls(path, false)) check(drv, expanded, c, tolerance(dt), what);
            for (const Call& c : standard_calls(GQLA_PATH_GQA, true)) check(drv, expanded, c, tolerance(dt), what);

            // The same queries on every form: the transient rows are
            // rounded to the cache dtype like the kept ones, so with an f32
            // cache the two GQA forms agree to f32 rounding (sums in another
            // order), absorb to the f32 tolerance. With a bf16 cache they
            // agree to the bf16-dot kernels' own rounding of probabilities,
            // which split pieces redo against their own maxima.
            if (dt == GQLA_DTYPE_F16) continue;
            const uint64_t seed = drv.rng()();
            Outcome kept, transient, absorb;
            check(drv, expanded, Call{{0, 1, 2, 3, 4}, {1, 7, 65, 40, 320}, true, GQLA_PATH_GQA, false}, tolerance(dt),
                  what, &kept, seed);
            check(drv, expanded, Call{{0, 1, 2, 3, 4}, {1, 7, 65, 40, 320}, true, GQLA_PATH_GQA, true}, tolerance(dt),
                  what, &transient, seed);
            check(drv, expanded, Call{{0, 1, 2, 3, 4}, {1, 7, 65, 40, 320}, true, GQLA_PATH_ABSORB, false},
                  tolerance(dt), what, &absorb, seed);
            const double forms = gqla::ref::rel_l2(transient.o.data(), kept.o.data(), kept.o.size());
            const double paths = gqla::ref::rel_l2(absorb.o.data(), kept.o.data(), kept.o.size());
            INFO(what << " transient vs kept rel_l2=" << forms << " absorb vs kept rel_l2=" << paths);
            INFO(drv.replay_hint());
            CHECK(forms <= (dt == GQLA_DTYPE_F32 ? 2e-6 : 5e-3));
            if (dt == GQLA_DTYPE_F32) CHECK(paths <= 1e-5);
        }
}

}  // namespace

TEST_CASE("cpu prefill: GQLA absorb, kept GQA and GQA_TRANSIENT forms match the reference and each other (f32)") {
    gqla_forms_match(GQLA_DTYPE_F32);
}
TEST_CASE("cpu prefill: GQLA absorb, kept GQA and GQA_TRANSIENT forms match the reference and each other (f16)") {
    gqla_forms_match(GQLA_DTYPE_F16);
}
TEST_CASE("cpu prefill: GQLA absorb, kept GQA and GQA_TRANSIENT forms match the reference and each other (bf16)") {
    gqla_forms_match(GQLA_DTYPE_BF16);
}

TEST_CASE("cpu prefill: ragged calls of decode-sized runs equal the uniform call bit for bit") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        Driver drv(prefill_desc(gqla_desc(dt, 3), 16));
        REQUIRE(drv.status() == GQLA_OK);
        REQUIRE(!drv.set_random_weights(GQLA_DTYPE_F32).empty());
        REQUIRE(drv.vt()->set_expanded(drv.ctx(), 1) == GQLA_OK);
        fill_five(drv, 1);
        ExpandedReference expanded;
        for (gqla_path path : {GQLA_PATH_GQA, GQLA_PATH_ABSORB})
            for (int s_q : {1, 4, 16}) {
                const uint64_t seed = drv.rng()();
                Outcome uniform, ragged;
                const std::vector<int> seqs{2, 3, 4}, lens(3, s_q);  // lengths >= 16
                check(drv, expanded, Call{seqs, lens, false, path, false}, tolerance(dt), "uniform", &uniform, seed);
                check(drv, expanded, Call{seqs, lens, true, path, false}, tolerance(dt), "ragged", &ragged, seed);
                INFO("cache=" << std::string(gqla::dtype_name(dt)) << " s_q=" << s_q);
                CHECK(uniform.o == ragged.o);
            }
    }
}

TEST_CASE("cpu prefill: calls cut into query ranges (small chunks) match the reference") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        Driver gqa(prefill_desc(gqa_desc(dt, 2), 5));
        REQUIRE(gqa.status() == GQLA_OK);
        gqla::cpu::limit_chunk_rows(gqa.ctx(), 50);
        fill_five(gqa, 0);
        ExpandedReference none;
        for (const Call& c : standard_calls(GQLA_PATH_GQA, false))
            check(gqa, none, c, tolerance(dt), "gqa kind, small chunks");

        Driver gqla(prefill_desc(gqla_desc(dt, 3), 5));
        REQUIRE(gqla.status() == GQLA_OK);
        gqla::cpu::limit_chunk_rows(gqla.ctx(), 50);
        REQUIRE(!gqla.set_random_weights(GQLA_DTYPE_F32).empty());
        REQUIRE(gqla.vt()->set_expanded(gqla.ctx(), 1) == GQLA_OK);
        fill_five(gqla, 1);
        ExpandedReference expanded;
        for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA})
            for (const Call& c : standard_calls(path, false))
                check(gqla, expanded, c, tolerance(dt), "gqla, small chunks");
        for (const Call& c : standard_calls(GQLA_PATH_GQA, true))
            check(gqla, expanded, c, tolerance(dt), "gqla, small chunks");
    }
}

namespace {

// Appends `count` tokens to sequence s of every layer: random rows, except
// that positions >= poison_from hold NaN (keys) and +inf (values) for the
// GQA kind, NaN latents for GQLA.
void append_poisoned(Driver& drv, Sequence& s, int64_t count, int64_t poison_from) {
    const gqla_backend_desc& d = drv.desc();
    const bool gqa = d.kind == GQLA_KIND_GQA;
    const int64_t G = d.num_kv_heads;
    const int64_t wa = gqa ? d.head_dim : d.latent_dim, wb = gqa ? d.value_dim : d.rope_dim;
    const int64_t groups = gqa ? G : 1;
    while (int64_t(s.pages.size()) * d.page_size < s.length + count) s.pages.push_back(drv.take_page());
    gqla_append_item item{s.pages.data(), s.slot, s.length, count, 0};
    for (int32_t layer = 0; layer < d.num_layers; ++layer) {
        HostTensor ta(d.io_dtype, gqa ? std::vector<int64_t>{count, G, wa} : std::vector<int64_t>{count, wa});
        HostTensor tb(d.io_dtype, gqa ? std::vector<int64_t>{count, G, wb} : std::vector<int64_t>{count, wb});
        std::vector<double> va, vb;
        for (int64_t i = 0; i < count; ++i) {
            const bool poisoned = s.length + i >= poison_from;
            for (int64_t g = 0; g < groups; ++g) {
                for (int64_t k = 0; k < wa; ++k) {
                    const double v = poisoned ? std::nan("") : round_to(drv.randn(), d.cache_dtype);
                    va.push_back(v);
                    if (gqa)
                        ta.set({i, g, k}, v);
                    else
                        ta.set({i, k}, v);
                }
                for (int64_t k = 0; k < wb; ++k) {
                    const double v = poisoned && gqa ? HUGE_VAL : round_to(drv.randn(), d.cache_dtype);
                    vb.push_back(v);
                    if (gqa)
                        tb.set({i, g, k}, v);
                    else
                        tb.set({i, k}, v);
                }
            }
        }
        gqla_append_args args{};
        args.layer = layer;
        args.num_items = 1;
        args.items = &item;
        args.a = ta.view;
        args.b = tb.view;
        REQUIRE(drv.vt()->append(drv.ctx(), &args) == GQLA_OK);
        if (layer == drv.layer()) {
            s.a.insert(s.a.end(), va.begin(), va.end());
            s.b.insert(s.b.end(), vb.begin(), vb.end());
        }
    }
    s.length += count;
}

}  // namespace

TEST_CASE("cpu prefill: positions past a query's limit contribute nothing, not even a NaN") {
    for (KernelChoice kernels : kAllKernels)
        for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16})
            for (bool gqla : {false, true}) {
                gqla_backend_desc d = prefill_desc(gqla ? gqla_desc(dt, 3) : gqa_desc(dt, 3), 5);
                Driver drv(d);
                REQUIRE(drv.status() == GQLA_OK);
                if (!use_kernels(drv.ctx(), kernels)) break;
                if (gqla) REQUIRE(!drv.set_random_weights(GQLA_DTYPE_F32).empty());
                Sequence& s = drv.add_sequence();
                // 137 tokens, the last 60 poisoned; 100 queries: the first 40
                // (positions 37..76) see none of them.
                append_poisoned(drv, s, 137, 77);
                const int n = 100, clean = 40;
                std::vector<Call> calls{Call{{0}, {n}, true, GQLA_PATH_GQA, false}};
                if (gqla) {
                    calls[0].transient = true;
                    calls.push_back(Call{{0}, {n}, true, GQLA_PATH_ABSORB, false});
                }
                for (const Call& c : calls) {
                    ExpandedReference expanded;
                    Outcome r = run(drv, expanded, c, drv.rng()());
                    INFO(label(kernels, dt) << std::string(gqla ? " gqla " : " gqa ") << path_label(c));
                    INFO(drv.replay_hint());
                    REQUIRE(r.st == GQLA_OK);
                    const size_t clean_elems = size_t(clean) * d.num_heads * d.value_dim;
                    CHECK(gqla::ref::rel_l2(r.o.data(), r.ref_o.data(), clean_elems) <= tolerance(dt));
                    bool poisoned_rows_non_finite = true;
                    for (size_t i = clean_elems; i < r.o.size(); i += d.value_dim)
                        poisoned_rows_non_finite = poisoned_rows_non_finite && !std::isfinite(r.o[i]);
                    CHECK(poisoned_rows_non_finite);
                }
            }
}
