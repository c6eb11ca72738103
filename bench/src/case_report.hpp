// SPDX-License-Identifier: Apache-2.0
// One measured case of the sweep and how it is printed: a table row or one
// JSON object per line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "bench_env.hpp"
#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct CaseResult {
    const Preset* preset = nullptr;
    bool attention = false;                // timed through gqla_attention (else gqla_decode)
    gqla_path requested = GQLA_PATH_AUTO;  // --path of the case (per call for attention rows)
    gqla_path active = GQLA_PATH_AUTO;     // decode: the session's path; attention: the form taken
    gqla_dtype dtype = GQLA_DTYPE_BF16;
    gqla_dtype io_dtype = GQLA_DTYPE_F32;
    int batch = 0, s_q = 0;  // s_q: the largest q_len of a ragged mix
    int64_t context = 0;     // mean length with --mixed
    std::string lengths;     // "" (uniform), "mixed MIN:MAX" or "uniform (mean of mixed)"
    std::string mix;         // --q-lens label of a ragged row, "" otherwise
    int64_t query_rows = 0;  // query tokens of one call
    int sets = 0;
    bool io_on_device = false;  // q/o in GPU memory (no copies in the time)
    double seconds = 0;         // median wall time of one call
    double p99_seconds = 0;     // 99th percentile of the same calls
    int calls = 0;              // timed calls
    int busy = 0;               // --busy threads running meanwhile
    bool interleaved = false;   // timed in turns with the other dtypes' sessions (--interleave)
    double device_seconds = 0;  // CUDA: median device time (events), 0 when not measured
    // Work of one call: decode rows as gqla_session_predict_cost counts it
    // (comparable with earlier runs); attention rows on the causal pairs of
    // the form that ran (attention_counts.hpp).
    double bytes = 0, flops = 0;
    double visible_pairs = 0;              // attention rows
    double peak_gflops = 0;                // the compute roof the floor divides by
    double floor_s = 0;                    // max(bytes / measured bandwidth, flops / peak)
    std::optional<gqla_path_cost> pred;    // the library's prediction for the form that ran
    std::optional<gqla_path> call_chosen;  // attention rows: what AUTO per call would pick
    std::optional<double> baseline_s;
    std::string baseline_note;
    std::optional<double> rel_err;
    std::string error;           // non-empty: the case could not run
    bool expected_skip = false;  // the error is a limit of the case (memory, s_q > context), not a failure
};

void print_table_header(const BenchEnv& env);
void print_table_row(const CaseResult& r);
void print_json(const CaseResult& r, const BenchEnv& env);

}  // namespace gqla::bench
