// SPDX-License-Identifier: Apache-2.0
// The integer a C caller stored in an enum-typed field or argument. C allows
// any int there; in C++ reading an out-of-range value through the enum type
// is undefined, so validation reads the bytes as int instead.
#pragma once

#include <cstring>

namespace gqla {

template <class Enum>
int enum_value(const Enum& e) {
    static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on supported ABIs");
    int v;
    std::memcpy(&v, &e, sizeof(v));
    return v;
}

}  // namespace gqla
