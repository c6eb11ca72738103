// SPDX-License-Identifier: Apache-2.0
// The expansion GEMM out[n][G*(d_c+d_v)] = latent[n][r] * W^T. With oneDNN
// it is one matmul (W read in place through transposed strides); otherwise
// the kernel table's GEMM over row blocks on the context's thread pool. Both
// use desc.num_threads threads; oneDNN runs on its own OpenMP runtime, whose
// thread count is set for the call and restored.
#include <algorithm>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/thread_pool.hpp"

#ifdef GQLA_WITH_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace gqla::cpu {

namespace {

#ifdef GQLA_WITH_ONEDNN
class OmpThreadsScope {
public:
    explicit OmpThreadsScope(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~OmpThreadsScope() { omp_set_num_threads(saved_); }
    OmpThreadsScope(const OmpThreadsScope&) = delete;
    OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

private:
    int saved_;
};
#endif

[[maybe_unused]] void fallback_gemm(CpuContext* ctx, const LayerWeights& w, int64_t n, const float* latent,
                                    float* out) {
    const int64_t r = ctx->desc.latent_dim, N = ctx->expanded_width();
    constexpr int64_t kRows = 16;
    const GemmFn gemm = ctx->kernels->gemm;
    const float* wt = w.wt.as<float>();
    ctx->threads().parallel_for_spread((n + kRows - 1) / kRows, [&](int64_t first, int64_t end, int) {
        for (int64_t r0 = first * kRows; r0 < std::min(n, end * kRows); r0 += kRows)
            gemm(static_cast<int>(std::min(kRows, n - r0)), static_cast<int>(N), static_cast<int>(r), latent + r0 * r,
                 r, wt, N, out + r0 * N, N);
    });
}

}  // namespace

bool expansion_reads_wt() {
#ifdef GQLA_WITH_ONEDNN
    return false;
#else
    return true;
#endif
}

gqla_status expansion_gemm(CpuContext* ctx, const LayerWeights& w, int64_t n, const float* latent, float* out) {
    if (n <= 0) return GQLA_OK;
#ifdef GQLA_WITH_ONEDNN
    const int64_t r = ctx->desc.latent_dim, N = ctx->expanded_width();
    try {
        using dnnl::memory;
        OmpThreadsScope threads(ctx->desc.num_threads);
        static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
        dnnl::stream stream(engine);
        const memory::desc src_md({n, r}, memory::data_type::f32, memory::dims{r, 1});
        const memory::desc wei_md({r, N}, memory::data_type::f32, memory::dims{1, r});  // W^T, W is [N][r]
        const memory::desc dst_md({n, N}, memory::data_type::f32, memory::dims{N, 1});
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), engine);
        memory src(src_md, engine, const_cast<float*>(latent));
        memory wei(wei_md, engine, w.w.as<float>());
        memory dst(dst_md, engine, out);
        dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
        stream.wait();
        return GQLA_OK;
    } catch (const dnnl::error& e) {
        return fail(ctx, GQLA_ERR_BACKEND, "oneDNN matmul failed: %s (status %d)", e.what(),
                    static_cast<int>(e.status));
    } catch (const std::exception& e) {
        return fail(ctx, GQLA_ERR_BACKEND, "oneDNN matmul failed: %s", e.what());
    }
#else
    fallback_gemm(ctx, w, n, latent, out);
    return GQLA_OK;
#endif
}

}  // namespace gqla::cpu
