// The oneDNN backend's Pad (pad.cc) against the reference kernel (kernels/reference/slice_pad.cc),
// bit for bit: ranks 1-5, every mode, dtypes of 1, 2, 4 and 8 bytes, positive, zero and
// negative pads on inner and outer axes, the axes input, the attribute form, empty results,
// strided inputs (the fallback), errors, and large tensors at 1 and 2 threads.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_testing.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::RandomTensor;
using testing::SameBits;

const char* const kModes[] = {"constant", "reflect", "edge", "wrap"};

struct PadCase {
  std::string mode = "constant";
  std::vector<int64_t> pads;
  const std::vector<int64_t>* axes = nullptr;  // the axes input, or absent
  const Tensor* value = nullptr;               // constant_value, or absent
  bool attribute_form = false;                 // opset 2-10: pads and value attributes
  float value_attr = 0;
};

std::string Describe(const Tensor& x, const PadCase& c) {
  return absl::StrCat(x.DebugString(), " mode ", c.mode, " pads [", absl::StrJoin(c.pads, ", "),
                      "]", c.axes ? absl::StrCat(" axes [", absl::StrJoin(*c.axes, ", "), "]") : "",
                      c.value ? " with value" : "", c.attribute_form ? " (attributes)" : "");
}

using PadResult = testing::BackendRun;

// Runs Pad on `backend` at `threads`, twice at one site (the second run into the first's output,
// preallocated, when `preallocated`); the last output.
absl::StatusOr<PadResult> RunPad(const Tensor& x, const PadCase& c, const std::string& backend,
                                 int threads, bool preallocated = false) {
  KernelCall call("Pad");
  call.In(x);
  if (c.attribute_form) {
    call.Attr("pads", c.pads).Attr("value", c.value_attr);
  } else {
    call.In(
        *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(c.pads.size())}, c.pads));
    if (c.value != nullptr) {
      call.In(*c.value);
    } else {
      call.Absent();
    }
    if (c.axes != nullptr) {
      call.In(*Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(c.axes->size())},
                                           *c.axes));
    }
  }
  call.Out(x.dtype()).Attr("mode", c.mode);
  return testing::RunOnBackend(call, backend, threads, preallocated);
}

// Expects the dnnl kernel to give the reference kernel's bits (or its error code) at 1 and 2
// threads; `served`: that it ran no fallback.
void ExpectMatches(const Tensor& x, const PadCase& c, bool served) {
  const std::string what = Describe(x, c);
  for (bool preallocated : {false, true}) {
    testing::ExpectDnnlMatchesReference(
        [&](const std::string& backend, int threads) {
          return RunPad(x, c, backend, threads, preallocated && backend == "dnnl");
        },
        absl::StrCat(what, preallocated ? " preallocated" : ""), served, testing::BitsDiffer);
  }
}

std::vector<int64_t> RandomDims(int rank, std::mt19937& rng) {
  std::vector<int64_t> dims(rank);
  for (auto& d : dims) d = 1 + static_cast<int64_t>(rng() % 5);
  return dims;
}

// Random begin/end pads in [-2, 4] for `n` axes of `dims` (via `axis_of`), keeping dims >= 0;
// some axes left unpadded.
std::vector<int64_t> RandomPads(const std::vector<int64_t>& dims, const std::vector<int>& axis_of,
                                bool allow_negative, std::mt19937& rng) {
  const size_t n = axis_of.size();
  std::vector<int64_t> pads(2 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) continue;  // unpadded
    const int64_t dim = dims[axis_of[i]];
    for (int side = 0; side < 2; ++side) {
      int64_t p = static_cast<int64_t>(rng() % 7) - (allow_negative ? 2 : 0);
      if (!allow_negative && p < 0) p = 0;
      pads[i + side * n] = p;
    }
    while (dim + pads[i] + pads[i + n] < 0) ++pads[i + n];
  }
  return pads;
}

