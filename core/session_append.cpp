// SPDX-License-Identifier: Apache-2.0
// Appending cache rows: validate everything, reserve every page the call
// needs (new pages and copy-on-write copies of shared pages that receive
// rows), let the backend write, and only then commit the new page tables and
// lengths. Any failure before the commit leaves the session as it was: the
// rows written into fresh pages or past the old lengths are invisible.
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "core/session.hpp"

namespace gqla {
namespace {

struct ArgName {
    char text[40];
};

ArgName seq_arg(bool single, int32_t i) {
    ArgName n;
    if (single)
        std::snprintf(n.text, sizeof(n.text), "seq");
    else
        std::snprintf(n.text, sizeof(n.text), "seqs[%d]", i);
    return n;
}

// One sequence's part of the call, prepared before anything is committed.
struct Change {
    int32_t seq_index;  // in the call's id array
    int64_t count;
    std::vector<int32_t> pages;    // the page table after the call
    std::vector<int64_t> lengths;  // the lengths after the call
};

}  // namespace

void Session::append(int32_t layer, gqla_seq_id seq, const gqla_tensor* a, const gqla_tensor* b) {
    std::lock_guard<std::mutex> lock(mu_);
    append_locked(layer, 1, &seq, nullptr, a, b, true);
}

void Session::append_batch(int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs, const int64_t* counts,
                           const gqla_tensor* a, const gqla_tensor* b) {
    std::lock_guard<std::mutex> lock(mu_);
    append_locked(layer, num_seqs, seqs, counts, a, b, false);
}

void Session::append_locked(int32_t layer, int32_t num_seqs, const gqla_seq_id* ids, const int64_t* counts,
                            const gqla_tensor* a, const gqla_tensor* b, bool single) {
    const char* call = single ? "append" : "append_batch";
    check_layer(layer);
    if (!single) {
        if (num_seqs < 1 || num_seqs > cfg_.max_sequences)
            fail(GQLA_ERR_INVALID_ARGUMENT, "num_seqs: expected 1..%d (config.max_sequences), got %d",
                 cfg_.max_sequences, num_seqs);
        if (ids == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "seqs: NULL (expected %d sequence ids)", num_seqs);
        if (counts == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "counts: NULL (expected %d row counts)", num_seqs);
    }
    require_weights(layer, call);

    // Rows: from counts (batch) or from the first tensor (single).
    int64_t total = 0;
    if (!single) {
        for (int32_t i = 0; i < num_seqs; ++i) {
            if (counts[i] < 0)
                fail(GQLA_ERR_INVALID_ARGUMENT, "counts[%d]: expected >= 0, got %lld", i,
                     static_cast<long long>(counts[i]));
            if (__builtin_add_overflow(total, counts[i], &total))
                fail(GQLA_ERR_INVALID_ARGUMENT, "counts: sum overflows int64");
        }
    }
    const bool gqa = cfg_.kind == GQLA_KIND_GQA;
    const int64_t rows = single ? kAnyExtent : total;
    // A shard's k/v carry its own KV heads only (cfg_ is the served layer).
    const char* heads = full_cfg_.num_kv_heads == cfg_.num_kv_heads ? "num_kv_heads" : "group_count";
    const TensorSpec a_spec =
        gqa ? TensorSpec{"k",           3,   {"n", heads, "head_dim"}, {rows, cfg_.num_kv_heads, cfg_.head_dim},
                         cfg_.io_dtype, true}
            : TensorSpec{"c", 2, {"n", "latent_dim"}, {rows, cfg_.latent_dim}, cfg_.io_dtype, true};
    gqla_view a_view = check_tensor(a, a_spec, placement_);
    if (single) {
        total = a_view.shape[0];
        if (total < 1)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: shape[0] (n) expected >= 1, got %lld", a_spec.name,
                 static_cast<long long>(total));
    }
    const TensorSpec b_spec =
        gqa ? TensorSpec{"v",           3,   {"n", heads, "value_dim"}, {total, cfg_.num_kv_heads, cfg_.value_dim},
                         cfg_.io_dtype, true}
            : TensorSpec{"kr", 2, {"n", "rope_dim"}, {total, cfg_.rope_dim}, cfg_.io_dtype, true};
    gqla_view b_view = check_tensor(b, b_spec, placement_);

    // Sequences: known, not repeated.
    const uint32_t epoch = next_epoch();
    for (int32_t i = 0; i < num_seqs; ++i) {
        const Sequence& s = find(ids[i], seq_arg(single, i).text);
        size_t slot = static_cast<size_t>(s.slot);
        if (slot_epoch_[slot] == epoch)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "seqs[%d]: sequence id %lld repeated (also seqs[%d]); an id may appear "
                 "once per call",
                 i, static_cast<long long>(ids[i]), slot_arg_[slot]);
        slot_epoch_[slot] = epoch;
        slot_arg_[slot] = i;
    }
    if (total == 0) return;
    append_views_locked(layer, num_seqs, ids, single ? &total : counts, a_view, b_view, call);
}

