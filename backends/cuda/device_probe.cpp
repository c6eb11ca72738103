// SPDX-License-Identifier: Apache-2.0
// CUDA device probe: spec-derived roofline numbers, and with
// GQLA_PROBE_CALIBRATE measured ones (read bandwidth by a streaming kernel,
// bf16 tensor-core rate by a cuBLAS GEMM), once per process per device.
#include "device_probe.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "calibration_kernels.hpp"
#include "cuda_status.hpp"
#include "device_buffer.hpp"

namespace gqla::cuda {

namespace {

// Dense tensor-core bf16 FLOP per clock per SM, by architecture.
double tensor_bf16_flops_per_clock_sm(int major, int minor) {
    if (major == 7) return 1024;                // Volta/Turing fp16 (no bf16; closest peak)
    if (major == 8 && minor == 0) return 2048;  // A100
    if (major == 8) return 1024;                // GA10x, Ada
    if (major == 9) return 4096;                // Hopper
    if (major == 10) return 8192;               // Blackwell datacenter
    if (major >= 11) return 2048;
    return 512;
}
// FP32 FMA lanes per SM.
double fp32_lanes_sm(int major, int minor) {
    if (major == 8 && minor == 0) return 64;
    if (major == 7) return 64;
    return 128;
}

struct Calibration {
    double read_gbps, bf16_gflops;
};
std::mutex g_mutex;
std::map<int, Calibration> g_calibrated;

Calibration calibrate(int device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    Calibration c{0, 0};
    try {
        // Read bandwidth: 512 MiB (several times any L2) read 4 times per
        // timed pass, so the launch latency inside the events is a small
        // share; best of 3 passes.
        const size_t bytes = size_t(512) << 20;
        constexpr int kReadsPerPass = 4;
        DeviceBuffer buf, sink;
        buf.allocate(bytes, "probe bandwidth buffer");
        sink.allocate(4096 * sizeof(float), "probe sink");
        launch_fill_random(buf.get(), bytes / 4, stream);
        float best = 1e30f;
        for (int i = 0; i < 4; ++i) {
            check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
            for (int r = 0; r < kReadsPerPass; ++r) launch_read_bandwidth(buf.get(), bytes, sink.get<float>(), stream);
            check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
            check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
            float ms = 0;
            check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
            if (i > 0 && ms < best) best = ms;  // first pass warms up
        }
        c.read_gbps = double(kReadsPerPass) * bytes / (best * 1e-3) / 1e9;

        // bf16 GEMM rate on random data: n^3 with n = 4096, best of 3.
        const int n = 4096;
        DeviceBuffer a, b, out;
        a.allocate(size_t(n) * n * 2, "probe GEMM A");
        b.allocate(size_t(n) * n * 2, "probe GEMM B");
        out.allocate(size_t(n) * n * 2, "probe GEMM C");
        launch_fill_random_bf16(a.get(), size_t(n) * n, stream);
        launch_fill_random_bf16(b.get(), size_t(n) * n, stream);
        cublasHandle_t h;
        check_cublas(cublasCreate(&h), "cublasCreate");
        try {
            check_cublas(cublasSetStream(h, stream), "cublasSetStream");
            const float one = 1.f, zero = 0.f;
            best = 1e30f;
            for (int i = 0; i < 4; ++i) {
                check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
                check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n, b.get(),
                                          CUDA_R_16BF, n, &zero, out.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT),
                             "probe GEMM");
                check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
                check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
                float ms = 0;
                check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
                if (i > 0 && ms < best) best = ms;
            }
        } catch (...) {
            cublasDestroy(h);
            throw;
        }
        cublasDestroy(h);
        c.bf16_gflops = 2.0 * n * n * double(n) / (best * 1e-3) / 1e9;
    } catch (...) {
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        cudaStreamDestroy(stream);
        throw;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    return c;
}

}  // namespace

int32_t visible_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;  // no driver or no GPU: the module is present but has nothing to drive
    }
    return n;
}

void probe_device(int32_t index, uint32_t flags, gqla_probe_info* out) {
    int n = visible_device_count();
    if (index < 0 || index >= n)
        throw BackendError(GQLA_ERR_UNSUPPORTED, "CUDA probe: device index " + std::to_string(index) +
                                                     " not visible (" + std::to_string(n) + " GPUs)");
    cudaDeviceProp prop;
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    int clock_khz = 0, mem_clock_khz = 0;
    check_cuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index), "cudaDeviceGetAttribute(clock)");
    check_cuda(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index),
               "cudaDeviceGetAttribute(mem clock)");

    const size_t keep = out->struct_size;
    std::memset(reinterpret_cast<char*>(out) + sizeof(size_t), 0, sizeof(gqla_probe_info) - sizeof(size_t));
    out->struct_size = keep;
    out->device = GQLA_DEVICE_CUDA;
    out->device_index = index;
    std::snprintf(out->vendor, sizeof out->vendor, "NVIDIA");
    // Names longer than the ABI's field are cut, never overrun; the explicit
    // precision states the cut (a plain %s draws -Wformat-truncation).
    std::snprintf(out->name, sizeof out->name, "%.*s", static_cast<int>(sizeof out->name - 1), prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sm_count = prop.multiProcessorCount;
    out->clock_mhz = clock_khz / 1000;
    out->mem_clock_mhz = mem_clock_khz / 1000;
    out->bus_width_bits = prop.memoryBusWidth;
    out->mem_gb = prop.totalGlobalMem / 1e9;
    // Double data rate: two transfers per memory clock.
    out->read_gbps = 2.0 * mem_clock_khz * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9;
    const double sm_hz = double(prop.multiProcessorCount) * clock_khz * 1e3;
    out->peak_gflops_f32 = sm_hz * 2.0 * fp32_lanes_sm(prop.major, prop.minor) / 1e9;
    out->peak_gflops_bf16 = sm_hz * tensor_bf16_flops_per_clock_sm(prop.major, prop.minor) / 1e9;
    out->calibrated = 0;

    if (flags & GQLA_PROBE_CALIBRATE) {
        std::lock_guard<std::mutex> lock(g_mutex);
        auto it = g_calibrated.find(index);
        if (it == g_calibrated.end()) it = g_calibrated.emplace(index, calibrate(index)).first;
        out->read_gbps = it->second.read_gbps;
        out->peak_gflops_bf16 = it->second.bf16_gflops;
        out->calibrated = 1;
    }
}

}  // namespace gqla::cuda
