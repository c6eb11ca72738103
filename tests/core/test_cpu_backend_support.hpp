// SPDX-License-Identifier: Apache-2.0
// A small driver of the CPU backend vtable for its tests: a page allocator,
// sequences that remember what was appended (as the cache stores it, in
// float64) and decode calls checked against the float64 reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend_internal.hpp"
#include "core/backend_api.h"
#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "tests/core/test_checks.hpp"

namespace cpu_backend_test {

// x as it survives a round trip through dtype t.
inline double round_to(double x, gqla_dtype t) {
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

inline double tolerance(gqla_dtype cache) {
    switch (cache) {
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

// A host buffer of dtype t holding a tensor with given shape and strides.
struct HostTensor {
    std::vector<unsigned char> bytes;
    gqla_view view{};

    HostTensor(gqla_dtype t, std::vector<int64_t> shape, int64_t inner_pad = 0) {
        view.dtype = t;
        view.on_device = 0;
        view.ndim = static_cast<int32_t>(shape.size());
        int64_t stride = 1;
        for (int i = view.ndim - 1; i >= 0; --i) {
            view.shape[i] = shape[static_cast<size_t>(i)];
            view.strides[i] = stride;
            stride *= shape[static_cast<size_t>(i)] + (i == view.ndim - 1 ? inner_pad : 0);
        }
        bytes.assign(static_cast<size_t>(stride) * gqla::dtype_size(t), 0);
        view.data = bytes.data();
    }
    size_t offset(std::initializer_list<int64_t> idx) const {
        size_t off = 0;
        int i = 0;
        for (int64_t x : idx) off += static_cast<size_t>(x * view.strides[i++]);
        return off;
    }
    void set(std::initializer_list<int64_t> idx, double v) {
        gqla::store_from_f32(view.data, view.dtype, offset(idx), static_cast<float>(v));
    }
    double get(std::initializer_list<int64_t> idx) const {
        return gqla::load_as_f32(view.data, view.dtype, offset(idx));
    }
    void poison() {
        for (size_t i = 0; i < bytes.size() / gqla::dtype_size(view.dtype); ++i)
            gqla::store_from_f32(view.data, view.dtype, i, std::numeric_limits<float>::quiet_NaN());
    }
};

struct Sequence {
    int32_t slot = 0;
    std::vector<int32_t> pages;
    int64_t length = 0;
    // Cache contents of the tested layer as stored: GQA kind K [L][G][D] and
    // V [L][G][Dv]; GQLA C [L][r] and KR [L][d_r].
    std::vector<double> a, b;
    // GQLA: the per-group keys [W_UK c | kr] and values W_UV c of the first
    // `expanded` tokens, in float64 (the long-context oracle).
    std::vector<double> ek, ev;
    int64_t expanded = 0;
};

struct Errors {
    double out = 0.0;  // rel L2 of o
    double lse = 0.0;  // core_test::lse_error
};

class Driver {
public:
    explicit Driver(const gqla_backend_desc& d)
        : desc_(d), vt_(gqla_cpu_backend()), seed_(core_test::test_seed()), rng_(seed_) {
        char err[256] = {0};
        status_ = vt_->create(&desc_, &ctx_, err, sizeof err);
        for (int32_t p = 0; p < d.num_pages; ++p) free_.push_back(p);
        std::shuffle(free_.begin(), free_.end(), rng_);  // pages of a sequence are scattered
    }
    ~Driver() {
        if (ctx_) vt_->destroy(ctx_);
    }
    Driver(const Driver&) = delete;
    Driver& operator=(const Driver&) = delete;

    gqla_status status() const { return status_; }
    void* ctx() const { return ctx_; }
    const gqla_backend_vtable* vt() const { return vt_; }
    const gqla_backend_desc& desc() const { return desc_; }
    std::mt19937_64& rng() { return rng_; }
    uint64_t seed() const { return seed_; }
    std::string replay_hint() const { return core_test::replay_hint(seed_); }

    // Tested layer: the last one; the others get unrelated data.
    int32_t layer() const { return desc_.num_layers - 1; }

    double randn() { return std::normal_distribution<double>(0.0, 1.0)(rng_); }

    Sequence& add_sequence() {
        seqs_.push_back(Sequence{});
        seqs_.back().slot = static_cast<int32_t>(seqs_.size() - 1);
        return seqs_.back();
    }
    std::vector<Sequence>& sequences() { return seqs_; }

    // W_UKV of every layer, random with unit-variance outputs; returns the
    // tested layer's weights in float64 as the backend stores them.
    std::vector<double> set_random_weights(gqla_dtype wdt) {
        const int64_t rows = int64_t(desc_.num_kv_heads) * (desc_.nope_dim + desc_.value_dim), r = desc_.latent_dim;
        std::vector<double> tested;
        for (int32_t layer = 0; layer < desc_.num_layers; ++layer) {
            HostTensor w(wdt, {rows, r});
            std::vector<double> vals(static_cast<size_t>(rows * r));
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t k = 0; k < r; ++k) {
                    double v = round_to(randn() / std::sqrt(double(r)), wdt);
                    vals[static_cast<size_t>(i * r + k)] = v;
                    w.set({i, k}, v);
                }
            if (vt_->set_weights(ctx_, layer, &w.view) != GQLA_OK) return {};
            if (layer == this->layer()) tested = vals;
        }
        weights_ = tested;
        return tested;
    }
    const std::vector<double>& weights() const { return weights_; }

    // Appends counts[i] random tokens to sequence idx[i] in every layer.
    gqla_status append(const std::vector<int>& idx, const std::vector<int64_t>& counts, int write_expanded) {
        const gqla_backend_desc& d = desc_;
        const bool gqa = d.kind == GQLA_KIND_GQA;
        const int64_t G = d.num_kv_heads;
        const int64_t wa = gqa ? d.head_dim : d.latent_dim, wb = gqa ? d.value_dim : d.rope_dim;
        int64_t n = 0;
        for (int64_t c : counts) n += c;
        std::vector<gqla_append_item> items;
        for (size_t i = 0; i < idx.size(); ++i) {
            Sequence& s = seqs_[static_cast<size_t>(idx[i])];
            while (int64_t(s.pages.size()) * d.page_size < s.length + counts[i]) s.pages.push_back(take_page());
        }
        int64_t row0 = 0;
        for (size_t i = 0; i < idx.size(); ++i) {
            Sequence& s = seqs_[static_cast<size_t>(idx[i])];
            items.push_back(gqla_append_item{s.pages.data(), s.slot, s.length, counts[i], row0});
            row0 += counts[i];
        }
        for (int32_t layer = 0; layer < d.num_layers; ++layer) {
            std::vector<int64_t> shape_a = gqa ? std::vector<int64_t>{n, G, wa} : std::vector<int64_t>{n, wa};
            std::vector<int64_t> shape_b = gqa ? std::vector<int64_t>{n, G, wb} : std::vector<int64_t>{n, wb};
            HostTensor ta(d.io_dtype, shape_a, 3), tb(d.io_dtype, shape_b, 1);
            std::vector<double> va, vb;
            fill(ta, gqa, n, G, wa, va);
            fill(tb, gqa, n, G, wb, vb);
            gqla_append_args args{};
            args.layer = layer;
            args.num_items = static_cast<int32_t>(items.size());
            args.items = items.data();
            args.a = ta.view;
            args.b = tb.view;
            args.write_expanded = write_expanded;
            gqla_status st = vt_->append(ctx_, &args);
            if (st != GQLA_OK) return st;
            if (layer != this->layer()) continue;
            const int64_t per_a = (gqa ? G : 1) * wa, per_b = (gqa ? G : 1) * wb;
            row0 = 0;
            for (size_t i = 0; i < idx.size(); ++i) {
                Sequence& s = seqs_[static_cast<size_t>(idx[i])];
                s.a.insert(s.a.end(), va.begin() + row0 * per_a, va.begin() + (row0 + counts[i]) * per_a);
                s.b.insert(s.b.end(), vb.begin() + row0 * per_b, vb.begin() + (row0 + counts[i]) * per_b);
                row0 += counts[i];
            }
        }
        for (size_t i = 0; i < idx.size(); ++i) seqs_[static_cast<size_t>(idx[i])].length += counts[i];
        return GQLA_OK;
    }

    // Expanded rows of every layer for every token (GQA path switched on).
    gqla_status expand_all() {
        std::vector<gqla_append_item> items;
        for (Sequence& s : seqs_) items.push_back(gqla_append_item{s.pages.data(), s.slot, 0, s.length, 0});
        for (int32_t layer = 0; layer < desc_.num_layers; ++layer) {
            gqla_expand_args args{layer, static_cast<int32_t>(items.size()), items.data()};
            gqla_status st = vt_->expand(ctx_, &args);
            if (st != GQLA_OK) return st;
        }
        return GQLA_OK;
    }

    // Decodes the sequences `idx` with s_q queries on `path` and compares o
    // and lse with the float64 reference. out_o (optional) receives o.
    Errors decode_and_check(const std::vector<int>& idx, int s_q, gqla_path path, gqla_status* st_out,
                            std::vector<double>* out_o = nullptr) {
        const gqla_backend_desc& d = desc_;
        const bool gqa = d.kind == GQLA_KIND_GQA;
        const int64_t B = static_cast<int64_t>(idx.size()), H = d.num_heads;
        const int64_t dq = gqa ? d.head_dim : d.nope_dim + d.rope_dim, dv = d.value_dim;
        HostTensor q(d.io_dtype, {B, s_q, H, dq}, 5), o(d.io_dtype, {B, s_q, H, dv}, 2),
            lse(GQLA_DTYPE_F32, {B, s_q, H}, 1);
        std::vector<double> qv(static_cast<size_t>(B * s_q * H * dq));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < s_q; ++i)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t k = 0; k < dq; ++k) {
                        double v = round_to(randn(), d.io_dtype);
                        qv[static_cast<size_t>(((b * s_q + i) * H + h) * dq + k)] = v;
                        q.set({b, i, h, k}, v);
                    }
        o.poison();
        lse.poison();
        std::vector<gqla_decode_seq> ds;
        for (int i : idx) {
            Sequence& s = seqs_[static_cast<size_t>(i)];
            ds.push_back(gqla_decode_seq{s.pages.data(), static_cast<int32_t>(s.pages.size()), s.slot, s.length,
                                         static_cast<int32_t>(s_q), static_cast<int64_t>(ds.size()) * s_q});
        }
        gqla_decode_args args{layer(),
                              path,
                              static_cast<int32_t>(B),
                              s_q,
                              ds.data(),
                              q.view,
                              o.view,
                              lse.view,
                              /*ragged=*/0,
                              /*transient=*/0,
                              static_cast<int64_t>(B) * s_q,
                              /*indices=*/gqla_view{},
                              /*topk=*/0};
        *st_out = vt_->decode(ctx_, &args);
        Errors e;
        if (*st_out != GQLA_OK) return e;
        std::vector<double> got, ref, got_lse, ref_lse;
        for (int64_t b = 0; b < B; ++b) {
            const Sequence& s = seqs_[static_cast<size_t>(idx[static_cast<size_t>(b)])];
            std::vector<double> ro(static_cast<size_t>(s_q * H * dv)), rl(static_cast<size_t>(s_q * H));
            const double* qb = qv.data() + b * s_q * H * dq;
            if (gqa)
                gqla::ref::gqa_decode(int(H), d.num_kv_heads, d.head_dim, int(dv), s.length, s_q, d.softmax_scale, qb,
                                      s.a.data(), s.b.data(), ro.data(), rl.data());
            else if (s.length > kDefinitionOracleMaxLength) {
                // Long contexts: the GQA form of the GQLA math on float64 expanded
                // keys (the definition costs G*(d_c+d_v)*r per token per head).
                expand_reference(const_cast<Sequence&>(s));
                gqla::ref::gqa_decode(int(H), d.num_kv_heads, d.nope_dim + d.rope_dim, int(dv), s.length, s_q,
                                      d.softmax_scale, qb, s.ek.data(), s.ev.data(), ro.data(), rl.data());
            } else
                gqla::ref::gqla_decode(int(H), d.num_kv_heads, d.latent_dim, d.nope_dim, d.rope_dim, int(dv), s.length,
                                       s_q, d.softmax_scale, qb, weights_.data(), s.a.data(), s.b.data(), ro.data(),
                                       rl.data());
            ref.insert(ref.end(), ro.begin(), ro.end());
            ref_lse.insert(ref_lse.end(), rl.begin(), rl.end());
            for (int64_t i = 0; i < s_q; ++i)
                for (int64_t h = 0; h < H; ++h) {
                    got_lse.push_back(lse.get({b, i, h}));
                    for (int64_t k = 0; k < dv; ++k) got.push_back(o.get({b, i, h, k}));
                }
        }
        e.out = gqla::ref::rel_l2(got.data(), ref.data(), got.size());
        e.lse = core_test::lse_error(got_lse.data(), ref_lse.data(), got_lse.size());
        if (out_o) *out_o = got;
        return e;
    }

    int32_t take_page() {
        const int32_t p = free_.back();
        free_.pop_back();
        return p;
    }
    size_t free_pages() const { return free_.size(); }

private:
    static constexpr int64_t kDefinitionOracleMaxLength = 64;

    void expand_reference(Sequence& s) const {
        const gqla_backend_desc& d = desc_;
        const int64_t G = d.num_kv_heads, r = d.latent_dim, dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim;
        s.ek.resize(static_cast<size_t>(s.length * G * (dc + dr)));
        s.ev.resize(static_cast<size_t>(s.length * G * dv));
        for (int64_t j = s.expanded; j < s.length; ++j)
            gqla::ref::gqla_token_rows(int(G), int(r), int(dc), int(dr), int(dv), weights_.data(), s.a.data() + j * r,
                                       s.b.data() + j * dr, s.ek.data() + j * G * (dc + dr), s.ev.data() + j * G * dv);
        s.expanded = s.length;
    }

    // Random rows (rounded through the io and cache dtypes, as the cache
    // will hold them) into t and, in float64, into vals.
    void fill(HostTensor& t, bool gqa, int64_t n, int64_t G, int64_t w, std::vector<double>& vals) {
        const int64_t groups = gqa ? G : 1;
        vals.resize(static_cast<size_t>(n * groups * w));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t g = 0; g < groups; ++g)
                for (int64_t k = 0; k < w; ++k) {
                    double v = round_to(round_to(randn(), desc_.io_dtype), desc_.cache_dtype);
                    vals[static_cast<size_t>((i * groups + g) * w + k)] = v;
                    if (gqa)
                        t.set({i, g, k}, v);
                    else
                        t.set({i, k}, v);
                }
    }

