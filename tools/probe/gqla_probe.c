/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gqla-probe: prints what gqla's hardware probe finds (CPU and CUDA devices)
 * and the bandwidth and peak the cost model prices decode steps with, as a
 * table or as JSON. Uses only the public C header, like any user program.
 */
#include <stdio.h>
#include <string.h>

#include "gqla/gqla.h"

static void usage(FILE* out) {
    fprintf(out,
            "usage: gqla-probe [--json] [--calibrate | --no-calibrate]\n"
            "  --json          print one JSON object instead of a table\n"
            "  --calibrate     measure memory bandwidth and peak FLOP/s (default;\n"
            "                  ~0.2 s on a CPU, cached in $GQLA_PROBE_CACHE when set)\n"
            "  --no-calibrate  report estimates from the specs instead (instant)\n"
            "  --help          this text\n"
            "Environment: GQLA_MAX_ISA=none|sse42|avx|avx2|avx512 caps the CPU ISA,\n"
            "GQLA_PROBE_CACHE=FILE keeps CPU calibration results across runs.\n");
}

/* Calls print_one(name, first) for every set bit the library names (a
 * clear bit gives gqla_isa_name(0), which is NULL). */
static void for_each_isa_name(uint64_t flags, void (*print_one)(const char* name, int first)) {
    int bit, first = 1;
    for (bit = 0; bit < 64; ++bit) {
        const char* name = gqla_isa_name(flags & ((uint64_t)1 << bit));
        if (name == NULL) continue;
        print_one(name, first);
        first = 0;
    }
}

static void print_isa_word(const char* name, int first) {
    (void)first;
    printf(" %s", name);
}

static void print_isa_json(const char* name, int first) { printf("%s\"%s\"", first ? "" : ", ", name); }

