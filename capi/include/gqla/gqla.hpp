// SPDX-License-Identifier: Apache-2.0
// gqla.hpp — header-only C++17 convenience layer over gqla.h.
//
// It calls only the public C ABI, so it works against any libgqla.so.1 and
// adds no symbols to the library. What it adds:
//   - gqla::Error: every failing call throws it, carrying the gqla_status and
//     the library's message (which names the offending argument);
//   - gqla::Session: owns a gqla_session*, move-only, destroyed with the object;
//   - helpers that fill gqla_config for GQA/GQLA and gqla_tensor from a
//     pointer + shape (+ strides for views).
//
// Example
//   auto cfg = gqla::make_gqla_config(32, 8, 512, 64, 64, 128);
//   cfg.cache_dtype = GQLA_DTYPE_F32;
//   gqla::Session s(cfg);
//   s.set_weights(0, gqla::tensor(w.data(), {8 * (64 + 128), 512}));
//   auto seq = s.add_sequence();
//   s.append(0, seq, gqla::tensor(c.data(), {n, 512}), gqla::tensor(kr.data(), {n, 64}));
//   s.decode(0, {seq}, gqla::tensor(q.data(), {1, 1, 32, 128}), gqla::tensor(o.data(), {1, 1, 32, 128}));
//   // 1 query of seq beside 7 of other, rows packed: q [8, H, Dq] -> o [8, H, Dv]
//   s.attend(0, {seq, other}, {1, 7}, gqla::tensor(q8.data(), {8, 32, 128}), gqla::tensor(o8.data(), {8, 32, 128}));
//
// Threading follows gqla.h: a session serializes its own calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gqla/gqla.h"