    gqla_backend_desc desc_;
    const gqla_backend_vtable* vt_;
    void* ctx_ = nullptr;
    gqla_status status_ = GQLA_ERR_INTERNAL;
    uint64_t seed_;
    std::mt19937_64 rng_;
    std::vector<int32_t> free_;
    std::vector<Sequence> seqs_;
    std::vector<double> weights_;
};

inline gqla_backend_desc gqa_desc(gqla_dtype cache, int G) {
    gqla_backend_desc d{};
    d.kind = GQLA_KIND_GQA;
    d.num_heads = 6;
    d.num_kv_heads = G;
    d.head_dim = 96;
    d.value_dim = 80;
    d.num_layers = 2;
    d.cache_dtype = cache;
    d.io_dtype = GQLA_DTYPE_F32;
    d.softmax_scale = static_cast<float>(1.0 / std::sqrt(96.0));
    d.page_size = 16;
    d.num_pages = 400;
    d.max_sequences = 16;
    d.max_batch = 8;
    d.max_q_len = 5;
    d.num_threads = 2;
    d.keep_latent = 1;  // ABI 3: 0 would drop the GQLA latent pool
    return d;
}

inline gqla_backend_desc gqla_desc(gqla_dtype cache, int G) {
    gqla_backend_desc d{};
    d.kind = GQLA_KIND_GQLA;
    d.num_heads = 6;
    d.num_kv_heads = G;
    d.latent_dim = 384;
    d.nope_dim = 96;
    d.rope_dim = 32;
    d.value_dim = 80;
    d.num_layers = 2;
    d.cache_dtype = cache;
    d.io_dtype = GQLA_DTYPE_F32;
    d.softmax_scale = static_cast<float>(1.0 / std::sqrt(128.0));
    d.page_size = 16;
    d.num_pages = 400;
    d.max_sequences = 16;
    d.max_batch = 8;
    d.max_q_len = 5;
    d.num_threads = 2;
    d.keep_latent = 1;  // ABI 3: 0 would drop the GQLA latent pool
    return d;
}

