// SPDX-License-Identifier: Apache-2.0
// DLPack declarations the binding needs. The system header (libdlpack-dev on
// Debian 12) is DLPack 0.6, which predates the versioned capsule
// ("dltensor_versioned", DLPack >= 1.0) that new producers may hand out. Its
// struct is a stable ABI, so it is declared here when the header lacks it.
#pragma once

// The build may point at another copy of the header (torch ships one).
#ifdef GQLA_PY_DLPACK_HEADER
#include GQLA_PY_DLPACK_HEADER
#else
#include <dlpack/dlpack.h>
#endif

#include <cstdint>

namespace gqla_py {

#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
using dlpack_versioned_tensor = DLManagedTensorVersioned;
constexpr uint64_t dlpack_flag_read_only = DLPACK_FLAG_BITMASK_READ_ONLY;
#else
struct dlpack_version {
    uint32_t major;
    uint32_t minor;
};
struct dlpack_versioned_tensor {
    dlpack_version version;
    void* manager_ctx;
    void (*deleter)(dlpack_versioned_tensor* self);
    uint64_t flags;
    DLTensor dl_tensor;
};
constexpr uint64_t dlpack_flag_read_only = 1ull << 0;
#endif

}  // namespace gqla_py
