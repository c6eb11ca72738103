// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the bench and the demo: status checks that carry
// the library's message, random inputs, host tensors, wall-clock time.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "gqla/gqla.h"

namespace gqla::bench {

// Thrown when a gqla call fails; the message names the call and quotes
// gqla_last_error_message() so a failing case says why.
struct GqlaError : std::runtime_error {
    gqla_status status;
    GqlaError(gqla_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

void check(gqla_status s, const char* call);

// Uniform values in [-scale, scale]; a fixed seed makes runs repeatable.
void fill_uniform(std::vector<float>& v, uint64_t seed, float scale = 1.0f);
std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f);

// Contiguous f32 host tensor over `data`.
gqla_tensor host_tensor(float* data, std::initializer_list<int64_t> shape);
// Contiguous host tensor of `dtype` elements over `data`.
gqla_tensor host_tensor(void* data, gqla_dtype dtype, std::initializer_list<int64_t> shape);

// `v` rounded to `dtype` (to nearest even; f32: copied), as raw bytes.
std::vector<unsigned char> to_dtype(const std::vector<float>& v, gqla_dtype dtype);
// n elements of `dtype` at `p`, widened to f32.
std::vector<float> from_dtype(const void* p, gqla_dtype dtype, size_t n);

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v);
// Nearest-rank percentile (p in (0, 100]) of v; 0 for an empty v.
double percentile(std::vector<double> v, double p);

// The device a session with device AUTO lands on: the probe resolves AUTO
// exactly as sessions do (CUDA module + visible GPU, GQLA_DEVICE override).
gqla_device_type resolve_auto_device();

// Bytes of memory the kernel reports as available (0 when unknown).
uint64_t mem_available_bytes();

}  // namespace gqla::bench
