// SPDX-License-Identifier: Apache-2.0
// A session: the resolved config, one backend instance, the page pool and
// the sequences (page tables and per-layer lengths), and the decode path.
// Every public method takes the session's mutex, so one session may be used
// from several threads. Methods throw gqla::Error; a throwing method leaves
// the session as it was (all-or-nothing).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/backend_api.h"
#include "core/backend_context.hpp"
#include "core/cost_model.hpp"
#include "core/page_pool.hpp"
#include "core/tensor_check.hpp"

namespace gqla {

class Session {
public:
    // cfg: a caller's config (read_config'ed). `backend` overrides the
    // registry's choice (then the session runs on backend->device, index
    // cfg.device_index); nullptr = resolve cfg.device through the registry.
    explicit Session(const gqla_config& cfg, const gqla_backend_vtable* backend = nullptr);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    gqla_config config() const;
    void set_weights(int32_t layer, const gqla_tensor* w);

    gqla_seq_id add_sequence();
    void release_sequence(gqla_seq_id seq);
    gqla_seq_id fork_sequence(gqla_seq_id parent);
    int64_t sequence_length(gqla_seq_id seq, int32_t layer) const;

    // Serialized sequences (session_export.cpp; format in sequence_format.hpp).
    // export: bytes needed -> *needed; writes when capacity suffices.
    void export_sequence(gqla_seq_id seq, void* buffer, size_t capacity, size_t* needed) const;
    gqla_seq_id import_sequence(const void* buffer, size_t size);

    // One sequence; n = rows of a.
    void append(int32_t layer, gqla_seq_id seq, const gqla_tensor* a, const gqla_tensor* b);
    void append_batch(int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs, const int64_t* counts,
                      const gqla_tensor* a, const gqla_tensor* b);

    void decode(int32_t layer, int32_t batch, const gqla_seq_id* seqs, const gqla_tensor* q, gqla_tensor* o,
                gqla_tensor* lse);

    // One attention call (session_attention.cpp). Pointers are the caller's;
    // q_lens NULL means uniform queries (s_q from q's shape).
    struct AttentionCall {
        int32_t layer = 0;
        int32_t batch = 0;
        const gqla_seq_id* ids = nullptr;
        const int32_t* q_lens = nullptr;
        const gqla_tensor* q = nullptr;
        gqla_tensor* o = nullptr;
        gqla_tensor* lse = nullptr;
        int path_value = GQLA_PATH_AUTO;  // the call's gqla_path as the caller's int (ignored when on_session_path)
        bool on_session_path = false;     // gqla_decode: the session's active path
        const gqla_tensor* indices = nullptr;  // sparse attention (top-k positions per query); NULL = dense
    };
    // Returns the form the call ran on (GQA, ABSORB or GQA_TRANSIENT).
    gqla_path attention(const AttentionCall& call);

    // By reference: a C caller may pass any int, which must not be loaded as the enum.
    void select_path(const gqla_path& path);
    gqla_path active_path() const;
    gqla_path requested_path() const;
    // Both at once (consistent under concurrent select_path).
    void paths(gqla_path* active, gqla_path* requested) const;

    gqla_stats stats() const;
    void set_stream(void* stream);
    void synchronize();
    gqla_cost_report predict_cost(const gqla_workload& w) const;

    // Page-pool view for tests of the bookkeeping.
    int32_t page_refcount(int32_t page) const;
    std::vector<int32_t> page_table(gqla_seq_id seq) const;

private:
    struct Sequence {
        int32_t slot = -1;
        std::vector<int32_t> pages;    // shared by all layers
        std::vector<int64_t> lengths;  // per layer
        int64_t longest() const;
    };

