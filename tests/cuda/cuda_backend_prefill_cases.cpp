// SPDX-License-Identifier: Apache-2.0
// gqla_cuda_backend_test, prefill chunks per cache dtype (the shapes of
// kPrefillQLens / kPrefillLengths, cuda_backend_ragged.hpp): the GQA kind on
// pages of 48 and 64, then the GQLA GQA path (kept and transient) against
// absorb.
#include <doctest/doctest.h>

#include <string>

#include "cuda_backend_ragged.hpp"

using namespace gqla::test;

namespace {

void test_prefill_gqa(gqla_dtype cache, int page_size) {
    gqla_backend_desc d = gqa_8_2_d128(cache, 0);
    d.page_size = page_size;
    for (int64_t L : kPrefillLengths) d.num_pages += (L + page_size - 1) / page_size + 1;
    d.max_q_len = 300;
    d.max_q_tokens = sum_of(kPrefillQLens);
    Harness h(d);
    std::vector<int> ids;
    for (int64_t L : kPrefillLengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    const std::string name = "gqa prefill P=" + std::to_string(page_size) + " " + gqla::dtype_name(cache);
    check_ragged(h, name, 1, ids, kPrefillQLens, GQLA_PATH_GQA, false);
    check_ragged(h, name + " split", 1, {ids[4]}, {32}, GQLA_PATH_GQA, false);
}

void prefill(gqla_dtype t) {
    test_prefill_gqa(t, 48);
    test_prefill_gqa(t, 64);
    // The GQLA GQA path (kept and transient) with keys 128 + 64 and
    // 64 + 64 wide, against absorb.
    test_ragged_gqla(t, 8, 2, 256, 128, 64, 128, 64, kPrefillQLens, kPrefillLengths);
    test_ragged_gqla(t, 8, 2, 256, 64, 64, 128, 48, kPrefillQLens, kPrefillLengths);
    // MLA-shaped (one head per group) chunks of 64-127 queries: half-used
    // 128-row blocks of the prefill kernel (kPrefillHalfRows).
    test_ragged_gqla(t, 4, 4, 256, 128, 64, 128, 64, {64, 100, 1, 127}, {64, 333, 200, 1000});
}

}  // namespace

GQLA_CASES_PER_CACHE_DTYPE("prefill", prefill)
