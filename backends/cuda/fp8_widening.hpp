// SPDX-License-Identifier: Apache-2.0
// Prefill launches over an 8-bit (e4m3) GQA cache on the bf16 prefill
// kernel: the pages of the launch's sequences widened once into a bf16
// workspace, then read like a bf16 cache.
//
// The 8-bit variant of the prefill kernel widens every tile in the CTA that
// reads it, and a sequence with many query rows per group has many CTAs
// reading the same tiles (GQA 32/8 at s_q 2048: 64 row blocks per group),
// so it widens each tile that many times, on the cores the softmax needs:
// measured at about half the bf16 kernel's rate. Widening the pages once
// moves 3 bytes per element (1 read, 2 written) and lets the bf16 kernel
// (three stages, P V deferred) run at its own rate, its tiles loaded by TMA
// boxes as a bf16 cache's (the workspace's maps are made when it grows).
//
// Taken where the launch would run on the prefill kernel anyway with at
// least kFp8WidenMinRowBlocks row blocks per group (below that each tile is
// widened a few times at most and the 8-bit kernel saves the extra pass;
// on an H100 the widened pages won at 4 row blocks for one sequence and
// for eight, at 2 only for eight, docs/fp8-cache.md); GQLA_CUDA_FP8_WIDEN=1
// widens every launch the prefill kernel takes, =0 none. Not taken (the
// 8-bit kernel reads the cache as it is) while the stream is being
// captured into a CUDA graph (a replay may see longer sequences than the
// pages widened at capture) or when the workspace would have to grow and
// cudaMalloc finds no room. The results are the same either way: each
// element is widened to the bf16 nearest to its dequantized value (the
// rounding of the 8-bit kernel), and both kernels multiply the same bf16
// tiles.
//
// The workspace (Session::widened_*) holds the launch's pages compactly:
// sequence after sequence, [page][G][P][D] keys and [page][G][P][Dv]
// values in bf16, with a page table and lengths indexed by the sequence's
// place in the call. It grows with the largest call seen (never shrinks)
// and is counted as workspace memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention_params.hpp"
#include "core/backend_api.h"

namespace gqla::cuda {

struct Session;
struct NarrowTmaMaps;

// Row blocks (kPrefillRows) per group from which a launch is widened when
// GQLA_CUDA_FP8_WIDEN is unset.
constexpr int kFp8WidenMinRowBlocks = 4;

// Sequences per launch of the widening kernel.
constexpr int kWidenSequencesPerLaunch = 128;

struct Fp8WideningParams {
    PoolView k, v;               // the layer's 8-bit pools (their scales at scale_offset)
    void* wide_k;                // bf16 [page][G][P][k.dim]
    void* wide_v;                // bf16 [page][G][P][v.dim]
    const int32_t* page_tables;  // the session's, [slot][table_stride]
    int64_t table_stride;
    int32_t* wide_table;  // [call sequence][wide_table_stride]: widened page of each page
    int64_t wide_table_stride;
    int32_t* wide_lengths;  // [call sequence]
    int32_t groups, page_size;
    int32_t count;  // sequences in this launch
    int32_t first;  // call index of the first
    int32_t slot[kWidenSequencesPerLaunch];
    int32_t length[kWidenSequencesPerLaunch];
    int32_t first_page[kWidenSequencesPerLaunch];  // widened page of its first page
};

// Widens every written row of the launch's sequences and fills their rows
// of the widened page table and lengths: one thread per 16 bytes of a row,
// grid (most pages of one sequence x blocks of a page, count, 2 pools).
void launch_widen_fp8_pages(const Fp8WideningParams& p, int32_t most_pages, cudaStream_t stream);

// If this launch of the GQA kind over an 8-bit cache is one to widen (see
// above), queues the widening on the session's stream and rewrites *p to
// read the widened pages (bf16 pools, the widened page table and lengths,
// slots = the sequences' places in the call) and *maps to the workspace's
// TMA maps (null where it has none). False (nothing changed) otherwise.
bool widen_fp8_for_prefill(Session& s, const gqla_decode_args& a, AttentionParams* p, const NarrowTmaMaps** maps);

}  // namespace gqla::cuda
