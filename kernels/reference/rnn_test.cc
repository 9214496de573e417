// Tests of the reference LSTM, GRU and RNN kernels. Expected values come from the ONNX node tests
// and from the NumPy oracle in testdata/rnn_oracle.py (which also checks itself against the ONNX
// node tests); both are generated into testdata/*.inc.
#include "kernels/reference/rnn.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::I32;
using testing::I64;
using testing::KernelCall;
using testing::ToDoubles;

// A tensor literal; present = false is an absent optional input or output.
struct Lit {
  bool present = false;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
  std::vector<double> values;
};

struct RnnCase {
  const char* name;
  const char* op;
  std::vector<std::pair<std::string, int64_t>> ints;
  std::vector<std::pair<std::string, float>> floats;
  std::vector<std::pair<std::string, std::string>> strings;
  std::vector<std::pair<std::string, std::vector<float>>> float_lists;
  std::vector<std::pair<std::string, std::vector<std::string>>> string_lists;
  std::vector<Lit> inputs;
  std::vector<Lit> outputs;
  double tol;
};

const std::vector<RnnCase>& OnnxCases() {
  static const auto* cases = new std::vector<RnnCase>{
#include "kernels/reference/testdata/rnn_onnx_cases.inc"
  };
  return *cases;
}

const std::vector<RnnCase>& OracleCases() {
  static const auto* cases = new std::vector<RnnCase>{
#include "kernels/reference/testdata/rnn_oracle_cases.inc"
  };
  return *cases;
}

const RnnCase& FindCase(const std::string& name) {
  for (const auto* list : {&OnnxCases(), &OracleCases()}) {
    for (const RnnCase& c : *list) {
      if (name == c.name) return c;
    }
  }
  ADD_FAILURE() << "no case " << name;
  return OnnxCases().front();
}

void Store(DType dtype, void* base, int64_t index, double v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[index] = static_cast<float>(v);
      break;
    case DType::kF64:
      static_cast<double*>(base)[index] = v;
      break;
    case DType::kF16:
      static_cast<Half*>(base)[index] = Half(static_cast<float>(v));
      break;
    case DType::kBF16:
      static_cast<BFloat16*>(base)[index] = BFloat16(static_cast<float>(v));
      break;
    case DType::kI32:
      static_cast<int32_t*>(base)[index] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      static_cast<int64_t*>(base)[index] = static_cast<int64_t>(v);
      break;
    default:
      ADD_FAILURE() << "unexpected dtype";
  }
}

// The literal as a tensor of `dtype`. Strided: a non-contiguous view with transposed, gapped
// strides and a nonzero offset into its storage.
Tensor MakeTensor(const Lit& lit, DType dtype, bool strided) {
  const int64_t n = static_cast<int64_t>(lit.values.size());
  if (!strided) {
    Tensor t = *Tensor::Empty(dtype, lit.dims);
    for (int64_t i = 0; i < n; ++i) Store(dtype, t.raw_data(), i, lit.values[i]);
    return t;
  }
  const int rank = static_cast<int>(lit.dims.size());
  std::vector<int64_t> strides(rank);
  int64_t s = 2;
  for (int k = 0; k < rank; ++k) {
    strides[k] = s;
    s *= lit.dims[k];
  }
  Tensor storage = *Tensor::Empty(dtype, {2 * n + 1});
  Tensor t = *Tensor::View(storage.storage(), DTypeSize(dtype), dtype, lit.dims, strides);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    int64_t offset = 0;
    for (int k = rank - 1; k >= 0; --k) {
      offset += (rest % lit.dims[k]) * strides[k];
      rest /= lit.dims[k];
    }
    Store(dtype, t.raw_data(), offset, lit.values[i]);
  }
  return t;
}

struct RunOptions {
  bool strided = false;      // inputs as strided views
  bool preallocate = false;  // outputs preallocated with their expected shapes
  DType float_dtype = DType::kF32;
  bool override_dtype = false;  // float inputs and outputs as float_dtype
};

