// SPDX-License-Identifier: Apache-2.0
#include "cuda_runtime.hpp"

#include <dlfcn.h>

namespace gqla::bench {
namespace {

// The runtime entry points used, with their C signatures (cudaError_t is an
// int enum, cudaEvent_t and cudaStream_t are pointers).
struct CudaRuntime {
    int (*malloc_fn)(void**, size_t) = nullptr;
    int (*free_fn)(void*) = nullptr;
    int (*memcpy_fn)(void*, const void*, size_t, int) = nullptr;
    int (*event_create)(void**) = nullptr;
    int (*event_destroy)(void*) = nullptr;
    int (*event_record)(void*, void*) = nullptr;
    int (*event_synchronize)(void*) = nullptr;
    int (*event_elapsed)(float*, void*, void*) = nullptr;
    int (*get_device_count)(int*) = nullptr;
    int (*set_device)(int) = nullptr;
    bool ok() const {
        return malloc_fn && free_fn && memcpy_fn && event_create && event_destroy && event_record &&
               event_synchronize && event_elapsed && get_device_count && set_device;
    }
};

constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;

template <typename F>
void bind(void* lib, const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
}

const CudaRuntime& runtime() {
    static const CudaRuntime rt = [] {
        CudaRuntime r;
        const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                               "/usr/local/cuda/lib64/libcudart.so"};
        for (const char* name : names) {
            void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (!h) continue;
            bind(h, "cudaMalloc", r.malloc_fn);
            bind(h, "cudaFree", r.free_fn);
            bind(h, "cudaMemcpy", r.memcpy_fn);
            bind(h, "cudaEventCreate", r.event_create);
            bind(h, "cudaEventDestroy", r.event_destroy);
            bind(h, "cudaEventRecord", r.event_record);
            bind(h, "cudaEventSynchronize", r.event_synchronize);
            bind(h, "cudaEventElapsedTime", r.event_elapsed);
            bind(h, "cudaGetDeviceCount", r.get_device_count);
            bind(h, "cudaSetDevice", r.set_device);
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

bool CudaIoBuffer::copy_to_host(void* host, size_t bytes) const {
    return ptr_ != nullptr && runtime().memcpy_fn(host, ptr_, bytes, kMemcpyDeviceToHost) == 0;
}

CudaIoBuffer::~CudaIoBuffer() {
    if (ptr_) runtime().free_fn(ptr_);
}

CudaEventTimer::CudaEventTimer() {
    const CudaRuntime& rt = runtime();
    if (!rt.ok()) return;
    if (rt.event_create(&start_) != 0) start_ = nullptr;
    if (rt.event_create(&stop_) != 0) stop_ = nullptr;
}

CudaEventTimer::~CudaEventTimer() {
    if (start_) runtime().event_destroy(start_);
    if (stop_) runtime().event_destroy(stop_);
}

void CudaEventTimer::start() {
    if (valid()) runtime().event_record(start_, nullptr);
}

void CudaEventTimer::stop() {
    if (valid()) runtime().event_record(stop_, nullptr);
}

double CudaEventTimer::seconds() {
    float ms = 0.f;
    if (!valid() || runtime().event_synchronize(stop_) != 0 || runtime().event_elapsed(&ms, start_, stop_) != 0)
        return -1.0;
    return ms * 1e-3;
}

int cuda_device_count() {
    int n = 0;
    if (!runtime().ok() || runtime().get_device_count(&n) != 0) return 0;
    return n;
}

bool cuda_set_device(int device) { return runtime().ok() && runtime().set_device(device) == 0; }

}  // namespace gqla::bench
