// SPDX-License-Identifier: Apache-2.0
// Minimal single-line JSON object builder: the bench prints one object per
// line so results can be read back with `jq` or json.loads per line.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace gqla::bench {

class JsonObject {
public:
    JsonObject& str(const char* key, const std::string& v) { return raw(key, quote(v)); }
    JsonObject& num(const char* key, double v, int digits = 6) {
        if (!std::isfinite(v)) return null(key);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*g", digits, v);
        return raw(key, buf);
    }
    JsonObject& integer(const char* key, long long v) { return raw(key, std::to_string(v)); }
    JsonObject& boolean(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
    JsonObject& null(const char* key) { return raw(key, "null"); }
    // `json` must already be valid JSON (an object or array built elsewhere).
    JsonObject& raw(const char* key, const std::string& json) {
        body_ += (body_.empty() ? "" : ",") + quote(key) + ":" + json;
        return *this;
    }
    std::string dump() const { return "{" + body_ + "}"; }

    static std::string quote(const std::string& s) {
        std::string out = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else
                out += c;
        }
        return out + "\"";
    }

private:
    std::string body_;
};

// ["a","b",...]
inline std::string json_string_array(const std::vector<std::string>& v) {
    std::string out = "[";
    for (const std::string& s : v) out += (out.size() > 1 ? "," : "") + JsonObject::quote(s);
    return out + "]";
}

}  // namespace gqla::bench
