// SPDX-License-Identifier: Apache-2.0
// doctest's main for gqla_core_tests; the cases live in the other files here.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
