// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_calibration_stats.hpp"

#include <algorithm>

namespace gqla {

double wall_rate(const std::vector<ThreadSample>& trial) {
    if (trial.empty()) return 0;
    double units = 0;
    CalibrationClock::time_point first = trial.front().start, last = trial.front().end;
    for (const ThreadSample& s : trial) {
        units += s.units;
        first = std::min(first, s.start);
        last = std::max(last, s.end);
    }
    const double seconds = std::chrono::duration<double>(last - first).count();
    return seconds > 0 ? units / seconds * 1e-9 : 0;
}

double cpu_time_rate(const std::vector<ThreadSample>& trial, double min_cpu_seconds) {
    double rate = 0;
    for (const ThreadSample& s : trial) {
        if (!(s.cpu_seconds >= min_cpu_seconds) || s.cpu_seconds <= 0) return 0;
        rate += s.units / s.cpu_seconds * 1e-9;
    }
    return rate;
}

double upper_quartile(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    return values[(3 * (values.size() - 1)) / 4];
}

double steady_clock_resolution_seconds() {
    double shortest = 1.0;
    for (int i = 0; i < 16; ++i) {
        const CalibrationClock::time_point a = CalibrationClock::now();
        CalibrationClock::time_point b = CalibrationClock::now();
        while (b == a) b = CalibrationClock::now();
        shortest = std::min(shortest, std::chrono::duration<double>(b - a).count());
    }
    return shortest;
}

bool long_enough_to_time(double seconds, double resolution_seconds) {
    return seconds >= kMinResolutionsPerTrial * resolution_seconds;
}

double clamp_to_limit(double measured, double limit) { return limit > 0 ? std::min(measured, limit) : measured; }

}  // namespace gqla