    void append_locked(int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs, const int64_t* counts,
                       const gqla_tensor* a, const gqla_tensor* b, bool single);
    // The part of an append after its arguments were checked: pages,
    // copy-on-write, the backend's writes and the commit. counts has num_seqs
    // entries; views hold their rows in order. stored_scales: rows already
    // in an 8-bit cache's form (a sequence import), with these scales
    // (gqla_append_args a_scales, b_scales); NULL for rows to convert.
    void append_views_locked(int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs, const int64_t* counts,
                             const gqla_view& a, const gqla_view& b, const char* call,
                             const gqla_view* stored_scales = nullptr);
    gqla_path attention_locked(const AttentionCall& call);
    // The form of a gqla_attention call on a GQLA session for its requested
    // path: AUTO prices absorb, the kept expanded cache (when kept) and the
    // transient expansion at the call's shape.
    // topk > 0: a sparse call of topk positions per query.
    gqla_path call_form(gqla_path requested, int32_t batch, int64_t mean_context, int32_t q_len, int32_t topk) const;
    gqla_seq_id add_locked();
    void release_locked(gqla_seq_id seq);
    void check_layer(int32_t layer) const;
    void require_weights(int32_t layer, const char* call) const;
    // w_ukv checked and narrowed to the rows of this session's groups: the
    // full [G*(d_c+d_v), r] or the shard's [group_count*(d_c+d_v), r].
    gqla_view shard_weight_rows(const gqla_tensor* w) const;
    Sequence& find(gqla_seq_id id, const char* arg_name);
    const Sequence& find(gqla_seq_id id, const char* arg_name) const;
    uint32_t next_epoch();                    // for duplicate-id checks without allocation
    void notify_sequence(const Sequence& s);  // backend->update_sequence

    // Path switching (session_path.cpp).
    void enable_expanded_path();  // all-or-nothing
    void disable_expanded_path();
    void expand_layer(int32_t layer);      // all live sequences
    void switch_for_auto(gqla_path want);  // best effort: keeps the path on failure
    // keep_latent = 0: the GQA path over the expanded cache is the only form.
    bool latent_kept() const { return cfg_.kind != GQLA_KIND_GQLA || cfg_.keep_latent != 0; }
    // Whether the backend keeps an expanded cache for this session (not for
    // an 8-bit cache without GQLA_BACKEND_FEATURE_FP8_EXPANDED).
    bool expanded_cache_served() const;
    // Throws INVALID_STATE naming `what` (a form or operation that reads the
    // latent) when this session does not keep it.
    void require_latent(const char* what) const;
    bool layers_with_tokens_have_weights() const;

    mutable std::mutex mu_;
    // The caller's config, resolved (group_count filled in): what
    // gqla_session_get_config returns and what an exported sequence records.
    gqla_config full_cfg_;
    // The layer this session serves (served_layer(full_cfg_)): a shard's
    // heads and groups, the whole layer otherwise. The backend, the shape
    // checks, the cost model and the path policy all work on it.
    gqla_config cfg_;
    gqla_backend_desc desc_;
    DevicePlacement placement_;
    std::unique_ptr<BackendContext> backend_;
    gqla_probe_info probe_;
    Efficiency efficiency_;
    std::unique_ptr<PathPolicy> policy_;
    PagePool pool_;

    std::unordered_map<gqla_seq_id, Sequence> seqs_;
    std::vector<int32_t> free_slots_;
    gqla_seq_id next_id_ = 1;
    std::vector<uint8_t> weights_set_;   // per layer
    std::vector<int64_t> layer_tokens_;  // per layer, summed over sequences
    int64_t tokens_cached_ = 0;          // sum over sequences of their longest layer

    gqla_path requested_ = GQLA_PATH_AUTO;
    gqla_path active_ = GQLA_PATH_GQA;
    bool expanded_ = false;  // GQLA: expanded pools allocated and filled

    // Decode history for AUTO re-resolution by select_path.
    bool have_history_ = false;
    int32_t last_batch_ = 1, last_q_len_ = 1, last_layer_ = 0;
    int64_t last_context_ = 1;

    // Preallocated at create so decode does not allocate.
    std::vector<gqla_decode_seq> decode_seqs_;  // max_batch
    std::vector<uint32_t> slot_epoch_;          // max_sequences
    std::vector<int32_t> slot_arg_;             // index in the call's id array
    uint32_t epoch_ = 0;
    std::vector<int64_t> zero_lengths_;  // num_layers zeros
};

}  // namespace gqla
