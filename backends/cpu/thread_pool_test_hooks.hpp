// SPDX-License-Identifier: Apache-2.0
// Points inside ThreadPool where a test build (GQLA_THREAD_POOL_TEST_HOOKS,
// tests/thread_pool) calls out, so that a test can hold a worker exactly
// there and replay an interleaving that the scheduler produces only rarely.
// The library itself is built without them.
#pragma once

namespace gqla::cpu::pool_test_hooks {

// A worker woke for a new call (or the pool's end) and is about to read the
// call number.
void before_worker_reads_call();

}  // namespace gqla::cpu::pool_test_hooks
