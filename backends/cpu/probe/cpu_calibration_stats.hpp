// SPDX-License-Identifier: Apache-2.0
// Turning the calibration's timed trials into one number: per-trial rates
// over wall and CPU time, robust statistics over trials, and the limits a
// reading must respect to be believed.
#pragma once

#include <cstddef>
#include <vector>

#include "backends/cpu/probe/cpu_calibration_threads.hpp"

namespace gqla {

// What one thread did in one trial.
struct ThreadSample {
    double units = 0;  // FLOPs or bytes
    CalibrationClock::time_point start, end;
    double cpu_seconds = 0;  // thread CPU time spent in the trial
};

// All threads' units over the span from the first start to the last end,
// in 1e9 units per second (0 for an empty or zero-length trial).
double wall_rate(const std::vector<ThreadSample>& trial);

// Sum over threads of each one's units over its own CPU time (1e9/s): what
// the cores deliver while they run our code, even when another process
// shares them for part of the trial. 0 when some thread ran for less than
// min_cpu_seconds (the CPU clock's granularity would dominate).
double cpu_time_rate(const std::vector<ThreadSample>& trial, double min_cpu_seconds);

// The value three quarters up the sorted list (the second largest of five,
// 0 when empty): above the typical trial, which other processes slow down,
// yet not decided by a single outlier on the high side.
double upper_quartile(std::vector<double> values);

// Shortest nonzero span between two steady_clock readings
// (seconds; its resolution as the program sees it).
double steady_clock_resolution_seconds();

// A trial is timed well enough when it lasts this many clock resolutions:
// its rate is then off by at most 1/kMinResolutionsPerTrial.
constexpr double kMinResolutionsPerTrial = 1000;
bool long_enough_to_time(double seconds, double resolution_seconds);

// measured, but never above `limit` (a physical ceiling such as the FMA
// peak at the measured clock); limit <= 0 means no ceiling is known.
double clamp_to_limit(double measured, double limit);

}  // namespace gqla
