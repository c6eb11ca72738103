// SPDX-License-Identifier: Apache-2.0
// gqla-gather-floor: the memory floor of sparse (top-k) attention on this
// host, without attention. It times plain reads of the bytes a sparse call
// must bring in - every cache line of K listed tokens' rows, nothing
// computed on them - in three patterns, cold (a rotation over >= 512 MiB,
// --cold-mib):
//   sparse, page layout  K random sorted positions of T, each (group, token)
//                        row where the CPU cache keeps it: a page holds a
//                        group's rows of P tokens contiguously, so a token's
//                        rows lie P * row bytes apart (docs/sparse-attention.md)
//   dense, page layout   K consecutive positions: contiguous runs, the dense
//                        row gqla-bench --topk prints beside each sparse one
//   sparse, token-major  the same positions with all of a token's rows
//                        contiguous (a layout gqla does not use): what the
//                        page layout costs a gather
// The first pattern's time is the floor of a sparse call's time over that
// cache; the ratio of the first two is how much longer reads alone take when
// the rows come a few hundred bytes at a time than in page runs
// (gqla-bench --topk can show a lower ratio: its dense call is slower than
// its reads alone).
// Defaults: LLaMA-3-8B-GQLA on the GQA path in bf16 (8 groups, 128-byte
// keys, 256-byte values, a 128-byte rope key shared by the groups), pages of
// 64 tokens, K = 2048 of T = 65536.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.hpp"
#include "support.hpp"

namespace {

using gqla::bench::median;

struct Shape {
    int64_t groups = 8, key_bytes = 128, value_bytes = 256, shared_bytes = 128;
    int64_t page = 64, context = 65536, topk = 2048;
    int threads = 0, reps = 41;
    int64_t cold_mib = 512;  // the rotation's size
    int64_t token_bytes() const { return groups * (key_bytes + value_bytes) + shared_bytes; }
};

constexpr int64_t kLine = 64;
constexpr int kBlock = 256;  // positions per block, as the CPU sparse kernels take them
constexpr int kAhead = 16;   // rows prefetched ahead of the one read
enum Pattern { kSparse, kDense, kTokenMajor, kPatterns };

// One sequence's cache: key, value and shared pools, [page][group][slot][bytes]
// (the shared pool has one group); the token-major pattern reads `key` as
// [token][all bytes of the token].
struct Cache {
    std::vector<char> key, value, shared;
};

inline uint64_t touch(const char* p, int64_t bytes, uint64_t acc) {
    for (int64_t o = 0; o < bytes; o += kLine) acc ^= *reinterpret_cast<const volatile uint64_t*>(p + o);
    return acc;
}

inline void prefetch(const char* p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += kLine) __builtin_prefetch(p + o, 0, 2);
}

// Positions pos[i0, i1) in the page layout: per block, the shared rows, then
// per group every position's key and value rows (the kernels' order).
uint64_t read_page_layout(const Shape& s, const Cache& c, const int32_t* pos, int64_t i0, int64_t i1) {
    const int64_t P = s.page;
    const auto row = [&](const std::vector<char>& pool, int64_t groups, int64_t g, int64_t bytes, int32_t t) {
        return pool.data() + ((t / P) * groups * P + g * P + t % P) * bytes;
    };
    uint64_t acc = 0;
    for (int64_t b0 = i0; b0 < i1; b0 += kBlock) {
        const int64_t b1 = std::min(i1, b0 + kBlock);
        if (s.shared_bytes > 0)
            for (int64_t i = b0; i < b1; ++i)
                acc = touch(row(c.shared, 1, 0, s.shared_bytes, pos[i]), s.shared_bytes, acc);
        for (int64_t g = 0; g < s.groups; ++g)
            for (int64_t i = b0; i < b1; ++i) {
                if (i + kAhead < b1) {
                    prefetch(row(c.key, s.groups, g, s.key_bytes, pos[i + kAhead]), s.key_bytes);
                    prefetch(row(c.value, s.groups, g, s.value_bytes, pos[i + kAhead]), s.value_bytes);
                }
                acc = touch(row(c.key, s.groups, g, s.key_bytes, pos[i]), s.key_bytes, acc);
                acc = touch(row(c.value, s.groups, g, s.value_bytes, pos[i]), s.value_bytes, acc);
            }
    }
    return acc;
}

