// SPDX-License-Identifier: Apache-2.0
#include "progress.hpp"

#include <algorithm>
#include <cstdio>

#include "support.hpp"

namespace gqla::bench {
namespace {

// One line at most this often: a log of a long run stays short, and a
// run of a few seconds (a smoke test) prints none.
constexpr double kIntervalS = 2.0;

std::string clock_text(double seconds) {
    const long long s = static_cast<long long>(seconds + 0.5);
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
    return buf;
}

}  // namespace

Progress::Progress(std::string title, long long total_cells, bool enabled)
    : title_(std::move(title)),
      total_(std::max(total_cells, 0LL)),
      enabled_(enabled && total_cells > 0),
      start_s_(now_s()),
      last_print_s_(start_s_) {}

Progress::~Progress() {
    // The closing line, for a run that printed any: how long it took in all.
    if (enabled_ && printed_ && done_ < total_) print("stopped");
}

void Progress::done(const std::string& what, long long cells) {
    done_ = std::min(total_, done_ + cells);
    if (!enabled_) return;
    const double now = now_s();
    const bool last = done_ == total_;
    if (now - last_print_s_ >= kIntervalS || (last && printed_)) {
        last_print_s_ = now;
        print(what);
    }
}

void Progress::print(const std::string& what) {
    const double elapsed = now_s() - start_s_;
    std::string eta = "done";
    if (done_ < total_)
        eta = done_ > 0
                  ? "ETA " + clock_text(elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_))
                  : "ETA unknown";
    std::fprintf(stderr, "%s: %lld/%lld cells (%.0f%%), %s elapsed, %s; last: %s\n", title_.c_str(), done_, total_,
                 100.0 * static_cast<double>(done_) / static_cast<double>(total_), clock_text(elapsed).c_str(),
                 eta.c_str(), what.c_str());
    std::fflush(stderr);
    printed_ = true;
}

}  // namespace gqla::bench
