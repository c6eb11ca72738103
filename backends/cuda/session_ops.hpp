// SPDX-License-Identifier: Apache-2.0
// The operations behind the vtable, on a bound Session. Each throws
// BackendError; the vtable turns that into a status and a message.
#pragma once

#include "core/backend_api.h"
#include "session.hpp"

namespace gqla::cuda {

void decode(Session& s, const gqla_decode_args& a);

void set_weights(Session& s, int32_t layer, const gqla_view& w);
void set_expanded(Session& s, bool enable);
// The expanded pools KC/VE (and their TMA maps); a no-op while they exist.
void allocate_expanded_pools(Session& s);
void append(Session& s, const gqla_append_args& a);
void expand(Session& s, const gqla_expand_args& a);
void copy_pages(Session& s, int32_t n, const int32_t* src, const int32_t* dst);
// Copies a sequence's kept rows to host memory and waits (cache_reads.cpp).
void read_rows(Session& s, const gqla_read_args& a);
void update_sequence(Session& s, int32_t slot, const int32_t* pages, int32_t num_pages, const int64_t* lengths);
// Mirrors one layer's length and the page table of a slot if they differ
// from what the device holds (decode's guard against a missed update).
void refresh_sequence(Session& s, int32_t slot, int32_t layer, const int32_t* pages, int32_t num_pages, int64_t length);

}  // namespace gqla::cuda
