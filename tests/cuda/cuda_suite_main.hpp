// SPDX-License-Identifier: Apache-2.0
// main() of this folder's own doctest suites (gqla_cuda_backend_test,
// gqla_cuda_nonfinite_test, gqla_cuda_attention_test):
//   - exit 77 (ctest's skip code) where no GPU is visible, before any case
//     runs. doctest's queries (--list-test-cases, --list-test-suites,
//     --count, --help, --version, --list-reporters, with their short forms)
//     answer without a GPU: they run nothing, and they let the ctest entries'
//     filters be checked anywhere (`gqla_cuda_backend_test --list-test-cases
//     "--test-case=* bf16*"`).
//   - reseed the suite's random engine before every case, and before every
//     rerun of a case for its next SUBCASE: a case draws the same inputs
//     whichever filter selects it and whatever ran before it.
//   - exit 1 where the filters select no case, so that a ctest entry whose
//     filter no longer matches a case name cannot pass.
// The including file defines DOCTEST_CONFIG_IMPLEMENT before including
// doctest, and includes this header in one file of the executable only.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace gqla::test {

// Set by cuda_suite_main: what reseeds the suite's random engine.
inline void (*g_reseed)() = nullptr;
// Cases the filters selected in the run; -1 where no run took place (a query).
inline int g_cases_selected = -1;

// Reseeds before every case (and SUBCASE rerun) and counts the selected cases.
struct SuiteListener : doctest::IReporter {
    explicit SuiteListener(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats& stats) override {
        g_cases_selected = static_cast<int>(stats.numTestCasesPassingFilters);
    }
    void test_case_start(const doctest::TestCaseData&) override {
        if (g_reseed) g_reseed();
    }
    void test_case_reenter(const doctest::TestCaseData&) override {
        if (g_reseed) g_reseed();
    }
    void test_case_end(const doctest::CurrentTestCaseStats&) override {}
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};
DOCTEST_REGISTER_LISTENER("gqla_cuda_suite", 1, SuiteListener);

// Whether argv asks doctest a query only (a list, a count, help, the
// version): `-`s, an optional "dt-" prefix, then the flag's name.
inline bool doctest_query_only(int argc, char** argv) {
    struct Flag {
        const char* name;
        const char* short_name;
    };
    static const Flag kQueries[] = {{"list-test-cases", "ltc"},
                                    {"list-test-suites", "lts"},
                                    {"list-reporters", "lr"},
                                    {"count", "c"},
                                    {"help", "h"},
                                    {"help", "?"},
                                    {"version", "v"}};
    for (int i = 1; i < argc; ++i) {
        const char* arg = argv[i];
        if (*arg != '-') continue;
        while (*arg == '-') ++arg;
        if (std::strncmp(arg, "dt-", 3) == 0) arg += 3;
        for (const Flag& q : kQueries)
            if (std::strcmp(arg, q.name) == 0 || std::strcmp(arg, q.short_name) == 0) return true;
    }
    return false;
}

// gpu_visible: the suite's own test for a usable GPU; skip_message: what it
// prints where there is none. reseed: resets the suite's random engine to
// its seed.
inline int cuda_suite_main(int argc, char** argv, bool gpu_visible, const char* skip_message, void (*reseed)()) {
    if (!gpu_visible && !doctest_query_only(argc, argv)) {
        std::puts(skip_message);
        return 77;
    }
    g_reseed = reseed;
    doctest::Context context(argc, argv);
    const int status = context.run();
    if (g_cases_selected == 0) {
        std::puts("FAIL: no test case matches the filters");
        return 1;
    }
    return status;
}

}  // namespace gqla::test
