// SPDX-License-Identifier: Apache-2.0
// The one place where C++ exceptions become gqla_status values, for every
// boundary where the library's C++ meets C: the public entry points
// (capi/src/api_guard.hpp), the probe, and the backend vtables (the CUDA
// module's errors derive from gqla::Error too). Header-only, so the CUDA
// module uses it without linking the core.
#pragma once

#include <exception>
#include <new>

#include "core/error.hpp"

namespace gqla {

// Runs body() and returns GQLA_OK, or turns what it threw into a status and
// hands (status, message) to report before returning the status:
//   gqla::Error        its status (INTERNAL if it carries OK or an unknown value)
//   std::bad_alloc     OUT_OF_MEMORY
//   anything else      INTERNAL
// report must not throw.
template <class Body, class Report>
gqla_status status_of(Body&& body, Report&& report) noexcept {
    try {
        body();
        return GQLA_OK;
    } catch (const Error& e) {
        const gqla_status st = status_known(e.status()) && e.status() != GQLA_OK ? e.status() : GQLA_ERR_INTERNAL;
        report(st, e.what());
        return st;
    } catch (const std::bad_alloc&) {
        report(GQLA_ERR_OUT_OF_MEMORY, "out of memory (host allocation failed)");
        return GQLA_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        report(GQLA_ERR_INTERNAL, e.what());
        return GQLA_ERR_INTERNAL;
    } catch (...) {
        report(GQLA_ERR_INTERNAL, "unknown exception");
        return GQLA_ERR_INTERNAL;
    }
}

}  // namespace gqla
