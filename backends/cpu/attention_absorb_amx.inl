// SPDX-License-Identifier: Apache-2.0
// The absorb form on Intel AMX tiles (AMX-TILE + AMX-BF16) over bf16 and
// 8-bit latents. Included by kernels_amx.cpp inside its bf16dot namespace,
// after attention_fp8_dot.inl, whose query pairs, latent pairs and raw bf16
// staging these kernels reuse, so their numerics are those of the
// AVX512-BF16 absorb kernels (docs/kernels.md, "Absorb on AMX tiles"):
// q~ split into high and low bf16 parts, probabilities rounded to bf16 (for
// 8-bit latents times a scale block's token scales), f32 sums, and the
// causal diagonal through the f32 tile, lane by lane.
//
// Scores: S^T [16 tokens x 16 rows] += latent rows [16 tokens x 32 dims] .
// query pairs [16 dim pairs x 16 rows], the latent tile loaded straight
// from the cache page (or from the 8-bit staging), the query pairs from
// absorb_pair_queries; the result lands in the score tile's [token][row]
// layout. Values: O [16 rows x 16 dims] += P [16 rows x 32 tokens] . latent
// pairs [16 token pairs x 16 dims] (absorb_pair_latent): the output rows are
// row-major [rows][r] in the item's AMX accumulator, transposed into the
// item's [r][rows] accumulator once, at its end or before a masked block.
//
// Tile registers, all 16 rows x 64 bytes: scores use tmm0-3 (high and low
// sums of two token tiles), tmm4/5 (their latent rows), tmm6/7 (query
// pairs, high and low); values use tmm0-3 (4 x 16 output dims), tmm4
// (probabilities), tmm5-7 (latent pairs).

