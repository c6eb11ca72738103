// SPDX-License-Identifier: Apache-2.0
// The shadow model of shadow_session.hpp.
#include "tests/fuzz/shadow_session.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/dtype.hpp"
#include "tests/fuzz/boundary_slack.hpp"
#include "tests/fuzz/fp8_rows.hpp"
#include "tests/reference/reference.hpp"
#include "tests/reference/reference_sparse.hpp"

namespace fuzz {

ShadowSession::ShadowSession(const gqla_config& resolved)
    : cfg_(resolved),
      pages_total_(resolved.max_tokens / resolved.page_size),
      weights_(static_cast<size_t>(resolved.num_layers)) {}

int64_t ShadowSession::a_cols() const {
    return is_gqla() ? cfg_.latent_dim : int64_t(cfg_.num_kv_heads) * cfg_.head_dim;
}
int64_t ShadowSession::b_cols() const {
    return is_gqla() ? cfg_.rope_dim : int64_t(cfg_.num_kv_heads) * cfg_.value_dim;
}
int64_t ShadowSession::q_dim() const { return cfg_.head_dim; }  // resolved: d_c + d_r for GQLA
int64_t ShadowSession::out_dim() const { return cfg_.value_dim; }

std::vector<gqla_seq_id> ShadowSession::live() const {
    std::vector<gqla_seq_id> ids;
    for (const auto& kv : seqs_) ids.push_back(kv.first);
    return ids;
}

int64_t ShadowSession::length(gqla_seq_id id, int32_t layer) const {
    return seqs_.at(id).lengths.at(static_cast<size_t>(layer));
}

bool ShadowSession::layer_has_tokens(int32_t layer) const {
    for (const auto& kv : seqs_)
        if (kv.second.lengths[static_cast<size_t>(layer)] > 0) return true;
    return false;
}

void ShadowSession::add(gqla_seq_id id) {
    Seq s;
    const size_t layers = static_cast<size_t>(cfg_.num_layers);
    s.a.resize(layers);
    s.b.resize(layers);
    s.lengths.assign(layers, 0);
    if (!seqs_.emplace(id, std::move(s)).second) throw std::logic_error("shadow: sequence id reused");
}

void ShadowSession::fork(gqla_seq_id parent, gqla_seq_id child) {
    Seq copy = seqs_.at(parent);
    for (int64_t p : copy.pages) retain(p);
    if (!seqs_.emplace(child, std::move(copy)).second) throw std::logic_error("shadow: sequence id reused");
}

void ShadowSession::drop(int64_t page) {
    auto it = refcount_.find(page);
    if (it == refcount_.end()) throw std::logic_error("shadow: dropping a free page");
    if (--it->second == 0) refcount_.erase(it);
}

void ShadowSession::release(gqla_seq_id id) {
    for (int64_t p : seqs_.at(id).pages) drop(p);
    seqs_.erase(id);
}

int64_t ShadowSession::pages_needed(int32_t layer, const std::vector<gqla_seq_id>& ids,
                                    const std::vector<int64_t>& counts) const {
    const int64_t P = cfg_.page_size;
    int64_t pages = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (counts[i] == 0) continue;
        const Seq& s = seqs_.at(ids[i]);
        const int64_t old_len = s.lengths[static_cast<size_t>(layer)];
        const int64_t need = (old_len + counts[i] + P - 1) / P;
        const int64_t have = static_cast<int64_t>(s.pages.size());
        if (need > have) pages += need - have;
        for (int64_t p = old_len / P; p < have && p < need; ++p)
            if (refcount_.at(s.pages[static_cast<size_t>(p)]) > 1) ++pages;
    }
    return pages;
}

double ShadowSession::as_stored(double v) const {
    alignas(4) unsigned char element[4];
    gqla::store_from_f32(element, cfg_.cache_dtype, 0, static_cast<float>(v));
    return gqla::load_as_f32(element, cfg_.cache_dtype, 0);
}

namespace {

double as_bf16(double v) { return gqla::bf16_to_f32(gqla::f32_to_bf16(static_cast<float>(v))); }

}  // namespace

