// SPDX-License-Identifier: Apache-2.0
// Reading a Python integer argument into the C type the library takes.
//
// Anything with __index__ (int, numpy integers) is accepted; bools are
// refused although Python counts them as integers (`True` as a sequence id is
// surely a mistake), and so are values outside [lo, hi]. Both raise
// gqla.InvalidArgument naming the argument, like the library's own checks.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace gqla_py {

int64_t integer_arg(pybind11::handle value, const std::string& name, int64_t lo, int64_t hi);

inline int32_t int32_arg(pybind11::handle value, const std::string& name) {
    return static_cast<int32_t>(integer_arg(value, name, INT32_MIN, INT32_MAX));
}

inline int64_t int64_arg(pybind11::handle value, const std::string& name) {
    return integer_arg(value, name, INT64_MIN, INT64_MAX);
}

}  // namespace gqla_py
