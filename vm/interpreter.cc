// The interpreter loop. Written once against three macros (DISPATCH, CASE, NEXT) that expand
// to computed-goto labels on GCC/Clang, or to a plain switch when DYNVM_DISPATCH_SWITCH is
// defined (the dynvm_vm_switch library builds that variant and the conformance tests run both).
//
// This file is compiled twice: as itself, it defines Impl::Execute; included by
// interpreter_profiled.cc (DYNVM_INTERPRETER_PROFILED 1), Impl::ExecuteProfiled, the loop a run
// with a Profiler executes. Every profiling site is an `if constexpr (kProfile)` block, so
// Execute contains no profiling code at all. (Two plain functions rather than one template:
// GCC does not split a template instantiation's cold code from its hot code.)
//
// The verifier has checked every operand (register indices, kinds, dtypes, jump targets,
// kernel arity, definite assignment), so the loop does no such checks. It checks only what
// depends on run-time values (docs/isa.md, "Run-time checks").
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "isa/instruction.h"
#include "isa/opcodes.h"
#include "vm/ops.h"
#include "vm/vm_impl.h"

#ifndef DYNVM_INTERPRETER_PROFILED
#define DYNVM_INTERPRETER_PROFILED 0
#endif
#if DYNVM_INTERPRETER_PROFILED
#define DYNVM_EXECUTE ExecuteProfiled
#else
#define DYNVM_EXECUTE Execute
#endif

#if defined(__GNUC__) && !defined(DYNVM_DISPATCH_SWITCH)
#define DYNVM_COMPUTED_GOTO 1
#else
#define DYNVM_COMPUTED_GOTO 0
#endif