void ShadowSession::store_rows(const double* a, const double* b, int64_t n, std::vector<double>& sa,
                               std::vector<double>& sb) const {
    const size_t a0 = sa.size(), b0 = sb.size();
    const int64_t na = n * a_cols(), nb = n * b_cols();
    if (!fp8()) {
        for (int64_t k = 0; k < na; ++k) sa.push_back(as_stored(a[k]));
        for (int64_t k = 0; k < nb; ++k) sb.push_back(as_stored(b[k]));
        return;
    }
    // 8-bit: one scale per row group (docs/fp8-cache.md): GQA K and V per
    // (token, KV head); the latent per (token, 128-element block); the GQLA
    // rope key kr in bf16, unscaled.
    sa.resize(a0 + static_cast<size_t>(na));
    sb.resize(b0 + static_cast<size_t>(nb));
    double* qa = sa.data() + a0;
    double* qb = sb.data() + b0;
    if (!is_gqla()) {
        for (int64_t k = 0; k < na; k += cfg_.head_dim) fp8::quantize(a + k, cfg_.head_dim, qa + k);
        for (int64_t k = 0; k < nb; k += cfg_.value_dim) fp8::quantize(b + k, cfg_.value_dim, qb + k);
        return;
    }
    const int r = cfg_.latent_dim;
    for (int64_t j = 0; j < n; ++j)
        for (int k = 0; k < r; k += fp8::kLatentBlock)
            fp8::quantize(a + j * r + k, std::min(fp8::kLatentBlock, r - k), qa + j * r + k);
    for (int64_t k = 0; k < nb; ++k) qb[k] = as_bf16(b[k]);
}

void ShadowSession::append(int32_t layer, const std::vector<gqla_seq_id>& ids, const std::vector<int64_t>& counts,
                           const std::vector<double>& a, const std::vector<double>& b) {
    const int64_t P = cfg_.page_size;
    const size_t l = static_cast<size_t>(layer);
    // Shared-ness is judged before any sequence of the call copies (as one
    // all-or-nothing step): collect the copies, release the originals after.
    std::vector<int64_t> copied;
    size_t row = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t n = counts[i];
        if (n == 0) continue;
        Seq& s = seqs_.at(ids[i]);
        const int64_t old_len = s.lengths[l];
        const int64_t need = (old_len + n + P - 1) / P;
        for (int64_t p = old_len / P; p < static_cast<int64_t>(s.pages.size()) && p < need; ++p) {
            int64_t& page = s.pages[static_cast<size_t>(p)];
            if (refcount_.at(page) <= 1) continue;
            copied.push_back(page);
            page = next_page_++;
            retain(page);
        }
        while (static_cast<int64_t>(s.pages.size()) < need) {
            s.pages.push_back(next_page_++);
            retain(s.pages.back());
        }
        // Kept as the cache stores them (rounded to the cache dtype, or
        // quantized), so decodes are held to the dtype's bound against what
        // gqla reads.
        store_rows(a.data() + row * a_cols(), b.data() + row * b_cols(), n, s.a[l], s.b[l]);
        s.lengths[l] += n;
        row += static_cast<size_t>(n);
    }
    for (int64_t p : copied) drop(p);
}

int64_t ShadowSession::tokens_cached() const {
    int64_t sum = 0;
    for (const auto& kv : seqs_) sum += *std::max_element(kv.second.lengths.begin(), kv.second.lengths.end());
    return sum;
}

ShadowSession::Rows ShadowSession::rows(gqla_seq_id id) const {
    const Seq& s = seqs_.at(id);
    Rows r;
    r.lengths = s.lengths;
    r.a = s.a;
    r.b = s.b;
    return r;
}

int64_t ShadowSession::pages_for(const Rows& rows) const {
    const int64_t longest = *std::max_element(rows.lengths.begin(), rows.lengths.end());
    return (longest + cfg_.page_size - 1) / cfg_.page_size;
}

