// SPDX-License-Identifier: Apache-2.0
// Strided-batched GEMMs of the decode path (the absorb projections) through
// cuBLASLt, each shape's descriptors and algorithm chosen once and kept: a
// decode call then costs the host one cublasLtMatmul per GEMM instead of
// cublasGemmStridedBatchedEx's per-call setup and algorithm lookup (on the
// H200 machine an absorb decode call's host time was lower in each of ten
// interleaved pairs, by a median 3 us for its two GEMMs; device time the
// same). Shapes cuBLASLt offers no algorithm for (odd leading dimensions or
// alignments) fall back to cublasGemmStridedBatchedEx.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <vector>

namespace gqla::cuda {

// C_i = op(A_i) op(B_i) for i < batch (column-major, as cuBLAS; X_i = X + i
// stride_x elements), f32 accumulation and scale, C overwritten.
struct BatchedGemm {
    cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    int m = 0, n = 0, k = 0, batch = 1;
    const void* a = nullptr;
    cudaDataType_t a_type = CUDA_R_32F;
    int64_t lda = 0, stride_a = 0;
    const void* b = nullptr;
    cudaDataType_t b_type = CUDA_R_32F;
    int64_t ldb = 0, stride_b = 0;
    void* c = nullptr;
    cudaDataType_t c_type = CUDA_R_32F;
    int64_t ldc = 0, stride_c = 0;
};

class BatchedGemmRunner {
public:
    BatchedGemmRunner() = default;
    BatchedGemmRunner(const BatchedGemmRunner&) = delete;
    BatchedGemmRunner& operator=(const BatchedGemmRunner&) = delete;
    ~BatchedGemmRunner();

    // blas: the session's cuBLAS handle, for the fallback. use_lt false:
    // every GEMM through cublasGemmStridedBatchedEx (GQLA_CUDA_CUBLASLT=0).
    // The workspace is the session's cuBLAS one: both libraries run on the
    // session's stream, one call after another.
    void init(cublasHandle_t blas, bool use_lt, void* workspace, size_t workspace_bytes);
    // Queues g on `stream`, the stream blas is set to (the fallback runs on
    // blas's); `what` names the GEMM in error messages.
    void run(cudaStream_t stream, const BatchedGemm& g, const char* what);

private:
    // A shape as cuBLASLt sees it: operands' types, sizes, strides and the
    // alignment their pointers guarantee (an algorithm chosen for 16-byte
    // aligned rows must not meet 2-byte aligned ones).
    struct Key {
        int32_t trans_a, trans_b, m, n, k, batch;
        int32_t a_type, b_type, c_type, align_a, align_b, align_c;
        int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
        bool operator==(const Key& o) const;
    };
    struct Plan {
        Key key;
        bool has_algo;  // false: cuBLASLt has none for this shape (fallback)
        uint64_t last_use;
        cublasLtMatmulDescOpaque_t desc;
        cublasLtMatrixLayoutOpaque_t a, b, c;
        cublasLtMatmulAlgo_t algo;
    };
    static Key key_of(const BatchedGemm& g);
    Plan& plan_for(const BatchedGemm& g, const Key& key);
    void build(Plan& p, const BatchedGemm& g) const;

    // Enough for the two projections of many batch sizes (serving changes
    // the batch every few steps); reserved at init, so a new shape replaces
    // the least recently used plan rather than allocating.
    static constexpr size_t kMaxPlans = 64;
    cublasHandle_t blas_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    std::vector<Plan> plans_;
    uint64_t clock_ = 0;
};

}  // namespace gqla::cuda
