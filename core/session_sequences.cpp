// SPDX-License-Identifier: Apache-2.0
// Sequence lifetime: add, fork (shared pages), release, length.
#include <algorithm>

#include "core/error.hpp"
#include "core/session.hpp"

namespace gqla {

gqla_seq_id Session::add_sequence() {
    std::lock_guard<std::mutex> lock(mu_);
    return add_locked();
}

gqla_seq_id Session::add_locked() {
    if (free_slots_.empty())
        fail(GQLA_ERR_CAPACITY,
             "sequence_add: %d sequences are live, the most config.max_sequences allows (release one or raise it)",
             cfg_.max_sequences);
    Sequence s;
    s.slot = free_slots_.back();
    s.lengths.assign(static_cast<size_t>(cfg_.num_layers), 0);
    gqla_seq_id id = next_id_;
    seqs_.emplace(id, std::move(s));  // may throw: nothing changed yet
    free_slots_.pop_back();
    ++next_id_;
    return id;
}

gqla_seq_id Session::fork_sequence(gqla_seq_id parent_id) {
    std::lock_guard<std::mutex> lock(mu_);
    const Sequence& parent = find(parent_id, "parent");
    if (free_slots_.empty())
        fail(GQLA_ERR_CAPACITY,
             "sequence_fork: %d sequences are live, the most config.max_sequences allows (release one or raise it)",
             cfg_.max_sequences);
    Sequence child;
    child.slot = free_slots_.back();
    child.pages = parent.pages;
    child.lengths = parent.lengths;
    gqla_seq_id id = next_id_;
    auto it = seqs_.emplace(id, std::move(child)).first;
    free_slots_.pop_back();
    for (int32_t page : it->second.pages) pool_.retain(page);
    try {
        notify_sequence(it->second);
    } catch (...) {
        for (int32_t page : it->second.pages) pool_.release(page);
        free_slots_.push_back(it->second.slot);
        seqs_.erase(it);
        throw;
    }
    ++next_id_;
    for (int32_t l = 0; l < cfg_.num_layers; ++l) layer_tokens_[static_cast<size_t>(l)] += it->second.lengths[l];
    tokens_cached_ += it->second.longest();
    return id;
}

void Session::release_sequence(gqla_seq_id id) {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked(id);
}

void Session::release_locked(gqla_seq_id id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) fail(GQLA_ERR_NOT_FOUND, "seq: unknown sequence id %lld", static_cast<long long>(id));
    Sequence& s = it->second;
    const gqla_backend_vtable& vt = backend_->vt();
    if (vt.update_sequence != nullptr)
        backend_->check(vt.update_sequence(backend_->ctx(), s.slot, nullptr, 0, zero_lengths_.data()),
                        "update_sequence");
    for (int32_t page : s.pages) pool_.release(page);
    for (int32_t l = 0; l < cfg_.num_layers; ++l) layer_tokens_[static_cast<size_t>(l)] -= s.lengths[l];
    tokens_cached_ -= s.longest();
    free_slots_.push_back(s.slot);
    seqs_.erase(it);
}

int64_t Session::sequence_length(gqla_seq_id id, int32_t layer) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Sequence& s = find(id, "seq");
    check_layer(layer);
    return s.lengths[static_cast<size_t>(layer)];
}

}  // namespace gqla