void ShadowSession::import(gqla_seq_id id, const Rows& rows) {
    // A new sequence whose rows are appended layer by layer: pages of its
    // own, shared with nothing.
    Seq s;
    s.a = rows.a;
    s.b = rows.b;
    s.lengths = rows.lengths;
    for (int64_t p = 0; p < pages_for(rows); ++p) {
        s.pages.push_back(next_page_++);
        retain(s.pages.back());
    }
    if (!seqs_.emplace(id, std::move(s)).second) throw std::logic_error("shadow: sequence id reused");
}

const char* ShadowSession::form_name(Form f) {
    switch (f) {
        case Form::Direct:
            return "direct";
        case Form::Expanded:
            return "expanded";
        case Form::Transient:
            return "transient";
    }
    return "?";
}

bool ShadowSession::expanded_rows(const Seq& s, size_t l, Form form, std::vector<double>& keys,
                                  std::vector<double>& vals, std::vector<double>* dk, std::vector<double>* dv) const {
    const int G = cfg_.num_kv_heads, r = cfg_.latent_dim, dc = cfg_.nope_dim, dr = cfg_.rope_dim, nv = cfg_.value_dim,
              dq = dc + dr;
    const int64_t L = s.lengths[l];
    const std::vector<double>& w = weights_[l];
    keys.assign(static_cast<size_t>(L * G * dq), 0.0);
    vals.assign(static_cast<size_t>(L * G * nv), 0.0);
    if (!fp8() || form == Form::Transient) {
        // Rounded to the cache dtype (8-bit caches' transient rows: bf16).
        gqla::ref::gqla_expanded_rows(G, r, dc, dr, nv, L, w.data(), s.a[l].data(), s.b[l].data(), keys.data(),
                                      vals.data());
        for (int64_t row = 0; row < L * G; ++row)  // the nope parts; kr is stored already
            for (int i = 0; i < dc; ++i) {
                double& x = keys[static_cast<size_t>(row * dq + i)];
                x = fp8() ? as_bf16(x) : as_stored(x);
            }
        for (double& v : vals) v = fp8() ? as_bf16(v) : as_stored(v);
        return false;
    }
    // The 8-bit kept expanded cache: each (token, group)'s KC and VE rows
    // quantized with their own scales from the f32 GEMM of the stored latent
    // with W. Its error against the float64 dot is at most (r + 1) f32
    // roundings of sum_k |w_k c_k| in any summation order, plus one of
    // widening the latent to f32 (e4m3 x scale); (r + 2) with a margin.
    const bool bounded = dk != nullptr;
    if (bounded) {
        dk->assign(keys.size(), 0.0);
        dv->assign(vals.size(), 0.0);
    }
    const size_t N = static_cast<size_t>(dc + nv);
    std::vector<double> x(N), err(N, 0.0), out(N), dev(N);
    bool boundary = false;
    for (int64_t j = 0; j < L; ++j) {
        const double* c = s.a[l].data() + j * r;
        for (int g = 0; g < G; ++g) {
            for (size_t i = 0; i < N; ++i) {
                const double* row = w.data() + (static_cast<int64_t>(g) * static_cast<int64_t>(N) + i) * r;
                x[i] = gqla::ref::dot(row, c, r);
                if (bounded) {
                    double sum = 0.0;
                    for (int k = 0; k < r; ++k) sum += std::fabs(row[k] * c[k]);
                    err[i] = (r + 2) * 0x1p-24 * sum * 1.01;
                }
            }
            boundary |= fp8::quantize_bounded(x.data(), err.data(), dc, out.data(), dev.data());
            boundary |= fp8::quantize_bounded(x.data() + dc, err.data() + dc, nv, out.data() + dc, dev.data() + dc);
            const size_t krow = static_cast<size_t>((j * G + g) * dq), vrow = static_cast<size_t>((j * G + g) * nv);
            for (int i = 0; i < dc; ++i) keys[krow + i] = out[static_cast<size_t>(i)];
            for (int i = 0; i < dr; ++i) keys[krow + dc + i] = s.b[l][static_cast<size_t>(j * dr + i)];
            for (int i = 0; i < nv; ++i) vals[vrow + i] = out[static_cast<size_t>(dc + i)];
            if (bounded) {
                for (int i = 0; i < dc; ++i) (*dk)[krow + i] = dev[static_cast<size_t>(i)];
                for (int i = 0; i < nv; ++i) (*dv)[vrow + i] = dev[static_cast<size_t>(dc + i)];
            }
        }
    }
    return boundary;
}

