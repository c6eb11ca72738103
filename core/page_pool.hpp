// SPDX-License-Identifier: Apache-2.0
// Bookkeeping of the cache pages: which page ids are free and how many
// sequences share each used page (fork shares pages; copy-on-write splits
// them). The memory behind a page id belongs to the backend; this class only
// hands out ids.
//
// Changes that may have to be undone go through a Reservation: it takes the
// pages a call needs up front (failing before anything changed when they are
// not there), hands them out one by one, and gives all of them back unless
// the call commits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gqla {

class PagePool {
public:
    explicit PagePool(int64_t num_pages);

    int64_t total() const { return static_cast<int64_t>(refcount_.size()); }
    int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
    int64_t used() const { return total() - free_count(); }
    int32_t refcount(int32_t page) const { return refcount_.at(static_cast<size_t>(page)); }
    bool shared(int32_t page) const { return refcount(page) > 1; }

    // One more holder of a used page (fork).
    void retain(int32_t page);
    // One holder fewer; the page is free again when the last one goes.
    void release(int32_t page);

    class Reservation {
    public:
        Reservation(Reservation&& other) noexcept;
        Reservation& operator=(Reservation&&) = delete;
        Reservation(const Reservation&) = delete;
        ~Reservation();

        // Next reserved page, now used with refcount 1.
        int32_t take();
        int64_t remaining() const { return static_cast<int64_t>(pages_.size() - taken_); }
        // Keep the taken pages; untaken ones go back to the pool.
        void commit();

    private:
        friend class PagePool;
        Reservation(PagePool* pool, std::vector<int32_t> pages) : pool_(pool), pages_(std::move(pages)) {}
        void give_back(size_t from);
        PagePool* pool_;
        std::vector<int32_t> pages_;
        size_t taken_ = 0;
        bool committed_ = false;
    };

    // Reserve n pages; throws CAPACITY (message says what `what` needed and
    // what is free) when fewer than n are free. Nothing changes on failure.
    Reservation reserve(int64_t n, const char* what);

private:
    std::vector<int32_t> refcount_;  // 0 = free
    std::vector<int32_t> free_;      // stack; lowest ids handed out first
};

}  // namespace gqla
