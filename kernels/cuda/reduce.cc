// Softmax/LogSoftmax, LayerNormalization and ArgMax/ArgMin on the device (f32). Inputs with
// other layouts are packed first; the kernels see [outer, n, inner] (reduce.cu).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/common.h"

namespace dynvm::cuda {
namespace {

using Dims = absl::InlinedVector<int64_t, Tensor::kMaxRank>;

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view op) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t Product(absl::Span<const int64_t> dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

absl::StatusOr<int64_t> GetAttr(const KernelSpec& spec, absl::string_view name, int64_t def) {
  return spec.GetInt(name, def);
}

// ---- Softmax, LogSoftmax ----

struct SoftmaxAttrs {
  const char* op;
  bool log;
  int64_t axis;
  bool legacy_2d;  // opset < 13: normalize over [axis, rank) as one extent
};

absl::Status RunSoftmax(const SoftmaxAttrs& sa, CudaContext& cc, KernelContext&, Inputs in,
                        Outputs out) {
  if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(sa.op, " takes 1 input and has 1 output"));
  }
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(sa.axis, x.rank(), sa.op));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kF32, x.dims(), sa.op));
  StorageRef keep;
  DYNVM_ASSIGN_OR_RETURN(const void* data, ContiguousData(cc, x, &keep));
  const size_t rank = static_cast<size_t>(x.rank());
  const int64_t outer = Product(x.dims(), 0, axis);
  const int64_t n = sa.legacy_2d ? Product(x.dims(), axis, rank) : x.dim(axis);
  const int64_t inner = sa.legacy_2d ? 1 : Product(x.dims(), axis + 1, rank);
  return LaunchStatus(Softmax(out[0]->data<float>(), static_cast<const float*>(data), outer, n,
                              inner, sa.log, cc.stream()),
                      sa.op, "Softmax");
}

// ---- LayerNormalization ----

struct LayerNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
};

// Scale or B as a contiguous [n] over the normalized dims. InvalidArgument when it does not
// broadcast to X, Unimplemented when it varies over the leading (kept) dims.
absl::StatusOr<const float*> NormParam(CudaContext& cc, const Tensor* t, const Tensor& x, int axis,
                                       StorageRef* keep) {
  if (t == nullptr) return static_cast<const float*>(nullptr);
  const char* what = "LayerNormalization: Scale/B ";
  if (t->rank() > x.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, t->ShapeString(), " does not broadcast to X ", x.ShapeString()));
  }
  const int lead = x.rank() - t->rank();
  for (int i = 0; i < t->rank(); ++i) {
    if (t->dim(i) != 1 && t->dim(i) != x.dim(lead + i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, t->ShapeString(), " does not broadcast to X ", x.ShapeString()));
    }
  }
  const auto strides = BroadcastStrides(*t, x.dims());
  for (int d = 0; d < axis; ++d) {
    if (strides[d] != 0) {
      return absl::UnimplementedError(
          absl::StrCat("LayerNormalization (cuda): Scale/B ", t->ShapeString(),
                       " varies over the leading dims of X ", x.ShapeString()));
    }
  }
  Tensor v = *t;
  v.SetView(x.dims().subspan(axis), absl::MakeConstSpan(strides).subspan(axis));
  if (v.is_contiguous()) return v.data<float>();
  DYNVM_ASSIGN_OR_RETURN(const void* data, ContiguousData(cc, v, keep));
  return static_cast<const float*>(data);
}

absl::Status RunLayerNorm(const LayerNormAttrs& la, CudaContext& cc, KernelContext&, Inputs in,
                          Outputs out) {
  if (in.empty() || in[0] == nullptr || out.empty() || out[0] == nullptr) {
    return absl::InvalidArgumentError("LayerNormalization needs X and Y");
  }
  const Tensor& x = *in[0];
  const Tensor* scale = in.size() > 1 ? in[1] : nullptr;
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(la.axis, x.rank(), "LayerNormalization"));
  StorageRef keep_x, keep_s, keep_b;
  DYNVM_ASSIGN_OR_RETURN(const float* ps, NormParam(cc, scale, x, axis, &keep_s));
  absl::StatusOr<const float*> pb = NormParam(cc, bias, x, axis, &keep_b);
  if (!pb.ok()) return pb.status();
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kF32, x.dims(), "LayerNormalization"));
  Dims stat_dims(x.dims().begin(), x.dims().end());
  for (int d = axis; d < x.rank(); ++d) stat_dims[d] = 1;
  float* stats[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    Tensor* t = out.size() > static_cast<size_t>(i + 1) ? out[i + 1] : nullptr;
    if (t == nullptr) continue;
    DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, t, DType::kF32, stat_dims, "LayerNormalization"));
    stats[i] = t->data<float>();
  }
  absl::StatusOr<const void*> data = ContiguousData(cc, x, &keep_x);
  if (!data.ok()) return data.status();
  const int64_t rows = Product(x.dims(), 0, axis);
  const int64_t n = Product(x.dims(), axis, x.rank());
  return LaunchStatus(
      LayerNorm(out[0]->data<float>(), stats[0], stats[1], static_cast<const float*>(*data), ps,
                *pb, rows, n, la.epsilon, cc.stream()),
      "LayerNormalization", "LayerNorm");
}

