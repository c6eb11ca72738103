// SPDX-License-Identifier: Apache-2.0
// gqla-bench --topk: see sparse_case.hpp.
#include "sparse_case.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "presets.hpp"
#include "sparse_session.hpp"
#include "support.hpp"

namespace gqla::bench {

int run_sparse_bench(const Options& opt) {
    const int threads = opt.threads;
    const int K = opt.topk;
    if (!opt.json)
        std::printf("%-16s %-10s %-5s %5s %7s %6s %4s  %12s  %12s  %6s  %8s %8s\n", "preset", "path", "cache", "batch",
                    "T", "K", "s_q", "sparse ms", "dense ms", "ratio", "cpu ms", "cpu ms");
    for (const std::string& name : opt.presets) {
        const Preset* p = find_preset(name);
        if (p == nullptr) throw std::runtime_error("unknown preset " + name);
        for (gqla_path path : opt.paths) {
            if (!p->is_gqla() && path != GQLA_PATH_GQA) continue;
            for (gqla_dtype cache : opt.dtypes)
                for (int batch : opt.batches)
                    for (int64_t T : opt.contexts)
                        for (int s_q : opt.s_qs) {
                            SparseSession sparse(*p, path, cache, opt, batch, T, s_q);
                            const int64_t dense_len = std::min<int64_t>(K, T);
                            SparseSession dense(*p, path, cache, opt, batch, dense_len, s_q);
                            std::vector<int32_t> idx = indexer_lists(batch, s_q, T, K, 42);
                            std::vector<int32_t> none;
                            gqla_path ts = GQLA_PATH_AUTO, td = GQLA_PATH_AUTO;
                            double c_sparse = 0, c_dense = 0;
                            const double t_sparse = sparse.time(path, s_q, idx, K, opt.reps, opt.hot, &ts, &c_sparse);
                            const double t_dense = dense.time(path, s_q, none, 0, opt.reps, opt.hot, &td, &c_dense);
                            if (opt.json)
                                std::printf(
                                    "{\"device\": \"%s\", \"preset\": \"%s\", \"path\": \"%s\", \"dense_path\": "
                                    "\"%s\", "
                                    "\"cache\": \"%s\", \"batch\": %d, \"context\": %lld, \"topk\": %d, "
                                    "\"s_q\": %d, \"threads\": %d, \"hot\": %s, \"sparse_median_s\": %.6e, "
                                    "\"dense_context\": %lld, \"dense_median_s\": %.6e, \"sparse_cpu_s\": %.6e, "
                                    "\"dense_cpu_s\": %.6e}\n",
                                    opt.device == GQLA_DEVICE_CUDA ? "cuda" : "cpu", p->name, path_name(ts),
                                    path_name(td), dtype_label(cache), batch, static_cast<long long>(T), K, s_q,
                                    threads, opt.hot ? "true" : "false", t_sparse, static_cast<long long>(dense_len),
                                    t_dense, c_sparse, c_dense);
                            else
                                std::printf("%-16s %-10s %-5s %5d %7lld %6d %4d  %12.3f  %12.3f  %6.2f  %8.3f %8.3f\n",
                                            p->name, path_name(ts), dtype_label(cache), batch,
                                            static_cast<long long>(T), K, s_q, t_sparse * 1e3, t_dense * 1e3,
                                            t_sparse / t_dense, c_sparse * 1e3, c_dense * 1e3);
                            std::fflush(stdout);
                        }
        }
    }
    return 0;
}

}  // namespace gqla::bench
