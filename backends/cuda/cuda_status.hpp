// SPDX-License-Identifier: Apache-2.0
// Turning CUDA and cuBLAS failures into gqla_status + message. Every runtime
// and cuBLAS call of the module goes through these checks; the message lands
// in the session (error_message) or in create's err buffer.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "gqla/gqla.h"

namespace gqla::cuda {

// Thrown inside the module, caught at the vtable boundary, where
// core/status_translation.hpp turns it into its status like any gqla::Error.
struct BackendError : Error {
    BackendError(gqla_status s, const std::string& msg) : Error(s, msg) {}
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what) {
    cudaGetLastError();  // clear a sticky-free error so the next call starts clean
    gqla_status s = (e == cudaErrorMemoryAllocation) ? GQLA_ERR_OUT_OF_MEMORY : GQLA_ERR_BACKEND;
    throw BackendError(s,
                       std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw_cuda(e, what);
}

// After a kernel launch: catches bad configurations and launch failures.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

inline void check_cublas(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    gqla_status st = (s == CUBLAS_STATUS_ALLOC_FAILED) ? GQLA_ERR_OUT_OF_MEMORY : GQLA_ERR_BACKEND;
    throw BackendError(
        st, std::string("cuBLAS: ") + what + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

}  // namespace gqla::cuda
