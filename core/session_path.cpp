// SPDX-License-Identifier: Apache-2.0
// Decode path of GQLA sessions. The latent cache is kept unless
// config.keep_latent = 0; the GQA path additionally keeps the per-group
// expanded cache, built from the latent when the path is switched on and
// freed when it is switched off. Without the latent the expanded cache is the
// only cache: the GQA path is the only path and nothing switches.
#include <vector>

#include "core/enum_value.hpp"
#include "core/error.hpp"
#include "core/session.hpp"

namespace gqla {

gqla_path Session::active_path() const {
    std::lock_guard<std::mutex> lock(mu_);
    return active_;
}

gqla_path Session::requested_path() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requested_;
}

void Session::paths(gqla_path* active, gqla_path* requested) const {
    std::lock_guard<std::mutex> lock(mu_);
    *active = active_;
    *requested = requested_;
}

bool Session::layers_with_tokens_have_weights() const {
    for (int32_t l = 0; l < cfg_.num_layers; ++l)
        if (layer_tokens_[static_cast<size_t>(l)] > 0 && !weights_set_[static_cast<size_t>(l)]) return false;
    return true;
}

void Session::expand_layer(int32_t layer) {
    std::vector<gqla_append_item> items;
    items.reserve(seqs_.size());
    for (const auto& entry : seqs_) {
        const Sequence& s = entry.second;
        const int64_t length = s.lengths[static_cast<size_t>(layer)];
        if (length == 0) continue;
        gqla_append_item item{};
        item.page_table = s.pages.data();
        item.slot = s.slot;
        item.start = 0;
        item.count = length;
        items.push_back(item);
    }
    if (items.empty()) return;
    gqla_expand_args args{};
    args.layer = layer;
    args.num_items = static_cast<int32_t>(items.size());
    args.items = items.data();
    backend_->check(backend_->vt().expand(backend_->ctx(), &args), "expand");
}

bool Session::expanded_cache_served() const {
    return cfg_.cache_dtype != GQLA_DTYPE_FP8_E4M3 || backend_->has_feature(GQLA_BACKEND_FEATURE_FP8_EXPANDED);
}

void Session::enable_expanded_path() {
    if (expanded_) {
        active_ = GQLA_PATH_GQA;
        return;
    }
    if (!expanded_cache_served())
        fail(GQLA_ERR_UNSUPPORTED,
             "path: GQLA_PATH_GQA keeps the expanded cache, which the %s backend does not keep for an fp8_e4m3 "
             "cache; use GQLA_PATH_ABSORB, or GQLA_PATH_GQA_TRANSIENT per gqla_attention call",
             backend_->vt().name);
    for (int32_t l = 0; l < cfg_.num_layers; ++l)
        if (layer_tokens_[static_cast<size_t>(l)] > 0 && !weights_set_[static_cast<size_t>(l)])
            fail(GQLA_ERR_INVALID_STATE,
                 "path: the GQA path expands every layer holding tokens, but layer %d holds tokens and has no "
                 "weights (call gqla_set_weights first)",
                 l);
    const gqla_backend_vtable& vt = backend_->vt();
    backend_->check(vt.set_expanded(backend_->ctx(), 1), "set_expanded(1)");
    try {
        for (int32_t l = 0; l < cfg_.num_layers; ++l)
            if (layer_tokens_[static_cast<size_t>(l)] > 0) expand_layer(l);
    } catch (...) {
        vt.set_expanded(backend_->ctx(), 0);
        throw;
    }
    expanded_ = true;
    active_ = GQLA_PATH_GQA;
}

void Session::disable_expanded_path() {
    if (expanded_) {
        backend_->check(backend_->vt().set_expanded(backend_->ctx(), 0), "set_expanded(0)");
        expanded_ = false;
    }
    active_ = GQLA_PATH_ABSORB;
}

void Session::require_latent(const char* what) const {
    if (!latent_kept())
        fail(GQLA_ERR_INVALID_STATE,
             "%s needs the latent cache, which this session drops (config.keep_latent = 0: it keeps only the "
             "expanded cache of its groups and runs the GQA path only)",
             what);
}

void Session::switch_for_auto(gqla_path want) {
    if (!latent_kept()) return;  // one path only
    try {
        if (want == GQLA_PATH_GQA) {
            if (layers_with_tokens_have_weights() && expanded_cache_served()) enable_expanded_path();
        } else if (want == GQLA_PATH_ABSORB) {
            disable_expanded_path();
        }
    } catch (const Error&) {
        // AUTO only optimizes: when the switch cannot be made (memory), keep
        // decoding on the path that works.
    }
}

void Session::select_path(const gqla_path& path) {
    std::lock_guard<std::mutex> lock(mu_);
    const int value = enum_value(path);
    if (value == GQLA_PATH_GQA_TRANSIENT)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "path: GQLA_PATH_GQA_TRANSIENT is a form of one gqla_attention call, not a "
             "session path (expected GQLA_PATH_AUTO, _GQA or _ABSORB)");
    if (value != GQLA_PATH_AUTO && value != GQLA_PATH_GQA && value != GQLA_PATH_ABSORB)
        fail(GQLA_ERR_INVALID_ARGUMENT, "path: expected GQLA_PATH_AUTO, _GQA or _ABSORB (0..2), got %d", value);
    if (cfg_.kind == GQLA_KIND_GQA) {
        if (path == GQLA_PATH_ABSORB)
            fail(GQLA_ERR_INVALID_ARGUMENT, "path: GQLA_PATH_ABSORB needs a GQLA session (this session is GQA)");
        requested_ = path;
        return;
    }
    if (path == GQLA_PATH_ABSORB) require_latent("path: GQLA_PATH_ABSORB");
    if (!latent_kept()) {  // GQA or AUTO: the one path it has
        requested_ = path;
        return;
    }
    switch (path) {
        case GQLA_PATH_GQA:
            enable_expanded_path();
            break;
        case GQLA_PATH_ABSORB:
            disable_expanded_path();
            break;
        case GQLA_PATH_GQA_TRANSIENT:
            break;  // refused above
        case GQLA_PATH_AUTO: {
            gqla_path want = have_history_ ? policy_->choose(last_batch_, last_context_, last_q_len_, active_,
                                                             layer_tokens_[static_cast<size_t>(last_layer_)])
                                           : policy_->initial();
            if (want != active_) switch_for_auto(want);
            break;
        }
    }
    requested_ = path;
}

}  // namespace gqla
