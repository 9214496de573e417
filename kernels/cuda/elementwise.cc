// Elementwise ops on the device: binary arithmetic, comparisons and logic with numpy
// broadcasting, unary math, Where, Cast and Identity. Strided and broadcast operands are read
// in place (a walk per operand, elementwise.cu); outputs are contiguous.
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cuda/common.h"

namespace dynvm::cuda {
namespace {

using Dims = absl::InlinedVector<int64_t, Tensor::kMaxRank>;

absl::StatusOr<Dims> Broadcast(std::initializer_list<const Tensor*> ts, absl::string_view op) {
  size_t rank = 0;
  for (const Tensor* t : ts) rank = std::max(rank, static_cast<size_t>(t->rank()));
  Dims out(rank, 1);
  for (const Tensor* t : ts) {
    const size_t lead = rank - t->rank();
    for (size_t i = lead; i < rank; ++i) {
      const int64_t d = t->dim(static_cast<int>(i - lead));
      if (d == out[i] || d == 1) continue;
      if (out[i] != 1) {
        std::string shapes;
        for (const Tensor* u : ts)
          absl::StrAppend(&shapes, shapes.empty() ? "" : " and ", u->ShapeString());
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": shapes ", shapes, " do not broadcast"));
      }
      out[i] = d;
    }
  }
  return out;
}

// ---- binary ----

struct BinaryAttrs {
  const char* op;
  BinaryOp kind;
  ScalarType type;  // of the inputs
  bool bool_out;
};

absl::Status RunBinary(const BinaryAttrs& ba, CudaContext& cc, KernelContext&, Inputs in,
                       Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, ba.op));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  absl::StatusOr<Dims> dims = Broadcast({&a, &b}, ba.op);
  if (!dims.ok()) return dims.status();
  DYNVM_RETURN_IF_ERROR(
      PrepareOutput(cc, out[0], ba.bool_out ? DType::kBool : a.dtype(), *dims, ba.op));
  Tensor& y = *out[0];
  const Walk<3> walk =
      MakeWalk<3>(*dims, {y.strides(), BroadcastStrides(a, *dims), BroadcastStrides(b, *dims)});
  return LaunchStatus(Binary(ba.kind, ba.type, y.raw_data(), a.raw_data(), b.raw_data(), walk,
                             y.numel(), cc.stream()),
                      ba.op, "Binary");
}

struct BinaryDef {
  const char* op;
  BinaryOp kind;
  std::initializer_list<DType> types;
  bool bool_out;
};

void AddBinary(Registrations& r, const BinaryDef& def) {
  const char* op = def.op;
  const BinaryOp kind = def.kind;
  const bool bool_out = def.bool_out;
  const std::vector<DType> types(def.types);
  Add(r, op,
      [op, kind, bool_out,
       types](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() != 2 || spec.outputs.size() != 1) {
          return absl::UnimplementedError(absl::StrCat(op, " (cuda): two inputs only"));
        }
        const uint8_t t0 = spec.inputs[0].dtype;
        bool known = false;
        for (DType t : types) known |= t0 == static_cast<uint8_t>(t);
        if (t0 != spec.inputs[1].dtype || !known) {
          return absl::UnimplementedError(absl::StrCat(op, " (cuda): dtype not supported"));
        }
        const DType dtype = static_cast<DType>(t0);
        BinaryAttrs a{op, kind, *ScalarTypeOf(dtype), bool_out};
        return MakeKernel<BinaryAttrs>(KernelName(op, dtype), op, &RunBinary, a);
      });
}

// ---- unary ----

struct UnaryAttrs {
  const char* op;
  UnaryOp kind;
  ScalarType type;
};

absl::Status RunUnary(const UnaryAttrs& ua, CudaContext& cc, KernelContext&, Inputs in,
                      Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, ua.op));
  const Tensor& x = *in[0];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], x.dtype(), x.dims(), ua.op));
  Tensor& y = *out[0];
  const Walk<2> walk = MakeWalk<2>(x.dims(), {y.strides(), x.strides()});
  return LaunchStatus(
      Unary(ua.kind, ua.type, y.raw_data(), x.raw_data(), walk, y.numel(), cc.stream()), ua.op,
      "Unary");
}

