// SPDX-License-Identifier: Apache-2.0
#include "tests/fuzz/shadow_session.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"

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
        // Kept as the cache stores them (rounded to the cache dtype), so
        // decodes are held to the dtype's bound against what gqla reads.
        for (size_t k = row * a_cols(); k < (row + n) * a_cols(); ++k) s.a[l].push_back(as_stored(a[k]));
        for (size_t k = row * b_cols(); k < (row + n) * b_cols(); ++k) s.b[l].push_back(as_stored(b[k]));
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

void ShadowSession::reference(gqla_seq_id id, int32_t layer, int32_t s_q, const double* q, double* o, double* lse,
                              bool from_expanded) const {
    const Seq& s = seqs_.at(id);
    const size_t l = static_cast<size_t>(layer);
    const int64_t L = s.lengths[l];
    if (is_gqla() && from_expanded) {
        const int G = cfg_.num_kv_heads, r = cfg_.latent_dim, dc = cfg_.nope_dim, dr = cfg_.rope_dim,
                  dv = cfg_.value_dim, dq = dc + dr;
        std::vector<double> keys(static_cast<size_t>(L * G * dq)), vals(static_cast<size_t>(L * G * dv));
        gqla::ref::gqla_expanded_rows(G, r, dc, dr, dv, L, weights_[l].data(), s.a[l].data(), s.b[l].data(),
                                      keys.data(), vals.data());
        for (int64_t row = 0; row < L * G; ++row)  // the nope parts; kr is stored already
            for (int i = 0; i < dc; ++i)
                keys[static_cast<size_t>(row * dq + i)] = as_stored(keys[static_cast<size_t>(row * dq + i)]);
        for (double& v : vals) v = as_stored(v);
        gqla::ref::gqa_decode(cfg_.num_heads, G, dq, dv, L, s_q, cfg_.softmax_scale, q, keys.data(), vals.data(), o,
                              lse);
    } else if (is_gqla())
        gqla::ref::gqla_decode(cfg_.num_heads, cfg_.num_kv_heads, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim,
                               cfg_.value_dim, L, s_q, cfg_.softmax_scale, q, weights_[l].data(), s.a[l].data(),
                               s.b[l].data(), o, lse);
    else
        gqla::ref::gqa_decode(cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim, cfg_.value_dim, L, s_q,
                              cfg_.softmax_scale, q, s.a[l].data(), s.b[l].data(), o, lse);
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
