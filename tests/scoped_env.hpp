// SPDX-License-Identifier: Apache-2.0
// An environment variable set (or, with a null value, unset) for a scope and
// restored after it: for knobs read when a session or probe is created
// (GQLA_MAX_ISA, GQLA_CUDA_*, GQLA_PROBE_*), shared by the core, C ABI and
// GPU suites.
#pragma once

#include <cstdlib>
#include <string>

namespace gqla::test {

class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        const char* old = std::getenv(name);
        had_ = old != nullptr;
        if (had_) old_ = old;
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_.c_str(), old_.c_str(), 1);
        else
            unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_, old_;
    bool had_ = false;
};

}  // namespace gqla::test
