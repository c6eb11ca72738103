// SPDX-License-Identifier: Apache-2.0
// The GQA_TRANSIENT form of a GQLA attention call: the GQA path over
// expanded rows built for this call only, so that a prefill chunk (many
// queries per sequence) gets the GQA form's cheaper attention without
// keeping the expanded cache of every layer.
//
// The session keeps one layer of expanded pages (Session::transient_kc /
// transient_ve) with the kept pools' page numbering: a sequence's own page
// table addresses it, so the decode kernels read it exactly like one layer
// of the kept KC / VE. Each call writes the expanded rows [0, length) of
// each of its sequences at their own pages, through the same gather, GEMM
// and scatter (cache_rows.hpp) that build the kept expanded cache, so the
// rows are rounded into the cache dtype exactly like the kept ones and both
// forms agree.
#pragma once

#include "core/backend_api.h"
#include "session.hpp"

namespace gqla::cuda {

// Fills the transient pool with the expanded rows [0, seqs[i].length) of
// layer a.layer for every sequence of the call, queued on the session's
// stream. The first call allocates the pool (cudaMalloc; OUT_OF_MEMORY with
// the size asked and nothing changed when it does not fit; INVALID_STATE if
// that first call is being captured in a CUDA graph). Later calls neither
// allocate nor synchronize; token indices come from the device page tables
// at run time, so a captured call replays correctly while its sequences keep
// the lengths they had at capture (the rows expanded are fixed then), also
// after copy-on-write moved their pages. INVALID_STATE when the layer has no
// weights.
void expand_for_transient_call(Session& s, const gqla_decode_args& a);

// Sparse calls expand only the rows their lists name, once the lists are
// compacted (per run, on the stream): first, before any staging, the checks
// and allocations of expand_for_transient_call (the pool, and the int64
// [total_q][topk] pool rows of the listed entries), with the same errors;
// then, after compact_sparse_lists(s, a) of a uniform run `a`, the expansion
// of the rows its lists name (rows * topk of them, padding entries repeating
// a kept row: docs/sparse-attention.md), into the same pool at their own
// pages. Capture follows the sparse lists' rule: a captured call must follow
// an uncaptured one at least its size.
void prepare_transient_call(Session& s, const gqla_decode_args& a);
void expand_listed_rows_for_transient(Session& s, const gqla_decode_args& a);

}  // namespace gqla::cuda