// A kernel table to test: one per ISA (AMX included), and the AVX512-BF16
// table in both of its GQA-form score variants (kernel_table.hpp:
// Bf16GqaScores).
struct KernelChoice {
    gqla::cpu::Isa isa;
    gqla::cpu::Bf16GqaScores scores = gqla::cpu::Bf16GqaScores::Dot;
};
constexpr KernelChoice kAllKernels[] = {
    {gqla::cpu::Isa::Scalar},
    {gqla::cpu::Isa::Avx2},
    {gqla::cpu::Isa::Avx512},
    {gqla::cpu::Isa::Avx512Bf16, gqla::cpu::Bf16GqaScores::Dot},
    {gqla::cpu::Isa::Avx512Bf16, gqla::cpu::Bf16GqaScores::Fma},
    {gqla::cpu::Isa::Amx},
};

inline std::string kernels_label(KernelChoice k) {  // std::string: doctest prints a const char* as an address
    switch (k.isa) {
        case gqla::cpu::Isa::Scalar:
            return "scalar";
        case gqla::cpu::Isa::Avx2:
            return "avx2";
        case gqla::cpu::Isa::Avx512:
            return "avx512";
        case gqla::cpu::Isa::Avx512Bf16:
            return k.scores == gqla::cpu::Bf16GqaScores::Dot ? "avx512-bf16" : "avx512-bf16 (fma scores)";
        case gqla::cpu::Isa::Amx:
            return "avx512-amx";
    }
    return "?";
}

// Pins the context to the table of k; false when the host lacks its ISA.
inline bool use_kernels(void* ctx, KernelChoice k) {
    if (!gqla::cpu::use_isa(ctx, k.isa)) return false;
    if (k.isa == gqla::cpu::Isa::Avx512Bf16) gqla::cpu::use_table(ctx, gqla::cpu::avx512bf16_kernels(k.scores));
    return true;
}

constexpr gqla_dtype kAllDtypes[] = {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16};

}  // namespace cpu_backend_test