TEST(DnnlPadTest, MatchesReferenceOverRanksModesAndDtypes) {
  std::mt19937 rng(7);
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8,
                          DType::kU8,  DType::kI64, DType::kBool, DType::kI32};
  for (int rank = 1; rank <= 5; ++rank) {
    for (const char* mode : kModes) {
      for (DType dtype : dtypes) {
        for (int trial = 0; trial < 6; ++trial) {
          const std::vector<int64_t> dims = RandomDims(rank, rng);
          const Tensor x = RandomTensor(dtype, dims, rng);
          std::vector<int> all(rank);
          for (int d = 0; d < rank; ++d) all[d] = d;
          PadCase c;
          c.mode = mode;
          // Reflect with crops below 0 is fine for the reference (indices wrap); keep both.
          c.pads = RandomPads(dims, all, trial % 2 == 1, rng);
          const Tensor value = RandomTensor(dtype, {}, rng);
          if (trial % 3 == 2) c.value = &value;
          ExpectMatches(x, c, /*served=*/true);
        }
      }
    }
  }
}

TEST(DnnlPadTest, AxesInputAndInnerOrOuterAxesOnly) {
  std::mt19937 rng(11);
  for (const char* mode : kModes) {
    for (int rank = 2; rank <= 5; ++rank) {
      const std::vector<int64_t> dims = RandomDims(rank, rng);
      const Tensor x = RandomTensor(DType::kF32, dims, rng);
      // Only the innermost axis, only the outermost, and a random subset given negatively.
      const std::vector<std::vector<int64_t>> axes_sets = {
          {rank - 1}, {0}, {-1, 0}, {-rank + 1, -1}, {1 - rank}};
      for (const auto& axes : axes_sets) {
        std::vector<int> axis_of;
        for (int64_t a : axes) axis_of.push_back(static_cast<int>(a < 0 ? a + rank : a));
        PadCase c;
        c.mode = mode;
        c.axes = &axes;
        for (bool neg : {false, true}) {
          c.pads = RandomPads(dims, axis_of, neg, rng);
          ExpectMatches(x, c, true);
        }
      }
    }
  }
}

TEST(DnnlPadTest, ChannelsLastWindowPadAndWholePads) {
  std::mt19937 rng(3);
  // swin_t's window padding: [1, H, W, C] padded after H and W.
  const Tensor x = RandomTensor(DType::kF32, {1, 13, 11, 24}, rng);
  PadCase c;
  c.pads = {0, 0, 0, 0, 0, 1, 3, 0};
  ExpectMatches(x, c, true);
  // Pads larger than the dim (reflect and wrap go round more than once).
  const Tensor y = RandomTensor(DType::kI64, {3, 2}, rng);
  for (const char* mode : kModes) {
    c.mode = mode;
    c.pads = {5, 7, 4, 9};
    ExpectMatches(y, c, true);
    c.pads = {0, 0, 0, 0};  // no padding: a copy
    ExpectMatches(y, c, true);
  }
  // Crops to nothing along one axis but padded along another, and dims of 1.
  const Tensor z = RandomTensor(DType::kF16, {1, 4, 1}, rng);
  c.mode = "constant";
  c.pads = {2, -2, 0, 1, 0, 0};
  ExpectMatches(z, c, true);
  c.pads = {1, 0, -4, 0, 1, 2};  // axis 1 cropped to 0: empty result
  ExpectMatches(z, c, true);
  for (const char* mode : kModes) {
    c.mode = mode;
    c.pads = {0, 3, 2, 1, 4, 2};  // the axes of 1 repeat their one element (but constant)
    ExpectMatches(z, c, true);
  }
}