void Session::append_views_locked(int32_t layer, int32_t num_seqs, const gqla_seq_id* ids, const int64_t* counts,
                                  const gqla_view& a_view, const gqla_view& b_view, const char* call,
                                  const gqla_view* stored_scales) {
    // Capacity: new pages plus copies of shared pages that would receive rows.
    const int64_t P = cfg_.page_size;
    int64_t new_pages = 0, cow_pages = 0;
    for (int32_t i = 0; i < num_seqs; ++i) {
        const int64_t count = counts[i];
        if (count == 0) continue;
        const Sequence& s = seqs_.find(ids[i])->second;
        const int64_t old_len = s.lengths[static_cast<size_t>(layer)];
        const int64_t new_len = old_len + count;
        const int64_t have = static_cast<int64_t>(s.pages.size());
        const int64_t need = (new_len + P - 1) / P;
        if (need > have) new_pages += need - have;
        for (int64_t p = old_len / P; p < have && p < need; ++p)
            if (pool_.shared(s.pages[static_cast<size_t>(p)])) ++cow_pages;
    }
    char what[128];
    std::snprintf(what, sizeof(what), "%s (%lld new pages + %lld copy-on-write copies of shared pages)", call,
                  static_cast<long long>(new_pages), static_cast<long long>(cow_pages));
    PagePool::Reservation reservation = pool_.reserve(new_pages + cow_pages, what);

    // New page tables and lengths, built aside.
    std::vector<Change> changes;
    changes.reserve(static_cast<size_t>(num_seqs));
    std::vector<int32_t> cow_src, cow_dst;
    std::vector<gqla_append_item> items;
    items.reserve(static_cast<size_t>(num_seqs));
    int64_t row = 0;
    for (int32_t i = 0; i < num_seqs; ++i) {
        const int64_t count = counts[i];
        if (count == 0) continue;
        const Sequence& s = seqs_.find(ids[i])->second;
        const int64_t old_len = s.lengths[static_cast<size_t>(layer)];
        const int64_t need = (old_len + count + P - 1) / P;
        Change c{i, count, s.pages, s.lengths};
        for (int64_t p = old_len / P; p < static_cast<int64_t>(c.pages.size()) && p < need; ++p) {
            int32_t& page = c.pages[static_cast<size_t>(p)];
            if (!pool_.shared(page)) continue;
            cow_src.push_back(page);
            page = reservation.take();
            cow_dst.push_back(page);
        }
        while (static_cast<int64_t>(c.pages.size()) < need) c.pages.push_back(reservation.take());
        c.lengths[static_cast<size_t>(layer)] = old_len + count;
        gqla_append_item item{};
        item.slot = s.slot;
        item.start = old_len;
        item.count = count;
        item.row_offset = row;
        items.push_back(item);
        changes.push_back(std::move(c));
        row += count;
    }
    for (size_t k = 0; k < changes.size(); ++k) items[k].page_table = changes[k].pages.data();

    const gqla_backend_vtable& vt = backend_->vt();
    if (!cow_src.empty())
        backend_->check(
            vt.copy_pages(backend_->ctx(), static_cast<int32_t>(cow_src.size()), cow_src.data(), cow_dst.data()),
            "copy_pages");
    gqla_append_args args{};
    args.layer = layer;
    args.num_items = static_cast<int32_t>(items.size());
    args.items = items.data();
    args.a = a_view;
    args.b = b_view;
    args.write_expanded = (cfg_.kind == GQLA_KIND_GQLA && expanded_) ? 1 : 0;
    if (stored_scales) {
        args.a_scales = stored_scales[0];
        args.b_scales = stored_scales[1];
    }
    backend_->check(vt.append(backend_->ctx(), &args), "append");

    // Mirror the new tables in the backend; undo the mirrored ones on failure.
    if (vt.update_sequence != nullptr) {
        for (size_t k = 0; k < changes.size(); ++k) {
            const Change& c = changes[k];
            gqla_status st = vt.update_sequence(backend_->ctx(), items[k].slot, c.pages.data(),
                                                static_cast<int32_t>(c.pages.size()), c.lengths.data());
            if (st == GQLA_OK) continue;
            for (size_t j = 0; j < k; ++j) {
                const Sequence& old = seqs_.find(ids[changes[j].seq_index])->second;
                vt.update_sequence(backend_->ctx(), old.slot, old.pages.data(), static_cast<int32_t>(old.pages.size()),
                                   old.lengths.data());
            }
            backend_->check(st, "update_sequence");
        }
    }

    // Commit.
    for (int32_t page : cow_src) pool_.release(page);
    reservation.commit();
    for (Change& c : changes) {
        Sequence& s = seqs_.find(ids[c.seq_index])->second;
        tokens_cached_ -= s.longest();
        s.pages.swap(c.pages);
        s.lengths.swap(c.lengths);
        tokens_cached_ += s.longest();
        layer_tokens_[static_cast<size_t>(layer)] += c.count;
    }
}

}  // namespace gqla
