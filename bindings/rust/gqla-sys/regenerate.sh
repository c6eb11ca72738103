#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerates src/bindings.rs from the public C header with bindgen.
#
#   regenerate.sh            rewrite src/bindings.rs in place
#   regenerate.sh OUTPUT     write to OUTPUT instead (used by tests/bindings_drift.rs)
#
# Environment: BINDGEN (default: bindgen), GQLA_HEADER (default: the header of
# this source tree).
#
# Only gqla_*/GQLA_* items are kept, not recursively: bindgen maps int32_t and
# friends to Rust integers, so the libc typedefs behind them are not needed.
# C enums become newtype structs so that a value unknown to these bindings
# (from a newer library) is still a valid Rust value.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
header=${GQLA_HEADER:-$here/../../../capi/include/gqla/gqla.h}
output=${1:-$here/src/bindings.rs}
bindgen=${BINDGEN:-bindgen}

"$bindgen" "$header" \
    --allowlist-function 'gqla_.*' \
    --allowlist-type 'gqla_.*' \
    --allowlist-var 'GQLA_.*' \
    --no-recursive-allowlist \
    --newtype-enum 'gqla_.*' \
    --size_t-is-usize \
    --with-derive-default \
    --output "$output" \
    -- -std=c99
