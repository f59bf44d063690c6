// Buffer: an owning, 64-byte aligned, zero-initialised array of floats (or any
// trivial type). Ops work on raw pointers with shapes in comments, llm.c style;
// Buffer only owns memory. Where that memory lives is its Allocator's choice:
// host memory by default, or a Backend's (backend/backend.h: a GPU's memory
// under the CUDA backend), which only that backend's ops may dereference.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace dendrite {

// Where a Buffer's bytes come from (a Backend is one). allocate returns
// 64-byte aligned, zero-filled memory, or throws.
class Allocator {
 public:
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;

 protected:
  ~Allocator() = default;
};

// What the allocations made on this thread are for, while one is alive
// ("the activations", "AdamW's moments"): an allocator names it in its
// out-of-memory error. Scopes nest; the innermost is named.
class AllocationPurpose {
 public:
  explicit AllocationPurpose(const char* what) : outer_(current_) { current_ = what; }
  ~AllocationPurpose() { current_ = outer_; }
  AllocationPurpose(const AllocationPurpose&) = delete;
  AllocationPurpose& operator=(const AllocationPurpose&) = delete;
  // The innermost purpose, or null outside every scope.
  static const char* current() { return current_; }

 private:
  const char* outer_;
  static inline thread_local const char* current_ = nullptr;
};

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n, Allocator* allocator = nullptr) : allocator_(allocator) { resize(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        allocator_(o.allocator_) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      free();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      allocator_ = o.allocator_;
    }
    return *this;
  }
  ~Buffer() { free(); }

  // Reallocates from the same allocator (contents are lost) and zero-fills.
  void resize(size_t n) {
    free();
    size_ = n;
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    if (allocator_) {
      data_ = static_cast<T*>(allocator_->allocate(bytes));
      return;
    }
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  void zero() {
    if (!size_) return;
    if (allocator_)
      allocator_->zero(data_, size_ * sizeof(T));
    else
      std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }
  // Null: host memory.
  Allocator* allocator() const { return allocator_; }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void free() {
    if (allocator_ && data_)
      allocator_->release(data_);
    else
      std::free(data_);
    data_ = nullptr;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  Allocator* allocator_ = nullptr;
};

}  // namespace dendrite
