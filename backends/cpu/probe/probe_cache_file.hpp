// SPDX-License-Identifier: Apache-2.0
// Calibration results kept across processes in the file named by
// $GQLA_PROBE_CACHE, so short-lived programs need not re-measure. The file is
// small text; an entry is used only when it was measured on the same CPU
// model, with the same usable CPU count and ISA cap.
#pragma once

#include <cstdint>
#include <string>

namespace gqla {

struct CalibrationRecord {
    std::string model;           // CPU brand string
    int32_t affinity_cores = 0;  // threads the measurement used
    uint64_t isa_flags = 0;      // after the GQLA_MAX_ISA cap
    double read_gbps = 0;
    double peak_gflops_f32 = 0;
    double clock_ghz = 0;  // all-core clock the peak was capped at (0: unknown);
                           // kept so a reader of the file can check the peak
};

// Reads `path`; true and *out filled when it holds a record for `want`'s
// model, affinity_cores and isa_flags with positive numbers.
bool load_calibration(const std::string& path, const CalibrationRecord& want, CalibrationRecord* out);

// Writes the record (through a temporary file renamed into place, so a
// concurrent reader never sees half a file). Best effort: false on failure.
bool save_calibration(const std::string& path, const CalibrationRecord& rec);

}  // namespace gqla
