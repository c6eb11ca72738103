// See absorb_kernels.hpp. One CTA per (b, qi, h) row; memory-trivial.
#include "absorb_kernels.hpp"
#include "cuda_status.hpp"
#include "device_dtype.cuh"

namespace gqla::cuda {

namespace {

struct Strides3 { int64_t b, q, h; };

__device__ __forceinline__ int64_t group_major_row(const AbsorbLayout& a, int b, int qi, int h) {
    int g = h / a.n_rep, hi = h % a.n_rep;
    return ((static_cast<int64_t>(g) * a.batch + b) * a.q_len + qi) * a.n_rep + hi;
}

__global__ void pack_q_kernel(AbsorbLayout a, const void* q, int q_dtype, Strides3 s, float* q_nope, float* q_att) {
    const int h = blockIdx.x % a.num_heads, qi = (blockIdx.x / a.num_heads) % a.q_len;
    const int b = blockIdx.x / (a.num_heads * a.q_len);
    const int64_t src = b * s.b + qi * s.q + h * s.h;
    const int64_t row = group_major_row(a, b, qi, h);
    const int dq = a.nope_dim + a.rope_dim, att_stride = a.latent_dim + a.rope_dim;
    for (int c = threadIdx.x; c < dq; c += blockDim.x) {
        float v = load_elem(q, q_dtype, src + c);
        if (c < a.nope_dim) q_nope[row * a.nope_dim + c] = v;
        else q_att[row * att_stride + a.latent_dim + (c - a.nope_dim)] = v;
    }
}

__global__ void unpack_o_kernel(AbsorbLayout a, const float* o_proj, void* o, int o_dtype, Strides3 s) {
    const int h = blockIdx.x % a.num_heads, qi = (blockIdx.x / a.num_heads) % a.q_len;
    const int b = blockIdx.x / (a.num_heads * a.q_len);
    const int64_t dst = b * s.b + qi * s.q + h * s.h;
    const int64_t row = group_major_row(a, b, qi, h);
    for (int c = threadIdx.x; c < a.value_dim; c += blockDim.x)
        store_elem(o, o_dtype, dst + c, o_proj[row * a.value_dim + c]);
}

}  // namespace

void launch_absorb_pack_q(const AbsorbLayout& a, const void* q, int32_t q_dtype, const int64_t q_strides[3],
                          float* q_nope, float* q_att, cudaStream_t stream) {
    pack_q_kernel<<<a.batch * a.q_len * a.num_heads, 128, 0, stream>>>(
        a, q, q_dtype, Strides3{q_strides[0], q_strides[1], q_strides[2]}, q_nope, q_att);
    check_launch("absorb pack_q_kernel");
}

void launch_absorb_unpack_o(const AbsorbLayout& a, const float* o_proj, void* o, int32_t o_dtype,
                            const int64_t o_strides[3], cudaStream_t stream) {
    unpack_o_kernel<<<a.batch * a.q_len * a.num_heads, 128, 0, stream>>>(
        a, o_proj, o, o_dtype, Strides3{o_strides[0], o_strides[1], o_strides[2]});
    check_launch("absorb unpack_o_kernel");
}

}  // namespace gqla::cuda
