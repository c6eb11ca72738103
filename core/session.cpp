// SPDX-License-Identifier: Apache-2.0
#include "core/session.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/backend_registry.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace gqla {
namespace {

gqla_config resolve_for(const gqla_config& cfg, const gqla_backend_vtable* backend) {
    validate_config(cfg);
    if (backend != nullptr) return resolve_config(cfg, backend->device);
    gqla_device_type device = resolve_device(cfg.device);
    backend_for(device, cfg.device_index);  // UNSUPPORTED when CUDA cannot be used
    return resolve_config(cfg, device);
}

gqla_backend_desc make_desc(const gqla_config& c) {
    gqla_backend_desc d;
    std::memset(&d, 0, sizeof(d));
    d.kind = c.kind;
    d.num_heads = c.num_heads;
    d.num_kv_heads = c.num_kv_heads;
    d.head_dim = c.head_dim;  // GQLA: d_c + d_r, the query/key dim
    d.value_dim = c.value_dim;
    d.latent_dim = c.latent_dim;
    d.nope_dim = c.nope_dim;
    d.rope_dim = c.rope_dim;
    d.num_layers = c.num_layers;
    d.cache_dtype = c.cache_dtype;
    d.io_dtype = c.io_dtype;
    d.softmax_scale = c.softmax_scale;
    d.page_size = c.page_size;
    d.num_pages = c.max_tokens / c.page_size;
    d.max_sequences = c.max_sequences;
    d.max_batch = c.max_batch;
    d.max_q_len = c.max_q_len;
    d.max_q_tokens = c.max_q_tokens;
    d.device_index = c.device == GQLA_DEVICE_CUDA ? c.device_index : 0;
    d.num_threads = c.num_threads;
    d.keep_latent = c.kind == GQLA_KIND_GQLA ? c.keep_latent : 1;
    return d;
}

// The registry's probe for registry backends (CPU: gqla::probe_cpu); an
// injected backend probes itself.
// AUTO prices paths on measured numbers: the calibration runs once per
// process (<= 200 ms CPU, <= 300 ms CUDA) and is cached. GQLA_PROBE_CALIBRATE=0
// falls back to spec-sheet estimates for start-up-sensitive callers.
uint32_t session_probe_flags() {
    const char* env = std::getenv("GQLA_PROBE_CALIBRATE");
    return (env != nullptr && env[0] == '0') ? 0u : GQLA_PROBE_CALIBRATE;
}

gqla_probe_info session_probe(const gqla_backend_vtable& vt, bool injected, const gqla_config& c) {
    const uint32_t flags = session_probe_flags();
    if (!injected) return probe_through_backend(c.device, c.device == GQLA_DEVICE_CUDA ? c.device_index : 0, flags);
    gqla_probe_info info{};
    info.struct_size = sizeof(info);
    gqla_status st = vt.probe(c.device_index, flags, &info);
    if (st != GQLA_OK)
        fail(status_known(st) ? st : GQLA_ERR_BACKEND, "%s backend: probe failed: %s", vt.name, status_description(st));
    return info;
}

// The device defaults, overwritten by whatever the backend reports within
// range (a backend that leaves a field alone keeps the default).
Efficiency backend_efficiency(const gqla_backend_vtable& vt, const gqla_backend_desc& desc,
                              const Efficiency& defaults) {
    Efficiency e = defaults;
    if (vt.efficiency == nullptr) return e;
    gqla_backend_efficiency reported{};
    for (int path = 0; path < 2; ++path) {
        reported.memory[path] = e.memory[path];
        reported.compute[path] = e.compute[path];
        reported.overhead_s[path] = e.overhead_s[path];
    }
    reported.prefill_compute = e.prefill_compute;
    reported.prefill_min_queries = e.prefill_min_queries;
    reported.prefill_min_rows = e.prefill_min_rows;
    reported.sparse_gqa_memory = e.sparse_gqa_memory;
    reported.transient_overhead_s = e.transient_overhead_s;
    reported.prefill_half_rows = e.prefill_half_rows;
    reported.serial_share = e.serial_share;
    reported.thread_read_gbps = e.thread_read_gbps;
    reported.absorb_projection_compute = e.absorb_projection_compute;
    vt.efficiency(&desc, &reported);
    auto fraction = [](double v) { return v > 0 && v <= 1; };
    // Compute factors are relative to the probe's f32 FMA peak (or its bf16
    // dot peak): matrix units (AMX tiles) run past it.
    auto compute_factor = [](double v) { return v > 0 && v <= 64; };
    for (int path = 0; path < 2; ++path) {
        if (fraction(reported.memory[path])) e.memory[path] = reported.memory[path];
        if (compute_factor(reported.compute[path])) e.compute[path] = reported.compute[path];
        if (reported.overhead_s[path] >= 0) e.overhead_s[path] = reported.overhead_s[path];
    }
    if (fraction(reported.prefill_compute) && reported.prefill_min_queries >= 1 && reported.prefill_min_rows >= 1) {
        e.prefill_compute = reported.prefill_compute;
        e.prefill_min_queries = reported.prefill_min_queries;
        e.prefill_min_rows = reported.prefill_min_rows;
        if (reported.prefill_half_rows >= 1 && reported.prefill_half_rows < reported.prefill_min_rows)
            e.prefill_half_rows = reported.prefill_half_rows;
    }
    if (fraction(reported.sparse_gqa_memory)) e.sparse_gqa_memory = reported.sparse_gqa_memory;
    if (reported.transient_overhead_s >= 0 && reported.transient_overhead_s < 1)
        e.transient_overhead_s = reported.transient_overhead_s;
    if (reported.serial_share >= 0 && reported.serial_share <= 1) e.serial_share = reported.serial_share;
    if (reported.thread_read_gbps >= 0) e.thread_read_gbps = reported.thread_read_gbps;
    if (reported.absorb_projection_compute == 0 || fraction(reported.absorb_projection_compute))
        e.absorb_projection_compute = reported.absorb_projection_compute;
    return e;
}

}  // namespace

