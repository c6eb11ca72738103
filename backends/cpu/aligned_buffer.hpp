// A 64-byte aligned, owned byte buffer whose allocation failure is a value
// (no exceptions), so callers can report OUT_OF_MEMORY and keep old state.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <utility>

namespace gqla::cpu {

class AlignedBuffer {
public:
    static constexpr size_t kAlign = 64;

    AlignedBuffer() = default;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    AlignedBuffer(AlignedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
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
        const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
        void* p = std::aligned_alloc(kAlign, rounded);
        if (!p) return false;
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
    template <class T> T* as() const { return static_cast<T*>(ptr_); }
    size_t size() const { return size_; }
    bool empty() const { return ptr_ == nullptr; }

private:
    void* ptr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace gqla::cpu
