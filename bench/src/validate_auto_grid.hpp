// SPDX-License-Identifier: Apache-2.0
// What the --validate-auto grids share: the per-call FLOP and per-session
// byte budgets that keep each grid near a minute, the forms a
// gqla_attention call may take, in the order of the grids' arrays, and how
// a pick among them is scored.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "gqla/gqla.h"
#include "json_writer.hpp"

namespace gqla::bench {

// A cell is kept when the costliest form's call stays under this many FLOPs
// (causal count): about 0.5 s on a 2-core CPU, 50-100 ms on an H200. The
// dropped cells are listed.
constexpr double kCpuCallFlops = 2e10;
constexpr double kGpuCallFlops = 3e13;
// Cache bytes one session of a grid may hold on a CPU (on a GPU: half of
// what the bench may allocate); expanding and rotating over larger caches
// costs seconds each.
constexpr double kCpuCellBytes = 1.25 * 1024 * 1024 * 1024;

// Forms a call may take, in the order of the grids' arrays.
constexpr gqla_path kForms[] = {GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
constexpr int kFormCount = 3;

inline int form_index(gqla_path p) {
    for (int k = 0; k < kFormCount; ++k)
        if (kForms[k] == p) return k;
    return -1;
}

// The measured-fastest of a cell's first `forms` forms (cells carry
// meas[kFormCount], seconds; infinity where a form was not timed).
template <class Cell>
int best_of(const Cell& c, int forms = kFormCount) {
    int best = 0;
    for (int k = 1; k < forms; ++k)
        if (c.meas[k] < c.meas[best]) best = k;
    return best;
}

// How often picks were the measured-fastest of the forms they chose among,
// and what the others cost: regret = time(pick) / time(best) - 1.
struct Scores {
    int cases = 0, correct = 0;
    double regret_sum = 0, regret_max = 0;

    // Scores `pick` against the fastest of the cell's first `forms` forms and
    // returns its regret: NaN for a pick outside them, infinity for a form
    // that was not timed (over the FLOP budget); either makes the max
    // infinite and adds nothing to the mean.
    template <class Cell>
    double add(const Cell& c, gqla_path pick, int forms = kFormCount) {
        const int best = best_of(c, forms), chosen = form_index(pick);
        const double regret = chosen >= 0 && chosen < forms ? c.meas[chosen] / c.meas[best] - 1.0 : NAN;
        ++cases;
        correct += chosen == best;
        if (std::isfinite(regret)) {
            regret_sum += regret;
            regret_max = std::max(regret_max, regret);
        } else {
            regret_max = INFINITY;
        }
        return regret;
    }
    // cases, correct, fraction, mean_regret, max_regret into `j`.
    void write(JsonObject& j) const {
        j.integer("cases", cases)
            .integer("correct", correct)
            .num("fraction", cases ? static_cast<double>(correct) / cases : NAN, 4)
            .num("mean_regret", cases ? regret_sum / cases : NAN, 4)
            .num("max_regret", cases ? regret_max : NAN, 4);
    }
    std::string json() const {
        JsonObject j;
        write(j);
        return j.dump();
    }
};

}  // namespace gqla::bench
