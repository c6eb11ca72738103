// SPDX-License-Identifier: Apache-2.0
// Progress of a long run (--validate-auto, a long sweep) on stderr: cells
// done of the total, time elapsed and an estimate of the time left, so that
// a run of many minutes says where it is. stdout keeps only the results.
#pragma once

#include <string>

namespace gqla::bench {

class Progress {
public:
    // `title` starts every line; nothing is printed when `enabled` is false
    // (--quiet). Runs shorter than the print interval print nothing at all.
    Progress(std::string title, long long total_cells, bool enabled);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // `cells` more cells are done, the last of them described by `what`.
    // Cells a failed step will never run are counted done too, so the
    // estimate stays right.
    void done(const std::string& what, long long cells = 1);

private:
    void print(const std::string& what);

    std::string title_;
    long long total_ = 0, done_ = 0;
    bool enabled_;
    bool printed_ = false;
    double start_s_, last_print_s_;
};

}  // namespace gqla::bench
