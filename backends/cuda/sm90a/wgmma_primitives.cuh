// SPDX-License-Identifier: Apache-2.0
// Hopper warpgroup MMA (wgmma, sm_90a) over shared-memory operands in the
// 128-byte-swizzled layout, plus the fences and named barriers around it.
// Only the shapes the kernels use. Latent decode: S = Q K^T as m64n64k16 (both
// operands K-major) and O += P V as m64n256k16 (V read MN-major, i.e.
// transposed in hardware); for 32 query rows the transposed products
// S^T = K Q^T as m64n32k16 (both K-major) and O^T += V^T P^T as m64n32k16
// (V^T read MN-major). Prefill: S = Q K^T as m64n128k16 (both K-major) and
// O += P V as m64n128k16 with P in registers and V read MN-major.
//
// Operand tiles are stored as "atoms" of 64 16-bit columns (128 bytes) by up
// to 64 rows, each 1024-byte aligned; the 16-byte piece q of row r sits at
// piece q ^ (r % 8), which is the hardware's 128B swizzle, so whoever writes
// a tile (cp.async or st.shared) uses swizzled_offset() below.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "mma_primitives.cuh"
#include "tma_primitives.cuh"  // fence_proxy_async_smem

namespace gqla::cuda {

constexpr int kSwizzleRowBytes = 128;                     // one row of an atom
constexpr int kSwizzleGroupBytes = 8 * kSwizzleRowBytes;  // 8 rows: the swizzle period

__device__ __forceinline__ int swizzled_offset(int row, int piece16) {
    return row * kSwizzleRowBytes + ((piece16 ^ (row & 7)) << 4);
}

// Matrix descriptor of a 128B-swizzled operand starting at `p`.
//   K-major : lbo unused (1), sbo = stride between 8-row groups
//   MN-major: lbo = stride between 64-element blocks of M/N,
//             sbo = stride between 8-element groups of K
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    const uint32_t a = smem_addr(p);
    return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16) |
           (static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// The descriptor of the operand `bytes` further on: the start address is
// the low field (in 16-byte units), and shared addresses stay below 2^18, so
// no carry reaches the other fields.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads:
// producers arrive without waiting, consumers sync (wait for the count).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Warp-specialized kernels hand registers from the producer warpgroup to the
// consumers: every warp of a warpgroup executes the same one.
template <int N>
__device__ __forceinline__ void warpgroup_release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void warpgroup_claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Keeps the compiler from moving accumulator reads/writes across wgmma issue/wait.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The maxima of a thread's two rows of a 64-row f32 accumulator fragment:
// elements 4j, 4j + 1 belong to row lane / 4 and 4j + 2, 4j + 3 to that row
// + 8; the four lanes of a quad hold the other columns of the same rows.
template <int N>
__device__ __forceinline__ float2 fragment_row_max(const float (&s)[N]) {
    float lo = -INFINITY, hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        lo = fmaxf(lo, fmaxf(s[4 * j], s[4 * j + 1]));
        hi = fmaxf(hi, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int lane_bit = 1; lane_bit <= 2; lane_bit <<= 1) {
        lo = fmaxf(lo, __shfl_xor_sync(0xffffffffu, lo, lane_bit));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, lane_bit));
    }
    return make_float2(lo, hi);
}

// d (64 x 256, f32) (+)= A (64 x 16, K-major) * B (16 x 256, MN-major).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_bt(float (&d)[128], uint64_t da, uint64_t db, int accumulate);

// d (64 x 64, f32) (+)= A (64 x 16, K-major) * B (16 x 64, K-major).
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t da, uint64_t db, int accumulate);

// d (64 x 32, f32) (+)= A (64 x 16) * B (16 x 32, K-major); A K-major, or
// MN-major (transposed) with the _at variant.
template <typename T>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], uint64_t da, uint64_t db, int accumulate);
template <typename T>
__device__ __forceinline__ void wgmma_m64n32k16_at(float (&d)[16], uint64_t da, uint64_t db, int accumulate);

