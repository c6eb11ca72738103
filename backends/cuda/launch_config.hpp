// SPDX-License-Identifier: Apache-2.0
// Launch configurations shared by the decode kernels.
#pragma once

#include <cuda_runtime.h>

namespace gqla::cuda {

// Storage for the attributes a launch configuration points to.
using LaunchAttrs = cudaLaunchAttribute[2];

// grid of `block` threads with smem_bytes of dynamic shared memory. With
// split_cluster, the splits of a row block (grid.z) form one thread-block
// cluster; with dependent, the kernel is a programmatic dependent of the
// kernel before it on the stream (compute capability 9.0+: it may start
// before that one completes and waits for it in griddepcontrol.wait).
inline cudaLaunchConfig_t make_launch_config(dim3 grid, dim3 block, int smem_bytes, bool split_cluster, bool dependent,
                                             LaunchAttrs& attrs) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    cfg.attrs = attrs;
    if (split_cluster) {
        cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
        a = cudaLaunchAttribute{};
        a.id = cudaLaunchAttributeClusterDimension;
        a.val.clusterDim.x = 1;
        a.val.clusterDim.y = 1;
        a.val.clusterDim.z = grid.z;
    }
    if (dependent) {
        cudaLaunchAttribute& a = attrs[cfg.numAttrs++];
        a = cudaLaunchAttribute{};
        a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a.val.programmaticStreamSerializationAllowed = 1;
    }
    return cfg;
}

// Clusters of cluster_splits CTAs of `kernel` (block threads, smem_bytes of
// dynamic shared memory each) that can be resident at once; 0 where the
// shape cannot be scheduled (an answer, not an error).
inline int max_active_split_clusters(const void* kernel, dim3 block, int smem_bytes, int cluster_splits) {
    LaunchAttrs attrs;
    const cudaLaunchConfig_t cfg =
        make_launch_config(dim3(1, 1, static_cast<unsigned>(cluster_splits)), block, smem_bytes, true, false, attrs);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

}  // namespace gqla::cuda