namespace dynvm {
namespace {

using isa::kAbsentRegister;
using isa::kRegisterFlag;
using isa::Opcode;

inline int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int64_t SaturateToInt(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

}  // namespace

absl::Status VirtualMachine::Impl::DYNVM_EXECUTE(int function, int depth, const ReturnTarget& ret) {
  constexpr bool kProfile = DYNVM_INTERPRETER_PROFILED != 0;
  const Executable::FunctionEntry& fn = exe->function_entry(function);
  [[maybe_unused]] size_t loop_base = 0;  // loops open when this frame started (kProfile)
  if constexpr (kProfile) loop_base = profiler->open_loops();
  Frame& frame = FrameAt(depth, fn);
  Scalar* const s = frame.s.data();
  Object* const o = frame.o.data();
  const uint32_t* const code = fn.code;
  const uint32_t* ip = code;
  std::vector<KernelContext::Site>& fn_sites = sites[function];
  absl::Status status;

#define S(w) s[(w)]
#define O(w) o[(w)]
#define VAL(w) (((w)&kRegisterFlag) ? s[(w) & ~kRegisterFlag].i : static_cast<int64_t>(w))
#define LEN() (ip[0] >> 8)
#define FAIL(expr)   \
  do {               \
    status = (expr); \
    goto error;      \
  } while (0)
#define CHECK_OK(expr)                 \
  do {                                 \
    absl::Status _s = (expr);          \
    if (!_s.ok()) FAIL(std::move(_s)); \
  } while (0)

#if DYNVM_COMPUTED_GOTO
  static const void* const kLabels[] = {
#define DYNVM_LABEL(name, mnemonic, operands, meaning) &&L_##name,
      DYNVM_OPCODES(DYNVM_LABEL)
#undef DYNVM_LABEL
  };
#define DISPATCH() goto* kLabels[ip[0] & 0xFF];
#define CASE(name) L_##name:
#define NEXT() \
  ip += LEN(); \
  DISPATCH()
#define REDISPATCH() DISPATCH()
  DISPATCH();
#else
#define DISPATCH() switch (static_cast<Opcode>(ip[0] & 0xFF))
#define CASE(name) case Opcode::k##name:
#define NEXT() \
  ip += LEN(); \
  continue
#define REDISPATCH() continue
  for (;;) {
    DISPATCH() {
#endif

  CASE(Nop) { NEXT(); }
  CASE(If) {
    if (S(ip[1]).i) {
      NEXT();
    }
    ip += static_cast<int32_t>(ip[2]);
    REDISPATCH();
  }
  CASE(Else) {
    ip += static_cast<int32_t>(ip[1]);
    REDISPATCH();
  }
  CASE(EndIf) { NEXT(); }
  CASE(Loop) {
    S(ip[1]).i = 0;
    if (VAL(ip[2]) <= 0) {
      ip += static_cast<int32_t>(ip[3]);
      REDISPATCH();
    }
    if constexpr (kProfile) profiler->BeginLoop(function, static_cast<uint32_t>(ip - code));
    if (depth == 0 && ++loop_nesting == 1) first_iteration_allocs = -1;
    NEXT();
  }
  CASE(EndLoop) {
    const uint32_t* head = ip + static_cast<int32_t>(ip[1]);
    if (--iterations_left < 0) {
      FAIL(absl::ResourceExhaustedError(
          absl::StrCat("loop iteration limit of ", options.max_loop_iterations, " exceeded")));
    }
    if ((iterations_left & 255) == 0) CHECK_OK(CheckInterrupts());
    if (depth == 0 && loop_nesting == 1 && first_iteration_allocs < 0)
      first_iteration_allocs = SystemAllocs();
    if (++S(head[1]).i < VAL(head[2])) {
      if constexpr (kProfile) {
        SampleMemory();
        profiler->EndIteration(true);
      }
      ip = head + (head[0] >> 8);
      REDISPATCH();
    }
    if constexpr (kProfile) {
      SampleMemory();
      profiler->EndIteration(false);
    }
    if (depth == 0) ExitLoop();
    NEXT();
  }
  CASE(Break) {
    if constexpr (kProfile) profiler->BreakLoop();
    if (depth == 0) ExitLoop();
    ip += static_cast<int32_t>(ip[1]);
    REDISPATCH();
  }
  CASE(BreakIf) {
    if (S(ip[1]).i) {
      if constexpr (kProfile) profiler->BreakLoop();
      if (depth == 0) ExitLoop();
      ip += static_cast<int32_t>(ip[2]);
      REDISPATCH();
    }
    NEXT();
  }
  CASE(BreakUnless) {
    if (!S(ip[1]).i) {
      if constexpr (kProfile) profiler->BreakLoop();
      if (depth == 0) ExitLoop();
      ip += static_cast<int32_t>(ip[2]);
      REDISPATCH();
    }
    NEXT();
  }
  CASE(Continue) {
    ip += static_cast<int32_t>(ip[1]);
    REDISPATCH();
  }
  CASE(Call) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      if (depth + 1 >= options.max_call_depth) {
        FAIL(absl::ResourceExhaustedError(
            absl::StrCat("call depth limit of ", options.max_call_depth, " exceeded")));
      }
      CHECK_OK(CheckInterrupts());
      const int callee = static_cast<int>(ip[1]);
      const uint32_t* oargs = ip + 2;
      const uint32_t* sargs = oargs + 1 + oargs[0];
      const uint32_t* ores = sargs + 1 + sargs[0];
      const uint32_t* sres = ores + 1 + ores[0];
      Frame& next = FrameAt(depth + 1, exe->function_entry(callee));
      for (uint32_t k = 0; k < oargs[0]; ++k) next.o[k] = O(oargs[1 + k]);
      for (uint32_t k = 0; k < sargs[0]; ++k) next.s[k] = S(sargs[1 + k]);
      ReturnTarget target;
      target.frame = &frame;
      target.objects = ores;
      target.scalars = sres;
      if constexpr (kProfile) profiler->BeginCall(callee);
      absl::Status cs = DYNVM_EXECUTE(callee, depth + 1, target);
      if constexpr (kProfile) {
        profiler->EndCall();
        if (!cs.ok()) profiler->CloseLoopsTo(loop_base);
      }
      if (!cs.ok()) return cs;  // already annotated by the callee
    }
    NEXT();
  }
  CASE(Ret) {
    const uint32_t* ores = ip + 1;
    const uint32_t* sres = ores + 1 + ores[0];
    if (ret.frame != nullptr) {
      for (uint32_t k = 0; k < ores[0]; ++k) ret.frame->o[ret.objects[1 + k]] = O(ores[1 + k]);
      for (uint32_t k = 0; k < sres[0]; ++k) ret.frame->s[ret.scalars[1 + k]] = S(sres[1 + k]);
    } else {
      ret.outputs->resize(ores[0]);
      for (uint32_t k = 0; k < ores[0]; ++k) (*ret.outputs)[k] = O(ores[1 + k]);
      if (run_output_buffers != nullptr) CHECK_OK(FillOutputBuffers(fn.info, *ret.outputs));
    }
    for (uint32_t k = 0; k < fn.num_objects; ++k) o[k].Clear();
    if constexpr (kProfile) profiler->CloseLoopsTo(loop_base);
    return absl::OkStatus();
  }
  CASE(Fail) { FAIL(absl::FailedPreconditionError(exe->string(ip[1]))); }
  CASE(Assert) {
    if (!S(ip[1]).i) FAIL(absl::FailedPreconditionError(exe->string(ip[2])));
    NEXT();
  }
  CASE(Mov) {
    O(ip[1]) = O(ip[2]);
    NEXT();
  }
  CASE(MovS) {
    S(ip[1]) = S(ip[2]);
    NEXT();
  }
  CASE(PMove) {
    // Parallel move: read every source before writing any destination.
    const uint32_t n = ip[1];
    const uint32_t* dst = ip + 2;
    const uint32_t* src = ip + 3 + n;
    if (n == 2 && dst[0] == src[1] && dst[1] == src[0]) {
      std::swap(O(dst[0]), O(dst[1]));
    } else {
      tmp_objects.resize(n);
      for (uint32_t k = 0; k < n; ++k) tmp_objects[k] = O(src[k]);
      for (uint32_t k = 0; k < n; ++k) O(dst[k]) = std::move(tmp_objects[k]);
    }
    NEXT();
  }
  CASE(PMoveS) {
    const uint32_t n = ip[1];
    const uint32_t* dst = ip + 2;
    const uint32_t* src = ip + 3 + n;
    Scalar tmp[16];
    if (n <= 16) {
      for (uint32_t k = 0; k < n; ++k) tmp[k] = S(src[k]);
      for (uint32_t k = 0; k < n; ++k) S(dst[k]) = tmp[k];
    } else {
      std::vector<Scalar> big(n);
      for (uint32_t k = 0; k < n; ++k) big[k] = S(src[k]);
      for (uint32_t k = 0; k < n; ++k) S(dst[k]) = big[k];
    }
    NEXT();
  }
  CASE(Kill) {
    O(ip[1]).Clear();
    if constexpr (kProfile) SampleMemory();
    NEXT();
  }
  CASE(ConstI) {
    S(ip[1]).i = isa::ReadImm64(ip + 2);
    NEXT();
  }
  CASE(ConstF) {
    S(ip[1]).f = isa::ReadF64(ip + 2);
    NEXT();
  }
  CASE(ConstB) {
    S(ip[1]).i = ip[2] != 0;
    NEXT();
  }
  CASE(AddI) {
    S(ip[1]).i =
        static_cast<int64_t>(static_cast<uint64_t>(S(ip[2]).i) + static_cast<uint64_t>(S(ip[3]).i));
    NEXT();
  }
  CASE(AddImmI) {
    S(ip[1]).i = static_cast<int64_t>(static_cast<uint64_t>(S(ip[2]).i) +
                                      static_cast<uint64_t>(isa::ReadImm64(ip + 3)));
    NEXT();
  }
  CASE(SubI) {
    S(ip[1]).i =
        static_cast<int64_t>(static_cast<uint64_t>(S(ip[2]).i) - static_cast<uint64_t>(S(ip[3]).i));
    NEXT();
  }
  CASE(MulI) {
    S(ip[1]).i =
        static_cast<int64_t>(static_cast<uint64_t>(S(ip[2]).i) * static_cast<uint64_t>(S(ip[3]).i));
    NEXT();
  }
  CASE(DivI) {
    const int64_t b = S(ip[3]).i, a = S(ip[2]).i;
    if (b == 0) FAIL(absl::InvalidArgumentError("integer division by zero"));
    if (a == std::numeric_limits<int64_t>::min() && b == -1)
      FAIL(absl::InvalidArgumentError("integer division overflows"));
    S(ip[1]).i = FloorDiv(a, b);
    NEXT();
  }
  CASE(ModI) {
    const int64_t b = S(ip[3]).i, a = S(ip[2]).i;
    if (b == 0) FAIL(absl::InvalidArgumentError("integer modulo by zero"));
    if (b == -1) {
      S(ip[1]).i = 0;
    } else {
      S(ip[1]).i = a - b * FloorDiv(a, b);
    }
    NEXT();
  }
  CASE(MinI) {
    S(ip[1]).i = std::min(S(ip[2]).i, S(ip[3]).i);
    NEXT();
  }
  CASE(MaxI) {
    S(ip[1]).i = std::max(S(ip[2]).i, S(ip[3]).i);
    NEXT();
  }
  CASE(NegI) {
    S(ip[1]).i = static_cast<int64_t>(0 - static_cast<uint64_t>(S(ip[2]).i));
    NEXT();
  }
  CASE(AddF) {
    S(ip[1]).f = S(ip[2]).f + S(ip[3]).f;
    NEXT();
  }
  CASE(SubF) {
    S(ip[1]).f = S(ip[2]).f - S(ip[3]).f;
    NEXT();
  }
  CASE(MulF) {
    S(ip[1]).f = S(ip[2]).f * S(ip[3]).f;
    NEXT();
  }
  CASE(DivF) {
    S(ip[1]).f = S(ip[2]).f / S(ip[3]).f;
    NEXT();
  }
  CASE(MinF) {
    S(ip[1]).f = std::fmin(S(ip[2]).f, S(ip[3]).f);
    NEXT();
  }
  CASE(MaxF) {
    S(ip[1]).f = std::fmax(S(ip[2]).f, S(ip[3]).f);
    NEXT();
  }
  CASE(NegF) {
    S(ip[1]).f = -S(ip[2]).f;
    NEXT();
  }
  CASE(EqI) {
    S(ip[1]).i = S(ip[2]).i == S(ip[3]).i;
    NEXT();
  }
  CASE(NeI) {
    S(ip[1]).i = S(ip[2]).i != S(ip[3]).i;
    NEXT();
  }
  CASE(LtI) {
    S(ip[1]).i = S(ip[2]).i < S(ip[3]).i;
    NEXT();
  }
  CASE(LeI) {
    S(ip[1]).i = S(ip[2]).i <= S(ip[3]).i;
    NEXT();
  }
  CASE(EqF) {
    S(ip[1]).i = S(ip[2]).f == S(ip[3]).f;
    NEXT();
  }
  CASE(LtF) {
    S(ip[1]).i = S(ip[2]).f < S(ip[3]).f;
    NEXT();
  }
  CASE(LeF) {
    S(ip[1]).i = S(ip[2]).f <= S(ip[3]).f;
    NEXT();
  }
  CASE(And) {
    S(ip[1]).i = S(ip[2]).i && S(ip[3]).i;
    NEXT();
  }
  CASE(Or) {
    S(ip[1]).i = S(ip[2]).i || S(ip[3]).i;
    NEXT();
  }
  CASE(Xor) {
    S(ip[1]).i = (S(ip[2]).i != 0) != (S(ip[3]).i != 0);
    NEXT();
  }
  CASE(Not) {
    S(ip[1]).i = !S(ip[2]).i;
    NEXT();
  }
  CASE(IToF) {
    S(ip[1]).f = static_cast<double>(S(ip[2]).i);
    NEXT();
  }
  CASE(FToI) {
    S(ip[1]).i = SaturateToInt(S(ip[2]).f);
    NEXT();
  }
  CASE(BToI) {
    S(ip[1]).i = S(ip[2]).i != 0;
    NEXT();
  }
  CASE(SelectI) {
    S(ip[1]).i = S(ip[2]).i ? S(ip[3]).i : S(ip[4]).i;
    NEXT();
  }
  CASE(SelectF) {
    S(ip[1]).f = S(ip[2]).i ? S(ip[3]).f : S(ip[4]).f;
    NEXT();
  }
  CASE(Dim) {
    const Tensor& t = O(ip[2]).t;
    if (ip[3] >= static_cast<uint32_t>(t.rank())) {
      FAIL(absl::InvalidArgumentError(
          absl::StrCat("dim ", ip[3], " of a rank-", t.rank(), " tensor ", t.DebugString())));
    }
    S(ip[1]).i = t.dim(static_cast<int>(ip[3]));
    NEXT();
  }
  CASE(Rank) {
    S(ip[1]).i = O(ip[2]).t.rank();
    NEXT();
  }
  CASE(Numel) {
    S(ip[1]).i = O(ip[2]).t.numel();
    NEXT();
  }
  CASE(ReadI) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<int64_t> v = ops::ReadInt(O(ip[2]).t, VAL(ip[3]), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(ip[1]).i = *v;
    }
    NEXT();
  }
  CASE(ReadF) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<double> v = ops::ReadFloat(O(ip[2]).t, VAL(ip[3]), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(ip[1]).f = *v;
    }
    NEXT();
  }
  CASE(ReadB) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<bool> v = ops::ReadBool(O(ip[2]).t, VAL(ip[3]), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(ip[1]).i = *v;
    }
    NEXT();
  }
  CASE(Write) {
    Tensor& t = O(ip[1]).t;
    const int64_t index = VAL(ip[2]);
    if (fn.scalar_kinds[ip[3]] == 1) {
      CHECK_OK(ops::WriteFloat(t, index, S(ip[3]).f, cuda.get()));
    } else {
      CHECK_OK(ops::WriteInt(t, index, S(ip[3]).i, cuda.get()));
    }
    NEXT();
  }
  CASE(AllocStorage) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const int64_t bytes = VAL(ip[2]);
      if (bytes < 0)
        FAIL(absl::InvalidArgumentError(absl::StrCat("alloc_storage of ", bytes, " bytes")));
      absl::StatusOr<StorageRef> st;
      if (ip[3] == static_cast<uint32_t>(Device::kCPU)) {
        st = Storage::Allocate(*pool, static_cast<size_t>(bytes), pool);
      } else {
        absl::StatusOr<DeviceContext*> d = DeviceFor(static_cast<Device>(ip[3]));
        if (!d.ok()) FAIL(d.status());
        st =
            Storage::Allocate((*d)->allocator(), static_cast<size_t>(bytes), (*d)->allocator_ref());
      }
      if (!st.ok()) FAIL(st.status());
      O(ip[1]).st = *std::move(st);
      if constexpr (kProfile) SampleMemory();
    }
    NEXT();
  }
  CASE(AllocTensor) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const uint32_t* dims = ip + 5;
      int64_t d[Tensor::kMaxRank];
      for (uint32_t k = 0; k < dims[0]; ++k) d[k] = VAL(dims[1 + k]);
      const Tensor* b = nullptr;
      if (depth == 0 && run_output_buffers != nullptr) {
        // An output with a caller's buffer: the kernel writes there (same dtype and dims).
        b = OutputBufferAt(fn, static_cast<uint32_t>(ip - code));
        if (b != nullptr && (static_cast<uint32_t>(b->dtype()) != ip[4] ||
                             b->dims() != absl::Span<const int64_t>(d, dims[0]) ||
                             O(ip[2]).st->device() != Device::kCPU)) {
          b = nullptr;  // not the buffer's shape: computed in the pool, refused at ret
        }
      }
      if (b != nullptr) {
        O(ip[1]).t = *b;
      } else {
        absl::StatusOr<Tensor> t = ops::ViewOf(O(ip[2]).st, VAL(ip[3]), static_cast<DType>(ip[4]),
                                               absl::Span<const int64_t>(d, dims[0]));
        if (!t.ok()) FAIL(t.status());
        O(ip[1]).t = *std::move(t);
      }
    }
    NEXT();
  }
  CASE(AllocGrowable) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      Allocator* a = pool.get();
      std::shared_ptr<Allocator> keep = pool;
      if (ip[3] != static_cast<uint32_t>(Device::kCPU)) {
        absl::StatusOr<DeviceContext*> dc = DeviceFor(static_cast<Device>(ip[3]));
        if (!dc.ok()) FAIL(dc.status());
        a = &(*dc)->allocator();
        keep = (*dc)->allocator_ref();
      }
      const uint32_t* dims = ip + 6;
      int64_t d[Tensor::kMaxRank];
      for (uint32_t k = 0; k < dims[0]; ++k) d[k] = VAL(dims[1 + k]);
      absl::StatusOr<Tensor> t =
          ops::AllocGrowable(*a, static_cast<DType>(ip[2]), static_cast<int>(ip[4]), VAL(ip[5]),
                             absl::Span<const int64_t>(d, dims[0]), std::move(keep));
      if (!t.ok()) FAIL(t.status());
      O(ip[1]).t = *std::move(t);
      if constexpr (kProfile) SampleMemory();
    }
    NEXT();
  }
  CASE(Append) {
    if (O(ip[1]).t.device() == Device::kCPU) {
      CHECK_OK(
          ops::Append(*pool, O(ip[1]).t, O(ip[2]).t, static_cast<int>(ip[3]), pool, cuda.get()));
    } else {
      if (cuda == nullptr)
        FAIL(absl::FailedPreconditionError("append to a device tensor without a device context"));
      CHECK_OK(ops::Append(cuda->allocator(), O(ip[1]).t, O(ip[2]).t, static_cast<int>(ip[3]),
                           cuda->allocator_ref(), cuda.get()));
    }
    if constexpr (kProfile) SampleMemory();
    NEXT();
  }
  CASE(LoadConst) {
    O(ip[1]).t = constants[ip[2]];
    NEXT();
  }
  CASE(Reshape) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const uint32_t* dims = ip + 3;
      int64_t d[Tensor::kMaxRank];
      for (uint32_t k = 0; k < dims[0]; ++k) d[k] = VAL(dims[1 + k]);
      absl::StatusOr<Tensor> t = ops::Reshape(O(ip[2]).t, absl::Span<const int64_t>(d, dims[0]));
      if (!t.ok()) FAIL(t.status());
      O(ip[1]).t = *std::move(t);
    }
    NEXT();
  }
  CASE(View) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const uint32_t* dims = ip + 4;
      const uint32_t* strides = dims + 1 + dims[0];
      int64_t d[Tensor::kMaxRank], st[Tensor::kMaxRank];
      for (uint32_t k = 0; k < dims[0]; ++k) {
        d[k] = VAL(dims[1 + k]);
        st[k] = VAL(strides[1 + k]);
      }
      absl::StatusOr<Tensor> t =
          ops::View(O(ip[2]).t, VAL(ip[3]), absl::Span<const int64_t>(d, dims[0]),
                    absl::Span<const int64_t>(st, dims[0]));
      if (!t.ok()) FAIL(t.status());
      O(ip[1]).t = *std::move(t);
    }
    NEXT();
  }
  CASE(Copy) {
    CHECK_OK(ops::Copy(O(ip[2]).t, O(ip[1]).t, cuda.get()));
    NEXT();
  }
  CASE(Invoke) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const Executable::KernelEntry& k = exe->kernel_entry(static_cast<int>(ip[1]));
      const uint32_t* ins = ip + 3;
      const uint32_t* outs = ins + 1 + ins[0];
      for (uint32_t j = 0; j < ins[0]; ++j) {
        const uint32_t r = ins[1 + j];
        in_buf[j] = r == kAbsentRegister ? nullptr : &O(r).t;
      }
      for (uint32_t j = 0; j < outs[0]; ++j) {
        const uint32_t r = outs[1 + j];
        if (r == kAbsentRegister) {
          out_buf[j] = nullptr;
          continue;
        }
        Tensor& t = O(r).t;
        if (k.dynamic_outputs[j]) {
          t = Tensor();
        } else if (!t.storage()->writable()) {
          FAIL(absl::FailedPreconditionError(
              absl::StrCat("output ", j, " of ", k.spec.DebugName(),
                           " is read-only (a constant or a caller's buffer)")));
        }
        out_buf[j] = &t;
      }
      // Inputs move to the kernel's device (only a VM that has used a device can hold a
      // device tensor, so a host-only VM skips the check).
      if (k.spec.device != Device::kCPU) {
        CHECK_OK(PrepareDeviceInvoke(k, ins[0]));
      } else if (cuda != nullptr) {
        CHECK_OK(PrepareHostInvoke(ins[0], outs[0]));
      }
      ctx.set_site(&fn_sites[ip[2]]);
      [[maybe_unused]] int64_t start = 0;
      if constexpr (kProfile) start = profiler->Now();
      status = k.kernel->Run(ctx, absl::Span<const Tensor* const>(in_buf.data(), ins[0]),
                             absl::Span<Tensor* const>(out_buf.data(), outs[0]));
      if constexpr (kProfile) {
        const int64_t end = profiler->Now();
        if (status.ok()) {
          profiler->Kernel(static_cast<int>(ip[1]), function, ip[2],
                           static_cast<uint32_t>(ip - code), start, end, in_buf.data(), ins[0],
                           out_buf.data(), outs[0]);
          SampleMemory();
        }
      }
      if (moved_inputs) {  // the copies die now, not at some later invoke
        for (uint32_t j = 0; j < ins[0]; ++j) device_in_buf[j] = Tensor();
        moved_inputs = false;
      }
      if (!status.ok()) goto error;
    }
    NEXT();
  }
  CASE(Emit) {
    if (on_emit != nullptr && *on_emit) {
      const Tensor& t = O(ip[1]).t;
      if (t.defined() && t.device() != Device::kCPU) {
        // The host sees a copy (a sync point).
        absl::StatusOr<Tensor> host = Tensor::Allocate(*pool, t.dtype(), t.dims(), pool);
        if (!host.ok()) FAIL(host.status());
        CHECK_OK(ops::Copy(t, *host, cuda.get()));
        CHECK_OK((*on_emit)(static_cast<int>(ip[2]), *host));
      } else {
        CHECK_OK((*on_emit)(static_cast<int>(ip[2]), t));
      }
    }
    NEXT();
  }
  CASE(SeqNew) {
    O(ip[1]).seq = std::make_shared<Sequence>();
    NEXT();
  }
  CASE(SeqPush) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(ip[1]).seq;
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);  // values: copy on write
      q->items.push_back(O(ip[2]).t);
    }
    NEXT();
  }
  CASE(SeqInsert) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(ip[1]).seq;
      int64_t pos = S(ip[3]).i;
      const int64_t n = static_cast<int64_t>(q->items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos > n)
        FAIL(absl::OutOfRangeError(absl::StrCat("seq_insert position out of range: ", S(ip[3]).i,
                                                " for a sequence of ", n)));
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);
      q->items.insert(q->items.begin() + pos, O(ip[2]).t);
    }
    NEXT();
  }
  CASE(SeqErase) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(ip[1]).seq;
      int64_t pos = S(ip[2]).i;
      const int64_t n = static_cast<int64_t>(q->items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos >= n)
        FAIL(absl::OutOfRangeError(absl::StrCat("seq_erase position out of range: ", S(ip[2]).i,
                                                " for a sequence of ", n)));
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);
      q->items.erase(q->items.begin() + pos);
    }
    NEXT();
  }
  CASE(SeqAt) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const Sequence& q = *O(ip[2]).seq;
      int64_t pos = S(ip[3]).i;
      const int64_t n = static_cast<int64_t>(q.items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos >= n)
        FAIL(absl::OutOfRangeError(
            absl::StrCat("seq_at position out of range: ", S(ip[3]).i, " for a sequence of ", n)));
      O(ip[1]).t = q.items[pos];
    }
    NEXT();
  }
  CASE(SeqLen) {
    S(ip[1]).i = static_cast<int64_t>(O(ip[2]).seq->items.size());
    NEXT();
  }
  CASE(OptNone) {
    O(ip[1]).Clear();
    NEXT();
  }
  CASE(OptSome) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      Object v = O(ip[2]);
      O(ip[1]) = std::move(v);
      O(ip[1]).has = true;
    }
    NEXT();
  }
  CASE(OptHas) {
    S(ip[1]).i = O(ip[2]).has;
    NEXT();
  }
  CASE(OptGet) {
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      if (!O(ip[2]).has) FAIL(absl::FailedPreconditionError("opt_get of an empty optional"));
      Object v = O(ip[2]);
      v.has = false;
      O(ip[1]) = std::move(v);
    }
    NEXT();
  }

#if !DYNVM_COMPUTED_GOTO
}  // switch
}  // for
#endif

error :
    // Release this frame's objects so the VM is usable after the error; callers unwind theirs.
    for (uint32_t k = 0; k < fn.num_objects; ++k) o[k]
        .Clear();
if constexpr (kProfile) profiler->CloseLoopsTo(loop_base);
return Annotate(status, function, static_cast<uint32_t>(ip - code));

#undef S
#undef O
#undef VAL
#undef LEN
#undef FAIL
#undef CHECK_OK
#undef DISPATCH
#undef CASE
#undef NEXT
#undef REDISPATCH
}

#undef DYNVM_EXECUTE

}  // namespace dynvm