KernelCall MakeCall(const RnnCase& c) {
  KernelCall call(c.op);
  for (const auto& [k, v] : c.ints) call.Attr(k, v);
  for (const auto& [k, v] : c.floats) call.Attr(k, v);
  for (const auto& [k, v] : c.strings) call.Attr(k, v);
  for (const auto& [k, v] : c.float_lists) call.Attr(k, v);
  for (const auto& [k, v] : c.string_lists) call.Attr(k, v);
  return call;
}

// Runs the case's kernel; absent outputs are passed as nullptr (KernelCall::Run cannot do that).
absl::StatusOr<std::vector<Tensor>> RunCase(const RnnCase& c, const RunOptions& o) {
  KernelCall call = MakeCall(c);
  auto dtype_of = [&](const Lit& lit) {
    const bool is_float = lit.dtype == DType::kF32 || lit.dtype == DType::kF64;
    return o.override_dtype && is_float ? o.float_dtype : lit.dtype;
  };
  std::vector<Tensor> ins;
  for (const Lit& lit : c.inputs) {
    if (lit.present) {
      ins.push_back(MakeTensor(lit, dtype_of(lit), o.strided));
      call.In(ins.back());
    } else {
      ins.emplace_back();
      call.Absent();
    }
  }
  std::vector<Tensor> outs;
  for (const Lit& lit : c.outputs) {
    const DType dt = dtype_of(lit);
    if (lit.present && o.preallocate) {
      outs.push_back(*Tensor::Empty(dt, lit.dims));
      call.OutTensor(outs.back());
    } else {
      outs.emplace_back();
      call.Out(dt);
    }
  }
  KernelSpec spec = call.spec();
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    spec.outputs[i].optional = !c.outputs[i].present;
  }
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, KernelRegistry::Global().Create(spec));
  KernelContext ctx(&HeapAllocator::Get());
  std::vector<const Tensor*> in_ptrs;
  for (size_t i = 0; i < ins.size(); ++i) {
    in_ptrs.push_back(c.inputs[i].present ? &ins[i] : nullptr);
  }
  std::vector<Tensor*> out_ptrs;
  for (size_t i = 0; i < outs.size(); ++i) {
    out_ptrs.push_back(c.outputs[i].present ? &outs[i] : nullptr);
  }
  absl::Status s = (kernel)->Run(ctx, in_ptrs, out_ptrs);
  if (!s.ok()) return s;
  return outs;
}

void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol * (1 + std::abs(expected[i])))
        << what << " element " << i;
  }
}

void CheckOutputs(const RnnCase& c, const std::vector<Tensor>& outs, double tol,
                  const std::string& what) {
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const Lit& lit = c.outputs[i];
    if (!lit.present) continue;
    const std::string name = what + " output " + std::to_string(i);
    ASSERT_TRUE(outs[i].defined()) << name;
    EXPECT_EQ(std::vector<int64_t>(outs[i].dims().begin(), outs[i].dims().end()), lit.dims) << name;
    ExpectNear(ToDoubles(outs[i]), lit.values, tol, name);
  }
}

class RnnCaseTest : public ::testing::TestWithParam<const RnnCase*> {};

TEST_P(RnnCaseTest, ContiguousInputsDynamicOutputs) {
  const RnnCase& c = *GetParam();
  absl::StatusOr<std::vector<Tensor>> outs = RunCase(c, {});
  ASSERT_TRUE(outs.ok()) << outs.status();
  CheckOutputs(c, *outs, c.tol, c.name);
}

TEST_P(RnnCaseTest, StridedInputsPreallocatedOutputs) {
  const RnnCase& c = *GetParam();
  RunOptions o;
  o.strided = true;
  o.preallocate = true;
  absl::StatusOr<std::vector<Tensor>> outs = RunCase(c, o);
  ASSERT_TRUE(outs.ok()) << outs.status();
  CheckOutputs(c, *outs, c.tol, c.name);
}

// f16 and bf16 compute in float from rounded inputs: compared with loose tolerances.
TEST_P(RnnCaseTest, HalfPrecision) {
  const RnnCase& c = *GetParam();
  for (auto [dtype, tol] : {std::pair{DType::kF16, 2e-2}, std::pair{DType::kBF16, 8e-2}}) {
    RunOptions o;
    o.override_dtype = true;
    o.float_dtype = dtype;
    o.strided = dtype == DType::kBF16;
    absl::StatusOr<std::vector<Tensor>> outs = RunCase(c, o);
    ASSERT_TRUE(outs.ok()) << outs.status();
    CheckOutputs(c, *outs, tol, std::string(c.name) + "." + std::string(DTypeName(dtype)));
  }
}

