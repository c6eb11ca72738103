// SPDX-License-Identifier: Apache-2.0
#include "core/page_pool.hpp"

#include <stdexcept>

#include "core/error.hpp"

namespace gqla {

PagePool::PagePool(int64_t num_pages) {
    if (num_pages < 0 || num_pages > INT32_MAX)
        fail(GQLA_ERR_INTERNAL, "page pool: bad page count %lld", static_cast<long long>(num_pages));
    refcount_.assign(static_cast<size_t>(num_pages), 0);
    free_.reserve(static_cast<size_t>(num_pages));
    for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

void PagePool::retain(int32_t page) {
    int32_t& rc = refcount_.at(static_cast<size_t>(page));
    if (rc <= 0) fail(GQLA_ERR_INTERNAL, "page pool: retain of free page %d", page);
    ++rc;
}

void PagePool::release(int32_t page) {
    int32_t& rc = refcount_.at(static_cast<size_t>(page));
    if (rc <= 0) fail(GQLA_ERR_INTERNAL, "page pool: release of free page %d", page);
    if (--rc == 0) free_.push_back(page);
}

PagePool::Reservation PagePool::reserve(int64_t n, const char* what) {
    if (n < 0) fail(GQLA_ERR_INTERNAL, "page pool: negative reservation");
    if (n > free_count())
        fail(GQLA_ERR_CAPACITY,
             "%s: needs %lld free pages, only %lld of %lld are free (raise config.max_tokens or release sequences)",
             what, static_cast<long long>(n), static_cast<long long>(free_count()), static_cast<long long>(total()));
    std::vector<int32_t> pages(free_.end() - n, free_.end());
    free_.resize(free_.size() - static_cast<size_t>(n));
    return Reservation(this, std::move(pages));
}

PagePool::Reservation::Reservation(Reservation&& other) noexcept
    : pool_(other.pool_), pages_(std::move(other.pages_)), taken_(other.taken_), committed_(other.committed_) {
    other.pool_ = nullptr;
}

int32_t PagePool::Reservation::take() {
    if (taken_ >= pages_.size()) fail(GQLA_ERR_INTERNAL, "page pool: reservation exhausted");
    int32_t page = pages_[pages_.size() - 1 - taken_];  // back of the stack first: lowest id
    ++taken_;
    pool_->refcount_[static_cast<size_t>(page)] = 1;
    return page;
}

void PagePool::Reservation::commit() {
    if (pool_ == nullptr || committed_) return;
    committed_ = true;
    give_back(taken_);
}

// Return reserved pages [from, end) of the take order to the pool.
void PagePool::Reservation::give_back(size_t from) {
    // pages_ is handed out from its back; restore so the free stack keeps its order.
    for (size_t i = from; i < pages_.size(); ++i) {
        int32_t page = pages_[pages_.size() - 1 - i];
        pool_->refcount_[static_cast<size_t>(page)] = 0;
    }
    for (size_t i = from; i < pages_.size(); ++i) pool_->free_.push_back(pages_[i - from]);
}

PagePool::Reservation::~Reservation() {
    if (pool_ == nullptr || committed_) return;
    give_back(0);
}

}  // namespace gqla
