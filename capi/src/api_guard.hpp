// SPDX-License-Identifier: Apache-2.0
// What every C entry point shares: exception -> gqla_status translation, the
// thread-local last-error message, and checks of pointer / struct arguments.
#pragma once

#include <cstddef>
#include <cstring>

#include "core/error.hpp"
#include "core/status_translation.hpp"
#include "gqla/gqla.h"

namespace gqla::capi {

// Store "<function>: <message>" as this thread's last error.
void record_error(const char* function, const char* message) noexcept;

// Run body; every exception becomes a status (core/status_translation.hpp)
// and its message this thread's last error.
template <class Body>
gqla_status guarded(const char* function, Body&& body) noexcept {
    return status_of(body, [function](gqla_status, const char* message) { record_error(function, message); });
}

// INVALID_ARGUMENT "<name>: NULL" when p is NULL.
inline void require_non_null(const void* p, const char* name) {
    if (p == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: NULL", name);
}

// A struct the caller passes for us to fill: non-NULL and struct_size at
// least `needed` (the fields version 1 defines).
template <class T>
void require_out_struct(const T* out, const char* name, size_t needed, const char* type_name) {
    require_non_null(out, name);
    if (out->struct_size < needed)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s->struct_size: expected >= %zu (sizeof(%s)), got %zu", name, needed,
             type_name, out->struct_size);
}

// Copy our filled struct into the caller's, keeping the caller's struct_size
// and not writing past the smaller of both sizes.
template <class T>
void write_out_struct(T* out, const T& value) {
    size_t caller_size = out->struct_size;
    size_t n = caller_size < sizeof(T) ? caller_size : sizeof(T);
    std::memcpy(out, &value, n);
    out->struct_size = caller_size;
}

}  // namespace gqla::capi