namespace gqla {

// ------------------------------------------------------------------ errors

// A failed gqla call: the status and the message of gqla_last_error_message()
// captured at the moment of failure (the C message is overwritten by later calls).
class Error : public std::runtime_error {
public:
    Error(gqla_status status, const std::string& message)
        : std::runtime_error(std::string(gqla_status_string(status)) + ": " + message),
          status_(status),
          message_(message) {}
    gqla_status status() const noexcept { return status_; }
    // The library's message alone, without the status name.
    const std::string& message() const noexcept { return message_; }

private:
    gqla_status status_;
    std::string message_;
};

// Throw gqla::Error unless `status` is GQLA_OK.
inline void check(gqla_status status) {
    if (status != GQLA_OK) throw Error(status, gqla_last_error_message());
}

// ------------------------------------------------------------------ version

inline int32_t version() { return gqla_version(); }
inline std::string version_string() { return gqla_version_string(); }
inline std::string status_string(gqla_status s) { return gqla_status_string(s); }

// ------------------------------------------------------------------ tensors

// Contiguous row-major host tensor over `data` (not owned).
inline gqla_tensor tensor(void* data, gqla_dtype dtype, std::initializer_list<int64_t> shape) {
    gqla_tensor t;
    std::vector<int64_t> dims(shape);
    check(gqla_tensor_init(&t, data, dtype, static_cast<int32_t>(dims.size()), dims.data()));
    return t;
}
// Same, taking the input as const: gqla never writes through input tensors.
inline gqla_tensor tensor(const void* data, gqla_dtype dtype, std::initializer_list<int64_t> shape) {
    return tensor(const_cast<void*>(data), dtype, shape);
}
// f32 shorthand, the common case.
inline gqla_tensor tensor(const float* data, std::initializer_list<int64_t> shape) {
    return tensor(static_cast<const void*>(data), GQLA_DTYPE_F32, shape);
}

// Host view with explicit strides in elements (innermost must be 1), e.g. a
// slice of a larger buffer.
inline gqla_tensor strided_tensor(const void* data, gqla_dtype dtype, std::initializer_list<int64_t> shape,
                                  std::initializer_list<int64_t> strides) {
    if (shape.size() != strides.size())
        throw Error(GQLA_ERR_INVALID_ARGUMENT, "strided_tensor: shape and strides differ in length");
    gqla_tensor t = tensor(data, dtype, shape);
    int i = 0;
    for (int64_t s : strides) t.strides[i++] = s;
    return t;
}

// ------------------------------------------------------------------ config

// Defaults for `kind` (dims still 0).
inline gqla_config default_config(gqla_kind kind) {
    gqla_config cfg;
    check(gqla_config_default(&cfg, kind));
    return cfg;
}

// GQA: H query heads over G KV heads of dim D (value dim Dv, 0 = D).
inline ::gqla_config make_gqa_config(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim, int32_t value_dim = 0,
                                     int32_t num_layers = 1) {
    gqla_config cfg = default_config(GQLA_KIND_GQA);
    cfg.num_heads = num_heads;
    cfg.num_kv_heads = num_kv_heads;
    cfg.head_dim = head_dim;
    cfg.value_dim = value_dim;
    cfg.num_layers = num_layers;
    return cfg;
}

// GQLA: H query heads over G latent groups; latent rank r, nope dim d_c,
// rope dim d_r, value dim d_v (MLA when G == H).
inline ::gqla_config make_gqla_config(int32_t num_heads, int32_t num_groups, int32_t latent_dim, int32_t nope_dim,
                                      int32_t rope_dim, int32_t value_dim, int32_t num_layers = 1) {
    ::gqla_config cfg = default_config(GQLA_KIND_GQLA);
    cfg.num_heads = num_heads;
    cfg.num_kv_heads = num_groups;
    cfg.latent_dim = latent_dim;
    cfg.nope_dim = nope_dim;
    cfg.rope_dim = rope_dim;
    cfg.value_dim = value_dim;
    cfg.num_layers = num_layers;
    return cfg;
}

// Throws with the library's message naming the first bad field.
inline void validate(const ::gqla_config& cfg) { check(gqla_config_validate(&cfg)); }

// ------------------------------------------------------------------ probe / cost

inline int32_t device_count(gqla_device_type device) {
    int32_t n = 0;
    check(gqla_device_count(device, &n));
    return n;
}

inline gqla_probe_info probe(gqla_device_type device = GQLA_DEVICE_CPU, int32_t index = 0, uint32_t flags = 0) {
    gqla_probe_info info;
    info.struct_size = sizeof info;
    check(gqla_probe(device, index, flags, &info));
    return info;
}

// topk > 0: a sparse step of topk positions per query (0 = dense).
inline gqla_workload workload(int32_t batch, int64_t context, int32_t q_len = 1, int32_t topk = 0) {
    gqla_workload w;
    w.struct_size = sizeof w;
    w.batch = batch;
    w.context = context;
    w.q_len = q_len;
    w.topk = topk;
    return w;
}

// Cost of both paths for `cfg` on `probe_info` (nullptr: probe of cfg.device).
inline gqla_cost_report predict_cost(const ::gqla_config& cfg, const gqla_workload& w,
                                     const gqla_probe_info* probe_info = nullptr) {
    gqla_cost_report report;
    report.struct_size = sizeof report;
    check(gqla_predict_cost(&cfg, probe_info, &w, &report));
    return report;
}

// Partial attentions (outputs + lses over disjoint positions) merged into
// the attention over their union (gqla_merge_attention_states).
inline void merge_attention_states(const std::vector<gqla_tensor>& outputs, const std::vector<gqla_tensor>& lses,
                                   gqla_tensor out, gqla_tensor* out_lse = nullptr) {
    if (outputs.size() != lses.size())
        throw Error(GQLA_ERR_INVALID_ARGUMENT, "merge_attention_states: outputs and lses differ in length");
    check(
        gqla_merge_attention_states(static_cast<int32_t>(outputs.size()), outputs.data(), lses.data(), &out, out_lse));
}

// ------------------------------------------------------------------ session

// Owns one gqla_session. Move-only; the destructor destroys it.
class Session {
public:
    explicit Session(const ::gqla_config& cfg) { check(gqla_session_create(&cfg, &handle_)); }
    // Adopt a handle created elsewhere (takes ownership; may be nullptr).
    explicit Session(gqla_session* adopted) noexcept : handle_(adopted) {}
    ~Session() { gqla_session_destroy(handle_); }

