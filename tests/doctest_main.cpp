// SPDX-License-Identifier: Apache-2.0
// doctest's main, compiled once (gqla_doctest_main) for the suites that use
// it as it is: gqla_abi_tests, gqla_core_tests and gqla_thread_tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
