// SPDX-License-Identifier: Apache-2.0
#include "probe_report.hpp"

#include <cstdio>
#include <string>

namespace gqla::demo {
namespace {

std::string isa_list(uint64_t flags) {
    std::string out;
    for (int bit = 0; bit < 64; ++bit)  // a clear bit asks for gqla_isa_name(0): NULL
        if (const char* name = gqla_isa_name(flags & (uint64_t{1} << bit)))
            out += (out.empty() ? "" : " ") + std::string(name);
    return out.empty() ? "none" : out;
}

}  // namespace

void print_probe(const gqla_probe_info& info) {
    if (info.device == GQLA_DEVICE_CUDA) {
        std::printf("  GPU %d       %s (%s), compute capability %d.%d, %d SMs, %.1f GB\n", info.device_index, info.name,
                    info.vendor, info.cc_major, info.cc_minor, info.sm_count, info.mem_gb);
    } else {
        std::printf("  CPU         %s (%s)\n", info.name, info.vendor);
        std::printf("  cores       %d logical, %d physical, %d usable by this process\n", info.logical_cores,
                    info.physical_cores, info.affinity_cores);
        std::printf("  ISA         %s\n", isa_list(info.isa_flags).c_str());
        std::printf("  caches      L1d %d KiB, L2 %d KiB, L3 %d KiB\n", info.l1d_kb, info.l2_kb, info.l3_kb);
    }
    std::printf("  bandwidth   %.1f GB/s read (%s)\n", info.read_gbps, info.calibrated ? "measured" : "estimated");
    std::printf("  peak        %.1f GFLOP/s f32, %.1f GFLOP/s bf16 (%s)\n", info.peak_gflops_f32, info.peak_gflops_bf16,
                info.calibrated ? "measured" : "estimated");
    std::printf("  ridge       %.1f FLOP/byte: below it a kernel is memory-bound\n",
                info.peak_gflops_f32 / info.read_gbps);
}

}  // namespace gqla::demo
