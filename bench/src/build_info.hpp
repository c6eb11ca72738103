// SPDX-License-Identifier: Apache-2.0
// What a result was measured with: the version of the libgqla the bench
// runs against and the git commit the bench was built from, carried by
// every JSON object the bench prints so that stored results stay traceable.
#pragma once

#include "json_writer.hpp"

namespace gqla::bench {

// The commit of the source tree at build time (40 hex digits), "unknown"
// outside a git checkout; written by bench/git_commit.cmake.
const char* built_from_commit();
// Whether that checkout had uncommitted changes to tracked files: 1 yes,
// 0 no, -1 unknown.
int built_from_modified_tree();

// Adds "gqla_version" (gqla_version_string()), "git_commit" and "git_dirty".
void add_build_info(JsonObject& j);

}  // namespace gqla::bench
