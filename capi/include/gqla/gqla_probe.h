/* SPDX-License-Identifier: Apache-2.0 */
/* gqla: the hardware probe and the cost model of the C API.
 *
 * Part of gqla.h, which includes this header (and which this header
 * includes): either include works and gives the whole API. What a device
 * can do (gqla_probe: ISA, bandwidth, peak; measured or estimated) and what
 * one decode step costs on each path (gqla_predict_cost), the numbers AUTO
 * decides with. The same stability rules hold as in gqla.h: pinned values,
 * struct_size first, append-only structs.
 */
#ifndef GQLA_GQLA_PROBE_H
#define GQLA_GQLA_PROBE_H

#include "gqla.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ probe */

/* ISA feature bits of gqla_probe_info.isa_flags */
#define GQLA_ISA_SSE42 (1u << 0)
#define GQLA_ISA_AVX (1u << 1)
#define GQLA_ISA_AVX2 (1u << 2)
#define GQLA_ISA_FMA (1u << 3)
#define GQLA_ISA_F16C (1u << 4)
#define GQLA_ISA_AVX512F (1u << 5)
#define GQLA_ISA_AVX512BW (1u << 6)
#define GQLA_ISA_AVX512VL (1u << 7)
#define GQLA_ISA_AVX512BF16 (1u << 8)
#define GQLA_ISA_AVX512FP16 (1u << 9)
#define GQLA_ISA_AMX (1u << 10)

/* The name of one GQLA_ISA_* bit as Linux's /proc/cpuinfo spells it
 * ("sse4.2", "avx2", "avx512_bf16", ...): a static string. NULL for 0, for
 * several bits at once and for a bit this version does not define (a later
 * version may name more). Every binding and tool prints these names. */
GQLA_API const char* gqla_isa_name(uint64_t isa_flag);

/* Probe flags */
#define GQLA_PROBE_CALIBRATE (1u << 0) /* measure bandwidth and peak (cached per process) */

/* Bits of gqla_probe_info.measured: which roofline numbers were measured */
#define GQLA_MEASURED_READ_GBPS (1u << 0) /* read_gbps */
#define GQLA_MEASURED_PEAK (1u << 1)      /* peak_gflops_f32 (and the bf16 peak derived from it) */

typedef struct gqla_probe_info {
    size_t struct_size;      /* sizeof(gqla_probe_info) */
    gqla_device_type device; /* CPU or CUDA */
    int32_t device_index;
    char vendor[64]; /* "AuthenticAMD", "NVIDIA", ... */
    char name[128];  /* CPU model or GPU name */
    /* CPU */
    int32_t logical_cores;
    int32_t physical_cores;
    int32_t affinity_cores; /* CPUs this process may run on */
    uint64_t isa_flags;     /* GQLA_ISA_* (CPU) */
    int32_t l1d_kb, l2_kb, l3_kb;
    /* CUDA */
    int32_t cc_major, cc_minor;
    int32_t sm_count;
    int32_t clock_mhz, mem_clock_mhz, bus_width_bits;
    double mem_gb;
    /* Roofline numbers used by the cost model */
    double read_gbps;        /* memory read bandwidth, GB/s (1e9); CPU: of page-sized
                                (8 KiB) runs read at random places, as the attention
                                kernels read a paged cache; CUDA: streaming */
    double peak_gflops_f32;  /* FMA peak, all threads / SIMT f32 */
    double peak_gflops_bf16; /* tensor-core bf16 peak (CUDA); CPU: bf16 dot peak or f32 peak */
    int32_t calibrated;      /* 1: read_gbps/peaks were measured, 0: estimated from specs */
    int32_t measured;        /* GQLA_MEASURED_* bits: which numbers were measured, the others
                                    are estimates (calibrated is 1 when all were). It fills what
                                    was tail padding, so sizeof is unchanged */
} gqla_probe_info;

/* Number of devices of a type visible now (CPU: 1; CUDA: 0 when the module
 * or a GPU is absent). */
GQLA_API gqla_status gqla_device_count(gqla_device_type device, int32_t* out_count);

/* Describe a device. Without GQLA_PROBE_CALIBRATE the numbers are estimated
 * from specs (fast); with it they are measured once per process (~0.2 s CPU,
 * up to ~0.7 s where the host must first back the buffer's memory; <= 300 ms
 * CUDA) and cached. Errors: INVALID_ARGUMENT, UNSUPPORTED. */
GQLA_API gqla_status gqla_probe(gqla_device_type device, int32_t device_index, uint32_t flags, gqla_probe_info* out);

/* ------------------------------------------------------------------- cost */

typedef struct gqla_workload {
    size_t struct_size; /* sizeof(gqla_workload) */
    int32_t batch;      /* sequences per decode call */
    int64_t context;    /* cached tokens per sequence (mean) */
    int32_t q_len;      /* s_q */
    /* Appended in 1.2: sparse (top-k) attention, the topk of
     * gqla_attention_args.indices; 0 = dense. A sparse step reads, per
     * query, its own min(topk, visible) positions (no sharing between the
     * queries of a sequence) plus its 4 * topk index bytes. 0..2^20. */
    int32_t topk;
} gqla_workload;

typedef enum gqla_bound { GQLA_BOUND_MEMORY = 0, GQLA_BOUND_COMPUTE = 1 } gqla_bound;

typedef struct gqla_path_cost {
    double bytes; /* bytes read + written by one decode step */
    double flops;
    double memory_s;   /* bytes / bandwidth (a CPU session's: the probe's, at most
                              what its threads pull, docs/cost-model.md) */
    double compute_s;  /* flops / peak */
    double overhead_s; /* fixed per-call overhead */
    double time_s;     /* predicted: with m = memory_s / memory efficiency and
                              c = compute_s / compute efficiency, max(m, c) +
                              share * min(m, c) + overhead_s, the efficiencies and
                              the share being the backend's measured ones */
    gqla_bound bound;  /* the term that dominates time_s */
} gqla_path_cost;

typedef struct gqla_cost_report {
    size_t struct_size;    /* sizeof(gqla_cost_report) */
    gqla_path_cost gqa;    /* GQA path (the only path of a GQA-kind config) */
    gqla_path_cost absorb; /* absorb path (zeros for GQA kind) */
    gqla_path chosen;      /* what AUTO picks for this workload */
    double expand_bytes;   /* one-time cost of building the expanded cache */
    double expand_flops;
    double expand_s;
    /* Appended in 1.1. */
    gqla_path_cost transient; /* GQLA: the GQA form over latent rows up-projected
                                  per call (the expansion of the batch's
                                  context included); zeros for GQA kind */
    gqla_path call_chosen;    /* what gqla_attention's AUTO picks for this
                                  workload with no expanded cache kept:
                                  GQA (GQA kind), ABSORB or GQA_TRANSIENT */
} gqla_cost_report;

/* Predict both paths' cost of one decode step of `layer`-sized attention for
 * workload w on `probe` (NULL: the probe of cfg->device). Pure: creates nothing.
 * Errors: INVALID_ARGUMENT, UNSUPPORTED. */
GQLA_API gqla_status gqla_predict_cost(const gqla_config* cfg, const gqla_probe_info* probe, const gqla_workload* w,
                                       gqla_cost_report* out);

/* The same for a live session, on its device's probe with its backend's
 * measured efficiency factors. */
GQLA_API gqla_status gqla_session_predict_cost(const gqla_session* session, const gqla_workload* w,
                                               gqla_cost_report* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GQLA_GQLA_PROBE_H */