uint64_t read_token_major(const Shape& s, const Cache& c, const int32_t* pos, int64_t i0, int64_t i1) {
    const int64_t tb = s.token_bytes();
    const int ahead = 2;  // a token is ~50 lines: a couple of tokens ahead
    uint64_t acc = 0;
    for (int64_t i = i0; i < i1; ++i) {
        if (i + ahead < i1) prefetch(c.key.data() + pos[i + ahead] * tb, tb);
        acc = touch(c.key.data() + pos[i] * tb, tb, acc);
    }
    return acc;
}

bool parse(int argc, char** argv, Shape* s) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h" || i + 1 >= argc) return false;
        const long long v = std::atoll(argv[++i]);
        if (v < 0 || (v == 0 && a != "--shared-bytes")) return false;
        if (a == "--groups")
            s->groups = v;
        else if (a == "--key-bytes")
            s->key_bytes = v;
        else if (a == "--value-bytes")
            s->value_bytes = v;
        else if (a == "--shared-bytes")
            s->shared_bytes = v;
        else if (a == "--page-size")
            s->page = v;
        else if (a == "--context")
            s->context = v;
        else if (a == "--topk")
            s->topk = v;
        else if (a == "--threads")
            s->threads = static_cast<int>(v);
        else if (a == "--cold-mib")
            s->cold_mib = v;
        else if (a == "--reps")
            s->reps = static_cast<int>(v);
        else
            return false;
    }
    // Bounds that keep every size below in range (a cache of up to 2^31
    // tokens of at most 1 MiB each, a rotation of at most 1 TiB).
    const int64_t kMaxBytes = int64_t(1) << 20;
    return s->topk <= s->context && s->context % s->page == 0 && s->context <= INT32_MAX &&
           s->groups * (s->key_bytes + s->value_bytes) + s->shared_bytes <= kMaxBytes && s->threads <= 1024 &&
           s->cold_mib <= kMaxBytes && s->reps <= 100000;
}

}  // namespace

