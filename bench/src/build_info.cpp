// SPDX-License-Identifier: Apache-2.0
#include "build_info.hpp"

#include "gqla/gqla.h"

namespace gqla::bench {

void add_build_info(JsonObject& j) {
    j.str("gqla_version", gqla_version_string()).str("git_commit", built_from_commit());
    const int modified = built_from_modified_tree();
    if (modified < 0)
        j.null("git_dirty");
    else
        j.boolean("git_dirty", modified == 1);
}

}  // namespace gqla::bench