// ---- ArgMax, ArgMin ----

struct ArgAttrs {
  const char* op;
  bool max;
  int64_t axis = 0;
  bool keepdims = true;
  bool select_last = false;
};

absl::Status RunArg(const ArgAttrs& aa, CudaContext& cc, KernelContext&, Inputs in, Outputs out) {
  if (in.size() != 1 || in[0] == nullptr || out.size() != 1 || out[0] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(aa.op, " takes 1 input and has 1 output"));
  }
  const Tensor& x = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(aa.axis, x.rank(), aa.op));
  Dims out_dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis) {
      out_dims.push_back(x.dim(d));
    } else if (aa.keepdims) {
      out_dims.push_back(1);
    }
  }
  DYNVM_RETURN_IF_ERROR(PrepareOutput(cc, out[0], DType::kI64, out_dims, aa.op));
  const int64_t n = x.dim(axis);
  if (n == 0 && out[0]->numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(aa.op, ": cannot reduce the empty axis ", aa.axis, " of ", x.DebugString()));
  }
  StorageRef keep;
  DYNVM_ASSIGN_OR_RETURN(const void* data, ContiguousData(cc, x, &keep));
  const int64_t outer = Product(x.dims(), 0, axis);
  const int64_t inner = Product(x.dims(), axis + 1, x.rank());
  return LaunchStatus(ArgReduce(out[0]->data<int64_t>(), static_cast<const float*>(data), outer, n,
                                inner, aa.max, aa.select_last, cc.stream()),
                      aa.op, "ArgReduce");
}

}  // namespace

void RegisterReduceKernels(Registrations& r) {
  for (const std::pair<const char*, bool>& def :
       {std::pair<const char*, bool>{"Softmax", false}, {"LogSoftmax", true}}) {
    const char* name = def.first;
    const bool log = def.second;
    Add(r, name, [name, log](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
      if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(name, " takes 1 input and has 1 output"));
      }
      DYNVM_RETURN_IF_ERROR(RequireDType(spec, spec.inputs[0], {DType::kF32}));
      DYNVM_ASSIGN_OR_RETURN(int64_t legacy, GetAttr(spec, "legacy_2d", 0));
      DYNVM_ASSIGN_OR_RETURN(int64_t axis, GetAttr(spec, "axis", legacy != 0 ? 1 : -1));
      return MakeKernel<SoftmaxAttrs>(KernelName(name, DType::kF32), name, &RunSoftmax,
                                      SoftmaxAttrs{name, log, axis, legacy != 0});
    });
  }
  Add(r, "LayerNormalization",
      [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.empty() || spec.inputs.size() > 3 || spec.outputs.empty() ||
            spec.outputs.size() > 3) {
          return absl::InvalidArgumentError("LayerNormalization: 1-3 inputs and 1-3 outputs");
        }
        for (const PortSpec& p : spec.inputs) {
          DYNVM_RETURN_IF_ERROR(RequireDType(spec, p, {DType::kF32}));
        }
        for (const PortSpec& p : spec.outputs) {
          DYNVM_RETURN_IF_ERROR(RequireDType(spec, p, {DType::kF32}));
        }
        LayerNormAttrs a;
        absl::StatusOr<int64_t> axis = spec.GetInt("axis", -1);
        absl::StatusOr<float> eps = spec.GetFloat("epsilon", 1e-5f);
        if (!axis.ok()) return axis.status();
        if (!eps.ok()) return eps.status();
        a.axis = *axis;
        a.epsilon = *eps;
        return MakeKernel<LayerNormAttrs>(KernelName("LayerNormalization", DType::kF32),
                                          "LayerNormalization", &RunLayerNorm, a);
      });
  for (const std::pair<const char*, bool>& def :
       {std::pair<const char*, bool>{"ArgMax", true}, {"ArgMin", false}}) {
    const char* name = def.first;
    const bool max = def.second;
    Add(r, name, [name, max](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
      if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(name, " takes 1 input and has 1 output"));
      }
      DYNVM_RETURN_IF_ERROR(RequireDType(spec, spec.inputs[0], {DType::kF32}));
      ArgAttrs a{name, max};
      absl::StatusOr<int64_t> axis = spec.GetInt("axis", 0);
      absl::StatusOr<int64_t> keepdims = spec.GetInt("keepdims", 1);
      absl::StatusOr<int64_t> last = spec.GetInt("select_last_index", 0);
      if (!axis.ok()) return axis.status();
      if (!keepdims.ok()) return keepdims.status();
      if (!last.ok()) return last.status();
      a.axis = *axis;
      a.keepdims = *keepdims != 0;
      a.select_last = *last != 0;
      return MakeKernel<ArgAttrs>(KernelName(name, DType::kI64), name, &RunArg, a);
    });
  }
}

}  // namespace dynvm::cuda
