// SPDX-License-Identifier: Apache-2.0
// The kernel table of an ISA unit that includes attention_kernels.inl: every
// entry is that unit's own kernel. Included right after it, inside the
// unit's namespace (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp);
// the AVX512-BF16 unit starts from the AVX-512 table instead.

static const KernelTable& make_table(Isa isa, const char* name) {
    static const KernelTable table = {
        isa,
        name,
        {gqa_attend<GQLA_DTYPE_F32>, gqa_attend<GQLA_DTYPE_F16>, gqa_attend<GQLA_DTYPE_BF16>, gqa_attend_fp8},
        {gqa_attend_wide<GQLA_DTYPE_F32>, gqa_attend_wide<GQLA_DTYPE_F16>, gqa_attend_wide<GQLA_DTYPE_BF16>,
         gqa_attend_wide_fp8},
        {absorb_attend<GQLA_DTYPE_F32>, absorb_attend<GQLA_DTYPE_F16>, absorb_attend<GQLA_DTYPE_BF16>,
         absorb_attend_fp8},
        {expand_latent<GQLA_DTYPE_F32>, expand_latent<GQLA_DTYPE_F16>, expand_latent<GQLA_DTYPE_BF16>},
        gemm_any<GQLA_DTYPE_F32>,
        gemm_any<GQLA_DTYPE_BF16>,
        fp8_rows_to_f32,
        true,  // gqa_attend_fp8 reads gathered rows
    };
    return table;
}