    Session(Session&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Session& operator=(Session&& other) noexcept {
        if (this != &other) {
            gqla_session_destroy(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    gqla_session* get() const noexcept { return handle_; }
    explicit operator bool() const noexcept { return handle_ != nullptr; }
    // Give up ownership without destroying.
    gqla_session* detach() noexcept { return std::exchange(handle_, nullptr); }

    // The resolved config (device, threads, scale, capacity, path filled in).
    ::gqla_config config() const {
        ::gqla_config cfg;
        cfg.struct_size = sizeof cfg;
        check(gqla_session_get_config(handle_, &cfg));
        return cfg;
    }

    void set_weights(int32_t layer, const gqla_tensor& w_ukv) { check(gqla_set_weights(handle_, layer, &w_ukv)); }

    gqla_seq_id add_sequence() {
        gqla_seq_id id = 0;
        check(gqla_sequence_add(handle_, &id));
        return id;
    }
    void release(gqla_seq_id seq) { check(gqla_sequence_release(handle_, seq)); }
    gqla_seq_id fork(gqla_seq_id parent) {
        gqla_seq_id child = 0;
        check(gqla_sequence_fork(handle_, parent, &child));
        return child;
    }
    int64_t length(gqla_seq_id seq, int32_t layer = 0) const {
        int64_t n = 0;
        check(gqla_sequence_length(handle_, seq, layer, &n));
        return n;
    }

    // The sequence's cache as bytes (gqla_sequence_export) and back as a new
    // sequence of this or another session of the same shape.
    std::vector<unsigned char> export_sequence(gqla_seq_id seq) const {
        size_t needed = 0;
        check(gqla_sequence_export(handle_, seq, nullptr, 0, &needed));
        std::vector<unsigned char> bytes(needed);
        check(gqla_sequence_export(handle_, seq, bytes.data(), bytes.size(), &needed));
        bytes.resize(needed);
        return bytes;
    }
    gqla_seq_id import_sequence(const std::vector<unsigned char>& bytes) {
        gqla_seq_id id = 0;
        check(gqla_sequence_import(handle_, bytes.data(), bytes.size(), &id));
        return id;
    }

    // GQA: a = k [n,G,D], b = v [n,G,Dv]. GQLA: a = c [n,r], b = kr [n,d_r].
    void append(int32_t layer, gqla_seq_id seq, const gqla_tensor& a, const gqla_tensor& b) {
        check(gqla_append(handle_, layer, seq, &a, &b));
    }
    // Sequence seqs[i] receives counts[i] consecutive rows of a/b.
    void append_batch(int32_t layer, const std::vector<gqla_seq_id>& seqs, const std::vector<int64_t>& counts,
                      const gqla_tensor& a, const gqla_tensor& b) {
        if (seqs.size() != counts.size())
            throw Error(GQLA_ERR_INVALID_ARGUMENT, "append_batch: seqs and counts differ in length");
        check(gqla_append_batch(handle_, layer, static_cast<int32_t>(seqs.size()), seqs.data(), counts.data(), &a, &b));
    }

    // q [B,s_q,H,Dq] -> o [B,s_q,H,Dv] (+ lse [B,s_q,H] f32 when given).
    void decode(int32_t layer, const std::vector<gqla_seq_id>& seqs, const gqla_tensor& q, gqla_tensor o,
                gqla_tensor* lse = nullptr) {
        check(gqla_decode(handle_, layer, static_cast<int32_t>(seqs.size()), seqs.data(), &q, &o, lse));
    }

    // gqla_attention: any mix of query counts, on the form `path` asks for;
    // returns the form the call ran on (GQA, ABSORB or GQA_TRANSIENT).
    //   q_lens empty: q [B,s_q,H,Dq] -> o [B,s_q,H,Dv] (+ lse [B,s_q,H]), as decode;
    //   q_lens[i] queries of seqs[i]: rows packed in sequence order,
    //   q [N,H,Dq] -> o [N,H,Dv] (+ lse [N,H]), N = sum(q_lens).
    gqla_path attend(int32_t layer, const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens,
                     const gqla_tensor& q, gqla_tensor o, gqla_tensor* lse = nullptr, gqla_path path = GQLA_PATH_AUTO) {
        if (!q_lens.empty() && q_lens.size() != seqs.size())
            throw Error(GQLA_ERR_INVALID_ARGUMENT, "attend: q_lens has " + std::to_string(q_lens.size()) +
                                                       " entries for " + std::to_string(seqs.size()) + " sequences");
        gqla_attention_args args;
        check(gqla_attention_args_default(&args));
        args.layer = layer;
        args.batch = static_cast<int32_t>(seqs.size());
        args.seqs = seqs.data();
        args.q_lens = q_lens.empty() ? nullptr : q_lens.data();
        args.q = &q;
        args.o = &o;
        args.lse = lse;
        args.path = path;
        gqla_path taken = GQLA_PATH_AUTO;
        args.path_taken = &taken;
        check(gqla_attention(handle_, &args));
        return taken;
    }

    void select_path(gqla_path path) { check(gqla_select_path(handle_, path)); }
    // The path decode uses now (never AUTO).
    gqla_path path() const {
        gqla_path active = GQLA_PATH_AUTO;
        check(gqla_get_path(handle_, &active, nullptr));
        return active;
    }
    // What the caller asked for (may be AUTO).
    gqla_path requested_path() const {
        gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
        check(gqla_get_path(handle_, &active, &requested));
        return requested;
    }

    gqla_stats stats() const {
        gqla_stats s;
        s.struct_size = sizeof s;
        check(gqla_session_stats(handle_, &s));
        return s;
    }

    // Cost on this session's device with its backend's efficiency factors.
    gqla_cost_report predict_cost(const gqla_workload& w) const {
        gqla_cost_report report;
        report.struct_size = sizeof report;
        check(gqla_session_predict_cost(handle_, &w, &report));
        return report;
    }

    // CUDA: a cudaStream_t for later work (CPU sessions ignore it).
    void set_stream(void* stream) { check(gqla_session_set_stream(handle_, stream)); }
    void synchronize() { check(gqla_session_synchronize(handle_)); }

private:
    gqla_session* handle_ = nullptr;
};

}  // namespace gqla