struct AmxTileConfig {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Configures the tiles for one item and releases them after it, so a
// thread that leaves the kernel carries no tile state into context
// switches (8 KB saved and restored otherwise).
struct AmxTiles {
    AmxTiles() {
        alignas(64) AmxTileConfig c{};
        c.palette = 1;
        for (int i = 0; i < 8; ++i) {
            c.colsb[i] = 64;
            c.rows[i] = 16;
        }
        _tile_loadconfig(&c);
    }
    ~AmxTiles() { _tile_release(); }
    AmxTiles(const AmxTiles&) = delete;
    AmxTiles& operator=(const AmxTiles&) = delete;
};

constexpr int kAmxTileRows = 16;  // tokens of a score tile, rows of an output tile
constexpr int kAmxKeyStep = 32;   // bf16 elements of a tile row

// Items the AMX kernels take: whole 32-element key steps in both segments.
static inline bool amx_absorb_shape(const AbsorbItem& it) {
    return it.r > 0 && it.r % kAmxKeyStep == 0 && it.d_r % kAmxKeyStep == 0 && it.rows_pad % kAmxTileRows == 0;
}

static_assert(kAbsorbTokenBlock == 2 * kAmxTileRows, "a value tile takes one block's 32 tokens");

static inline void transpose16x16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

// it.acc[k][rows] = the AMX accumulator's [rows][k], 16 x 16 at a time.
static inline void amx_store_accumulator(const AbsorbItem& it, const float* rows_acc) {
    const int R = it.rows_pad, r = it.r;
    for (int col = 0; col < R; col += 16)
        for (int k = 0; k < r; k += 16) {
            __m512 v[16];
            for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(rows_acc + int64_t(col + i) * r + k);
            transpose16x16(v);
            for (int i = 0; i < 16; ++i) _mm512_storeu_ps(it.acc + int64_t(k + i) * R + col, v[i]);
        }
}

// Tile products of one key range: for k in [k0, k1) step 32, the latent
// tiles of NT token tiles (a[t] + k, ld a_ld bf16) times the query pairs at
// pair row (q0 + k) / 2, high parts into tmm0/tmm1 and low parts (when ql)
// into tmm2/tmm3. Tile registers are not renamed, so each token tile loads
// into its own register (tmm4/tmm5) and both query tiles (tmm6/tmm7) serve
// every token tile: four independent sums per step.
template <int NT>
static inline void amx_key_range(const uint16_t* const* a, int64_t a_ld, int k0, int k1, int q0, const uint32_t* qp,
                                 const uint32_t* ql, int R, PrefetchStream* pf) {
    const int64_t q_stride = int64_t(R) * 4;
    for (int k = k0; k < k1; k += kAmxKeyStep) {
        if (pf) pf->step();
        const int64_t qrow = int64_t((q0 + k) / 2) * R;
        _tile_loadd(4, a[0] + k, a_ld * 2);
        if constexpr (NT == 2) _tile_loadd(5, a[1] + k, a_ld * 2);
        _tile_loadd(6, qp + qrow, q_stride);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (NT == 2) _tile_dpbf16ps(1, 5, 6);
        if (ql) {
            _tile_loadd(7, ql + qrow, q_stride);
            _tile_dpbf16ps(2, 4, 7);
            if constexpr (NT == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
}

static inline void amx_zero_sums() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

// The four sums to memory: [0] high and [1] low of token tile 0, [2] and
// [3] those of token tile 1 (16 x 16 f32 each).
template <int NT>
static inline void amx_store_sums(bool low, float (*out)[256]) {
    _tile_stored(0, out[0], 64);
    if (low) _tile_stored(2, out[1], 64);
    if constexpr (NT == 2) {
        _tile_stored(1, out[2], 64);
        if (low) _tile_stored(3, out[3], 64);
    }
}

// Scores of NT x 16 tokens (a_c[t]: the latent rows of token tile t, ld r;
// a_kr[t]: their rope rows, ld d_r; `tokens` valid rows in all) for the 16
// rows whose query pairs start at qp (ql: the low parts, or null), into
// st[token][16] (ld st_ld floats): the high parts' score, plus the low
// parts' where that is finite (split_score_tile_bf16's rule: an inf key
// keeps its +-inf). An 8-bit latent sums per scale block (sc: the tokens'
// scales, `blocks` per token), each block's sum times its token's scale.
template <bool kFp8, int NT>
static inline void amx_score_tiles(const AbsorbItem& it, const uint16_t* const* a_c, const uint16_t* const* a_kr,
                                   const float* sc, int tokens, const uint32_t* qp, const uint32_t* ql, float* st,
                                   int st_ld, PrefetchStream* pf) {
    const int r = it.r, d_r = it.d_r, R = it.rows_pad;
    const bool low = ql != nullptr;
    alignas(64) float sums[4][256];  // as amx_store_sums lays them out
    alignas(64) float total[4][256];
    if constexpr (kFp8) {
        for (int i = 0; i < 4; ++i)
            for (int e = 0; e < 256; ++e) total[i][e] = 0.0f;
        const int blocks = it.c_scale_blocks;
        for (int b = 0; b < blocks; ++b) {
            const int k0 = b * kFp8LatentBlockElems, k1 = imin(r, k0 + kFp8LatentBlockElems);
            amx_zero_sums();
            amx_key_range<NT>(a_c, r, k0, k1, 0, qp, ql, R, pf);
            amx_store_sums<NT>(low, sums);
            for (int j = 0; j < tokens; ++j) {
                const int part = (j / 16) * 2, row = 16 * (j % 16);
                const __m512 s = _mm512_set1_ps(sc[int64_t(j) * blocks + b] * kE4m3Raw);
                _mm512_store_ps(total[part] + row, _mm512_fmadd_ps(_mm512_load_ps(sums[part] + row), s,
                                                                   _mm512_load_ps(total[part] + row)));
                if (low)
                    _mm512_store_ps(total[part + 1] + row, _mm512_fmadd_ps(_mm512_load_ps(sums[part + 1] + row), s,
                                                                           _mm512_load_ps(total[part + 1] + row)));
            }
        }
        if (d_r > 0) {
            amx_zero_sums();
            amx_key_range<NT>(a_kr, d_r, 0, d_r, r, qp, ql, R, nullptr);
            amx_store_sums<NT>(low, sums);
            for (int j = 0; j < tokens; ++j) {
                const int part = (j / 16) * 2, row = 16 * (j % 16);
                for (int l = 0; l < (low ? 2 : 1); ++l)
                    _mm512_store_ps(total[part + l] + row, _mm512_add_ps(_mm512_load_ps(total[part + l] + row),
                                                                         _mm512_load_ps(sums[part + l] + row)));
            }
        }
    } else {
        (void)sc;
        amx_zero_sums();
        amx_key_range<NT>(a_c, r, 0, r, 0, qp, ql, R, pf);
        if (d_r > 0) amx_key_range<NT>(a_kr, d_r, 0, d_r, r, qp, ql, R, nullptr);
        amx_store_sums<NT>(low, total);
    }
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (int j = 0; j < tokens; ++j) {
        const int part = (j / 16) * 2, row = 16 * (j % 16);
        const __m512 h = _mm512_load_ps(total[part] + row);
        __m512 out = h;
        if (low) {
            const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(h), inf, _CMP_LT_OQ);
            out = _mm512_mask_add_ps(h, finite, h, _mm512_load_ps(total[part + 1] + row));
        }
        _mm512_storeu_ps(st + int64_t(j) * st_ld, out);
    }
}

// Scores of the block's n tokens for every row (into the item's score
// tile). c16: the block's latent rows as bf16 (the cache's, or the 8-bit
// staging). Two token tiles at a time; a tile of fewer than 16 tokens is
// copied into `pad` (zero rows after it) first, so no tile load reads past
// the block.
template <bool kFp8>
static inline void amx_scores_block(const AbsorbItem& it, int n, const uint16_t* c16, const uint16_t* kr,
                                    const float* sc, const uint32_t* qp, const uint32_t* ql, uint16_t* pad,
                                    PrefetchStream* pf) {
    const int r = it.r, d_r = it.d_r, R = it.rows_pad, blocks = it.c_scale_blocks;
    for (int j0 = 0; j0 < n; j0 += 2 * kAmxTileRows) {
        const int tokens = imin(2 * kAmxTileRows, n - j0);
        const int nt = (tokens + kAmxTileRows - 1) / kAmxTileRows;
        const uint16_t* a_c[2];
        const uint16_t* a_kr[2];
        for (int t = 0; t < nt; ++t) {
            const int first = j0 + t * kAmxTileRows, rows = imin(kAmxTileRows, n - first);
            a_c[t] = c16 + int64_t(first) * r;
            a_kr[t] = kr + int64_t(first) * d_r;
            if (rows == kAmxTileRows) continue;
            uint16_t* pc = pad;
            uint16_t* pkr = pad + int64_t(kAmxTileRows) * r;
            for (int j = 0; j < kAmxTileRows; ++j) {
                if (j < rows) {
                    __builtin_memcpy(pc + int64_t(j) * r, a_c[t] + int64_t(j) * r, size_t(r) * 2);
                    if (d_r) __builtin_memcpy(pkr + int64_t(j) * d_r, a_kr[t] + int64_t(j) * d_r, size_t(d_r) * 2);
                } else {
                    __builtin_memset(pc + int64_t(j) * r, 0, size_t(r) * 2);
                    if (d_r) __builtin_memset(pkr + int64_t(j) * d_r, 0, size_t(d_r) * 2);
                }
            }
            a_c[t] = pc;
            a_kr[t] = pkr;
        }
        const float* tsc = kFp8 ? sc + int64_t(j0) * blocks : nullptr;
        for (int col = 0; col < R; col += 16, pf = nullptr) {
            const uint32_t* q = qp + col;
            const uint32_t* q_lo = ql ? ql + col : nullptr;
            float* st = it.stile + int64_t(j0) * R + col;
            if (nt == 2)
                amx_score_tiles<kFp8, 2>(it, a_c, a_kr, tsc, tokens, q, q_lo, st, R, pf);
            else
                amx_score_tiles<kFp8, 1>(it, a_c, a_kr, tsc, tokens, q, q_lo, st, R, pf);
        }
    }
}

// The probabilities of rows col..col+15 over the block's n tokens,
// transposed to [16 rows][32 tokens] f32 (zero past n).
static inline void amx_transpose_probabilities(const AbsorbItem& it, int n, int col, float* pt) {
    const int R = it.rows_pad;
    for (int h = 0; h < 2; ++h) {
        __m512 v[16];
        for (int j = 0; j < 16; ++j) {
            const int tok = 16 * h + j;
            v[j] = tok < n ? _mm512_loadu_ps(it.stile + int64_t(tok) * R + col) : _mm512_setzero_ps();
        }
        transpose16x16(v);
        for (int i = 0; i < 16; ++i) _mm512_store_ps(pt + 32 * i + 16 * h, v[i]);
    }
}

// pb[i][j] = bf16(pt[i][j] * w[j]) for the 16 rows (w: 32 token weights,
// or null for none).
static inline void amx_round_probabilities(const float* pt, const float* w, uint16_t* pb) {
    const __m512 w0 = w ? _mm512_loadu_ps(w) : _mm512_set1_ps(1.0f);
    const __m512 w1 = w ? _mm512_loadu_ps(w + 16) : _mm512_set1_ps(1.0f);
    for (int i = 0; i < 16; ++i) {
        const __m512 a = _mm512_mul_ps(_mm512_load_ps(pt + 32 * i), w0);
        const __m512 b = _mm512_mul_ps(_mm512_load_ps(pt + 32 * i + 16), w1);
        _mm512_store_si512(pb + 32 * i, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}

// rows_acc[16 rows][k0..k1) += pb [16 rows][32 tokens] . cp [16 token
// pairs][k0..k1) (rows_acc at the block's first row, ld r).
static inline void amx_value_tiles(const uint16_t* pb, const uint32_t* cp, int r, float* rows_acc, int k0, int k1) {
    const int64_t acc_ld = int64_t(r) * 4, cp_ld = int64_t(r) * 4;
    _tile_loadd(4, pb, 64);
    int k = k0;
    for (; k + 64 <= k1; k += 64) {
        _tile_loadd(0, rows_acc + k, acc_ld);
        _tile_loadd(1, rows_acc + k + 16, acc_ld);
        _tile_loadd(2, rows_acc + k + 32, acc_ld);
        _tile_loadd(3, rows_acc + k + 48, acc_ld);
        _tile_loadd(5, cp + k, cp_ld);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(6, cp + k + 16, cp_ld);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(7, cp + k + 32, cp_ld);
        _tile_dpbf16ps(2, 4, 7);
        _tile_loadd(5, cp + k + 48, cp_ld);
        _tile_dpbf16ps(3, 4, 5);
        _tile_stored(0, rows_acc + k, acc_ld);
        _tile_stored(1, rows_acc + k + 16, acc_ld);
        _tile_stored(2, rows_acc + k + 32, acc_ld);
        _tile_stored(3, rows_acc + k + 48, acc_ld);
    }
    for (; k < k1; k += 16) {
        _tile_loadd(0, rows_acc + k, acc_ld);
        _tile_loadd(5, cp + k, cp_ld);
        _tile_dpbf16ps(0, 4, 5);
        _tile_stored(0, rows_acc + k, acc_ld);
    }
}

// Rows of the AMX accumulator times their rescale factor, skipped where it
// is 1 (once a row's maximum settles, almost every block).
static inline void amx_rescale_rows(float* rows_acc, int r, const float* corr, int rows) {
    for (int i = 0; i < rows; ++i) {
        if (corr[i] == 1.0f) continue;
        const __m512 c = _mm512_set1_ps(corr[i]);
        float* row = rows_acc + int64_t(i) * r;
        for (int k = 0; k < r; k += 16) _mm512_storeu_ps(row + k, _mm512_mul_ps(_mm512_loadu_ps(row + k), c));
    }
}

// Stage: how an 8-bit block's latent rows become raw bf16 (unused for
// bf16 latents): stage_latent_raw_bf16, or the byte-lookup form of
// attention_fp8_vbmi.inl.
template <bool kFp8, StageLatentFn Stage = stage_latent_raw_bf16>
static void absorb_attend_amx(const AbsorbItem& it) {
    const int K = it.r + it.d_r, R = it.rows_pad, r = it.r;
    for (int i = 0; i < R; ++i) {
        it.m[i] = kMaxFloor;
        it.l[i] = 0.0f;
    }
    float* corr = it.stile + kAbsorbTokenBlock * R;
    const int64_t min_limit = min_row_limit(it.row_limit, R);
    uint32_t* qp = it.pairs;
    uint32_t* cp = qp + round16(int64_t(K / 2) * R);
    uint32_t* pp = cp + round16(int64_t(kAbsorbTokenBlock / 2) * r);
    uint32_t* ql = pp + round16(int64_t(kAbsorbTokenBlock / 2) * R);
    // The AMX accumulator [R][r], past the queries' low parts (see
    // absorb_pair_scratch_floats).
    float* rows_acc = reinterpret_cast<float*>(ql + round16(int64_t(K / 2) * R));
    if (!absorb_pair_queries(it, qp, ql)) ql = nullptr;
    for (int64_t i = 0; i < int64_t(R) * r; ++i) rows_acc[i] = 0.0f;
    // Partial score tiles are padded to 16 tokens here (16 x K bf16; the
    // f32 tile is free until a masked block widens its latent into it).
    uint16_t* pad = reinterpret_cast<uint16_t*>(it.ctile);
    alignas(64) float pt[16 * 32];
    alignas(64) uint16_t pb[16 * 32];
    float weight[kAbsorbTokenBlock];
    bool in_item_acc = false;  // the f32 path owns it.acc from here on

    struct Rows {
        const void* c;
        const uint16_t* kr;
        const float* sc;
    };
    auto rows_at = [&](int64_t t) {
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        const size_t es = kFp8 ? 1 : 2;
        return Rows{static_cast<const char*>(it.c) + (page * it.c_page_stride + slot * r) * es,
                    static_cast<const uint16_t*>(it.kr) + page * it.kr_page_stride + slot * it.d_r,
                    kFp8 ? it.c_scale + page * it.c_scale_page_stride + slot * it.c_scale_blocks : nullptr};
    };
    AmxTiles tiles;
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = block_tokens(t, it.t1, it.page_size, kAbsorbTokenBlock);
        const Rows cur = rows_at(t);
        PrefetchStream ahead;
        if (t + n < it.t1) {
            const int next_n = block_tokens(t + n, it.t1, it.page_size, kAbsorbTokenBlock);
            const Rows nx = rows_at(t + n);
            ahead.add(nx.c, int64_t(next_n) * r * (kFp8 ? 1 : 2));
            ahead.add(nx.kr, int64_t(next_n) * it.d_r * 2);
            if (kFp8) ahead.add(nx.sc, int64_t(next_n) * it.c_scale_blocks * 4);
        }
        // One step per key step of the latent, per pair of token tiles.
        ahead.plan(((n + 2 * kAmxTileRows - 1) / (2 * kAmxTileRows)) * (r / kAmxKeyStep));
        const uint16_t* c16;
        if constexpr (kFp8) {
            Stage(it, n, static_cast<const uint8_t*>(cur.c), it.stage);
            c16 = it.stage;
        } else {
            c16 = static_cast<const uint16_t*>(cur.c);
        }
        amx_scores_block<kFp8>(it, n, c16, cur.kr, cur.sc, qp, ql, pad, &ahead);
        absorb_softmax_block(it, t, n, min_limit, corr);
        if (in_item_acc || t + n - 1 > min_limit) {
            // The causal diagonal: rows see different token counts, so the
            // values go through the f32 tile, masked lane by lane (every
            // later block of the item is masked too).
            if (!in_item_acc) {
                amx_store_accumulator(it, rows_acc);
                in_item_acc = true;
            }
            if constexpr (kFp8) {
                for (int j = 0; j < n; ++j)
                    fp8_rows_to_f32(static_cast<const uint8_t*>(cur.c) + int64_t(j) * r, r,
                                    cur.sc + int64_t(j) * it.c_scale_blocks, kFp8LatentBlockElems, it.ctile + j * K);
            } else {
                absorb_widen_latent(it, n, c16);
            }
            absorb_pv_block_masked(it, t, n, K, corr);
            t += n;
            continue;
        }
        absorb_pair_latent(it, n, c16, cp);
        for (int jp = (n + 1) / 2; jp < kAbsorbTokenBlock / 2; ++jp)
            for (int k = 0; k < r; ++k) cp[int64_t(jp) * r + k] = 0u;
        for (int col = 0; col < R; col += 16) {
            float* racc = rows_acc + int64_t(col) * r;
            amx_rescale_rows(racc, r, corr + col, 16);
            amx_transpose_probabilities(it, n, col, pt);
            if constexpr (kFp8) {
                for (int b = 0; b < it.c_scale_blocks; ++b) {
                    for (int j = 0; j < kAbsorbTokenBlock; ++j)
                        weight[j] = j < n ? cur.sc[int64_t(j) * it.c_scale_blocks + b] * kE4m3Raw : 0.0f;
                    amx_round_probabilities(pt, weight, pb);
                    const int k0 = b * kFp8LatentBlockElems;
                    amx_value_tiles(pb, cp, r, racc, k0, imin(r, k0 + kFp8LatentBlockElems));
                }
            } else {
                amx_round_probabilities(pt, nullptr, pb);
                amx_value_tiles(pb, cp, r, racc, 0, r);
            }
        }
        t += n;
    }
    if (!in_item_acc) amx_store_accumulator(it, rows_acc);
}

// Table entries: items of other shapes take the AVX-512 kernels.
static void absorb_attend_amx_bf16(const AbsorbItem& it) {
    if (!amx_absorb_shape(it)) {
        absorb_attend<GQLA_DTYPE_BF16>(it);
        return;
    }
    absorb_attend_amx<false>(it);
}

static void absorb_attend_amx_fp8(const AbsorbItem& it) {
    if (!amx_absorb_shape(it) || it.stage == nullptr) {
        absorb_attend_fp8(it);
        return;
    }
    absorb_attend_amx<true>(it);
}

// The same staging the latent by byte lookups (AVX512-VBMI hosts): 2.5x
// fewer instructions a block than widening through f16 and f32.
GQLA_VBMI static void absorb_attend_amx_fp8_vbmi(const AbsorbItem& it) {
    if (!amx_absorb_shape(it) || it.stage == nullptr) {
        absorb_attend_fp8(it);
        return;
    }
    absorb_attend_amx<true, stage_latent_raw_bf16_vbmi>(it);
}
