// SPDX-License-Identifier: Apache-2.0
// A backend instance of one session: the vtable plus its context, destroyed
// with the session. Turns a backend's status into a gqla::Error that carries
// the backend's own message.
#pragma once

#include <cstdint>

#include "core/backend_api.h"

namespace gqla {

class BackendContext {
public:
    // Creates the backend instance; throws with the backend's message.
    BackendContext(const gqla_backend_vtable* vtable, const gqla_backend_desc& desc);
    ~BackendContext();
    BackendContext(const BackendContext&) = delete;
    BackendContext& operator=(const BackendContext&) = delete;

    const gqla_backend_vtable& vt() const { return *vt_; }
    void* ctx() const { return ctx_; }

    // GQLA_BACKEND_FEATURE_* bits; require_feature throws UNSUPPORTED
    // "<what>: not supported by the <backend> backend of this build".
    bool has_feature(uint32_t feature) const;
    void require_feature(uint32_t feature, const char* what) const;

    // Throws when status != OK: "<backend> backend: <operation> failed: <message>".
    void check(gqla_status status, const char* operation) const;

private:
    const gqla_backend_vtable* vt_;
    void* ctx_ = nullptr;
};

}  // namespace gqla
