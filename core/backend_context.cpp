// SPDX-License-Identifier: Apache-2.0
#include "core/backend_context.hpp"

#include "core/error.hpp"

namespace gqla {

BackendContext::BackendContext(const gqla_backend_vtable* vtable, const gqla_backend_desc& desc) : vt_(vtable) {
    if (desc.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        require_feature(GQLA_BACKEND_FEATURE_FP8_CACHE, "config.cache_dtype FP8_E4M3");
    if (desc.keep_latent == 0) require_feature(GQLA_BACKEND_FEATURE_DROP_LATENT, "config.keep_latent = 0");
    char err[512] = {0};
    gqla_status st = vt_->create(&desc, &ctx_, err, sizeof(err));
    if (st != GQLA_OK) {
        ctx_ = nullptr;
        err[sizeof(err) - 1] = '\0';
        fail(status_known(st) ? st : GQLA_ERR_BACKEND, "%s backend: create failed: %s", vt_->name,
             err[0] ? err : status_description(st));
    }
}

BackendContext::~BackendContext() {
    if (ctx_ != nullptr) vt_->destroy(ctx_);
}

bool BackendContext::has_feature(uint32_t feature) const { return (vt_->features & feature) == feature; }

void BackendContext::require_feature(uint32_t feature, const char* what) const {
    if (!has_feature(feature))
        fail(GQLA_ERR_UNSUPPORTED, "%s: not supported by the %s backend of this build", what, vt_->name);
}

void BackendContext::check(gqla_status status, const char* operation) const {
    if (status == GQLA_OK) return;
    const char* msg = vt_->error_message ? vt_->error_message(ctx_) : nullptr;
    fail(status_known(status) ? status : GQLA_ERR_BACKEND, "%s backend: %s failed: %s", vt_->name, operation,
         msg && *msg ? msg : status_description(status));
}

}  // namespace gqla
