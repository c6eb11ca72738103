// SPDX-License-Identifier: Apache-2.0
// Command line of gqla-bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gqla/gqla.h"
#include "query_mix.hpp"

namespace gqla::bench {

struct Options {
    gqla_device_type device = GQLA_DEVICE_AUTO;
    std::vector<std::string> presets{"llama3-8b-gqla"};
    // GQLA presets: the paths to run, in order (--path; default gqa, absorb).
    // GQLA_PATH_GQA_TRANSIENT exists only per gqla_attention call.
    std::vector<gqla_path> paths{GQLA_PATH_GQA, GQLA_PATH_ABSORB};
    std::vector<gqla_dtype> dtypes{GQLA_DTYPE_BF16};
    gqla_dtype io_dtype = GQLA_DTYPE_F32;  // --io: q, o and the appended rows
    std::vector<int> batches{1, 16};
    std::vector<int64_t> contexts{1024, 4096, 16384};
    // --mixed MIN:MAX: the sequences of a batch hold lengths spread evenly
    // over [MIN, MAX]; each such case is followed by the uniform case with
    // the same total tokens (context = mean length), so the two times show
    // how well the work is balanced over the threads. 0: off.
    int64_t mixed_min = 0, mixed_max = 0;
    std::vector<int> s_qs{1};
    // --q-lens: one gqla_attention call over a ragged mix (replaces --batch
    // and --s-q); empty: uniform calls.
    QueryMix mix;
    int threads = 0;
    int reps = 20;
    int busy = 0;  // --busy: busy-looping threads during the timed calls
    bool hot = false;
    int64_t cold_mib = 512;   // --cold-mib: the size of the rotation that keeps calls cold
    bool interleave = false;  // --interleave: the dtypes of a row take turns call by call
    bool json = false;
    bool quiet = false;  // --quiet: no progress lines on stderr
    int page_size = 0;
    bool validate_auto = false;
    bool check_accuracy = true;
    bool baseline = true;
    // --topk K: sparse attention of K positions per query beside dense
    // attention over K tokens (sparse_case.hpp); 0: off.
    int topk = 0;
    // --shards N: N group-sharded sessions against the full one
    // (shard_case.hpp); --keep-latent 1: shards on the GQA path keep the
    // latent too. 0: off.
    int shards = 0;
    int shard_keep_latent = 0;

    double cold_bytes() const { return static_cast<double>(cold_mib) * 1024.0 * 1024.0; }
};

// Parses argv; on --help prints usage and exits 0, on a bad option prints
// the problem and usage and exits 2.
Options parse_options(int argc, char** argv);

}  // namespace gqla::bench