int64_t Session::Sequence::longest() const {
    int64_t m = 0;
    for (int64_t l : lengths) m = std::max(m, l);
    return m;
}

Session::Session(const gqla_config& cfg, const gqla_backend_vtable* backend)
    : full_cfg_(resolve_for(cfg, backend)),
      cfg_(served_layer(full_cfg_)),
      desc_(make_desc(cfg_)),
      placement_{cfg_.device, cfg_.device == GQLA_DEVICE_CUDA ? cfg_.device_index : 0},
      pool_(0) {
    const gqla_backend_vtable* vt = backend ? backend : backend_for(cfg_.device, cfg_.device_index);
    backend_ = std::make_unique<BackendContext>(vt, desc_);
    // The page bookkeeping only once the backend holds the pages: a pool the
    // device cannot allocate fails without building it first.
    pool_ = PagePool(cfg_.max_tokens / cfg_.page_size);
    probe_ = session_probe(*vt, backend != nullptr, cfg_);
    efficiency_ = backend_efficiency(*vt, desc_, default_efficiency(cfg_.device));
    policy_ = std::make_unique<PathPolicy>(cfg_, probe_, efficiency_);

    free_slots_.reserve(static_cast<size_t>(cfg_.max_sequences));
    for (int32_t s = cfg_.max_sequences - 1; s >= 0; --s) free_slots_.push_back(s);
    seqs_.reserve(static_cast<size_t>(cfg_.max_sequences));
    weights_set_.assign(static_cast<size_t>(cfg_.num_layers), 0);
    layer_tokens_.assign(static_cast<size_t>(cfg_.num_layers), 0);
    zero_lengths_.assign(static_cast<size_t>(cfg_.num_layers), 0);
    decode_seqs_.resize(static_cast<size_t>(cfg_.max_batch));
    slot_epoch_.assign(static_cast<size_t>(cfg_.max_sequences), 0);
    slot_arg_.assign(static_cast<size_t>(cfg_.max_sequences), 0);

    requested_ = cfg_.path;
    if (cfg_.kind == GQLA_KIND_GQA) {
        active_ = GQLA_PATH_GQA;
    } else if (!latent_kept()) {
        // The backend allocated the expanded pools at create; they are the
        // only cache of this session and are never switched off.
        active_ = GQLA_PATH_GQA;
        expanded_ = true;
    } else {
        gqla_path start = cfg_.path == GQLA_PATH_AUTO ? policy_->initial() : cfg_.path;
        // AUTO starts on the absorb path where the backend keeps no expanded
        // cache (an 8-bit cache without GQLA_BACKEND_FEATURE_FP8_EXPANDED);
        // an explicit GQA path is refused there.
        if (cfg_.path == GQLA_PATH_AUTO && !expanded_cache_served()) start = GQLA_PATH_ABSORB;
        active_ = GQLA_PATH_ABSORB;
        if (start == GQLA_PATH_GQA) enable_expanded_path();  // no tokens yet: only allocates
    }
}