std::vector<const RnnCase*> Pointers(const std::vector<RnnCase>& cases) {
  std::vector<const RnnCase*> v;
  for (const RnnCase& c : cases) v.push_back(&c);
  return v;
}

std::string CaseName(const ::testing::TestParamInfo<const RnnCase*>& info) {
  return info.param->name;
}

INSTANTIATE_TEST_SUITE_P(OnnxNode, RnnCaseTest, ::testing::ValuesIn(Pointers(OnnxCases())),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Oracle, RnnCaseTest, ::testing::ValuesIn(Pointers(OracleCases())),
                         CaseName);

// ---- LstmStep ----

std::vector<float> Floats(const Lit& lit) {
  return std::vector<float>(lit.values.begin(), lit.values.end());
}

TEST(LstmStepTest, MatchesSingleStepCase) {
  const RnnCase& c = FindCase("lstm_single_step");
  // Inputs: X [1, B, I], W [1, 4H, I], R [1, 4H, H], B [1, 8H], sequence_lens (absent),
  // initial_h [1, B, H], initial_c [1, B, H]. Outputs: Y, Y_h, Y_c.
  const int64_t batch = c.inputs[0].dims[1];
  const int64_t input_size = c.inputs[0].dims[2];
  const int64_t hidden = c.inputs[2].dims[2];
  const std::vector<float> x = Floats(c.inputs[0]);
  const std::vector<float> w = Floats(c.inputs[1]);
  const std::vector<float> r = Floats(c.inputs[2]);
  const std::vector<float> bias = Floats(c.inputs[3]);
  std::vector<float> h = Floats(c.inputs[5]);
  std::vector<float> cell = Floats(c.inputs[6]);
  std::vector<float> scratch(reference::LstmStepScratchSize(batch, hidden));
  std::vector<float> h_out(batch * hidden);
  std::vector<float> c_out(batch * hidden);
  reference::LstmStepF32(batch, input_size, hidden, x.data(), h.data(), cell.data(), w.data(),
                         r.data(), bias.data(), h_out.data(), c_out.data(), scratch.data());
  ExpectNear(std::vector<double>(h_out.begin(), h_out.end()), c.outputs[1].values, 1e-5, "h");
  ExpectNear(std::vector<double>(c_out.begin(), c_out.end()), c.outputs[2].values, 1e-5, "c");

  // In place, as a decode loop runs it.
  reference::LstmStepF32(batch, input_size, hidden, x.data(), h.data(), cell.data(), w.data(),
                         r.data(), bias.data(), h.data(), cell.data(), scratch.data());
  ExpectNear(std::vector<double>(h.begin(), h.end()), c.outputs[1].values, 1e-5, "h in place");
  ExpectNear(std::vector<double>(cell.begin(), cell.end()), c.outputs[2].values, 1e-5,
             "c in place");
}

TEST(LstmStepTest, NullBiasMatchesZeroBias) {
  const int64_t batch = 2, input_size = 3, hidden = 2;
  std::vector<float> x = {0.5f, -1.0f, 0.25f, 1.5f, 0.0f, -0.5f};
  std::vector<float> w(4 * hidden * input_size), r(4 * hidden * hidden);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < r.size(); ++i) r[i] = std::cos(static_cast<float>(i));
  std::vector<float> h = {0.1f, -0.2f, 0.3f, 0.4f}, c = {1.0f, -1.0f, 0.5f, 0.0f};
  std::vector<float> zero_bias(8 * hidden, 0.0f), scratch(4 * batch * hidden);
  std::vector<float> h1(4), c1(4), h2(4), c2(4);
  reference::LstmStepF32(batch, input_size, hidden, x.data(), h.data(), c.data(), w.data(),
                         r.data(), nullptr, h1.data(), c1.data(), scratch.data());
  reference::LstmStepF32(batch, input_size, hidden, x.data(), h.data(), c.data(), w.data(),
                         r.data(), zero_bias.data(), h2.data(), c2.data(), scratch.data());
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(c1, c2);
}