void AddUnary(Registrations& r, const char* op, UnaryOp kind, std::initializer_list<DType> types) {
  const std::vector<DType> allowed(types);
  Add(r, op,
      [op, kind, allowed](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(op, " takes 1 input and has 1 output"));
        }
        for (DType t : allowed) {
          if (spec.inputs[0].dtype == static_cast<uint8_t>(t)) {
            UnaryAttrs a{op, kind, *ScalarTypeOf(t)};
            return MakeKernel<UnaryAttrs>(KernelName(op, t), op, &RunUnary, a);
          }
        }
        return absl::UnimplementedError(absl::StrCat(op, " (cuda): dtype not supported"));
      });
}

// ---- Where, Cast, Identity ----

absl::Status RunWhere(const int&, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 3, out, "Where"));
  const Tensor& c = *in[0];
  const Tensor& a = *in[1];
  const Tensor& b = *in[2];
  if (c.dtype() != DType::kBool || a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError("Where: bad operand dtypes");
  }
  absl::StatusOr<Dims> dims = Broadcast({&c, &a, &b}, "Where");
  if (!dims.ok()) return dims.status();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], a.dtype(), *dims, "Where"));
  Tensor& y = *out[0];
  const Walk<4> walk = MakeWalk<4>(*dims, {y.strides(), BroadcastStrides(c, *dims),
                                           BroadcastStrides(a, *dims), BroadcastStrides(b, *dims)});
  return LaunchStatus(Where(y.raw_data(), c.data<uint8_t>(), a.raw_data(), b.raw_data(),
                            static_cast<int>(DTypeSize(a.dtype())), walk, y.numel(), cc.stream()),
                      "Where", "Where");
}

struct CastAttrs {
  DType to;
};

absl::Status RunCast(const CastAttrs& ca, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.empty() || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError("Cast takes 1 input and has 1 output");
  }
  const Tensor& x = *in[0];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], ca.to, x.dims(), "Cast"));
  Tensor& y = *out[0];
  if (x.dtype() == ca.to) return DeviceCopy(cc, x, y);
  std::optional<ScalarType> from = ScalarTypeOf(x.dtype()), to = ScalarTypeOf(ca.to);
  if (!from || !to) return absl::InvalidArgumentError("Cast (cuda): dtype not supported");
  const Walk<2> walk = MakeWalk<2>(x.dims(), {y.strides(), x.strides()});
  return LaunchStatus(Cast(y.raw_data(), *to, x.raw_data(), *from, walk, y.numel(), cc.stream()),
                      "Cast", "Cast");
}

absl::Status RunIdentity(const int&, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckPresent(in, 1, out, "Identity"));
  const Tensor& x = *in[0];
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], x.dtype(), x.dims(), "Identity"));
  return DeviceCopy(cc, x, *out[0]);
}

bool Copyable(uint8_t dtype) {
  return dtype != kAnyDType && dtype != static_cast<uint8_t>(DType::kString);
}

}  // namespace