/* JSON string with the escapes RFC 8259 requires. */
static void print_json_string(const char* s) {
    putchar('"');
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int probe(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* info) {
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    gqla_status st = gqla_probe(device, index, flags, info);
    if (st != GQLA_OK) {
        fprintf(stderr, "gqla-probe: probing %s %d failed: %s (%s)\n",
                device == GQLA_DEVICE_CPU ? "CPU" : "CUDA device", index, gqla_status_string(st),
                gqla_last_error_message());
        return 0;
    }
    return 1;
}

/* Whether a number (GQLA_MEASURED_* bit) was measured rather than estimated.
 * calibrated covers all of them; measured tells them apart when only some were. */
static int is_measured(const gqla_probe_info* info, uint32_t bit) {
    return info->calibrated || ((uint32_t)info->measured & bit) != 0;
}

static const char* origin(const gqla_probe_info* info, uint32_t bit) {
    return is_measured(info, bit) ? "measured" : "estimated";
}

static const char* json_bool(int value) { return value ? "true" : "false"; }

static void print_cpu_table(const gqla_probe_info* c) {
    printf("CPU\n");
    printf("  model            %s (%s)\n", c->name, c->vendor);
    printf("  cores            %d logical, %d physical, %d usable by this process\n", c->logical_cores,
           c->physical_cores, c->affinity_cores);
    printf("  ISA             ");
    for_each_isa_name(c->isa_flags, print_isa_word);
    if (c->isa_flags == 0) printf(" (baseline only)");
    printf("\n");
    printf("  caches           L1d %d KiB, L2 %d KiB, L3 %d KiB\n", c->l1d_kb, c->l2_kb, c->l3_kb);
    printf("  read bandwidth   %.1f GB/s (%s)\n", c->read_gbps, origin(c, GQLA_MEASURED_READ_GBPS));
    printf("  f32 peak         %.1f GFLOP/s (%s)\n", c->peak_gflops_f32, origin(c, GQLA_MEASURED_PEAK));
    printf("  bf16 peak        %.1f GFLOP/s (%s)\n", c->peak_gflops_bf16, origin(c, GQLA_MEASURED_PEAK));
}

static void print_cuda_table(const gqla_probe_info* g) {
    printf("CUDA device %d\n", g->device_index);
    printf("  name             %s\n", g->name);
    printf("  compute cap.     %d.%d, %d SMs, %d MHz\n", g->cc_major, g->cc_minor, g->sm_count, g->clock_mhz);
    printf("  memory           %.1f GB, %d-bit bus at %d MHz\n", g->mem_gb, g->bus_width_bits, g->mem_clock_mhz);
    printf("  read bandwidth   %.1f GB/s (%s)\n", g->read_gbps, g->calibrated ? "measured" : "estimated");
    printf("  bf16 tensor peak %.1f TFLOP/s\n", g->peak_gflops_bf16 * 1e-3);
    printf("  f32 peak         %.1f TFLOP/s\n", g->peak_gflops_f32 * 1e-3);
}

static void print_cpu_json(const gqla_probe_info* c) {
    printf("{\"vendor\": ");
    print_json_string(c->vendor);
    printf(", \"model\": ");
    print_json_string(c->name);
    printf(", \"cores\": %d, \"physical_cores\": %d, \"affinity_cores\": %d", c->logical_cores, c->physical_cores,
           c->affinity_cores);
    printf(", \"isa\": [");
    for_each_isa_name(c->isa_flags, print_isa_json);
    printf("], \"l1d_kb\": %d, \"l2_kb\": %d, \"l3_kb\": %d", c->l1d_kb, c->l2_kb, c->l3_kb);
    printf(", \"read_gbps\": %.3f, \"peak_gflops_f32\": %.3f, \"peak_gflops_bf16\": %.3f, \"calibrated\": %s",
           c->read_gbps, c->peak_gflops_f32, c->peak_gflops_bf16, json_bool(c->calibrated));
    printf(", \"read_gbps_measured\": %s, \"peak_measured\": %s}", json_bool(is_measured(c, GQLA_MEASURED_READ_GBPS)),
           json_bool(is_measured(c, GQLA_MEASURED_PEAK)));
}

static void print_cuda_json(const gqla_probe_info* g) {
    printf("{\"index\": %d, \"name\": ", g->device_index);
    print_json_string(g->name);
    printf(
        ", \"cc\": \"%d.%d\", \"sms\": %d, \"mem_gb\": %.3f, \"bw_gbps\": %.3f, \"peak_tflops_bf16\": %.3f"
        ", \"peak_tflops_f32\": %.3f, \"calibrated\": %s}",
        g->cc_major, g->cc_minor, g->sm_count, g->mem_gb, g->read_gbps, g->peak_gflops_bf16 * 1e-3,
        g->peak_gflops_f32 * 1e-3, g->calibrated ? "true" : "false");
}

int main(int argc, char** argv) {
    int json = 0, i;
    uint32_t flags = GQLA_PROBE_CALIBRATE;
    int32_t gpus = 0, g, printed = 0;
    gqla_probe_info cpu, gpu;

    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--calibrate") == 0)
            flags |= GQLA_PROBE_CALIBRATE;
        else if (strcmp(argv[i], "--no-calibrate") == 0)
            flags &= ~(uint32_t)GQLA_PROBE_CALIBRATE;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "gqla-probe: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    if (!probe(GQLA_DEVICE_CPU, 0, flags, &cpu)) return 1;
    if (gqla_device_count(GQLA_DEVICE_CUDA, &gpus) != GQLA_OK) gpus = 0;

    if (json) {
        printf("{\"version\": \"%s\", \"cpu\": ", gqla_version_string());
        print_cpu_json(&cpu);
        printf(", \"cuda\": [");
        for (g = 0; g < gpus; ++g) {
            if (!probe(GQLA_DEVICE_CUDA, g, flags, &gpu)) continue;
            if (printed++) printf(", ");
            print_cuda_json(&gpu);
        }
        printf("]}\n");
        return 0;
    }

    printf("gqla %s\n", gqla_version_string());
    print_cpu_table(&cpu);
    for (g = 0; g < gpus; ++g)
        if (probe(GQLA_DEVICE_CUDA, g, flags, &gpu)) print_cuda_table(&gpu);
    if (gpus == 0) printf("CUDA: no device (module absent or no GPU visible)\n");
    return 0;
}