Session::~Session() = default;

gqla_config Session::config() const {
    std::lock_guard<std::mutex> lock(mu_);
    gqla_config c = full_cfg_;
    c.path = active_;
    return c;
}

void Session::check_layer(int32_t layer) const {
    if (layer < 0 || layer >= cfg_.num_layers)
        fail(GQLA_ERR_INVALID_ARGUMENT, "layer: %d out of range [0, %d)", layer, cfg_.num_layers);
}

void Session::require_weights(int32_t layer, const char* call) const {
    if (cfg_.kind == GQLA_KIND_GQLA && !weights_set_[static_cast<size_t>(layer)])
        fail(GQLA_ERR_INVALID_STATE, "%s: weights of layer %d are not set (call gqla_set_weights first)", call, layer);
}

Session::Sequence& Session::find(gqla_seq_id id, const char* arg_name) {
    auto it = seqs_.find(id);
    if (it == seqs_.end())
        fail(GQLA_ERR_NOT_FOUND, "%s: unknown sequence id %lld", arg_name, static_cast<long long>(id));
    return it->second;
}

const Session::Sequence& Session::find(gqla_seq_id id, const char* arg_name) const {
    return const_cast<Session*>(this)->find(id, arg_name);
}

uint32_t Session::next_epoch() {
    if (++epoch_ == 0) {  // wrapped: old marks could collide
        std::fill(slot_epoch_.begin(), slot_epoch_.end(), 0u);
        epoch_ = 1;
    }
    return epoch_;
}

void Session::notify_sequence(const Sequence& s) {
    const gqla_backend_vtable& vt = backend_->vt();
    if (vt.update_sequence == nullptr) return;
    backend_->check(vt.update_sequence(backend_->ctx(), s.slot, s.pages.data(), static_cast<int32_t>(s.pages.size()),
                                       s.lengths.data()),
                    "update_sequence");
}

gqla_view Session::shard_weight_rows(const gqla_tensor* w) const {
    const int64_t per_group = int64_t(cfg_.nope_dim) + cfg_.value_dim;
    const int64_t all_rows = int64_t(full_cfg_.num_kv_heads) * per_group;
    const int64_t shard_rows = int64_t(cfg_.num_kv_heads) * per_group;
    TensorSpec spec{
        "w_ukv",   2,    {"num_kv_heads * (nope_dim + value_dim)", "latent_dim"}, {kAnyExtent, cfg_.latent_dim},
        kAnyDtype, false};
    gqla_view view = check_tensor(w, spec, placement_);
    const int64_t rows = view.shape[0];
    if (rows == shard_rows) return view;
    if (rows != all_rows && all_rows == shard_rows)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "w_ukv: shape[0] expected %lld (num_kv_heads %d x (nope_dim + value_dim)), got %lld",
             static_cast<long long>(all_rows), full_cfg_.num_kv_heads, static_cast<long long>(rows));
    if (rows != all_rows)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "w_ukv: shape[0] expected %lld (num_kv_heads %d x (nope_dim + value_dim), all groups) or %lld "
             "(group_count %d x (nope_dim + value_dim), the groups this session serves), got %lld",
             static_cast<long long>(all_rows), full_cfg_.num_kv_heads, static_cast<long long>(shard_rows),
             cfg_.num_kv_heads, static_cast<long long>(rows));
    // The full W_UKV: the rows of groups [group_begin, group_begin + group_count).
    const int64_t first = int64_t(full_cfg_.group_begin) * per_group;
    view.data = static_cast<char*>(view.data) + first * view.strides[0] * static_cast<int64_t>(dtype_size(view.dtype));
    view.shape[0] = shard_rows;
    return view;
}

