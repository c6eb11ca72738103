// SPDX-License-Identifier: Apache-2.0
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/dtype.hpp"

namespace gqla::bench {

void check(gqla_status s, const char* call) {
    if (s == GQLA_OK) return;
    throw GqlaError(s, std::string(call) + " failed: " + gqla_status_string(s) + " — " + gqla_last_error_message());
}

void fill_uniform(std::vector<float>& v, uint64_t seed, float scale) {
    // splitmix64: fast, and good enough for test inputs.
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (float& f : v) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
        f = static_cast<float>((2.0 * u - 1.0) * scale);
    }
}

std::vector<float> random_vector(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    fill_uniform(v, seed, scale);
    return v;
}

gqla_tensor host_tensor(float* data, std::initializer_list<int64_t> shape) {
    return host_tensor(data, GQLA_DTYPE_F32, shape);
}

gqla_tensor host_tensor(void* data, gqla_dtype dtype, std::initializer_list<int64_t> shape) {
    gqla_tensor t;
    std::vector<int64_t> dims(shape);
    check(gqla_tensor_init(&t, data, dtype, static_cast<int32_t>(dims.size()), dims.data()), "gqla_tensor_init");
    return t;
}

std::vector<unsigned char> to_dtype(const std::vector<float>& v, gqla_dtype dtype) {
    std::vector<unsigned char> out(v.size() * dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) store_from_f32(out.data(), dtype, i, v[i]);
    return out;
}

std::vector<float> from_dtype(const void* p, gqla_dtype dtype, size_t n) {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = load_as_f32(p, dtype, i);
    return out;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
    const size_t i = static_cast<size_t>(std::min(std::max(rank, 1.0), static_cast<double>(v.size()))) - 1;
    return v[i];
}

gqla_device_type resolve_auto_device() {
    gqla_probe_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    check(gqla_probe(GQLA_DEVICE_AUTO, 0, 0, &info), "gqla_probe(AUTO)");
    return info.device;
}

uint64_t mem_available_bytes() {
    FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "MemAvailable:", 13) == 0) {
            std::sscanf(line + 13, "%lu", &kb);
            break;
        }
    }
    std::fclose(f);
    return kb * 1024;
}

}  // namespace gqla::bench