// d (64 x 128, f32) (+)= A (64 x 16, K-major) * B (16 x 128, K-major): the
// prefill kernel's S = Q K^T.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db, int accumulate);
// d (64 x 128, f32) (+)= A (64 x 16, in registers: the fragment layout of
// mma.sync's A, which is also the accumulator layout of two 8-column chunks,
// so P goes from the S accumulators to the product without shared memory)
// * B (16 x 128, MN-major): the prefill kernel's O += P V.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs_bt(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                       int accumulate);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GQLA_WGMMA_N256_BT(TY, PTX)                                                                                   \
    template <>                                                                                                       \
    __device__ __forceinline__ void wgmma_m64n256k16_bt<TY>(float(&d)[128], uint64_t da, uint64_t db,                 \
                                                            int accumulate) {                                         \
        asm volatile(                                                                                                 \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                             \
            "wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX "." PTX                                                \
            " {"                                                                                                      \
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                  \
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                        \
            "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                        \
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                                        \
            "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                                        \
            "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                                        \
            "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"                            \
            "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"                         \
            "}, %128, %129, p, 1, 1, 0, 1;\n}\n"                                                                      \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
              "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),           \
              "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),       \
              "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),       \
              "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),       \
              "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                  \
            : "l"(da), "l"(db), "r"(accumulate));                                                                     \
    }
#define GQLA_WGMMA_N64(TY, PTX)                                                                                       \
    template <>                                                                                                       \
    __device__ __forceinline__ void wgmma_m64n64k16<TY>(float(&d)[32], uint64_t da, uint64_t db, int accumulate) {    \
        asm volatile(                                                                                                 \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                              \
            "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX                                                 \
            " {"                                                                                                      \
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                  \
            "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                                         \
            "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                                        \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
            : "l"(da), "l"(db), "r"(accumulate));                                                                     \
    }
// TNSP_A: 0 = A K-major, 1 = A MN-major.
#define GQLA_WGMMA_N32(NAME, TY, PTX, TNSP_A)                                                                      \
    template <>                                                                                                    \
    __device__ __forceinline__ void NAME<TY>(float(&d)[16], uint64_t da, uint64_t db, int accumulate) {            \
        asm volatile(                                                                                              \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                           \
            "wgmma.mma_async.sync.aligned.m64n32k16.f32." PTX "." PTX                                              \
            " {"                                                                                                   \
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"                                                \
            "}, %16, %17, p, 1, 1, " TNSP_A ", 0;\n}\n"                                                            \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),      \
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
            : "l"(da), "l"(db), "r"(accumulate));                                                                  \
    }
GQLA_WGMMA_N32(wgmma_m64n32k16, __nv_bfloat16, "bf16", "0")
GQLA_WGMMA_N32(wgmma_m64n32k16, __half, "f16", "0")
GQLA_WGMMA_N32(wgmma_m64n32k16_at, __nv_bfloat16, "bf16", "1")
GQLA_WGMMA_N32(wgmma_m64n32k16_at, __half, "f16", "1")
GQLA_WGMMA_N256_BT(__nv_bfloat16, "bf16")
GQLA_WGMMA_N256_BT(__half, "f16")
GQLA_WGMMA_N64(__nv_bfloat16, "bf16")
GQLA_WGMMA_N64(__half, "f16")
// The 64 f32 accumulators of an m64n128 product: the operand list of the
// instruction and the matching asm operands.
#define GQLA_WGMMA_ACC64                                               \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"           \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define GQLA_WGMMA_ACC64_OPERANDS(d)                                                                            \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define GQLA_WGMMA_N128_SS(TY, PTX)                                                                                 \
    template <>                                                                                                     \
    __device__ __forceinline__ void wgmma_m64n128k16<TY>(float(&d)[64], uint64_t da, uint64_t db, int accumulate) { \
        asm volatile(                                                                                               \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                            \
            "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {" GQLA_WGMMA_ACC64                        \
            "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                                      \
            : GQLA_WGMMA_ACC64_OPERANDS(d)                                                                          \
            : "l"(da), "l"(db), "r"(accumulate));                                                                   \
    }
#define GQLA_WGMMA_N128_RS_BT(TY, PTX)                                                                            \
    template <>                                                                                                   \
    __device__ __forceinline__ void wgmma_m64n128k16_rs_bt<TY>(float(&d)[64], const uint32_t(&a)[4], uint64_t db, \
                                                               int accumulate) {                                  \
        asm volatile(                                                                                             \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                          \
            "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {" GQLA_WGMMA_ACC64                      \
            "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                      \
            : GQLA_WGMMA_ACC64_OPERANDS(d)                                                                        \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));                              \
    }
GQLA_WGMMA_N128_SS(__nv_bfloat16, "bf16")
GQLA_WGMMA_N128_SS(__half, "f16")
GQLA_WGMMA_N128_RS_BT(__nv_bfloat16, "bf16")
GQLA_WGMMA_N128_RS_BT(__half, "f16")
#undef GQLA_WGMMA_N128_SS
#undef GQLA_WGMMA_N128_RS_BT
#undef GQLA_WGMMA_ACC64
#undef GQLA_WGMMA_ACC64_OPERANDS
#undef GQLA_WGMMA_N256_BT
#undef GQLA_WGMMA_N64
#undef GQLA_WGMMA_N32
#endif

}  // namespace gqla::cuda