void Session::set_weights(int32_t layer, const gqla_tensor* w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cfg_.kind != GQLA_KIND_GQLA)
        fail(GQLA_ERR_INVALID_STATE, "set_weights: this is a GQA session; W_UKV weights exist only in GQLA sessions");
    check_layer(layer);
    gqla_view view = shard_weight_rows(w);
    if (!latent_kept() && layer_tokens_[static_cast<size_t>(layer)] > 0)
        fail(GQLA_ERR_INVALID_STATE,
             "set_weights: layer %d holds tokens whose expanded rows were built with its current weights, and "
             "config.keep_latent = 0 dropped the latent they would be rebuilt from (release its sequences first)",
             layer);
    const gqla_backend_vtable& vt = backend_->vt();
    backend_->check(vt.set_weights(backend_->ctx(), layer, &view), "set_weights");
    weights_set_[static_cast<size_t>(layer)] = 1;
    if (expanded_ && layer_tokens_[static_cast<size_t>(layer)] > 0) {
        try {
            expand_layer(layer);
        } catch (const Error& e) {
            // The expanded rows of this layer are stale now; the latent cache is
            // still right, so fall back to the absorb path rather than serve them.
            try {
                disable_expanded_path();
            } catch (...) {
            }
            fail(e.status(),
                 "set_weights: weights of layer %d stored, but re-expanding its cache failed, so the "
                 "session switched to the absorb path: %s",
                 layer, e.what());
        }
    }
}

int32_t Session::page_refcount(int32_t page) const {
    std::lock_guard<std::mutex> lock(mu_);
    return pool_.refcount(page);
}

std::vector<int32_t> Session::page_table(gqla_seq_id seq) const {
    std::lock_guard<std::mutex> lock(mu_);
    return find(seq, "seq").pages;
}

gqla_stats Session::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    gqla_stats s;
    std::memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    s.device = cfg_.device;
    s.path = active_;
    s.page_size = cfg_.page_size;
    s.pages_total = pool_.total();
    s.pages_used = pool_.used();
    s.pages_free = pool_.free_count();
    s.sequences = static_cast<int64_t>(seqs_.size());
    s.tokens_cached = tokens_cached_;
    s.token_capacity_left = pool_.free_count() * cfg_.page_size;
    int64_t bytes[4] = {0, 0, 0, 0};
    backend_->vt().memory_usage(backend_->ctx(), bytes);
    s.latent_bytes = bytes[0];
    s.expanded_bytes = bytes[1];
    s.weight_bytes = bytes[2];
    s.workspace_bytes = bytes[3];
    s.kept_bytes_per_token = kept_bytes_per_token_layer(cfg_);
    s.expanded_bytes_per_token = expanded_bytes_per_token_layer(cfg_);
    return s;
}

void Session::set_stream(void* stream) {
    std::lock_guard<std::mutex> lock(mu_);
    const gqla_backend_vtable& vt = backend_->vt();
    if (vt.set_stream != nullptr) backend_->check(vt.set_stream(backend_->ctx(), stream), "set_stream");
}

void Session::synchronize() {
    std::lock_guard<std::mutex> lock(mu_);
    const gqla_backend_vtable& vt = backend_->vt();
    if (vt.synchronize != nullptr) backend_->check(vt.synchronize(backend_->ctx()), "synchronize");
}

gqla_cost_report Session::predict_cost(const gqla_workload& w) const {
    std::lock_guard<std::mutex> lock(mu_);
    gqla_cost_report r = gqla::predict_cost(cfg_, probe_, w, efficiency_);
    if (!latent_kept()) r.chosen = r.call_chosen = GQLA_PATH_GQA;  // the only form it has
    return r;
}

}  // namespace gqla