void RegisterElementwiseKernels(Registrations& r) {
  constexpr DType kF32 = DType::kF32, kI32 = DType::kI32, kI64 = DType::kI64, kBool = DType::kBool;
  AddBinary(r, {"Add", BinaryOp::kAdd, {kF32, kI32, kI64}, false});
  AddBinary(r, {"Sub", BinaryOp::kSub, {kF32, kI32, kI64}, false});
  AddBinary(r, {"Mul", BinaryOp::kMul, {kF32, kI32, kI64}, false});
  AddBinary(r, {"Div", BinaryOp::kDiv, {kF32}, false});
  AddBinary(r, {"Pow", BinaryOp::kPow, {kF32}, false});
  AddBinary(r, {"Max", BinaryOp::kMax, {kF32, kI32, kI64}, false});
  AddBinary(r, {"Min", BinaryOp::kMin, {kF32, kI32, kI64}, false});
  AddBinary(r, {"Equal", BinaryOp::kEqual, {kF32, kI32, kI64, kBool}, true});
  AddBinary(r, {"Less", BinaryOp::kLess, {kF32, kI32, kI64}, true});
  AddBinary(r, {"Greater", BinaryOp::kGreater, {kF32, kI32, kI64}, true});
  AddBinary(r, {"LessOrEqual", BinaryOp::kLessOrEqual, {kF32, kI32, kI64}, true});
  AddBinary(r, {"GreaterOrEqual", BinaryOp::kGreaterOrEqual, {kF32, kI32, kI64}, true});
  AddBinary(r, {"And", BinaryOp::kAnd, {kBool}, true});
  AddBinary(r, {"Or", BinaryOp::kOr, {kBool}, true});
  AddBinary(r, {"Xor", BinaryOp::kXor, {kBool}, true});

  AddUnary(r, "Neg", UnaryOp::kNeg, {kF32, kI32, kI64});
  AddUnary(r, "Abs", UnaryOp::kAbs, {kF32, kI32, kI64});
  AddUnary(r, "Relu", UnaryOp::kRelu, {kF32, kI32, kI64});
  AddUnary(r, "Exp", UnaryOp::kExp, {kF32});
  AddUnary(r, "Log", UnaryOp::kLog, {kF32});
  AddUnary(r, "Sqrt", UnaryOp::kSqrt, {kF32});
  AddUnary(r, "Tanh", UnaryOp::kTanh, {kF32});
  AddUnary(r, "Sigmoid", UnaryOp::kSigmoid, {kF32});
  AddUnary(r, "Erf", UnaryOp::kErf, {kF32});
  AddUnary(r, "Reciprocal", UnaryOp::kReciprocal, {kF32});
  AddUnary(r, "Floor", UnaryOp::kFloor, {kF32});
  AddUnary(r, "Ceil", UnaryOp::kCeil, {kF32});
  AddUnary(r, "Sin", UnaryOp::kSin, {kF32});
  AddUnary(r, "Cos", UnaryOp::kCos, {kF32});
  AddUnary(r, "Not", UnaryOp::kNot, {kBool});

  Add(r, "Where", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 3 || spec.outputs.size() != 1) {
      return absl::InvalidArgumentError("Where takes 3 inputs and has 1 output");
    }
    const uint8_t t = spec.inputs[1].dtype;
    if (!Copyable(t) || spec.inputs[0].dtype != static_cast<uint8_t>(DType::kBool)) {
      return absl::UnimplementedError("Where (cuda): dtype not supported");
    }
    return MakeKernel<int>(KernelName("Where", static_cast<DType>(t)), "Where", &RunWhere, 0);
  });
  Add(r, "Cast", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
      return absl::UnimplementedError("Cast (cuda): one input and one output only");
    }
    const uint8_t from = spec.inputs[0].dtype, to = spec.outputs[0].dtype;
    if (!Copyable(from) || !Copyable(to) ||
        ((!ScalarTypeOf(static_cast<DType>(from)) || !ScalarTypeOf(static_cast<DType>(to))) &&
         from != to)) {
      return absl::UnimplementedError("Cast (cuda): dtype not supported");
    }
    return MakeKernel<CastAttrs>(KernelName("Cast", static_cast<DType>(to)), "Cast", &RunCast,
                                 CastAttrs{static_cast<DType>(to)});
  });
  Add(r, "Identity", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (spec.inputs.size() != 1 || spec.outputs.size() != 1 || !Copyable(spec.inputs[0].dtype) ||
        spec.inputs[0].kind != ObjectKind::kTensor) {
      return absl::UnimplementedError("Identity (cuda): tensors only");
    }
    return MakeKernel<int>(KernelName("Identity", static_cast<DType>(spec.inputs[0].dtype)),
                           "Identity", &RunIdentity, 0);
  });
}

}  // namespace dynvm::cuda
