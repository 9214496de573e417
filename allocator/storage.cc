#include "allocator/storage.h"

#include <new>

#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dynvm {
namespace {
// The header sits before the data; rounding keeps the data kTensorAlignment-aligned.
constexpr size_t kHeaderBytes =
    (sizeof(Storage) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}  // namespace

absl::string_view DeviceName(Device d) {
  switch (d) {
    case Device::kCPU:
      return "cpu";
    case Device::kCUDA:
      return "cuda";
  }
  return "?";
}

absl::StatusOr<StorageRef> Storage::Allocate(Allocator& allocator, size_t bytes,
                                             std::shared_ptr<Allocator> keep_alive) {
  if (bytes > (size_t{1} << 60)) {
    return absl::ResourceExhaustedError("storage of " + std::to_string(bytes) +
                                        " bytes is too large");
  }
  const size_t block_bytes = kHeaderBytes + bytes;
  if (allocator.device() != Device::kCPU) {
    // Device memory cannot hold the header: it lives on the host.
    DYNVM_ASSIGN_OR_RETURN(void* data, allocator.Allocate(bytes));
    auto* s = new Storage(Kind::kPool, static_cast<uint8_t*>(data), bytes, allocator.device());
    s->allocator_ = &allocator;
    s->allocator_keep_alive_ = std::move(keep_alive);
    s->block_bytes_ = 0;  // marks a host-side header
    return StorageRef(s);
  }
  DYNVM_ASSIGN_OR_RETURN(void* block, allocator.Allocate(block_bytes));
  auto* base = static_cast<uint8_t*>(block);
  auto* s = new (base) Storage(Kind::kPool, base + kHeaderBytes, bytes, Device::kCPU);
  s->allocator_ = &allocator;
  s->allocator_keep_alive_ = std::move(keep_alive);
  s->block_bytes_ = block_bytes;
  return StorageRef(s);
}

StorageRef Storage::Wrap(Kind kind, void* data, size_t bytes, Device device,
                         std::function<void()> release) {
  auto* s = new Storage(kind, static_cast<uint8_t*>(data), bytes, device);
  s->release_ = std::move(release);
  return StorageRef(s);
}

void Storage::Release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (kind_ == Kind::kPool) {
    Allocator* allocator = allocator_;
    std::shared_ptr<Allocator> keep_alive = std::move(allocator_keep_alive_);
    if (block_bytes_ == 0) {
      void* data = data_;
      size_t size = size_;
      delete this;
      allocator->Deallocate(data, size);
    } else {
      size_t block_bytes = block_bytes_;
      this->~Storage();
      allocator->Deallocate(this, block_bytes);
    }
    return;  // keep_alive may free the allocator here, after its last use.
  }
  std::function<void()> release = std::move(release_);
  delete this;
  if (release) release();
}

}  // namespace dynvm
