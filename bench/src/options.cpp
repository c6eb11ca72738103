// SPDX-License-Identifier: Apache-2.0
#include "options.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "presets.hpp"
#include "query_mix.hpp"

namespace gqla::bench {
namespace {

const char* kUsage =
    "usage: gqla-bench [options]\n"
    "  --device cpu|cuda|auto      device of the sessions (default auto)\n"
    "  --preset NAME[,NAME...]     llama3-8b | llama3-8b-gqla | deepseek-v3 | mla16 | all\n"
    "                              (default llama3-8b-gqla)\n"
    "  --path P[,P...]             path of GQLA presets: gqa | absorb | auto | transient | both\n"
    "                              (both = gqa,absorb; the default)\n"
    "  --dtype bf16|f16|f32|fp8_e4m3[,...]  cache dtype (default bf16)\n"
    "  --io f32|bf16|f16           dtype of q, o and the appended rows (default f32)\n"
    "  --batch N[,N...]            sequences per decode call (default 1,16)\n"
    "  --context N[,N...]          cached tokens per sequence (default 1024,4096,16384; k suffix ok)\n"
    "  --mixed MIN:MAX             lengths of a batch's sequences spread evenly over [MIN, MAX]\n"
    "                              (replaces --context), each case followed by the uniform case\n"
    "                              with the same total tokens\n"
    "  --s-q N[,N...]              query tokens per sequence, 1..65536 (default 1); the queries\n"
    "                              are each sequence's last s_q cached tokens (causal)\n"
    "  --q-lens QLENxCOUNT[,...]   one gqla_attention call over a ragged mix, e.g. 1x47,2048x1:\n"
    "                              47 sequences with 1 query and 1 with 2048, each holding\n"
    "                              --context tokens (replaces --batch and --s-q)\n"
    "  --threads N                 CPU threads (default: all available)\n"
    "  --reps N                    timed calls per case, median and p99 reported (default 20)\n"
    "  --busy N                    N busy-looping threads of the bench run while calls are timed\n"
    "                              (the library sharing its CPUs with an application's threads)\n"
    "  --hot                       call on the same sequences every time (default: rotate over\n"
    "                              >= 512 MiB of cache so every call starts cold)\n"
    "  --cold-mib N                the rotation's size in MiB (default 512; a smaller one only\n"
    "                              for smoke runs: the caches of the host must not hold it)\n"
    "  --interleave                with several --dtype: their sessions live side by side and\n"
    "                              take turns call by call, so the rows of one shape compare\n"
    "                              like with like on a shared host (each gets its share of\n"
    "                              the memory cap)\n"
    "  --page-size N               tokens per cache page (default: library default)\n"
    "  --no-baseline               skip the naive repeat-KV baseline\n"
    "  --no-check                  skip the accuracy check against the float64 reference\n"
    "  --json                      one JSON object per case instead of a table\n"
    "  --validate-auto             check AUTO's choices against measurements of every path\n"
    "  --topk K                    sparse attention: each query lists K random visible positions\n"
    "                              (sorted, distinct) of its --context; a dense row over K tokens\n"
    "                              beside each sparse one (uniform calls, --batch x --s-q)\n"
    "  --shards N                  tensor parallelism: N sessions of G/N groups each (one per rank,\n"
    "                              run in turn) against the full session: outputs checked, per-rank\n"
    "                              cache elements per token and decode time beside the full time / N;\n"
    "                              with --device cuda rank i runs on GPU i mod the GPUs visible\n"
    "  --keep-latent 0|1           with --shards: whether GQA-path shards keep the latent (default 0)\n"
    "  --quiet                     no progress lines on stderr (--validate-auto and sweeps\n"
    "                              longer than a few seconds print cells done, elapsed, ETA)\n"
    "\n"
    "Which call a row times: s_q <= 16 on gqa, absorb or auto is a decode row, gqla_decode on a\n"
    "session of that path (as earlier versions timed it). Larger s_q (prefill chunks), --q-lens\n"
    "and --path transient are attention rows: one gqla_attention call with the path given per\n"
    "call, on a session that keeps only the latent cache (absorb) unless the path is gqa, which\n"
    "keeps the expanded cache. Attention rows count FLOPs on the causal (query, key) pairs of\n"
    "the form that ran: 2*(Dq+Dv) per head and pair for the GQA form, the absorb form's own, and\n"
    "for transient also the expansion GEMM of the call's context, 2*r*G*(d_c+d_v) per token.\n";

[[noreturn]] void fail(const std::string& msg) {
    std::fprintf(stderr, "gqla-bench: %s\n\n%s", msg.c_str(), kUsage);
    std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    if (out.empty()) fail("empty list '" + s + "'");
    return out;
}

int64_t parse_count(const std::string& flag, const std::string& s) {
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (end && (*end == 'k' || *end == 'K')) {
        v *= 1024;
        ++end;
    }
    if (end == s.c_str() || (end && *end) || v < 1) fail(flag + ": expected a positive integer, got '" + s + "'");
    return v;
}

template <class T>
std::vector<T> parse_counts(const std::string& flag, const std::string& s) {
    std::vector<T> out;
    for (const std::string& item : split(s)) out.push_back(static_cast<T>(parse_count(flag, item)));
    return out;
}

gqla_dtype parse_dtype(const std::string& flag, const std::string& s) {
    if (s == "bf16") return GQLA_DTYPE_BF16;
    if (s == "f16") return GQLA_DTYPE_F16;
    if (s == "f32") return GQLA_DTYPE_F32;
    if (s == "fp8_e4m3" && flag == "--dtype") return GQLA_DTYPE_FP8_E4M3;  // a cache dtype only
    fail(flag +
         (flag == "--dtype" ? ": expected bf16, f16, f32 or fp8_e4m3, got '" : ": expected bf16, f16 or f32, got '") +
         s + "'");
}

gqla_path parse_path(const std::string& s) {
    if (s == "gqa") return GQLA_PATH_GQA;
    if (s == "absorb") return GQLA_PATH_ABSORB;
    if (s == "auto") return GQLA_PATH_AUTO;
    if (s == "transient") return GQLA_PATH_GQA_TRANSIENT;
    fail("--path: expected gqa, absorb, auto, transient or both, got '" + s + "'");
}

gqla_device_type parse_device(const std::string& s) {
    if (s == "cpu") return GQLA_DEVICE_CPU;
    if (s == "cuda") return GQLA_DEVICE_CUDA;
    if (s == "auto") return GQLA_DEVICE_AUTO;
    fail("--device: expected cpu, cuda or auto, got '" + s + "'");
}

}  // namespace

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + ": missing value");
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        } else if (a == "--device")
            o.device = parse_device(value());
        else if (a == "--preset") {
            o.presets.clear();
            for (const std::string& name : split(value())) {
                if (name == "all") {
                    for (const Preset& p : all_presets()) o.presets.push_back(p.name);
                } else if (!find_preset(name)) {
                    fail("--preset: unknown preset '" + name + "'");
                } else {
                    o.presets.push_back(name);
                }
            }
        } else if (a == "--path") {
            o.paths.clear();
            for (const std::string& name : split(value())) {
                if (name == "both") {
                    o.paths.push_back(GQLA_PATH_GQA);
                    o.paths.push_back(GQLA_PATH_ABSORB);
                } else {
                    o.paths.push_back(parse_path(name));
                }
            }
        } else if (a == "--dtype") {
            o.dtypes.clear();
            for (const std::string& d : split(value())) o.dtypes.push_back(parse_dtype(a, d));
        } else if (a == "--io")
            o.io_dtype = parse_dtype(a, value());
        else if (a == "--batch")
            o.batches = parse_counts<int>(a, value());
        else if (a == "--context")
            o.contexts = parse_counts<int64_t>(a, value());
        else if (a == "--mixed") {
            const std::string v = value();
            const size_t colon = v.find(':');
            if (colon == std::string::npos) fail("--mixed: expected MIN:MAX, got '" + v + "'");
            o.mixed_min = parse_count(a, v.substr(0, colon));
            o.mixed_max = parse_count(a, v.substr(colon + 1));
            if (o.mixed_min < 1 || o.mixed_max < o.mixed_min)
                fail("--mixed: expected 1 <= MIN <= MAX, got '" + v + "'");
        } else if (a == "--s-q") {
            o.s_qs = parse_counts<int>(a, value());
            for (int s_q : o.s_qs)
                if (s_q > 65536) fail("--s-q: at most 65536 query tokens, got " + std::to_string(s_q));
        } else if (a == "--q-lens") {
            std::string why;
            if (!parse_query_mix(value(), &o.mix, &why)) fail("--q-lens: " + why);
        } else if (a == "--threads")
            o.threads = static_cast<int>(parse_count(a, value()));
        else if (a == "--reps")
            o.reps = static_cast<int>(parse_count(a, value()));
        else if (a == "--busy")
            o.busy = static_cast<int>(parse_count(a, value()));
        else if (a == "--page-size")
            o.page_size = static_cast<int>(parse_count(a, value()));
        else if (a == "--hot")
            o.hot = true;
        else if (a == "--cold-mib") {
            o.cold_mib = parse_count(a, value());
            if (o.cold_mib > 65536) fail("--cold-mib: at most 65536 MiB, got " + std::to_string(o.cold_mib));
        } else if (a == "--interleave")
            o.interleave = true;
        else if (a == "--json")
            o.json = true;
        else if (a == "--quiet")
            o.quiet = true;
        else if (a == "--no-baseline")
            o.baseline = false;
        else if (a == "--no-check")
            o.check_accuracy = false;
        else if (a == "--topk")
            o.topk = static_cast<int>(parse_count(a, value()));
        else if (a == "--shards")
            o.shards = static_cast<int>(parse_count(a, value()));
        else if (a == "--keep-latent") {
            const std::string v = value();
            if (v != "0" && v != "1") fail("--keep-latent: expected 0 or 1, got '" + v + "'");
            o.shard_keep_latent = v == "1";
        } else if (a == "--validate-auto")
            o.validate_auto = true;
        else
            fail("unknown option '" + a + "'");
    }
    if (!o.mix.empty() && o.mixed_max > 0) fail("--q-lens and --mixed do not combine: give one of them");
    return o;
}

}  // namespace gqla::bench
