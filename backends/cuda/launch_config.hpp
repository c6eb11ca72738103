// Launch configurations shared by the attention kernels.
#pragma once

#include <cuda_runtime.h>

namespace gqla::cuda {

// grid of `block` threads with smem_bytes of dynamic shared memory; with
// split_cluster, the splits of a row block (grid.z) form one thread-block
// cluster (attr is the storage its attribute points to).
inline cudaLaunchConfig_t split_launch_config(dim3 grid, dim3 block, int smem_bytes, bool split_cluster,
                                              cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    if (split_cluster) {
        *attr = cudaLaunchAttribute{};
        attr->id = cudaLaunchAttributeClusterDimension;
        attr->val.clusterDim.x = 1;
        attr->val.clusterDim.y = 1;
        attr->val.clusterDim.z = grid.z;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    return cfg;
}

// Clusters of cluster_splits CTAs of `kernel` (block threads, smem_bytes of
// dynamic shared memory each) that can be resident at once; 0 where the
// shape cannot be scheduled (an answer, not an error).
inline int max_active_split_clusters(const void* kernel, dim3 block, int smem_bytes, int cluster_splits) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        split_launch_config(dim3(1, 1, static_cast<unsigned>(cluster_splits)), block, smem_bytes, true, &attr);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

}  // namespace gqla::cuda
