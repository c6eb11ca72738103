// SPDX-License-Identifier: Apache-2.0
// Conversions between the C ABI's structs and plain Python dicts. Field names
// in the dicts are exactly the C field names; enums stay integers (the Python
// layer maps them to strings), so this file holds no policy of its own.
#pragma once

#include <gqla/gqla.h>

#include <pybind11/pybind11.h>

namespace gqla_py {

// gqla_config_default(kind) overlaid with every key of `fields`; unknown keys
// are an InvalidArgument error (a typo must not be ignored silently).
gqla_config config_from_dict(const pybind11::dict& fields);
pybind11::dict config_to_dict(const gqla_config& config);

// A probe dict (as returned by probe()) back into the struct, e.g. to predict
// the cost on another machine's numbers; missing keys stay zero.
gqla_probe_info probe_from_dict(const pybind11::dict& fields);
pybind11::dict probe_to_dict(const gqla_probe_info& info);

pybind11::dict cost_report_to_dict(const gqla_cost_report& report);
pybind11::dict stats_to_dict(const gqla_stats& stats);

}  // namespace gqla_py
