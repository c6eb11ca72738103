// SPDX-License-Identifier: Apache-2.0
// The kernels keep softmax state in the log2 domain (exp2 is one instruction
// sequence shorter than exp): scores are scaled by log2(e) on the way in and
// log-sum-exps by ln(2) on the way out.
#pragma once

namespace gqla::cpu {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace gqla::cpu
