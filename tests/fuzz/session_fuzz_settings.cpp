// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): the calls that change how a session
// decodes: gqla_select_path (checked with gqla_get_path) and
// gqla_set_weights (GQLA sessions only). A GQLA session without the latent
// (keep_latent = 0, docs/sharding.md) has the GQA path only: selecting
// ABSORB, and new weights for a layer that holds tokens (whose expanded rows
// could not be rebuilt), are refused with INVALID_STATE.
#include "tests/fuzz/session_fuzz.hpp"

#include <algorithm>
#include <cmath>

#include "tests/fuzz/random_configs.hpp"

namespace fuzz {

namespace {
// f32 weight bytes from which the CPU backend's absorb projections of bf16
// and 8-bit caches read bf16 copies (backends/cpu/cpu_context.hpp).
constexpr int64_t kCpuBf16WeightsMinBytes = int64_t(1) << 20;
}  // namespace

bool SessionFuzz::op_select_path() {
    run.op = "select_path";
    Expect e;
    const int64_t pick = r_.range(0, 12);
    // An int until the call: a gqla_path variable holding -1 (outside the
    // enum's values) would be undefined behaviour in this C++ program,
    // though a C caller may pass it.
    const int raw = pick == 12 ? (r_.chance(0.5) ? -1 : 3) : static_cast<int>(pick % 3);
    const bool known = raw == GQLA_PATH_AUTO || raw == GQLA_PATH_GQA || raw == GQLA_PATH_ABSORB;
    if (!known || (cfg_.kind == GQLA_KIND_GQA && raw == GQLA_PATH_ABSORB)) e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (!shadow_.keeps_latent() && raw == GQLA_PATH_ABSORB) e.error(GQLA_ERR_INVALID_STATE);
    if (!check_status("gqla_select_path", gqla_select_path(s_, static_cast<gqla_path>(raw)), e)) return false;
    const gqla_path p = static_cast<gqla_path>(raw);  // accepted: one of the session paths
    requested_ = p;
    if (cfg_.kind == GQLA_KIND_GQA || !shadow_.keeps_latent())
        expected_path_ = GQLA_PATH_GQA;
    else
        expected_path_ = p;  // AUTO: either, checked as "unknown"
    gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
    Expect ok;
    check_status("gqla_get_path", gqla_get_path(s_, &active, &requested), ok);
    if (requested != p) fail("get_path: requested %d after selecting %d", int(requested), int(p));
    if (expected_path_ != GQLA_PATH_AUTO && active != expected_path_)
        fail("get_path: active %d after selecting %d", int(active), int(p));
    return true;
}

bool SessionFuzz::op_set_weights() {
    run.op = "set_weights";
    Expect e;
    const int32_t layer = some_layer(e);
    if (!shadow_.is_gqla()) e.error(GQLA_ERR_INVALID_STATE);
    if (!shadow_.keeps_latent() && layer_ok(layer, cfg_.num_layers) && shadow_.layer_has_tokens(layer))
        e.error(GQLA_ERR_INVALID_STATE);
    const int64_t rows = int64_t(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
    const int64_t cols = shadow_.is_gqla() ? cfg_.latent_dim : 4;
    // Weights of more than 1 MiB in f32 reach the CPU backend's absorb
    // projections of bf16 and 8-bit caches as bf16 copies, a documented
    // limit (docs/numerics.md: up to 2^-9 of q~); such sessions get weights
    // that bf16 holds exactly, so their decodes stay under the bf16 bound.
    const bool rounded_copies = (cfg_.cache_dtype == GQLA_DTYPE_BF16 || cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3) &&
                                rows * cols * 4 > kCpuBf16WeightsMinBytes;
    gqla_dtype wdt = r_.pick(kDtypes);  // drawn either way: the call stream stays that of before
    if (rounded_copies) wdt = GQLA_DTYPE_BF16;
    // A shard takes its own rows or the layer's full W_UKV, of which it
    // uses the rows of its groups (docs/sharding.md).
    const int32_t full_groups = session_cfg_.num_kv_heads;
    const bool full = shadow_.is_gqla() && full_groups != cfg_.num_kv_heads && r_.chance(0.5);
    const int64_t given_rows = full ? rows / cfg_.num_kv_heads * full_groups : rows;
    Tensor w = make_tensor(wdt, {std::max<int64_t>(given_rows, 1), cols}, 1.0 / std::sqrt(double(cols)), true);
    const gqla_tensor* pw = &w.t;
    if (apply_flaw(maybe_flaw(0.1), w.t, &pw, w.t.dtype, true)) e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (!check_status("gqla_set_weights", gqla_set_weights(s_, layer, pw), e)) return false;
    if (!full) {
        shadow_.set_weights(layer, w.stored);
        return true;
    }
    const auto first = w.stored.begin() + rows / cfg_.num_kv_heads * session_cfg_.group_begin * cols;
    shadow_.set_weights(layer, std::vector<double>(first, first + rows * cols));
    return true;
}

}  // namespace fuzz
