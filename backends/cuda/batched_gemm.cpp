// SPDX-License-Identifier: Apache-2.0
// See batched_gemm.hpp.
#include "batched_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Bytes every batch member's base address is a multiple of (capped at 256,
// the most cuBLASLt asks about).
int32_t alignment(const void* p, int64_t stride, int batch, cudaDataType_t t) {
    uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
    if (batch > 1) bits |= static_cast<uint64_t>(stride) * type_bytes(t);
    return static_cast<int32_t>(bits & (~bits + 1));
}

bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

// Stored rows x columns of op(X) = rows x cols under `trans`.
bool init_layout(cublasLtMatrixLayoutOpaque_t* layout, cudaDataType_t type, cublasOperation_t trans, int rows, int cols,
                 int64_t ld, int batch, int64_t stride) {
    const bool t = trans != CUBLAS_OP_N;
    const int32_t count = batch;
    return ok(cublasLtMatrixLayoutInit(layout, type, t ? cols : rows, t ? rows : cols, ld)) &&
           ok(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count)) &&
           ok(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                               sizeof stride));
}

}  // namespace

bool BatchedGemmRunner::Key::operator==(const Key& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }

BatchedGemmRunner::~BatchedGemmRunner() {
    if (lt_) cublasLtDestroy(lt_);
}

void BatchedGemmRunner::init(cublasHandle_t blas, bool use_lt, void* workspace, size_t workspace_bytes) {
    blas_ = blas;
    workspace_ = workspace;
    workspace_bytes_ = workspace_bytes;
    if (!use_lt) return;
    check_cublas(cublasLtCreate(&lt_), "cublasLtCreate");
    plans_.reserve(kMaxPlans);
}

BatchedGemmRunner::Key BatchedGemmRunner::key_of(const BatchedGemm& g) {
    Key k;
    std::memset(&k, 0, sizeof k);  // padding too: keys compare as bytes
    k.trans_a = g.trans_a;
    k.trans_b = g.trans_b;
    k.m = g.m;
    k.n = g.n;
    k.k = g.k;
    k.batch = g.batch;
    k.a_type = g.a_type;
    k.b_type = g.b_type;
    k.c_type = g.c_type;
    k.align_a = alignment(g.a, g.stride_a, g.batch, g.a_type);
    k.align_b = alignment(g.b, g.stride_b, g.batch, g.b_type);
    k.align_c = alignment(g.c, g.stride_c, g.batch, g.c_type);
    k.lda = g.lda;
    k.ldb = g.ldb;
    k.ldc = g.ldc;
    k.stride_a = g.stride_a;
    k.stride_b = g.stride_b;
    k.stride_c = g.stride_c;
    return k;
}

void BatchedGemmRunner::build(Plan& p, const BatchedGemm& g) const {
    p.has_algo = false;
    const int32_t ta = g.trans_a, tb = g.trans_b;
    if (!ok(cublasLtMatmulDescInit(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        !ok(cublasLtMatmulDescSetAttribute(&p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
        !ok(cublasLtMatmulDescSetAttribute(&p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
        !init_layout(&p.a, g.a_type, g.trans_a, g.m, g.k, g.lda, g.batch, g.stride_a) ||
        !init_layout(&p.b, g.b_type, g.trans_b, g.k, g.n, g.ldb, g.batch, g.stride_b) ||
        !init_layout(&p.c, g.c_type, CUBLAS_OP_N, g.m, g.n, g.ldc, g.batch, g.stride_c))
        return;
    cublasLtMatmulPreferenceOpaque_t pref;
    const uint64_t ws = workspace_bytes_;
    const uint32_t align_a = p.key.align_a, align_b = p.key.align_b, align_c = p.key.align_c;
    if (!ok(cublasLtMatmulPreferenceInit(&pref)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                 sizeof align_a)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                 sizeof align_b)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                 sizeof align_c)) ||
        !ok(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                 sizeof align_c)))
        return;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (!ok(cublasLtMatmulAlgoGetHeuristic(lt_, &p.desc, &p.a, &p.b, &p.c, &p.c, &pref, 1, &result, &found)) ||
        found < 1 || !ok(result.state) || result.workspaceSize > workspace_bytes_)
        return;
    p.algo = result.algo;
    p.has_algo = true;
}

BatchedGemmRunner::Plan& BatchedGemmRunner::plan_for(const BatchedGemm& g, const Key& key) {
    for (Plan& p : plans_)
        if (p.key == key) {
            p.last_use = ++clock_;
            return p;
        }
    Plan* p = nullptr;
    if (plans_.size() < kMaxPlans) {
        p = &plans_.emplace_back();
    } else {
        p = &*std::min_element(plans_.begin(), plans_.end(),
                               [](const Plan& x, const Plan& y) { return x.last_use < y.last_use; });
    }
    p->key = key;
    p->last_use = ++clock_;
    build(*p, g);
    return *p;
}

void BatchedGemmRunner::run(cudaStream_t stream, const BatchedGemm& g, const char* what) {
    const float one = 1.f, zero = 0.f;
    if (lt_) {
        Plan& p = plan_for(g, key_of(g));
        if (p.has_algo) {
            check_cublas(cublasLtMatmul(lt_, &p.desc, &one, g.a, &p.a, g.b, &p.b, &zero, g.c, &p.c, g.c, &p.c, &p.algo,
                                        workspace_, workspace_bytes_, stream),
                         what);
            return;
        }
    }
    check_cublas(cublasGemmStridedBatchedEx(blas_, g.trans_a, g.trans_b, g.m, g.n, g.k, &one, g.a, g.a_type,
                                            static_cast<int>(g.lda), g.stride_a, g.b, g.b_type, static_cast<int>(g.ldb),
                                            g.stride_b, &zero, g.c, g.c_type, static_cast<int>(g.ldc), g.stride_c,
                                            g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 what);
}

}  // namespace gqla::cuda
