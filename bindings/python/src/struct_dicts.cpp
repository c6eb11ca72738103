// SPDX-License-Identifier: Apache-2.0
#include "struct_dicts.hpp"

#include "status_error.hpp"

#include <cstring>
#include <string>

namespace py = pybind11;

namespace gqla_py {
namespace {

// Reads dict[key] into a field when present, counting the keys consumed so
// that leftovers (typos) can be reported.
class field_reader {
public:
    explicit field_reader(const py::dict& fields) : fields_(fields) {}

    template <typename T>
    void read(const char* key, T& field) {
        if (!fields_.contains(key)) return;
        ++consumed_;
        const py::handle value = fields_[key];
        if (value.is_none()) return;  // None: keep the library default
        try {
            field = value.cast<T>();
        } catch (const py::cast_error&) {
            invalid_argument(std::string(key) + ": expected a number, got " + py::repr(value).cast<std::string>());
        }
    }

    template <typename Enum>
    void read_enum(const char* key, Enum& field) {
        int value = static_cast<int>(field);
        read(key, value);
        field = static_cast<Enum>(value);
    }

    void reject_unknown(const char* what, std::initializer_list<const char*> known) {
        if (consumed_ == fields_.size()) return;
        for (auto item : fields_) {
            const auto key = item.first.cast<std::string>();
            bool found = false;
            for (const char* k : known) found = found || key == k;
            if (!found) invalid_argument(std::string(what) + ": unknown field '" + key + "'");
        }
    }

private:
    const py::dict& fields_;
    size_t consumed_ = 0;
};

py::dict path_cost_to_dict(const gqla_path_cost& cost) {
    py::dict d;
    d["bytes"] = cost.bytes;
    d["flops"] = cost.flops;
    d["memory_s"] = cost.memory_s;
    d["compute_s"] = cost.compute_s;
    d["overhead_s"] = cost.overhead_s;
    d["time_s"] = cost.time_s;
    d["bound"] = cost.bound == GQLA_BOUND_COMPUTE ? "compute" : "memory";
    return d;
}

std::string fixed_string(const char* chars, size_t capacity) { return std::string(chars, strnlen(chars, capacity)); }

void copy_fixed_string(char* dst, size_t capacity, const py::dict& fields, const char* key) {
    if (!fields.contains(key)) return;
    const auto value = fields[key].cast<std::string>();
    const size_t n = value.size() < capacity - 1 ? value.size() : capacity - 1;
    std::memcpy(dst, value.data(), n);
    dst[n] = '\0';
}

}  // namespace

gqla_config config_from_dict(const py::dict& fields) {
    gqla_config config{};
    int kind = GQLA_KIND_GQA;
    if (fields.contains("kind")) kind = fields["kind"].cast<int>();
    check(gqla_config_default(&config, static_cast<gqla_kind>(kind)));

    field_reader r(fields);
    r.read_enum("kind", config.kind);
    r.read("num_heads", config.num_heads);
    r.read("num_kv_heads", config.num_kv_heads);
    r.read("head_dim", config.head_dim);
    r.read("value_dim", config.value_dim);
    r.read("latent_dim", config.latent_dim);
    r.read("nope_dim", config.nope_dim);
    r.read("rope_dim", config.rope_dim);
    r.read("num_layers", config.num_layers);
    r.read_enum("cache_dtype", config.cache_dtype);
    r.read_enum("io_dtype", config.io_dtype);
    r.read("softmax_scale", config.softmax_scale);
    r.read("page_size", config.page_size);
    r.read("max_tokens", config.max_tokens);
    r.read("memory_budget_bytes", config.memory_budget_bytes);
    r.read("max_sequences", config.max_sequences);
    r.read("max_batch", config.max_batch);
    r.read("max_q_len", config.max_q_len);
    r.read_enum("device", config.device);
    r.read("device_index", config.device_index);
    r.read_enum("path", config.path);
    r.read("num_threads", config.num_threads);
    r.read("max_q_tokens", config.max_q_tokens);
    r.read("group_begin", config.group_begin);
    r.read("group_count", config.group_count);
    r.read("keep_latent", config.keep_latent);
    r.reject_unknown("config", {"kind",          "num_heads",     "num_kv_heads", "head_dim",    "value_dim",
                                "latent_dim",    "nope_dim",      "rope_dim",     "num_layers",  "cache_dtype",
                                "io_dtype",      "softmax_scale", "page_size",    "max_tokens",  "memory_budget_bytes",
                                "max_sequences", "max_batch",     "max_q_len",    "device",      "device_index",
                                "path",          "num_threads",   "max_q_tokens", "group_begin", "group_count",
                                "keep_latent"});
    return config;
}

py::dict config_to_dict(const gqla_config& c) {
    py::dict d;
    d["kind"] = static_cast<int>(c.kind);
    d["num_heads"] = c.num_heads;
    d["num_kv_heads"] = c.num_kv_heads;
    d["head_dim"] = c.head_dim;
    d["value_dim"] = c.value_dim;
    d["latent_dim"] = c.latent_dim;
    d["nope_dim"] = c.nope_dim;
    d["rope_dim"] = c.rope_dim;
    d["num_layers"] = c.num_layers;
    d["cache_dtype"] = static_cast<int>(c.cache_dtype);
    d["io_dtype"] = static_cast<int>(c.io_dtype);
    d["softmax_scale"] = c.softmax_scale;
    d["page_size"] = c.page_size;
    d["max_tokens"] = c.max_tokens;
    d["memory_budget_bytes"] = c.memory_budget_bytes;
    d["max_sequences"] = c.max_sequences;
    d["max_batch"] = c.max_batch;
    d["max_q_len"] = c.max_q_len;
    d["device"] = static_cast<int>(c.device);
    d["device_index"] = c.device_index;
    d["path"] = static_cast<int>(c.path);
    d["num_threads"] = c.num_threads;
    d["max_q_tokens"] = c.max_q_tokens;
    d["group_begin"] = c.group_begin;
    d["group_count"] = c.group_count;
    d["keep_latent"] = c.keep_latent;
    return d;
}

gqla_probe_info probe_from_dict(const py::dict& fields) {
    gqla_probe_info info{};
    info.struct_size = sizeof(info);
    field_reader r(fields);
    r.read_enum("device", info.device);
    r.read("device_index", info.device_index);
    r.read("logical_cores", info.logical_cores);
    r.read("physical_cores", info.physical_cores);
    r.read("affinity_cores", info.affinity_cores);
    r.read("isa_flags", info.isa_flags);
    r.read("l1d_kb", info.l1d_kb);
    r.read("l2_kb", info.l2_kb);
    r.read("l3_kb", info.l3_kb);
    r.read("cc_major", info.cc_major);
    r.read("cc_minor", info.cc_minor);
    r.read("sm_count", info.sm_count);
    r.read("clock_mhz", info.clock_mhz);
    r.read("mem_clock_mhz", info.mem_clock_mhz);
    r.read("bus_width_bits", info.bus_width_bits);
    r.read("mem_gb", info.mem_gb);
    r.read("read_gbps", info.read_gbps);
    r.read("peak_gflops_f32", info.peak_gflops_f32);
    r.read("peak_gflops_bf16", info.peak_gflops_bf16);
    r.read("calibrated", info.calibrated);
    copy_fixed_string(info.vendor, sizeof(info.vendor), fields, "vendor");
    copy_fixed_string(info.name, sizeof(info.name), fields, "name");
    // Keys probe_to_dict adds for readability are accepted and ignored.
    return info;
}

py::dict probe_to_dict(const gqla_probe_info& p) {
    py::dict d;
    d["device"] = static_cast<int>(p.device);
    d["device_index"] = p.device_index;
    d["vendor"] = fixed_string(p.vendor, sizeof(p.vendor));
    d["name"] = fixed_string(p.name, sizeof(p.name));
    d["logical_cores"] = p.logical_cores;
    d["physical_cores"] = p.physical_cores;
    d["affinity_cores"] = p.affinity_cores;
    d["isa_flags"] = p.isa_flags;
    d["l1d_kb"] = p.l1d_kb;
    d["l2_kb"] = p.l2_kb;
    d["l3_kb"] = p.l3_kb;
    d["cc_major"] = p.cc_major;
    d["cc_minor"] = p.cc_minor;
    d["sm_count"] = p.sm_count;
    d["clock_mhz"] = p.clock_mhz;
    d["mem_clock_mhz"] = p.mem_clock_mhz;
    d["bus_width_bits"] = p.bus_width_bits;
    d["mem_gb"] = p.mem_gb;
    d["read_gbps"] = p.read_gbps;
    d["peak_gflops_f32"] = p.peak_gflops_f32;
    d["peak_gflops_bf16"] = p.peak_gflops_bf16;
    d["calibrated"] = p.calibrated != 0;
    return d;
}

py::dict cost_report_to_dict(const gqla_cost_report& r) {
    py::dict d;
    d["gqa"] = path_cost_to_dict(r.gqa);
    d["absorb"] = path_cost_to_dict(r.absorb);
    d["chosen"] = static_cast<int>(r.chosen);
    d["expand_bytes"] = r.expand_bytes;
    d["expand_flops"] = r.expand_flops;
    d["expand_s"] = r.expand_s;
    d["transient"] = path_cost_to_dict(r.transient);
    d["call_chosen"] = static_cast<int>(r.call_chosen);
    return d;
}

py::dict stats_to_dict(const gqla_stats& s) {
    py::dict d;
    d["device"] = static_cast<int>(s.device);
    d["path"] = static_cast<int>(s.path);
    d["page_size"] = s.page_size;
    d["pages_total"] = s.pages_total;
    d["pages_used"] = s.pages_used;
    d["pages_free"] = s.pages_free;
    d["sequences"] = s.sequences;
    d["tokens_cached"] = s.tokens_cached;
    d["token_capacity_left"] = s.token_capacity_left;
    d["latent_bytes"] = s.latent_bytes;
    d["expanded_bytes"] = s.expanded_bytes;
    d["weight_bytes"] = s.weight_bytes;
    d["workspace_bytes"] = s.workspace_bytes;
    d["kept_bytes_per_token"] = s.kept_bytes_per_token;
    d["expanded_bytes_per_token"] = s.expanded_bytes_per_token;
    return d;
}

}  // namespace gqla_py
