#include "cuda_io_buffers.hpp"

#include <dlfcn.h>

namespace gqla::bench {
namespace {

// The three runtime entry points used, with their C signatures (cudaError_t is an int enum).
struct CudaRuntime {
    int (*malloc_fn)(void**, size_t) = nullptr;
    int (*free_fn)(void*) = nullptr;
    int (*memcpy_fn)(void*, const void*, size_t, int) = nullptr;
    bool ok() const { return malloc_fn && free_fn && memcpy_fn; }
};

constexpr int kMemcpyHostToDevice = 1;

const CudaRuntime& runtime() {
    static const CudaRuntime rt = [] {
        CudaRuntime r;
        const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                               "/usr/local/cuda/lib64/libcudart.so"};
        for (const char* name : names) {
            void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (!h) continue;
            r.malloc_fn = reinterpret_cast<int (*)(void**, size_t)>(dlsym(h, "cudaMalloc"));
            r.free_fn = reinterpret_cast<int (*)(void*)>(dlsym(h, "cudaFree"));
            r.memcpy_fn = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(dlsym(h, "cudaMemcpy"));
            if (r.ok()) break;
            r = CudaRuntime{};
        }
        return r;
    }();
    return rt;
}

}  // namespace

CudaIoBuffer::CudaIoBuffer(const void* host, size_t bytes) {
    const CudaRuntime& rt = runtime();
    if (!rt.ok() || rt.malloc_fn(&ptr_, bytes) != 0) {
        ptr_ = nullptr;
        return;
    }
    if (rt.memcpy_fn(ptr_, host, bytes, kMemcpyHostToDevice) != 0) {
        rt.free_fn(ptr_);
        ptr_ = nullptr;
    }
}

CudaIoBuffer::~CudaIoBuffer() {
    if (ptr_) runtime().free_fn(ptr_);
}

}  // namespace gqla::bench