// ---- other behavior ----

// The ONNX test lstm_defaults: X [1, 3, 2], W [1, 12, 2], R [1, 12, 3], hidden_size 3.
struct SmallLstm {
  Tensor x, w, r;
};
SmallLstm MakeSmallLstm() {
  const RnnCase& c = FindCase("lstm_defaults");
  return {MakeTensor(c.inputs[0], DType::kF32, false), MakeTensor(c.inputs[1], DType::kF32, false),
          MakeTensor(c.inputs[2], DType::kF32, false)};
}

TEST(RnnKernelTest, Names) {
  const SmallLstm s = MakeSmallLstm();
  KernelCall call("LSTM");
  call.In(s.x).In(s.w).In(s.r).Out(DType::kF32).Attr("hidden_size", int64_t{3});
  // The reference backend's kernel (a build with oneDNN prefers lstm.f32.dnnl.gemm).
  absl::StatusOr<std::unique_ptr<Kernel>> k =
      KernelRegistry::Global().Create(call.spec(), BackendPolicy{{"reference"}});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->name(), "lstm.f32.ref");
}

TEST(RnnKernelTest, HiddenSizeTakenFromRWhenAbsent) {
  const SmallLstm s = MakeSmallLstm();
  absl::StatusOr<std::vector<Tensor>> out =
      KernelCall("LSTM").In(s.x).In(s.w).In(s.r).Out(DType::kF32).Out(DType::kF32).Run();
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear(ToDoubles((*out)[1]), FindCase("lstm_defaults").outputs[1].values, 1e-5, "Y_h");
}

TEST(RnnKernelTest, SequenceLensAsI64) {
  const RnnCase& c = FindCase("gru_reverse_seq_lens");
  RnnCase c64 = c;
  c64.inputs[4].dtype = DType::kI64;
  absl::StatusOr<std::vector<Tensor>> outs = RunCase(c64, {});
  ASSERT_TRUE(outs.ok()) << outs.status();
  CheckOutputs(c, *outs, c.tol, "i64 sequence_lens");
}

TEST(RnnKernelTest, OneKernelRunsSeveralShapes) {
  // The same kernel (and workspace) runs a batch of 3, then 1, then 3 again.
  const RnnCase& c = FindCase("rnn_bidirectional_seq_lens");
  KernelCall call = MakeCall(c);
  std::vector<Tensor> full;
  for (int i = 0; i < 6; ++i) {
    full.push_back(MakeTensor(c.inputs[i], c.inputs[i].dtype, false));
    call.In(full.back());
  }
  call.Out(DType::kF32).Out(DType::kF32);
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(call.spec());
  ASSERT_TRUE(k.ok()) << k.status();
  KernelContext ctx(&HeapAllocator::Get());
  // Batch row 1 alone: X [3, 1, 2], sequence_lens [3], initial_h [2, 1, 3].
  const Lit& xl = c.inputs[0];
  const Lit& hl = c.inputs[5];
  Lit x1{true, DType::kF32, {3, 1, 2}, {}};
  for (int t = 0; t < 3; ++t) {
    for (int j = 0; j < 2; ++j) x1.values.push_back(xl.values[(t * 3 + 1) * 2 + j]);
  }
  Lit h1{true, DType::kF32, {2, 1, 3}, {}};
  for (int d = 0; d < 2; ++d) {
    for (int j = 0; j < 3; ++j) h1.values.push_back(hl.values[(d * 3 + 1) * 3 + j]);
  }
  const Tensor x1t = MakeTensor(x1, DType::kF32, false);
  const Tensor lens1 = I32({1}, {3});
  const Tensor h1t = MakeTensor(h1, DType::kF32, false);
  for (int round = 0; round < 3; ++round) {
    Tensor y, y_h;
    std::vector<Tensor*> out = {&y, &y_h};
    if (round == 1) {
      std::vector<const Tensor*> in = {&x1t, &full[1], &full[2], &full[3], &lens1, &h1t};
      ASSERT_TRUE((*k)->Run(ctx, in, out).ok());
      // Y_h of row 1 in both directions.
      const std::vector<double>& want = c.outputs[1].values;
      ExpectNear(ToDoubles(y_h), {want[3], want[4], want[5], want[12], want[13], want[14]}, 1e-5,
                 "batch of one");
    } else {
      std::vector<const Tensor*> in;
      for (const Tensor& t : full) in.push_back(&t);
      ASSERT_TRUE((*k)->Run(ctx, in, out).ok());
      ExpectNear(ToDoubles(y_h), c.outputs[1].values, 1e-5, "full batch");
    }
  }
}

