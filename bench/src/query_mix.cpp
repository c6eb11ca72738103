// SPDX-License-Identifier: Apache-2.0
#include "query_mix.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace gqla::bench {
namespace {

// A positive decimal integer (a k suffix multiplies by 1024, as --context
// accepts), at most `max`.
bool parse_positive(const std::string& s, long long max, long long* out) {
    if (s.empty()) return false;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (end && (*end == 'k' || *end == 'K')) {
        v *= 1024;
        ++end;
    }
    if (end == s.c_str() || *end != '\0' || v < 1 || v > max) return false;
    *out = v;
    return true;
}

}  // namespace

int QueryMix::batch() const {
    int n = 0;
    for (const QueryGroup& g : groups) n += g.count;
    return n;
}

int64_t QueryMix::total_queries() const {
    int64_t n = 0;
    for (const QueryGroup& g : groups) n += static_cast<int64_t>(g.q_len) * g.count;
    return n;
}

int32_t QueryMix::max_q_len() const {
    int32_t m = 0;
    for (const QueryGroup& g : groups) m = std::max(m, g.q_len);
    return m;
}

std::vector<int32_t> QueryMix::q_lens() const {
    std::vector<int32_t> out;
    for (const QueryGroup& g : groups) out.insert(out.end(), static_cast<size_t>(g.count), g.q_len);
    return out;
}

std::string QueryMix::label() const {
    std::string out;
    for (const QueryGroup& g : groups)
        out += (out.empty() ? "" : ",") + std::to_string(g.q_len) + "x" + std::to_string(g.count);
    return out;
}

QueryMix QueryMix::shrunk(int per_group) const {
    QueryMix m = *this;
    for (QueryGroup& g : m.groups) g.count = std::min(g.count, per_group);
    return m;
}

bool parse_query_mix(const std::string& text, QueryMix* out, std::string* error) {
    QueryMix mix;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const size_t x = item.find_first_of("xX");
        long long q_len = 0, count = 1;
        const bool ok = parse_positive(item.substr(0, x), 65536, &q_len) &&
                        (x == std::string::npos || parse_positive(item.substr(x + 1), 1 << 16, &count));
        if (!ok) {
            *error = "expected QLENxCOUNT (e.g. 2048x1 or 1x47), got '" + item + "'";
            return false;
        }
        mix.groups.push_back({static_cast<int32_t>(q_len), static_cast<int>(count)});
    }
    if (mix.groups.empty()) {
        *error = "empty mix '" + text + "'";
        return false;
    }
    *out = mix;
    return true;
}

}  // namespace gqla::bench
