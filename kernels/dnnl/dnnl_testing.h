// Test helpers for the oneDNN backend's kernels that are checked bit for bit against the
// reference kernel: run one call on a named backend, and compare two tensors' bits.
#ifndef DYNVM_KERNELS_DNNL_DNNL_TESTING_H_
#define DYNVM_KERNELS_DNNL_DNNL_TESTING_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::testing {

// A call's last output and how many of its runs the oneDNN kernel left to its fallback (the
// reference kernel): 0 for the reference backend.
struct BackendRun {
  Tensor out;
  int64_t fallback_runs = 0;
};

// Creates `call`'s kernel on `backend` ("reference" or "dnnl") and runs it twice with `threads`
// threads, so that a kernel's state from a first run (a cached plan) is exercised by the second.
// `reuse_output`: the second run writes into the first run's output tensor (a preallocated
// output); otherwise each run gets a fresh one. On "dnnl" the kernel must be a DnnlKernel.
inline absl::StatusOr<BackendRun> RunOnBackend(const KernelCall& call, const std::string& backend,
                                               int threads, bool reuse_output = false) {
  KernelSpec spec = call.spec();
  spec.backend = backend;
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, KernelRegistry::Global().Create(spec));
  KernelContext ctx(&HeapAllocator::Get(), threads);
  BackendRun r;
  const std::vector<const Tensor*> in = call.inputs();
  for (int run = 0; run < 2; ++run) {
    if (!reuse_output || run == 0) r.out = Tensor();
    std::vector<Tensor*> outs = {&r.out};
    DYNVM_RETURN_IF_ERROR(k->Run(ctx, in, outs));
  }
  if (backend == "dnnl") {
    const auto* d = dynamic_cast<const onednn::DnnlKernel*>(k.get());
    if (d == nullptr) return absl::InternalError(absl::StrCat("not a dnnl kernel: ", k->name()));
    r.fallback_runs = d->fallback_runs();
  }
  return r;
}

// Same dtype, dims and bytes.
inline bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  return a.numel() == 0 ||
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * DTypeSize(a.dtype())) == 0;
}

// A tensor of `dims` with random bits (bool: 0 or 1).
inline Tensor RandomTensor(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(dtype, dims);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  const int64_t n = t.numel() * DTypeSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<uint8_t>(dtype == DType::kBool ? rng() & 1 : rng());
  }
  return t;
}

// "" when `got` and `want` have the same bits, else both described.
inline std::string BitsDiffer(const Tensor& got, const Tensor& want) {
  return SameBits(got, want) ? "" : got.DebugString() + " vs " + want.DebugString();
}

// Expects the oneDNN kernel at 1 and 2 threads to give what the reference kernel gives at 1
// thread: its error code, or an output in which `differs(got, want)` finds nothing ("" when
// they agree, else what differs); `served`: that the oneDNN kernel ran no fallback.
// `run(backend, threads)` runs the call under test (RunOnBackend).
template <typename Run, typename Differs>
void ExpectDnnlMatchesReference(const Run& run, const std::string& what, bool served,
                                const Differs& differs) {
  absl::StatusOr<BackendRun> want = run("reference", 1);
  for (int threads : {1, 2}) {
    absl::StatusOr<BackendRun> got = run("dnnl", threads);
    if (!want.ok()) {
      EXPECT_FALSE(got.ok()) << what;
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), want.status().code()) << what;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_EQ(differs(got->out, want->out), "") << what << " at " << threads << " threads";
    if (served) {
      EXPECT_EQ(got->fallback_runs, 0) << what;
    }
  }
}

}  // namespace dynvm::testing

#endif  // DYNVM_KERNELS_DNNL_DNNL_TESTING_H_
