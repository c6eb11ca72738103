// SPDX-License-Identifier: Apache-2.0
// Owning handles for device and pinned host memory. Allocation failures
// become OUT_OF_MEMORY with the size and purpose in the message.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "cuda_status.hpp"

namespace gqla::cuda {

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        swap(o);
        return *this;
    }
    ~DeviceBuffer() { reset(); }

    void allocate(size_t bytes, const char* what) {
        reset();
        if (bytes == 0) return;
        void* p = nullptr;
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            throw BackendError(e == cudaErrorMemoryAllocation ? GQLA_ERR_OUT_OF_MEMORY : GQLA_ERR_BACKEND,
                               std::string("CUDA: cudaMalloc of ") + std::to_string(bytes) + " bytes for " + what +
                                   " failed: " + cudaGetErrorString(e));
        }
        ptr_ = p;
        bytes_ = bytes;
    }
    // Grows (never shrinks) to at least `bytes`; contents are not kept.
    void ensure(size_t bytes, const char* what) {
        if (bytes > bytes_) allocate(bytes, what);
    }
    void reset() {
        if (ptr_) cudaFree(ptr_);
        ptr_ = nullptr;
        bytes_ = 0;
    }
    void swap(DeviceBuffer& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
    }

    template <typename T = void>
    T* get() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

class PinnedBuffer {
public:
    PinnedBuffer() = default;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    ~PinnedBuffer() { reset(); }
    void ensure(size_t bytes, const char* what) {
        if (bytes <= bytes_) return;
        reset();
        void* p = nullptr;
        cudaError_t e = cudaMallocHost(&p, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            throw BackendError(GQLA_ERR_OUT_OF_MEMORY, std::string("CUDA: cudaMallocHost of ") + std::to_string(bytes) +
                                                           " bytes for " + what + " failed: " + cudaGetErrorString(e));
        }
        ptr_ = p;
        bytes_ = bytes;
    }
    void reset() {
        if (ptr_) cudaFreeHost(ptr_);
        ptr_ = nullptr;
        bytes_ = 0;
    }
    template <typename T = void>
    T* get() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace gqla::cuda
