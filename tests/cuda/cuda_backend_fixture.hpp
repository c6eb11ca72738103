// SPDX-License-Identifier: Apache-2.0
// What every case of gqla_cuda_backend_test shares: the seeded random
// inputs, the cache dtypes' tolerances, session descriptions, sequences
// filled with random rows, a decode checked against the float64 reference,
// and decodes on device tensors captured in CUDA graphs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "gpu_test_support.hpp"
#include "tests/reference/reference.hpp"
#include "vtable_doctest.hpp"

namespace gqla::test {

// The suite's random engine, reset to the run's seed (run_seed.hpp: fresh
// per run, GQLA_TEST_SEED replays) before every case (cuda_suite_main.hpp):
// within a run, a case's inputs do not depend on the filter.
extern std::mt19937 rng;
void reseed_rng();

// randn (gpu_test_support.hpp) drawn from the suite's engine.
std::vector<float> randn(size_t n, float scale = 1.f);

// Two layers, f32 io, up to 16 sequences of 8 queries; dims and pages are
// the caller's.
gqla_backend_desc base_desc(gqla_kind kind, gqla_dtype cache, int H, int G, int page_size);
// A GQLA session's description with pages for `lengths` plus 40 more rows each.
gqla_backend_desc gqla_desc(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
                            const std::vector<int64_t>& lengths);
// GQA 8 heads over 2 KV heads of 128, pages of 64: the stream and graph tests' session.
gqla_backend_desc gqa_8_2_d128(gqla_dtype cache, int64_t num_pages);

// n random rows appended to one layer of sequence `id`, in two appends.
void fill_sequence(Harness& h, int layer, int id, int64_t n, bool expanded);
// Random W_UKV on every layer, then one sequence per length, filled on every layer.
std::vector<int> add_gqla_sequences(Harness& h, const std::vector<int64_t>& lengths);

// Decodes `ids` with host q/o/lse and checks against the reference.
void check_decode(Harness& h, const std::string& name, int layer, const std::vector<int>& ids, int s_q, gqla_path path);

// One decode call captured in a CUDA graph on a stream of the session's own;
// the caller replays `exec` on `stream`. The session gets the default
// stream back at the end.
struct CapturedDecode {
    Harness& h;
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CapturedDecode(Harness& harness, const gqla_decode_args& a);
    ~CapturedDecode();
    CapturedDecode(const CapturedDecode&) = delete;
    CapturedDecode& operator=(const CapturedDecode&) = delete;
};

// Contiguous device tensors of a decode over B sequences: q [B, s_q, H, dq]
// and o [B, s_q, H, dv] in `io`, lse [B, s_q, H] in f32.
struct DeviceDecodeTensors {
    int64_t B, s_q, H, dq, dv;
    gqla_dtype io;
    void* q = nullptr;
    void* o = nullptr;
    float* lse = nullptr;
    size_t q_bytes() const { return size_t(B * s_q * H * dq) * gqla::dtype_size(io); }
    size_t o_bytes() const { return size_t(B * s_q * H * dv) * gqla::dtype_size(io); }
    size_t lse_count() const { return size_t(B * s_q * H); }
    DeviceDecodeTensors(int64_t B_, int64_t s_q_, int64_t H_, int64_t dq_, int64_t dv_, gqla_dtype io_);
    ~DeviceDecodeTensors();
    DeviceDecodeTensors(const DeviceDecodeTensors&) = delete;
    DeviceDecodeTensors& operator=(const DeviceDecodeTensors&) = delete;
    // Arguments of a decode of layer 1 of `seqs` (B of them) over these tensors.
    gqla_decode_args args(const std::vector<gqla_decode_seq>& seqs, gqla_path path) const;
};

}  // namespace gqla::test
