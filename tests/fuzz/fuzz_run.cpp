// SPDX-License-Identifier: Apache-2.0
// The run state, the failure report and the status check of fuzz_run.hpp.
#include "tests/fuzz/fuzz_run.hpp"

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
    std::fprintf(stderr, "\nreplay: gqla_api_sequence_fuzzer --seed %llu --calls %lld\n",
                 static_cast<unsigned long long>(run.seed), static_cast<long long>(run.calls));
    std::exit(1);
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
