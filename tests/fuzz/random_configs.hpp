// SPDX-License-Identifier: Apache-2.0
// Random session configs for the API-sequence fuzzer: both kinds, every
// dtype, odd head and latent sizes, tiny page pools and byte budgets, and
// configs with one field out of range that gqla must refuse.
#pragma once

#include <vector>

#include "gqla/gqla.h"
#include "tests/fuzz/fuzz_run.hpp"

namespace fuzz {

// Every dtype a cache, an io tensor or a weight may have.
extern const std::vector<gqla_dtype> kDtypes;

// A valid config (gqla_config_validate must accept it).
gqla_config random_config(Random& r);

// One field pushed out of its range; every such config must be refused.
void break_config(Random& r, gqla_config& c);

}  // namespace fuzz
