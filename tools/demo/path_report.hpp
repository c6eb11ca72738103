// SPDX-License-Identifier: Apache-2.0
// Prints the cost model's view of both GQLA paths for one workload: the
// bytes and FLOPs each reads/does, which roof binds, the predicted time and
// the path AUTO picks, with the reason in words.
#pragma once

#include "gqla/gqla.h"

namespace gqla::demo {

void print_path_costs(const gqla_workload& w, const gqla_cost_report& r);

}  // namespace gqla::demo
