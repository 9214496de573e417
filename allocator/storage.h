// Public API. A Storage is a reference-counted block of device memory; tensors are views into
// storages (kernels/tensor.h). A storage lives as long as any view of it.
//
// Thread safety: Storage and StorageRef are thread-safe for reference counting (atomic), so
// StorageRefs to one storage may be copied and dropped on different threads, and the last
// release may run on any thread. The bytes themselves are not synchronized: writers and readers
// of one storage on different threads need their own happens-before (as a VM run that fills a
// caller's output buffer and the thread that then reads it).
#ifndef DYNVM_ALLOCATOR_STORAGE_H_
#define DYNVM_ALLOCATOR_STORAGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "allocator/allocator.h"

namespace dynvm {

class StorageRef;

class Storage {
 public:
  enum class Kind : uint8_t {
    kPool,      // from an Allocator; owned by the VM that allocated it; writable
    kConstant,  // a read-only view of an executable's constant segment
    kExternal,  // memory owned by the caller (zero-copy input); never written by the VM
    kOutput,    // memory owned by the caller that the VM writes (a bound output buffer)
  };

  // Allocates `bytes` from `allocator`. The Storage header lives in the same block, before the
  // data, so one storage costs one allocation. The allocator must outlive the storage unless
  // it is held by a shared_ptr: pass `keep_alive` to tie its lifetime to the storage.
  static absl::StatusOr<StorageRef> Allocate(Allocator& allocator, size_t bytes,
                                             std::shared_ptr<Allocator> keep_alive = nullptr);

  // Wraps memory owned elsewhere. `release` runs when the last reference goes away.
  static StorageRef Wrap(Kind kind, void* data, size_t bytes, Device device,
                         std::function<void()> release);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  Kind kind() const { return kind_; }
  bool writable() const { return kind_ == Kind::kPool || kind_ == Kind::kOutput; }

  // Growth bookkeeping for `append` (docs/isa.md, "Growing values"): the axis along which this
  // storage has spare capacity, its capacity along that axis, and the frontier (the extent
  // already filled). Only the tensor whose extent reaches the frontier may append in place.
  int32_t grow_axis = -1;
  int64_t grow_capacity = 0;
  int64_t frontier = 0;

  int32_t ref_count() const { return refs_.load(std::memory_order_relaxed); }

 private:
  friend class StorageRef;
  Storage(Kind kind, uint8_t* data, size_t size, Device device)
      : data_(data), size_(size), device_(device), kind_(kind) {}
  ~Storage() = default;

  void AddRef() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release();

  uint8_t* data_;
  size_t size_;
  std::atomic<int32_t> refs_{1};
  Device device_;
  Kind kind_;
  // kPool:
  Allocator* allocator_ = nullptr;
  std::shared_ptr<Allocator> allocator_keep_alive_;
  size_t block_bytes_ = 0;
  // kConstant / kExternal / kOutput:
  std::function<void()> release_;
};

// An intrusive strong reference to a Storage.
class StorageRef {
 public:
  StorageRef() = default;
  StorageRef(const StorageRef& o) : s_(o.s_) {
    if (s_ != nullptr) s_->AddRef();
  }
  StorageRef(StorageRef&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  StorageRef& operator=(const StorageRef& o) {
    if (o.s_ != nullptr) o.s_->AddRef();
    Reset();
    s_ = o.s_;
    return *this;
  }
  StorageRef& operator=(StorageRef&& o) noexcept {
    if (this != &o) {
      Reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~StorageRef() { Reset(); }

  void Reset() {
    if (s_ != nullptr) std::exchange(s_, nullptr)->Release();
  }
  Storage* get() const { return s_; }
  Storage* operator->() const { return s_; }
  Storage& operator*() const { return *s_; }
  explicit operator bool() const { return s_ != nullptr; }

 private:
  friend class Storage;
  explicit StorageRef(Storage* adopt) : s_(adopt) {}
  Storage* s_ = nullptr;
};

}  // namespace dynvm

#endif  // DYNVM_ALLOCATOR_STORAGE_H_
