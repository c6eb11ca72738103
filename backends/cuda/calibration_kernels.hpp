// SPDX-License-Identifier: Apache-2.0
// Kernels behind the probe's calibration: random fills and a streaming read.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace gqla::cuda {

void launch_fill_random(void* p, size_t words, cudaStream_t stream);
void launch_fill_random_bf16(void* p, size_t elems, cudaStream_t stream);
void launch_read_bandwidth(const void* p, size_t bytes, float* sink, cudaStream_t stream);

}  // namespace gqla::cuda
