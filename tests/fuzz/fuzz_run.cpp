// SPDX-License-Identifier: Apache-2.0
// The run state, the failure report and the status check of fuzz_run.hpp.
#include "tests/fuzz/fuzz_run.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace fuzz {

Run run;

[[noreturn]] void fail(const char* fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "\nFUZZ FAILURE (seed %llu, call %lld, op %s): ", static_cast<unsigned long long>(run.seed),
                 static_cast<long long>(run.calls), run.op);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\nreplay: gqla_api_sequence_fuzzer --seed %llu --calls %lld --features %s\n",
                 static_cast<unsigned long long>(run.seed), static_cast<long long>(run.calls),
                 features_name(run.features).c_str());
    std::exit(1);
}

std::string features_name(const Features& f) {
    if (f.fp8 && f.drop_latent && f.attention && f.sequence_io && f.shards) return "all";
    if (!f.any()) return "base";
    std::string s;
    auto add = [&](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ",";
        s += name;
    };
    add(f.fp8, "fp8");
    add(f.drop_latent, "latent");
    add(f.attention, "attention");
    add(f.sequence_io, "sequence_io");
    add(f.shards, "shards");
    return s;
}

bool parse_features(const std::string& list, Features* out) {
    Features f;
    f.fp8 = f.drop_latent = f.attention = f.sequence_io = f.shards = false;
    if (list == "all") {
        *out = Features{};
        return true;
    }
    if (list == "base") {
        *out = f;
        return true;
    }
    size_t start = 0;
    while (start <= list.size()) {
        const size_t end = std::min(list.find(',', start), list.size());
        const std::string name = list.substr(start, end - start);
        if (name == "fp8")
            f.fp8 = true;
        else if (name == "latent")
            f.drop_latent = true;
        else if (name == "attention")
            f.attention = true;
        else if (name == "sequence_io")
            f.sequence_io = true;
        else if (name == "shards")
            f.shards = true;
        else
            return false;
        start = end + 1;
    }
    *out = f;
    return true;
}

bool check_status(const char* call, gqla_status st, const Expect& e) {
    ++run.calls;
    if (st < GQLA_OK || st > GQLA_ERR_INTERNAL) fail("%s returned %d, outside the gqla_status values", call, int(st));
    if (st == GQLA_ERR_INTERNAL) fail("%s returned GQLA_ERR_INTERNAL: %s", call, gqla_last_error_message());
    if (st != GQLA_OK) {
        const char* msg = gqla_last_error_message();
        if (msg == nullptr || msg[0] == '\0') fail("%s failed with %d but left no error message", call, int(st));
        if (e.must_succeed()) fail("%s: expected success, got %s: %s", call, gqla_status_string(st), msg);
        if (!(e.allowed & (1u << st))) fail("%s: unexpected %s: %s", call, gqla_status_string(st), msg);
        ++run.refused;
        if (run.verbose) std::printf("  %s refused as expected: %s\n", call, msg);
        return false;
    }
    if (!e.must_succeed()) fail("%s succeeded, but an error was expected (mask 0x%x)", call, e.allowed);
    if (run.verbose) std::printf("  %s ok\n", call);
    return true;
}

}  // namespace fuzz
