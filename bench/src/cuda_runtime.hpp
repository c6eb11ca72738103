// SPDX-License-Identifier: Apache-2.0
// The few CUDA runtime services the bench needs, loaded at run time so the
// bench still runs on machines without CUDA:
//  - query/output buffers in GPU memory: with host tensors every decode would
//    also pay two PCIe copies and a host sync that a model keeping its
//    activations on the GPU never pays;
//  - event timing on the legacy default stream (the stream a session uses
//    until it is given another), i.e. the device time of a decode call
//    without the host's launch and synchronization latency.
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
    // Copies the first `bytes` back to `host`; false on failure.
    bool copy_to_host(void* host, size_t bytes) const;

private:
    void* ptr_ = nullptr;
};

// start() and stop() record events on the legacy default stream; seconds()
// waits for the second and returns the time between them (< 0 on failure).
class CudaEventTimer {
public:
    CudaEventTimer();
    ~CudaEventTimer();
    CudaEventTimer(const CudaEventTimer&) = delete;
    CudaEventTimer& operator=(const CudaEventTimer&) = delete;

    bool valid() const { return start_ && stop_; }
    void start();
    void stop();
    double seconds();

private:
    void* start_ = nullptr;
    void* stop_ = nullptr;
};

// GPUs visible to the process (0 without a CUDA runtime or GPU).
int cuda_device_count();
// Makes `device` the calling thread's current GPU: buffers and timers made
// after it live there. False on failure.
bool cuda_set_device(int device);

}  // namespace gqla::bench
