// SPDX-License-Identifier: Apache-2.0
#include "reference_rows.hpp"

#include <algorithm>

#include "tests/reference/reference.hpp"

namespace gqla::bench {
namespace {

// Keys [pool, G, d_c] and values [pool, G, d_v] of every pool row, formed as
// tests/reference/reference.cpp forms them per token: W_UK[g] c and W_UV[g] c in double.
void form_pool_keys(const CheckInputs& in, std::vector<double>* kc, std::vector<double>* ve) {
    const Preset& p = *in.preset;
    const int64_t pool = static_cast<int64_t>(in.pool.size()) / p.r;
    kc->assign(static_cast<size_t>(pool) * p.G * p.d_c, 0.0);
    ve->assign(static_cast<size_t>(pool) * p.G * p.d_v, 0.0);
#pragma omp parallel for schedule(dynamic)
    for (int g = 0; g < p.G; ++g) {
        const float* w_uk = in.w + static_cast<size_t>(g) * (p.d_c + p.d_v) * p.r;
        for (int64_t i = 0; i < pool; ++i) {
            const float* c = in.pool.data() + i * p.r;
            for (int row = 0; row < p.d_c + p.d_v; ++row) {
                double sum = 0.0;
                for (int t = 0; t < p.r; ++t)
                    sum += static_cast<double>(w_uk[static_cast<size_t>(row) * p.r + t]) * c[t];
                if (row < p.d_c)
                    (*kc)[(static_cast<size_t>(i) * p.G + g) * p.d_c + row] = sum;
                else
                    (*ve)[(static_cast<size_t>(i) * p.G + g) * p.d_v + row - p.d_c] = sum;
            }
        }
    }
}

}  // namespace

std::vector<RowBlock> checked_blocks(int32_t q_len) {
    if (q_len <= 32) return {{0, q_len}};
    return {{0, 8}, {q_len / 2 - 2, 4}, {q_len - 8, 8}};
}

int32_t latent_pool_row(int b, int64_t j, int pool_rows) {
    uint64_t z = static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(j) + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<int32_t>(z % static_cast<uint64_t>(pool_rows));
}

std::vector<double> reference_rows(const CheckInputs& in) {
    const Preset& p = *in.preset;
    const int B = static_cast<int>(in.lengths.size());
    const int n_rep = p.H / p.G, dq = p.q_dim(), dv = p.out_dim();
    std::vector<double> kc, ve;
    if (p.is_gqla()) form_pool_keys(in, &kc, &ve);

    // Where each sequence's queries and checked rows start.
    std::vector<int64_t> q_row(B), out_row(B);
    int64_t rows = 0, checked = 0;
    for (int b = 0; b < B; ++b) {
        q_row[b] = rows;
        out_row[b] = checked;
        rows += in.q_lens[b];
        for (const RowBlock& blk : checked_blocks(in.q_lens[b])) checked += blk.count;
    }
    std::vector<double> out(static_cast<size_t>(checked) * p.H * dv);

    // One task per (sequence, group): that group's keys and values over the
    // whole sequence, then a GQA reference call per block on its prefix.
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < B * p.G; ++task) {
        const int b = task / p.G, g = task % p.G;
        const int64_t L = in.lengths[b];
        const int32_t q_len = in.q_lens[b];
        std::vector<double> K(static_cast<size_t>(L) * dq), V(static_cast<size_t>(L) * dv);
        for (int64_t j = 0; j < L; ++j) {
            double* key = &K[static_cast<size_t>(j) * dq];
            double* val = &V[static_cast<size_t>(j) * dv];
            if (p.is_gqla()) {
                const size_t i = static_cast<size_t>(in.pool_row[b][j]);
                std::copy_n(&kc[(i * p.G + g) * p.d_c], p.d_c, key);
                std::copy_n(&in.kr[b][static_cast<size_t>(j) * p.d_r], p.d_r, key + p.d_c);
                std::copy_n(&ve[(i * p.G + g) * p.d_v], p.d_v, val);
            } else {
                std::copy_n(&in.k[b][(static_cast<size_t>(j) * p.G + g) * dq], dq, key);
                std::copy_n(&in.v[b][(static_cast<size_t>(j) * p.G + g) * dv], dv, val);
            }
        }
        int64_t done = out_row[b];
        for (const RowBlock& blk : checked_blocks(q_len)) {
            std::vector<double> qg(static_cast<size_t>(blk.count) * n_rep * dq);
            for (int t = 0; t < blk.count; ++t)
                for (int h = 0; h < n_rep; ++h) {
                    const int64_t row = (q_row[b] + blk.first + t) % in.q_period;
                    const float* src = in.q + (row * p.H + g * n_rep + h) * dq;
                    std::copy_n(src, dq, &qg[(static_cast<size_t>(t) * n_rep + h) * dq]);
                }
            std::vector<double> og(static_cast<size_t>(blk.count) * n_rep * dv);
            // The block's last query sits at position L - q_len + first + count - 1.
            const int64_t prefix = L - q_len + blk.first + blk.count;
            ref::gqa_decode(n_rep, 1, dq, dv, prefix, blk.count, in.scale, qg.data(), K.data(), V.data(), og.data(),
                            nullptr);
            for (int t = 0; t < blk.count; ++t)
                std::copy_n(&og[static_cast<size_t>(t) * n_rep * dv], static_cast<size_t>(n_rep) * dv,
                            &out[((done + t) * p.H + g * n_rep) * dv]);
            done += blk.count;
        }
    }
    return out;
}

}  // namespace gqla::bench
