// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/probe_cache_file.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace gqla {

namespace {

// Version 3: read_gbps is the scattered-run bandwidth (page-sized runs at
// random places). Version 2 files hold the streaming bandwidth and version 1
// files may hold readings from cache hits or a cold core, so both are
// measured anew rather than trusted.
constexpr const char* kHeader = "gqla-probe-cache 3";

}  // namespace

bool load_calibration(const std::string& path, const CalibrationRecord& want, CalibrationRecord* out) {
    std::ifstream in(path);
    if (!in) return false;
    std::string line;
    if (!std::getline(in, line) || line != kHeader) return false;
    CalibrationRecord rec;
    while (std::getline(in, line)) {
        size_t eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string key = line.substr(0, eq), value = line.substr(eq + 1);
        if (key == "model")
            rec.model = value;
        else if (key == "affinity_cores")
            rec.affinity_cores = std::atoi(value.c_str());
        else if (key == "isa_flags")
            rec.isa_flags = std::strtoull(value.c_str(), nullptr, 16);
        else if (key == "read_gbps")
            rec.read_gbps = std::strtod(value.c_str(), nullptr);
        else if (key == "peak_gflops_f32")
            rec.peak_gflops_f32 = std::strtod(value.c_str(), nullptr);
        else if (key == "clock_ghz")
            rec.clock_ghz = std::strtod(value.c_str(), nullptr);
    }
    if (rec.model != want.model || rec.affinity_cores != want.affinity_cores || rec.isa_flags != want.isa_flags)
        return false;
    if (!(rec.read_gbps > 0) || !(rec.peak_gflops_f32 > 0)) return false;
    *out = rec;
    return true;
}

bool save_calibration(const std::string& path, const CalibrationRecord& rec) {
    std::ostringstream tmp_name;
    tmp_name << path << ".tmp";
#if defined(__unix__)
    tmp_name << "." << getpid();
#endif
    {
        std::ofstream out(tmp_name.str(), std::ios::trunc);
        if (!out) return false;
        out.precision(17);
        out << kHeader << "\n"
            << "model=" << rec.model << "\n"
            << "affinity_cores=" << rec.affinity_cores << "\n"
            << "isa_flags=" << std::hex << rec.isa_flags << std::dec << "\n"
            << "read_gbps=" << rec.read_gbps << "\n"
            << "peak_gflops_f32=" << rec.peak_gflops_f32 << "\n"
            << "clock_ghz=" << rec.clock_ghz << "\n";
        if (!out) {
            std::remove(tmp_name.str().c_str());
            return false;
        }
    }
    if (std::rename(tmp_name.str().c_str(), path.c_str()) != 0) {
        std::remove(tmp_name.str().c_str());
        return false;
    }
    return true;
}

}  // namespace gqla
