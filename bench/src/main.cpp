// SPDX-License-Identifier: Apache-2.0
// gqla-bench: decode attention timed through the public C ABI, judged against
// this machine's roofline, a naive repeat-KV implementation and the float64
// reference. See `gqla-bench --help`.
#include <cstdio>
#include <exception>

#include "bench_env.hpp"
#include "options.hpp"
#include "shard_case.hpp"
#include "sparse_case.hpp"
#include "sweep.hpp"
#include "validate_auto.hpp"

int main(int argc, char** argv) {
    using namespace gqla::bench;
    const Options opt = parse_options(argc, argv);
    try {
        if (opt.topk > 0) return run_sparse_bench(opt);
        if (opt.shards > 0) return run_shard_bench(opt);
        const BenchEnv env = make_bench_env(opt.device, opt.threads);
        return opt.validate_auto ? run_validate_auto(opt, env) : run_sweep(opt, env);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gqla-bench: %s\n", e.what());
        return 1;
    }
}
