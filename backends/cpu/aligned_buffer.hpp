// SPDX-License-Identifier: Apache-2.0
// A 64-byte aligned, owned byte buffer whose allocation failure is a value
// (no exceptions), so callers can report OUT_OF_MEMORY and keep old state.
// Buffers of 2 MiB and more (page pools, weight copies, workspaces) are
// 2 MiB-aligned and advised to use transparent huge pages: under the common
// THP "madvise" policy they would otherwise sit in 4 KiB pages, and the
// decode kernels, which stream them through page tables and per-group
// strides, would pay a TLB miss every 4 KiB.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gqla::cpu {

class AlignedBuffer {
public:
    static constexpr size_t kAlign = 64;
    static constexpr size_t kHugePage = size_t(2) << 20;

    AlignedBuffer() = default;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& o) noexcept
        : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            ptr_ = std::exchange(o.ptr_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    ~AlignedBuffer() { reset(); }

    // Replaces the contents with `bytes` uninitialised bytes; false (and
    // empty) when the allocation fails.
    bool allocate(size_t bytes) {
        reset();
        if (bytes == 0) return true;
        const size_t align = bytes >= kHugePage ? kHugePage : kAlign;
        const size_t rounded = (bytes + align - 1) / align * align;
        void* p = std::aligned_alloc(align, rounded);
        if (!p) return false;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure keeps 4 KiB pages
#endif
        ptr_ = p;
        size_ = bytes;
        return true;
    }
    void reset() {
        std::free(ptr_);
        ptr_ = nullptr;
        size_ = 0;
    }

    void* data() const { return ptr_; }
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t size() const { return size_; }
    bool empty() const { return ptr_ == nullptr; }

private:
    void* ptr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace gqla::cpu
