// SPDX-License-Identifier: Apache-2.0
// The expansion GEMM out[n][G*(d_c+d_v)] = latent[n][r] * W^T. With oneDNN
// it is oneDNN matmuls (W read in place through transposed strides) over
// row slices that the context's thread pool hands out, each slice run by
// oneDNN on its calling thread alone; otherwise the kernel table's GEMM
// over row blocks on the same pool.
//
// Why not one oneDNN matmul on its OpenMP team: libgomp's team keeps
// spinning for milliseconds after the region, into the decode that follows,
// where it takes CPUs from the pool's threads. On a 2-vCPU Zen 5, a GQLA
// session on the GQA path appending one token and decoding (T = 4096, bf16
// cache, 2 threads) decoded in 0.55-0.58 ms that way against 0.29-0.32 ms
// with OMP_WAIT_POLICY=passive. Serial oneDNN calls from the pool's threads
// never start a team, whatever the application's OpenMP settings are.
#include <algorithm>
#include <mutex>
#include <string>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/thread_pool.hpp"

#ifdef GQLA_WITH_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace gqla::cpu {

namespace {

// Rows of one GEMM step: a slice holds whole steps.
constexpr int64_t kRows = 16;
// A call of fewer steps than threads (appending a token or a few) splits the
// output columns too, in slices of at least this many.
constexpr int64_t kMinColumns = 256;

#ifdef GQLA_WITH_ONEDNN
// oneDNN sizes its parallel regions by omp_get_max_threads() of the calling
// thread; 1 runs the matmul on that thread without an OpenMP team.
class SerialOmpScope {
public:
    SerialOmpScope() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
    ~SerialOmpScope() { omp_set_num_threads(saved_); }
    SerialOmpScope(const SerialOmpScope&) = delete;
    SerialOmpScope& operator=(const SerialOmpScope&) = delete;

private:
    int saved_;
};

// out[rows][cols] (row stride N) = latent[rows][r] * W[cols][r]^T on the
// calling thread. Returns an empty string, or what oneDNN said (the pool's
// bodies must not throw).
std::string onednn_tile(int64_t rows, int64_t cols, int64_t r, int64_t N, const float* latent, const float* w,
                        float* out) {
    try {
        using dnnl::memory;
        SerialOmpScope serial;
        static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
        dnnl::stream stream(engine);
        const memory::desc src_md({rows, r}, memory::data_type::f32, memory::dims{r, 1});
        const memory::desc wei_md({r, cols}, memory::data_type::f32, memory::dims{1, r});  // W^T, W is [N][r]
        const memory::desc dst_md({rows, cols}, memory::data_type::f32, memory::dims{N, 1});
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), engine);
        memory src(src_md, engine, const_cast<float*>(latent));
        memory wei(wei_md, engine, const_cast<float*>(w));
        memory dst(dst_md, engine, out);
        dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
        stream.wait();
        return {};
    } catch (const dnnl::error& e) {
        return std::string("oneDNN matmul failed: ") + e.what() + " (status " + std::to_string(int(e.status)) + ")";
    } catch (const std::exception& e) {
        return std::string("oneDNN matmul failed: ") + e.what();
    }
}
#endif

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
    const int64_t r = ctx->desc.latent_dim, N = ctx->expanded_width();
    const int64_t steps = (n + kRows - 1) / kRows;
#ifdef GQLA_WITH_ONEDNN
    // Tiles: row slices of whole steps, times column slices when there are
    // fewer steps than threads (one token's GEMV would otherwise run alone).
    const int64_t threads = ctx->threads().participants();
    const int64_t col_slices = steps >= threads ? 1 : std::max<int64_t>(1, std::min(threads / steps, N / kMinColumns));
    std::mutex error_lock;
    std::string error;
    const float* weights = w.w.as<float>();
    auto run_tile = [&](int64_t r0, int64_t rows, int64_t slice) {
        const int64_t c0 = N * slice / col_slices, cols = N * (slice + 1) / col_slices - c0;
        std::string e = onednn_tile(rows, cols, r, N, latent + r0 * r, weights + c0 * r, out + r0 * N + c0);
        if (e.empty()) return;
        const std::lock_guard<std::mutex> hold(error_lock);
        if (error.empty()) error = std::move(e);
    };
    if (col_slices == 1)  // contiguous runs of steps: few large matmuls
        ctx->threads().parallel_for_spread(steps, [&](int64_t first, int64_t end, int) {
            run_tile(first * kRows, std::min(n, end * kRows) - first * kRows, 0);
        });
    else
        ctx->threads().parallel_for(steps * col_slices, 1, [&](int64_t first, int64_t end, int) {
            for (int64_t tile = first; tile < end; ++tile) {
                const int64_t r0 = tile / col_slices * kRows;
                run_tile(r0, std::min(kRows, n - r0), tile % col_slices);
            }
        });
    if (!error.empty()) return fail(ctx, GQLA_ERR_BACKEND, "%s", error.c_str());
#else
    const GemmFn gemm = ctx->kernels->gemm;
    const float* wt = w.wt.as<float>();
    ctx->threads().parallel_for_spread(steps, [&](int64_t first, int64_t end, int) {
        for (int64_t r0 = first * kRows; r0 < std::min(n, end * kRows); r0 += kRows)
            gemm(static_cast<int>(std::min(kRows, n - r0)), static_cast<int>(N), static_cast<int>(r), latent + r0 * r,
                 r, wt, N, out + r0 * N, N);
    });
#endif
    return GQLA_OK;
}

}  // namespace gqla::cpu
