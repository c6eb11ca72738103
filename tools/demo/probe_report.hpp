// SPDX-License-Identifier: Apache-2.0
// Prints what the probe found about a device.
#pragma once

#include "gqla/gqla.h"

namespace gqla::demo {

void print_probe(const gqla_probe_info& info);

}  // namespace gqla::demo
