// SPDX-License-Identifier: Apache-2.0
// gqla_merge_attention_states: combines partial attention outputs by their
// log-sum-exps (no session involved).
#include "capi/src/api_guard.hpp"
#include "core/merge_states.hpp"

extern "C" {

gqla_status gqla_merge_attention_states(int32_t num_states, const gqla_tensor* outputs, const gqla_tensor* lses,
                                        gqla_tensor* out, gqla_tensor* out_lse) {
    return gqla::capi::guarded("gqla_merge_attention_states",
                               [&] { gqla::merge_attention_states(num_states, outputs, lses, out, out_lse); });
}

}  // extern "C"