TEST(RnnKernelTest, EmptySequenceAndBatch) {
  const SmallLstm s = MakeSmallLstm();
  // seq_length 0: Y is empty, Y_h and Y_c are zero.
  const Tensor x0 = *Tensor::Empty(DType::kF32, {0, 3, 2});
  absl::StatusOr<std::vector<Tensor>> out = KernelCall("LSTM")
                                                .In(x0)
                                                .In(s.w)
                                                .In(s.r)
                                                .Out(DType::kF32)
                                                .Out(DType::kF32)
                                                .Out(DType::kF32)
                                                .Attr("hidden_size", int64_t{3})
                                                .Run();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ShapeString(), "[0,1,3,3]");
  EXPECT_EQ(ToDoubles((*out)[1]), std::vector<double>(9, 0.0));
  EXPECT_EQ(ToDoubles((*out)[2]), std::vector<double>(9, 0.0));
  // batch 0.
  const Tensor xb = *Tensor::Empty(DType::kF32, {2, 0, 2});
  out = KernelCall("LSTM")
            .In(xb)
            .In(s.w)
            .In(s.r)
            .Out(DType::kF32)
            .Out(DType::kF32)
            .Attr("hidden_size", int64_t{3})
            .Run();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ShapeString(), "[2,1,0,3]");
  EXPECT_EQ((*out)[1].ShapeString(), "[1,0,3]");
}

// ---- errors ----

absl::StatusCode CodeOf(const absl::StatusOr<std::vector<Tensor>>& s) { return s.status().code(); }

