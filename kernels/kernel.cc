#include "kernels/kernel.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dynvm {
namespace {

absl::Status WrongType(const KernelSpec& spec, absl::string_view name, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(spec.DebugName(), ": attribute '", name, "' must be of type ", want));
}

}  // namespace

std::string KernelSpec::DebugName() const {
  return domain.empty() ? op : absl::StrCat(domain, "::", op);
}

const AttrValue* KernelSpec::Find(absl::string_view name) const {
  auto it = attrs.find(name);
  return it == attrs.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> KernelSpec::GetInt(absl::string_view name, int64_t def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kInt) return WrongType(*this, name, "int");
  return a->i;
}

absl::StatusOr<float> KernelSpec::GetFloat(absl::string_view name, float def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type == AttrValue::Type::kInt) return static_cast<float>(a->i);
  if (a->type != AttrValue::Type::kFloat) return WrongType(*this, name, "float");
  return a->f;
}

absl::StatusOr<std::string> KernelSpec::GetString(absl::string_view name, std::string def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kString) return WrongType(*this, name, "string");
  return a->s;
}

absl::StatusOr<std::vector<int64_t>> KernelSpec::GetInts(absl::string_view name,
                                                         std::vector<int64_t> def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kInts) return WrongType(*this, name, "ints");
  return a->ints;
}

absl::StatusOr<std::vector<float>> KernelSpec::GetFloats(absl::string_view name,
                                                         std::vector<float> def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kFloats) return WrongType(*this, name, "floats");
  return a->floats;
}

absl::StatusOr<std::vector<std::string>> KernelSpec::GetStrings(
    absl::string_view name, std::vector<std::string> def) const {
  const AttrValue* a = Find(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kStrings) return WrongType(*this, name, "strings");
  return a->strings;
}

namespace {
constexpr size_t kMinWorkspaceBytes = 4096;
}  // namespace

absl::StatusOr<void*> KernelContext::Workspace(size_t bytes) {
  Site* s = site();
  if (!s->workspace || s->workspace->size() < bytes) {
    // At least a page, and twice the old size when it grows: a site whose shapes grow every
    // iteration (a decode loop over a growing prefix) reallocates a logarithmic number of
    // times, and small workspaces (most are) never after their first run.
    const size_t old = s->workspace ? s->workspace->size() : 0;
    bytes = std::max({bytes, kMinWorkspaceBytes, old > 0 ? 2 * old : size_t{0}});
    s->workspace.Reset();
    DYNVM_ASSIGN_OR_RETURN(StorageRef st,
                           Storage::Allocate(*allocator_, bytes, allocator_keep_alive_));
    s->workspace = std::move(st);
  }
  return s->workspace->data();
}

absl::StatusOr<void*> KernelContext::DeviceWorkspace(size_t bytes) {
  if (device_context_ == nullptr) {
    return absl::FailedPreconditionError("a device kernel ran without a device context");
  }
  Site* s = site();
  if (!s->device_workspace || s->device_workspace->size() < bytes) {
    s->device_workspace.Reset();
    DYNVM_ASSIGN_OR_RETURN(StorageRef st, Storage::Allocate(device_context_->allocator(), bytes,
                                                            device_context_->allocator_ref()));
    s->device_workspace = std::move(st);
  }
  return s->device_workspace->data();
}

namespace {

// The shared pool of `n` threads, or null when n is not a valid thread count.
ThreadPool* SharedPool(int n) {
  absl::StatusOr<std::shared_ptr<ThreadPool>> p = ThreadPool::Shared(n);
  return p.ok() ? p->get() : nullptr;  // the shared pools live as long as the process
}

}  // namespace

void KernelContext::ParallelFor(int64_t n, int64_t grain,
                                absl::FunctionRef<void(int64_t, int64_t)> fn) const {
  if (n <= 0) return;
  if (num_threads_ > 1 && n > grain) {
    if (thread_pool_ == nullptr) thread_pool_ = SharedPool(num_threads_);
    if (thread_pool_ != nullptr) {
      thread_pool_->ParallelFor(n, grain, fn, parallel_log_);
      return;
    }
  }
  fn(0, n);
}

void KernelContext::ParallelForDynamic(int64_t n, int64_t chunk,
                                       absl::FunctionRef<void(int, int64_t, int64_t)> fn) const {
  if (n <= 0) return;
  if (chunk < 1) chunk = 1;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int tasks = ParallelTasks(chunks, 1);
  if (tasks == 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(0, c * chunk, std::min(n, (c + 1) * chunk));
    return;
  }
  // One range per thread, each claiming chunks until none is left. A range whose worker has not
  // started when the caller finishes runs on the caller (ThreadPool::ParallelFor) and finds
  // nothing left to claim; a worker descheduled inside a chunk delays that chunk alone.
  std::atomic<int64_t> next{0};
  ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(static_cast<int>(t), c * chunk, std::min(n, (c + 1) * chunk));
      }
    }
  });
}

int KernelContext::ParallelTasks(int64_t n, int64_t grain) const {
  if (num_threads_ <= 1 || n <= grain) return 1;
  if (thread_pool_ == nullptr) thread_pool_ = SharedPool(num_threads_);
  return thread_pool_ == nullptr ? 1 : thread_pool_->Tasks(n, grain);
}

}  // namespace dynvm