int main(int argc, char** argv) {
    Shape s;
    if (!parse(argc, argv, &s)) {
        std::fprintf(
            stderr,
            "usage: gqla-gather-floor [--groups G] [--key-bytes B] [--value-bytes B] [--shared-bytes B]\n"
            "                         [--page-size P] [--context T] [--topk K] [--threads N] [--reps R] "
            "[--cold-mib M]\n"
            "all values positive (--shared-bytes 0: no shared row); K <= T < 2^31; T a multiple of P; at most 1 MiB "
            "per token, 1024 threads, --cold-mib 1048576 (defaults: LLaMA-3-8B-GQLA GQA path, bf16)\n");
        return 2;
    }
    const int threads = s.threads > 0 ? s.threads : omp_get_max_threads();
    const int64_t pages = s.context / s.page;
    const int64_t seq_bytes = s.context * s.token_bytes();
    // Each call reads the next cache of a rotation over >= --cold-mib MiB, whose
    // length is not a multiple of the patterns' count (each pattern visits
    // every cache).
    int caches = static_cast<int>(std::max<int64_t>(2, (s.cold_mib << 20) / seq_bytes + 1));
    if (caches % kPatterns == 0) ++caches;
    std::vector<Cache> cache;
    try {
        cache.resize(static_cast<size_t>(caches));
        for (Cache& c : cache) {  // written once so every page is backed
            c.key.assign(static_cast<size_t>(std::max(pages * s.groups * s.page * s.key_bytes, seq_bytes)), 1);
            c.value.assign(static_cast<size_t>(pages * s.groups * s.page * s.value_bytes), 2);
            c.shared.assign(static_cast<size_t>(pages * s.page * s.shared_bytes), 3);
        }
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "gqla-gather-floor: cannot allocate %d caches of %.1f MB (--context, --cold-mib)\n",
                     caches, static_cast<double>(seq_bytes) / 1e6);
        return 1;
    }
    std::vector<int32_t> all(static_cast<size_t>(s.context)), sparse(static_cast<size_t>(s.topk)),
        dense(static_cast<size_t>(s.topk));
    std::iota(all.begin(), all.end(), 0);
    std::mt19937 rng(1);
    std::vector<double> ms[kPatterns];
    uint64_t sink = 0;
    int turn = 0;
    for (int rep = 0; rep < s.reps + 3; ++rep) {  // 3 warm-up rounds
        std::shuffle(all.begin(), all.end(), rng);
        std::copy(all.begin(), all.begin() + s.topk, sparse.begin());
        std::sort(sparse.begin(), sparse.end());
        // The dense run starts at a random page: a call never finds the
        // last one's lines in the last-level cache.
        const int64_t first_page = std::uniform_int_distribution<int64_t>(0, (s.context - s.topk) / s.page)(rng);
        std::iota(dense.begin(), dense.end(), static_cast<int32_t>(first_page * s.page));
        for (int p = 0; p < kPatterns; ++p) {
            const Cache& c = cache[static_cast<size_t>(turn++ % caches)];
            const int32_t* pos = p == kDense ? dense.data() : sparse.data();
            const auto t0 = std::chrono::steady_clock::now();
            uint64_t acc = 0;
#pragma omp parallel num_threads(threads) reduction(^ : acc)
            {  // contiguous pieces of the list per thread, as a B = 1 call is cut
                const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
                const int64_t i0 = s.topk * t / n, i1 = s.topk * (t + 1) / n;
                acc = p == kTokenMajor ? read_token_major(s, c, pos, i0, i1) : read_page_layout(s, c, pos, i0, i1);
            }
            const auto t1 = std::chrono::steady_clock::now();
            sink ^= acc;
            if (rep >= 3) ms[p].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
    }
    const gqla::CpuIdentity id = gqla::cpu_identity();
    const double bytes = double(s.topk) * s.token_bytes();
    std::printf(
        "# %s (family %u model %u), %d threads; %lld groups x (%lld + %lld) + %lld bytes per token, pages of "
        "%lld, K %lld of T %lld; %.1f MB per call, median of %d cold calls\n",
        id.model.c_str(), id.family, id.model_number, threads, static_cast<long long>(s.groups),
        static_cast<long long>(s.key_bytes), static_cast<long long>(s.value_bytes),
        static_cast<long long>(s.shared_bytes), static_cast<long long>(s.page), static_cast<long long>(s.topk),
        static_cast<long long>(s.context), bytes / 1e6, s.reps);
    const char* names[kPatterns] = {"sparse, page layout", "dense, page layout", "sparse, token-major"};
    const double dense_ms = median(ms[kDense]);
    std::printf("%-22s %9s %8s %14s\n", "pattern", "ms", "GB/s", "x dense");
    bool timed = true;  // every median a positive, finite time
    for (int p = 0; p < kPatterns; ++p) {
        const double m = median(ms[p]);
        timed = timed && m > 0 && m < 1e9;
        std::printf("%-22s %9.3f %8.1f %14.2f\n", names[p], m, bytes / m / 1e6, m / dense_ms);
    }
    if (!timed) {
        std::fprintf(stderr, "gqla-gather-floor: a pattern has no positive time (clock too coarse?)\n");
        return 1;
    }
    return sink == 0xfeedfacecafebeefull ? 3 : 0;  // keeps the reads
}
