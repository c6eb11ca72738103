// Query/output buffers in GPU memory for timing CUDA sessions: with host
// tensors every decode would also pay two PCIe copies and a host sync that a
// model keeping activations on the GPU never pays. The CUDA runtime is loaded
// at run time, so the bench still runs on machines without CUDA.
#pragma once

#include <cstddef>

namespace gqla::bench {

class CudaIoBuffer {
public:
    // Allocates `bytes` on the current GPU and copies `host` into it.
    // valid() is false when the CUDA runtime cannot be loaded or allocation fails.
    CudaIoBuffer(const void* host, size_t bytes);
    ~CudaIoBuffer();
    CudaIoBuffer(const CudaIoBuffer&) = delete;
    CudaIoBuffer& operator=(const CudaIoBuffer&) = delete;

    bool valid() const { return ptr_ != nullptr; }
    void* data() const { return ptr_; }

private:
    void* ptr_ = nullptr;
};

}  // namespace gqla::bench