TEST(DnnlPadTest, AttributeFormAndValues) {
  std::mt19937 rng(5);
  for (DType dtype : {DType::kF32, DType::kI8, DType::kBool, DType::kF16, DType::kI64}) {
    const Tensor x = RandomTensor(dtype, {2, 3, 4}, rng);
    PadCase c;
    c.attribute_form = true;
    c.pads = {1, 0, 2, 0, 1, 1};
    c.value_attr = 1.0f;
    ExpectMatches(x, c, true);
    c.value_attr = -3.0f;
    if (dtype != DType::kBool) ExpectMatches(x, c, true);
  }
}

TEST(DnnlPadTest, EmptyInputsAndResults) {
  std::mt19937 rng(9);
  const Tensor x = RandomTensor(DType::kF32, {0, 3}, rng);
  PadCase c;
  c.pads = {1, 0, 2, 1};  // constant padding of an empty dim: all pad values
  ExpectMatches(x, c, true);
  c.pads = {0, 0, 2, 1};  // still empty
  ExpectMatches(x, c, true);
  for (const char* mode : {"reflect", "edge", "wrap"}) {
    c.mode = mode;
    c.pads = {1, 0, 0, 0};  // cannot pad the empty dim: the reference's error
    ExpectMatches(x, c, false);
    c.pads = {0, 0, 1, 1};  // empty result: no error
    ExpectMatches(x, c, false);
  }
}

TEST(DnnlPadTest, StridedInputsAndErrorsGoToTheReference) {
  std::mt19937 rng(13);
  const Tensor base = RandomTensor(DType::kF32, {4, 6}, rng);
  const Tensor t = *Tensor::View(base.storage(), base.byte_offset(), DType::kF32, {6, 4}, {1, 6});
  PadCase c;
  c.mode = "reflect";
  c.pads = {1, 2, 2, 1};
  ExpectMatches(t, c, false);
  absl::StatusOr<PadResult> r = RunPad(t, c, "dnnl", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->fallback_runs, 2);
  // A dim below zero, pads that do not fit the rank, a constant value of another dtype.
  c.mode = "constant";
  c.pads = {-5, 0, 0, 0};
  ExpectMatches(base, c, false);
  c.pads = {1, 1};
  ExpectMatches(base, c, false);
  const Tensor v = *Tensor::FromVector<int64_t>(DType::kI64, {}, {1});
  c.pads = {1, 1, 1, 1};
  c.value = &v;
  ExpectMatches(base, c, false);
}

TEST(DnnlPadTest, LargeTensorsAtOneAndTwoThreads) {
  std::mt19937 rng(17);
  struct Large {
    DType dtype;
    std::vector<int64_t> dims;
    std::vector<int64_t> pads;
  };
  const Large cases[] = {
      {DType::kF32, {1, 56, 56, 96}, {0, 0, 0, 0, 0, 7, 7, 0}},   // swin_t stage 1
      {DType::kF32, {2, 3, 150, 161}, {0, 0, 2, 3, 0, 0, 5, 4}},  // NCHW borders
      {DType::kI8, {300, 517}, {3, 200, -2, 9}},                  // rows of bytes
      {DType::kI64, {4, 50, 3, 60}, {1, 2, 3, 0, -1, 0, 0, 4}},   // outer pads
      {DType::kF16, {2, 40000}, {0, 1, 0, 2}},                    // two long rows
      {DType::kBool, {5, 64, 70, 3}, {-1, 2, 4, 1, 1, 3, 0, 0}},  // mixed crops
      {DType::kF32, {1, 56, 56, 96}, {0, 0, 0, 0, 0, 0, 0, 0}},   // a plain copy
      {DType::kI8, {2, 100, 1000}, {1, 0, 0, 2, 0, 0}},           // the outer axis only
  };
  for (const Large& l : cases) {
    const Tensor x = RandomTensor(l.dtype, l.dims, rng);
    for (const char* mode : kModes) {
      PadCase c;
      c.mode = mode;
      c.pads = l.pads;
      ExpectMatches(x, c, true);
    }
  }
}

}  // namespace
}  // namespace dynvm::onednn
