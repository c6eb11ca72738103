// SPDX-License-Identifier: Apache-2.0
// Hopper tensor-memory-accelerator (TMA) loads, the shared-memory barriers
// (mbarrier) they complete on, and the cluster stores and barriers of the
// narrow kernel's split merge (compute capability 9.0; the bodies
// are empty when compiled for older targets, where the host never launches a
// kernel that uses them). A tensor map (CUtensorMap, encoded on the host, see
// tensor_maps.hpp) describes a 2-D global array and the box one load moves;
// the hardware writes the box into shared memory already 128B-swizzled, so
// one thread issues a whole tile in a few instructions instead of every
// thread issuing 16-byte copies.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "mma_primitives.cuh"

namespace gqla::cuda {

// Every body is guarded: compiled for an older target they are empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GQLA_HOPPER_ASM(...) asm volatile(__VA_ARGS__)
#else
#define GQLA_HOPPER_ASM(...) \
    do {                     \
    } while (0)
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
    GQLA_HOPPER_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes barrier initialisation visible to the async proxy (the TMA unit).
__device__ __forceinline__ void mbarrier_init_fence() {
    GQLA_HOPPER_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory accesses (st.shared,
// cp.async, ldmatrix) before later async-proxy ones (wgmma operand reads,
// TMA writes into the same bytes).
__device__ __forceinline__ void fence_proxy_async_smem() {
    GQLA_HOPPER_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions for this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    GQLA_HOPPER_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                    : "memory");
}
// One plain arrival.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    GQLA_HOPPER_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// An arrival the hardware makes once every cp.async this thread issued so far
// has landed; it first raises the pending count by one, so it neither
// completes nor delays the phase by itself.
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* bar) {
    GQLA_HOPPER_ASM("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One of the phase's expected arrivals, made by the hardware once every
// cp.async this thread issued so far has landed (the thread goes on at once).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
    GQLA_HOPPER_ASM("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Spins on a try_wait form until the phase with parity %1 of barrier %0 has completed.
#define GQLA_MBARRIER_WAIT_LOOP(TRY_WAIT) \
    "{\n.reg .pred done;\nwait_%=:\n" TRY_WAIT " done, [%0], %1;\n@!done bra wait_%=;\n}\n"
// Blocks until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    GQLA_HOPPER_ASM(GQLA_MBARRIER_WAIT_LOOP("mbarrier.try_wait.parity.shared::cta.b64")::"r"(smem_addr(bar)),
                    "r"(parity)
                    : "memory");
}
// The same, and what other CTAs of the cluster stored into this CTA's shared
// memory with completions on the barrier (st_async_f32) is visible after it.
__device__ __forceinline__ void mbarrier_wait_cluster(uint64_t* bar, uint32_t parity) {
    GQLA_HOPPER_ASM(
        GQLA_MBARRIER_WAIT_LOOP("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64")::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
#undef GQLA_MBARRIER_WAIT_LOOP

// Thread-block clusters. The shared-memory address of the same offset in the
// CTA of cluster rank `rank`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t local_addr, int rank) {
    uint32_t remote = 0;
    GQLA_HOPPER_ASM("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local_addr), "r"(rank));
    return remote;
}
// A 4-byte store into another CTA's shared memory that completes 4 bytes of
// transactions on that CTA's barrier `remote_bar` (both cluster_map addresses).
__device__ __forceinline__ void st_async_f32(uint32_t remote_addr, float v, uint32_t remote_bar) {
    GQLA_HOPPER_ASM("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(remote_addr),
                    "r"(__float_as_uint(v)), "r"(remote_bar)
                    : "memory");
}
// The cluster barrier in two halves, by every thread of every CTA: an arrival
// that orders nothing (what must be visible is published otherwise, e.g. by
// mbarrier_init_fence), and the wait for every thread's arrival.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    GQLA_HOPPER_ASM("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { GQLA_HOPPER_ASM("barrier.cluster.wait.aligned;\n" ::: "memory"); }

// Box at element coordinates (x = column, y = row) of `map` -> shared memory
// at `dst` (1024-byte aligned for the 128B swizzle); completes on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    GQLA_HOPPER_ASM(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
        : "memory");
}

#undef GQLA_HOPPER_ASM

}  // namespace gqla::cuda