ShadowSession::Expected ShadowSession::reference(gqla_seq_id id, const Queries& qs, Form form, bool with_slack) const {
    const Seq& s = seqs_.at(id);
    const size_t l = static_cast<size_t>(qs.layer);
    const int64_t L = s.lengths[l];
    const int H = cfg_.num_heads, G = cfg_.num_kv_heads, Dv = cfg_.value_dim;
    const double scale = cfg_.softmax_scale;
    Expected e;
    e.o.assign(static_cast<size_t>(qs.n) * H * Dv, 0.0);
    e.lse.assign(static_cast<size_t>(qs.n) * H, 0.0);
    // GQA form over rows [L, G, D] / [L, G, Dv]: dense, or the listed positions.
    auto gqa = [&](int D, const double* K, const double* V) {
        if (qs.idx != nullptr)
            gqla::ref::gqa_sparse_decode(H, G, D, Dv, L, qs.n, scale, qs.q, K, V, qs.idx, qs.topk, e.o.data(),
                                         e.lse.data());
        else
            gqla::ref::gqa_decode(H, G, D, Dv, L, qs.n, scale, qs.q, K, V, e.o.data(), e.lse.data());
    };
    if (!is_gqla()) {
        gqa(cfg_.head_dim, s.a[l].data(), s.b[l].data());
        return e;
    }
    const int r = cfg_.latent_dim, dc = cfg_.nope_dim, dr = cfg_.rope_dim;
    if (form == Form::Direct) {
        const double* W = weights_[l].data();
        if (qs.idx != nullptr)
            gqla::ref::gqla_sparse_decode(H, G, r, dc, dr, Dv, L, qs.n, scale, qs.q, W, s.a[l].data(), s.b[l].data(),
                                          qs.idx, qs.topk, e.o.data(), e.lse.data());
        else
            gqla::ref::gqla_decode(H, G, r, dc, dr, Dv, L, qs.n, scale, qs.q, W, s.a[l].data(), s.b[l].data(),
                                   e.o.data(), e.lse.data());
        return e;
    }
    std::vector<double> keys, vals, dk, dv;
    const bool bounded = with_slack && fp8() && form == Form::Expanded;
    const bool boundary = expanded_rows(s, l, form, keys, vals, bounded ? &dk : nullptr, bounded ? &dv : nullptr);
    gqa(dc + dr, keys.data(), vals.data());
    if (bounded && boundary) {
        e.slack_o.resize(e.o.size());
        e.slack_lse.resize(e.lse.size());
        attention_slack(H, G, dc + dr, Dv, L, qs.n, scale, qs.q, keys.data(), vals.data(), dk.data(), dv.data(), qs.idx,
                        qs.topk, e.slack_o.data(), e.slack_lse.data());
    }
    return e;
}

double ShadowSession::value_rms(gqla_seq_id id, int32_t layer) const {
    const Seq& s = seqs_.at(id);
    const size_t l = static_cast<size_t>(layer);
    const int64_t L = s.lengths[l];
    double sum = 0;
    int64_t count = 0;
    if (!is_gqla()) {
        for (double v : s.b[l]) sum += v * v;
        count = static_cast<int64_t>(s.b[l].size());
    } else {
        const int64_t r = cfg_.latent_dim, dc = cfg_.nope_dim, dv = cfg_.value_dim;
        const std::vector<double>& w = weights_[l];
        for (int64_t g = 0; g < cfg_.num_kv_heads; ++g)
            for (int64_t i = 0; i < dv; ++i) {
                const double* row = w.data() + ((g * (dc + dv)) + dc + i) * r;  // W_UV row i of group g
                for (int64_t j = 0; j < L; ++j) {
                    const double* c = s.a[l].data() + j * r;
                    double v = 0;
                    for (int64_t k = 0; k < r; ++k) v += row[k] * c[k];
                    sum += v * v;
                    ++count;
                }
            }
    }
    return count ? std::sqrt(sum / static_cast<double>(count)) : 0.0;
}

}  // namespace fuzz