TEST(RnnErrorTest, SequenceLensOutOfRange) {
  const SmallLstm s = MakeSmallLstm();
  for (int32_t bad : {-1, 2, 1 << 30}) {
    absl::StatusOr<std::vector<Tensor>> out = KernelCall("LSTM")
                                                  .In(s.x)
                                                  .In(s.w)
                                                  .In(s.r)
                                                  .Absent()
                                                  .In(I32({3}, {1, bad, 1}))
                                                  .Out(DType::kF32)
                                                  .Attr("hidden_size", int64_t{3})
                                                  .Run();
    EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Wrong shape of sequence_lens.
  absl::StatusOr<std::vector<Tensor>> out = KernelCall("LSTM")
                                                .In(s.x)
                                                .In(s.w)
                                                .In(s.r)
                                                .Absent()
                                                .In(I32({2}, {1, 1}))
                                                .Out(DType::kF32)
                                                .Attr("hidden_size", int64_t{3})
                                                .Run();
  EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
}

TEST(RnnErrorTest, BadShapes) {
  const SmallLstm s = MakeSmallLstm();
  auto run = [&](const Tensor& x, const Tensor& w, const Tensor& r, int64_t hidden) {
    return KernelCall("LSTM").In(x).In(w).In(r).Out(DType::kF32).Attr("hidden_size", hidden).Run();
  };
  absl::StatusOr<std::vector<Tensor>> out = run(s.x, s.r, s.r, 3);  // W [1,12,3], I = 2
  ASSERT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("W must have shape [1,12,2]"), std::string::npos)
      << out.status();
  EXPECT_EQ(CodeOf(run(s.x, s.w, s.r, 4)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(run(F32({3, 2}, {1, 2, 3, 4, 5, 6}), s.w, s.r, 3)),
            absl::StatusCode::kInvalidArgument);
  // B of the wrong length; initial_h of the wrong batch; P of the wrong width.
  out = KernelCall("LSTM")
            .In(s.x)
            .In(s.w)
            .In(s.r)
            .In(*Tensor::Empty(DType::kF32, {1, 23}))
            .Out(DType::kF32)
            .Attr("hidden_size", int64_t{3})
            .Run();
  EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
  out = KernelCall("LSTM")
            .In(s.x)
            .In(s.w)
            .In(s.r)
            .Absent()
            .Absent()
            .In(*Tensor::Empty(DType::kF32, {1, 2, 3}))
            .Out(DType::kF32)
            .Attr("hidden_size", int64_t{3})
            .Run();
  EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
  out = KernelCall("LSTM")
            .In(s.x)
            .In(s.w)
            .In(s.r)
            .Absent()
            .Absent()
            .Absent()
            .Absent()
            .In(*Tensor::Empty(DType::kF32, {1, 8}))
            .Out(DType::kF32)
            .Attr("hidden_size", int64_t{3})
            .Run();
  EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
}

TEST(RnnErrorTest, PreallocatedOutputOfWrongShape) {
  const SmallLstm s = MakeSmallLstm();
  absl::StatusOr<std::vector<Tensor>> out =
      KernelCall("LSTM")
          .In(s.x)
          .In(s.w)
          .In(s.r)
          .OutTensor(*Tensor::Empty(DType::kF32, {1, 1, 3, 4}))
          .Attr("hidden_size", int64_t{3})
          .Run();
  EXPECT_EQ(CodeOf(out), absl::StatusCode::kInvalidArgument);
}

TEST(RnnErrorTest, BadAttributes) {
  const SmallLstm s = MakeSmallLstm();
  auto lstm = [&]() {
    KernelCall call("LSTM");
    call.In(s.x).In(s.w).In(s.r).Out(DType::kF32).Attr("hidden_size", int64_t{3});
    return call;
  };
  EXPECT_EQ(CodeOf(lstm().Attr("direction", std::string("sideways")).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("layout", int64_t{2}).Run()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("clip", 0.0f).Run()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("clip", -1.0f).Run()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("clip", std::nanf("")).Run()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("input_forget", int64_t{2}).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("hidden_size", int64_t{0}).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("hidden_size", int64_t{1} << 62).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CodeOf(lstm().Attr("activations", std::vector<std::string>{"Sigmoid", "Tanh", "Gelu"}).Run()),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("activations", std::vector<std::string>{"Sigmoid", "Tanh"}).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(lstm().Attr("hidden_size", std::string("3")).Run()),
            absl::StatusCode::kInvalidArgument);
  // Activation names match case-insensitively.
  EXPECT_TRUE(
      lstm().Attr("activations", std::vector<std::string>{"sigmoid", "TANH", "Tanh"}).Run().ok());
}

TEST(RnnErrorTest, DTypes) {
  const SmallLstm s = MakeSmallLstm();
  const Tensor xi = I32({1, 3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(CodeOf(KernelCall("RNN").In(xi).In(xi).In(xi).Out(DType::kI32).Run()),
            absl::StatusCode::kUnimplemented);
  const Tensor w64 = *Tensor::Empty(DType::kF64, {1, 12, 2});
  EXPECT_EQ(CodeOf(KernelCall("LSTM").In(s.x).In(w64).In(s.r).Out(DType::kF32).Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(KernelCall("LSTM")
                       .In(s.x)
                       .In(s.w)
                       .In(s.r)
                       .Absent()
                       .In(F32({3}, {1, 1, 1}))
                       .Out(DType::kF32)
                       .Run()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(KernelCall("LSTM").In(s.x).In(s.w).In(s.r).Out(DType::kF64).Run()),
            absl::StatusCode::kInvalidArgument);
}

TEST(RnnErrorTest, PortCounts) {
  const SmallLstm s = MakeSmallLstm();
  EXPECT_EQ(CodeOf(KernelCall("LSTM").In(s.x).In(s.w).Out(DType::kF32).Run()),
            absl::StatusCode::kInvalidArgument);
  KernelCall gru("GRU");
  gru.In(s.x).In(s.w).In(s.r).Absent().Absent().Absent().Absent().Out(DType::kF32);
  EXPECT_EQ(CodeOf(gru.Run()), absl::StatusCode::kInvalidArgument);
  KernelCall rnn("RNN");
  rnn.In(s.x).In(s.w).In(s.r).Out(DType::kF32).Out(DType::kF32).Out(DType::kF32);
  EXPECT_EQ(CodeOf(rnn.Run()), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm
