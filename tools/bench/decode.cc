#include "tools/bench/decode.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dynvm::bench {
namespace {

const FunctionInfo* EntryInfo(const VirtualMachine& vm) {
  absl::StatusOr<int> f = vm.executable().FindFunction("");
  return f.ok() ? &vm.executable().function(*f) : nullptr;
}

bool HasInput(const FunctionInfo& info, absl::string_view name) {
  for (const ParamInfo& p : info.inputs) {
    if (p.name == name) return true;
  }
  return false;
}

const ParamInfo* FindParam(const std::vector<ParamInfo>& params, absl::string_view name) {
  for (const ParamInfo& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::StatusOr<Tensor> ZeroState(const ParamInfo& p) {
  if (p.dtype != DType::kF32 || !p.has_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("step model input '", p.name, "' must be f32 with a shape"));
  }
  std::vector<int64_t> dims;
  for (const DimInfo& d : p.shape) {
    if (d.value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step model input '", p.name, "' must have fixed dims, not '", d.symbol, "'"));
    }
    dims.push_back(d.value);
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(DType::kF32, dims));
  float* data = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = 0.0f;
  return t;
}

absl::StatusOr<std::vector<int64_t>> TokensOf(const Tensor& t) {
  if (t.dtype() != DType::kI64 || t.rank() != 2 || t.dim(0) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens must be i64 [1, n], got ", t.DebugString()));
  }
  std::vector<int64_t> out(t.dim(1));
  for (int64_t i = 0; i < t.dim(1); ++i) out[i] = t.data<int64_t>()[i * t.stride(1)];
  return out;
}

}  // namespace

absl::Status BindLoopInputs(VirtualMachine& vm, const DecodeRequest& request) {
  const FunctionInfo* info = EntryInfo(vm);
  if (info == nullptr) return absl::InvalidArgumentError("the executable has no entry function");
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  absl::StatusOr<Tensor> prompt = Tensor::FromVector<int64_t>(
      DType::kI64, {1, static_cast<int64_t>(request.prompt.size())}, request.prompt);
  if (!prompt.ok()) return prompt.status();
  DYNVM_RETURN_IF_ERROR(vm.SetInput("prompt", *prompt));
  DYNVM_RETURN_IF_ERROR(vm.SetInput("max_new_tokens", Tensor::ScalarI64(request.max_new_tokens)));
  if (HasInput(*info, "stop_token")) {
    return vm.SetInput("stop_token", Tensor::ScalarI64(request.stop_token));
  }
  if (request.stop_token >= 0) {
    return absl::InvalidArgumentError("the model has no stop_token input");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> RunLoop(VirtualMachine& vm) {
  DYNVM_RETURN_IF_ERROR(vm.Run());
  DYNVM_ASSIGN_OR_RETURN(Tensor tokens, vm.GetOutput("tokens"));
  return TokensOf(tokens);
}

absl::StatusOr<std::vector<int64_t>> DecodeInVm(VirtualMachine& vm, const DecodeRequest& request) {
  DYNVM_RETURN_IF_ERROR(BindLoopInputs(vm, request));
  return RunLoop(vm);
}

absl::StatusOr<HostLoopDecoder> HostLoopDecoder::Create(VirtualMachine* vm) {
  const FunctionInfo* info = EntryInfo(*vm);
  if (info == nullptr) return absl::InvalidArgumentError("the executable has no entry function");
  for (const char* name : {"token", "h", "c"}) {
    if (FindParam(info->inputs, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the step model has no input '", name, "'"));
    }
  }
  for (const char* name : {"next", "h_out", "c_out"}) {
    if (FindParam(info->outputs, name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the step model has no output '", name, "'"));
    }
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor h, ZeroState(*FindParam(info->inputs, "h")));
  DYNVM_ASSIGN_OR_RETURN(Tensor c, ZeroState(*FindParam(info->inputs, "c")));
  HostLoopDecoder decoder(vm, std::move(h), std::move(c));
  absl::StatusOr<Tensor> token = Tensor::Empty(DType::kI64, {1, 1});
  if (!token.ok()) return token.status();
  decoder.token_ = *std::move(token);
  return decoder;
}

absl::StatusOr<int64_t> HostLoopDecoder::Step(int64_t token) {
  token_.data<int64_t>()[0] = token;
  DYNVM_RETURN_IF_ERROR(vm_->Run());
  absl::StatusOr<Tensor> next = vm_->GetOutput("next");
  absl::StatusOr<Tensor> h = vm_->GetOutput("h_out");
  absl::StatusOr<Tensor> c = vm_->GetOutput("c_out");
  if (!next.ok()) return next.status();
  if (!h.ok()) return h.status();
  if (!c.ok()) return c.status();
  if (next->dtype() != DType::kI64 || next->numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("next must be one i64, got ", next->DebugString()));
  }
  // The state outputs become the next step's inputs without a copy.
  DYNVM_RETURN_IF_ERROR(vm_->SetInputZeroCopy("h", *h));
  DYNVM_RETURN_IF_ERROR(vm_->SetInputZeroCopy("c", *c));
  return next->data<int64_t>()[0];
}

absl::StatusOr<std::vector<int64_t>> HostLoopDecoder::Decode(const DecodeRequest& request) {
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  DYNVM_RETURN_IF_ERROR(vm_->SetInputZeroCopy("token", token_));
  DYNVM_RETURN_IF_ERROR(vm_->SetInputZeroCopy("h", zero_h_));
  DYNVM_RETURN_IF_ERROR(vm_->SetInputZeroCopy("c", zero_c_));
  int64_t next = 0;
  for (int64_t t : request.prompt) {
    DYNVM_ASSIGN_OR_RETURN(int64_t n, Step(t));
    next = n;
  }
  std::vector<int64_t> tokens;
  tokens.reserve(request.max_new_tokens > 0 ? request.max_new_tokens : 0);
  for (int64_t i = 0; i < request.max_new_tokens; ++i) {
    tokens.push_back(next);
    if (next == request.stop_token || i + 1 == request.max_new_tokens) break;
    DYNVM_ASSIGN_OR_RETURN(int64_t n, Step(next));
    next = n;
  }
  return tokens;
}

}  // namespace dynvm::bench
