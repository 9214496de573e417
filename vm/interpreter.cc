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
#include "isa/operands.h"
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

// An invoke site keeps a workspace (KernelContext::Workspace) of at most this many bytes for its
// next invoke (and run); a larger one goes back to the VM's pool when the invoke returns. Kept
// per site, every large scratch of a model is held at once (the sum over its sites, not the
// largest: MViT's 64 ScatterNDs each copy their whole index tensor, 6 GB in all); from the
// pool's free lists, the next large scratch or value of its class reuses the block, and a
// kernel that needs a megabyte of scratch does far more work than the pool's round trip.
constexpr size_t kMaxKeptWorkspaceBytes = size_t{1} << 20;

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
#define LEN() isa::HeaderLength(ip[0])
// The operands of the current instruction, by name: in.reg<F::kDst>() (isa/operands.h).
#define DECODE(name)       \
  using F = isa::op::name; \
  const isa::Operands<F> in(ip)
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
#define DYNVM_LABEL(name, mnemonic, operands, names, meaning) &&L_##name,
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
    DECODE(If);
    if (S(in.reg<F::kCond>()).i) {
      NEXT();
    }
    ip += in.jump<F::kElse>();
    REDISPATCH();
  }
  CASE(Else) {
    DECODE(Else);
    ip += in.jump<F::kEnd>();
    REDISPATCH();
  }
  CASE(EndIf) { NEXT(); }
  CASE(Loop) {
    DECODE(Loop);
    S(in.reg<F::kIter>()).i = 0;
    if (VAL(in.value<F::kTrip>()) <= 0) {
      ip += in.jump<F::kExit>();
      REDISPATCH();
    }
    if constexpr (kProfile) profiler->BeginLoop(function, static_cast<uint32_t>(ip - code));
    if (depth == 0 && ++loop_nesting == 1) first_iteration_allocs = -1;
    NEXT();
  }
  CASE(EndLoop) {
    DECODE(EndLoop);
    const uint32_t* head = ip + in.jump<F::kHead>();
    const isa::Operands<isa::op::Loop> loop(head);
    if (--iterations_left < 0) {
      FAIL(absl::ResourceExhaustedError(
          absl::StrCat("loop iteration limit of ", options.max_loop_iterations, " exceeded")));
    }
    if ((iterations_left & 255) == 0) CHECK_OK(CheckInterrupts());
    if (depth == 0 && loop_nesting == 1 && first_iteration_allocs < 0)
      first_iteration_allocs = SystemAllocs();
    if (++S(loop.reg<isa::op::Loop::kIter>()).i < VAL(loop.value<isa::op::Loop::kTrip>())) {
      if constexpr (kProfile) {
        SampleMemory();
        profiler->EndIteration(true);
      }
      ip = head + loop.length();
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
    DECODE(Break);
    if constexpr (kProfile) profiler->BreakLoop();
    if (depth == 0) ExitLoop();
    ip += in.jump<F::kTarget>();
    REDISPATCH();
  }
  CASE(BreakIf) {
    DECODE(BreakIf);
    if (S(in.reg<F::kCond>()).i) {
      if constexpr (kProfile) profiler->BreakLoop();
      if (depth == 0) ExitLoop();
      ip += in.jump<F::kTarget>();
      REDISPATCH();
    }
    NEXT();
  }
  CASE(BreakUnless) {
    DECODE(BreakUnless);
    if (!S(in.reg<F::kCond>()).i) {
      if constexpr (kProfile) profiler->BreakLoop();
      if (depth == 0) ExitLoop();
      ip += in.jump<F::kTarget>();
      REDISPATCH();
    }
    NEXT();
  }
  CASE(Continue) {
    DECODE(Continue);
    ip += in.jump<F::kTarget>();
    REDISPATCH();
  }
  CASE(Call) {
    DECODE(Call);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      if (depth + 1 >= options.max_call_depth) {
        FAIL(absl::ResourceExhaustedError(
            absl::StrCat("call depth limit of ", options.max_call_depth, " exceeded")));
      }
      CHECK_OK(CheckInterrupts());
      const int callee = static_cast<int>(in.word<F::kFunc>());
      const absl::Span<const uint32_t> oargs = in.list<F::kObjArgs>();
      const absl::Span<const uint32_t> sargs = in.list<F::kScalarArgs>();
      Frame& next = FrameAt(depth + 1, exe->function_entry(callee));
      for (size_t k = 0; k < oargs.size(); ++k) next.o[k] = O(oargs[k]);
      for (size_t k = 0; k < sargs.size(); ++k) next.s[k] = S(sargs[k]);
      ReturnTarget target;
      target.frame = &frame;
      target.objects = in.list<F::kObjResults>();
      target.scalars = in.list<F::kScalarResults>();
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
    DECODE(Ret);
    const absl::Span<const uint32_t> ores = in.list<F::kObjs>();
    const absl::Span<const uint32_t> sres = in.list<F::kScalars>();
    if (ret.frame != nullptr) {
      for (size_t k = 0; k < ores.size(); ++k) ret.frame->o[ret.objects[k]] = O(ores[k]);
      for (size_t k = 0; k < sres.size(); ++k) ret.frame->s[ret.scalars[k]] = S(sres[k]);
    } else {
      ret.outputs->resize(ores.size());
      for (size_t k = 0; k < ores.size(); ++k) (*ret.outputs)[k] = O(ores[k]);
      if (run_output_buffers != nullptr) CHECK_OK(FillOutputBuffers(fn.info, *ret.outputs));
    }
    for (uint32_t k = 0; k < fn.num_objects; ++k) o[k].Clear();
    if constexpr (kProfile) profiler->CloseLoopsTo(loop_base);
    return absl::OkStatus();
  }
  CASE(Fail) {
    DECODE(Fail);
    FAIL(absl::FailedPreconditionError(exe->string(in.word<F::kMessage>())));
  }
  CASE(Assert) {
    DECODE(Assert);
    if (!S(in.reg<F::kCond>()).i)
      FAIL(absl::FailedPreconditionError(exe->string(in.word<F::kMessage>())));
    NEXT();
  }
  CASE(Mov) {
    DECODE(Mov);
    O(in.reg<F::kDst>()) = O(in.reg<F::kSrc>());
    NEXT();
  }
  CASE(MovS) {
    DECODE(MovS);
    S(in.reg<F::kDst>()) = S(in.reg<F::kSrc>());
    NEXT();
  }
  CASE(PMove) {
    // Parallel move: read every source before writing any destination.
    DECODE(PMove);
    const absl::Span<const uint32_t> dst = in.list<F::kDst>(), src = in.list<F::kSrc>();
    const uint32_t n = static_cast<uint32_t>(dst.size());
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
    DECODE(PMoveS);
    const absl::Span<const uint32_t> dst = in.list<F::kDst>(), src = in.list<F::kSrc>();
    const uint32_t n = static_cast<uint32_t>(dst.size());
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
    DECODE(Kill);
    O(in.reg<F::kReg>()).Clear();
    if constexpr (kProfile) SampleMemory();
    NEXT();
  }
  CASE(ConstI) {
    DECODE(ConstI);
    S(in.reg<F::kDst>()).i = in.imm64<F::kImm>();
    NEXT();
  }
  CASE(ConstF) {
    DECODE(ConstF);
    S(in.reg<F::kDst>()).f = in.f64<F::kImm>();
    NEXT();
  }
  CASE(ConstB) {
    DECODE(ConstB);
    S(in.reg<F::kDst>()).i = in.word<F::kImm>() != 0;
    NEXT();
  }
  CASE(AddI) {
    DECODE(AddI);
    S(in.reg<F::kDst>()).i = static_cast<int64_t>(static_cast<uint64_t>(S(in.reg<F::kLhs>()).i) +
                                                  static_cast<uint64_t>(S(in.reg<F::kRhs>()).i));
    NEXT();
  }
  CASE(AddImmI) {
    DECODE(AddImmI);
    S(in.reg<F::kDst>()).i = static_cast<int64_t>(static_cast<uint64_t>(S(in.reg<F::kLhs>()).i) +
                                                  static_cast<uint64_t>(in.imm64<F::kImm>()));
    NEXT();
  }
  CASE(SubI) {
    DECODE(SubI);
    S(in.reg<F::kDst>()).i = static_cast<int64_t>(static_cast<uint64_t>(S(in.reg<F::kLhs>()).i) -
                                                  static_cast<uint64_t>(S(in.reg<F::kRhs>()).i));
    NEXT();
  }
  CASE(MulI) {
    DECODE(MulI);
    S(in.reg<F::kDst>()).i = static_cast<int64_t>(static_cast<uint64_t>(S(in.reg<F::kLhs>()).i) *
                                                  static_cast<uint64_t>(S(in.reg<F::kRhs>()).i));
    NEXT();
  }
  CASE(DivI) {
    DECODE(DivI);
    const int64_t b = S(in.reg<F::kRhs>()).i, a = S(in.reg<F::kLhs>()).i;
    if (b == 0) FAIL(absl::InvalidArgumentError("integer division by zero"));
    if (a == std::numeric_limits<int64_t>::min() && b == -1)
      FAIL(absl::InvalidArgumentError("integer division overflows"));
    S(in.reg<F::kDst>()).i = FloorDiv(a, b);
    NEXT();
  }
  CASE(ModI) {
    DECODE(ModI);
    const int64_t b = S(in.reg<F::kRhs>()).i, a = S(in.reg<F::kLhs>()).i;
    if (b == 0) FAIL(absl::InvalidArgumentError("integer modulo by zero"));
    if (b == -1) {
      S(in.reg<F::kDst>()).i = 0;
    } else {
      S(in.reg<F::kDst>()).i = a - b * FloorDiv(a, b);
    }
    NEXT();
  }
  CASE(MinI) {
    DECODE(MinI);
    S(in.reg<F::kDst>()).i = std::min(S(in.reg<F::kLhs>()).i, S(in.reg<F::kRhs>()).i);
    NEXT();
  }
  CASE(MaxI) {
    DECODE(MaxI);
    S(in.reg<F::kDst>()).i = std::max(S(in.reg<F::kLhs>()).i, S(in.reg<F::kRhs>()).i);
    NEXT();
  }
  CASE(NegI) {
    DECODE(NegI);
    S(in.reg<F::kDst>()).i =
        static_cast<int64_t>(0 - static_cast<uint64_t>(S(in.reg<F::kSrc>()).i));
    NEXT();
  }
  CASE(AddF) {
    DECODE(AddF);
    S(in.reg<F::kDst>()).f = S(in.reg<F::kLhs>()).f + S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(SubF) {
    DECODE(SubF);
    S(in.reg<F::kDst>()).f = S(in.reg<F::kLhs>()).f - S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(MulF) {
    DECODE(MulF);
    S(in.reg<F::kDst>()).f = S(in.reg<F::kLhs>()).f * S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(DivF) {
    DECODE(DivF);
    S(in.reg<F::kDst>()).f = S(in.reg<F::kLhs>()).f / S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(MinF) {
    DECODE(MinF);
    S(in.reg<F::kDst>()).f = std::fmin(S(in.reg<F::kLhs>()).f, S(in.reg<F::kRhs>()).f);
    NEXT();
  }
  CASE(MaxF) {
    DECODE(MaxF);
    S(in.reg<F::kDst>()).f = std::fmax(S(in.reg<F::kLhs>()).f, S(in.reg<F::kRhs>()).f);
    NEXT();
  }
  CASE(NegF) {
    DECODE(NegF);
    S(in.reg<F::kDst>()).f = -S(in.reg<F::kSrc>()).f;
    NEXT();
  }
  CASE(EqI) {
    DECODE(EqI);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i == S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(NeI) {
    DECODE(NeI);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i != S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(LtI) {
    DECODE(LtI);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i < S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(LeI) {
    DECODE(LeI);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i <= S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(EqF) {
    DECODE(EqF);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).f == S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(LtF) {
    DECODE(LtF);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).f < S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(LeF) {
    DECODE(LeF);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).f <= S(in.reg<F::kRhs>()).f;
    NEXT();
  }
  CASE(And) {
    DECODE(And);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i && S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(Or) {
    DECODE(Or);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kLhs>()).i || S(in.reg<F::kRhs>()).i;
    NEXT();
  }
  CASE(Xor) {
    DECODE(Xor);
    S(in.reg<F::kDst>()).i = (S(in.reg<F::kLhs>()).i != 0) != (S(in.reg<F::kRhs>()).i != 0);
    NEXT();
  }
  CASE(Not) {
    DECODE(Not);
    S(in.reg<F::kDst>()).i = !S(in.reg<F::kSrc>()).i;
    NEXT();
  }
  CASE(IToF) {
    DECODE(IToF);
    S(in.reg<F::kDst>()).f = static_cast<double>(S(in.reg<F::kSrc>()).i);
    NEXT();
  }
  CASE(FToI) {
    DECODE(FToI);
    S(in.reg<F::kDst>()).i = SaturateToInt(S(in.reg<F::kSrc>()).f);
    NEXT();
  }
  CASE(BToI) {
    DECODE(BToI);
    S(in.reg<F::kDst>()).i = S(in.reg<F::kSrc>()).i != 0;
    NEXT();
  }
  CASE(SelectI) {
    DECODE(SelectI);
    S(in.reg<F::kDst>()).i =
        S(in.reg<F::kCond>()).i ? S(in.reg<F::kIfTrue>()).i : S(in.reg<F::kIfFalse>()).i;
    NEXT();
  }
  CASE(SelectF) {
    DECODE(SelectF);
    S(in.reg<F::kDst>()).f =
        S(in.reg<F::kCond>()).i ? S(in.reg<F::kIfTrue>()).f : S(in.reg<F::kIfFalse>()).f;
    NEXT();
  }
  CASE(Dim) {
    DECODE(Dim);
    const Tensor& t = O(in.reg<F::kTensor>()).t;
    if (in.word<F::kAxis>() >= static_cast<uint32_t>(t.rank())) {
      FAIL(absl::InvalidArgumentError(absl::StrCat("dim ", in.word<F::kAxis>(), " of a rank-",
                                                   t.rank(), " tensor ", t.DebugString())));
    }
    S(in.reg<F::kDst>()).i = t.dim(static_cast<int>(in.word<F::kAxis>()));
    NEXT();
  }
  CASE(Rank) {
    DECODE(Rank);
    S(in.reg<F::kDst>()).i = O(in.reg<F::kTensor>()).t.rank();
    NEXT();
  }
  CASE(Numel) {
    DECODE(Numel);
    S(in.reg<F::kDst>()).i = O(in.reg<F::kTensor>()).t.numel();
    NEXT();
  }
  CASE(ReadI) {
    DECODE(ReadI);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<int64_t> v =
          ops::ReadInt(O(in.reg<F::kTensor>()).t, VAL(in.value<F::kIndex>()), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(in.reg<F::kDst>()).i = *v;
    }
    NEXT();
  }
  CASE(ReadF) {
    DECODE(ReadF);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<double> v =
          ops::ReadFloat(O(in.reg<F::kTensor>()).t, VAL(in.value<F::kIndex>()), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(in.reg<F::kDst>()).f = *v;
    }
    NEXT();
  }
  CASE(ReadB) {
    DECODE(ReadB);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      absl::StatusOr<bool> v =
          ops::ReadBool(O(in.reg<F::kTensor>()).t, VAL(in.value<F::kIndex>()), cuda.get());
      if (!v.ok()) FAIL(v.status());
      S(in.reg<F::kDst>()).i = *v;
    }
    NEXT();
  }
  CASE(Write) {
    DECODE(Write);
    Tensor& t = O(in.reg<F::kTensor>()).t;
    const int64_t index = VAL(in.value<F::kIndex>());
    if (fn.scalar_kinds[in.reg<F::kSrc>()] == 1) {
      CHECK_OK(ops::WriteFloat(t, index, S(in.reg<F::kSrc>()).f, cuda.get()));
    } else {
      CHECK_OK(ops::WriteInt(t, index, S(in.reg<F::kSrc>()).i, cuda.get()));
    }
    NEXT();
  }
  CASE(AllocStorage) {
    DECODE(AllocStorage);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const int64_t bytes = VAL(in.value<F::kBytes>());
      if (bytes < 0)
        FAIL(absl::InvalidArgumentError(absl::StrCat("alloc_storage of ", bytes, " bytes")));
      absl::StatusOr<StorageRef> st;
      if (in.word<F::kDevice>() == static_cast<uint32_t>(Device::kCPU)) {
        st = Storage::Allocate(*pool, static_cast<size_t>(bytes), pool);
      } else {
        absl::StatusOr<DeviceContext*> d = DeviceFor(static_cast<Device>(in.word<F::kDevice>()));
        if (!d.ok()) FAIL(d.status());
        st =
            Storage::Allocate((*d)->allocator(), static_cast<size_t>(bytes), (*d)->allocator_ref());
      }
      if (!st.ok()) FAIL(st.status());
      O(in.reg<F::kDst>()).st = *std::move(st);
      if constexpr (kProfile) SampleMemory();
    }
    NEXT();
  }
  CASE(AllocTensor) {
    DECODE(AllocTensor);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const absl::Span<const uint32_t> dims = in.list<F::kDims>();
      int64_t d[Tensor::kMaxRank];
      for (size_t k = 0; k < dims.size(); ++k) d[k] = VAL(dims[k]);
      const Tensor* b = nullptr;
      if (depth == 0 && run_output_buffers != nullptr) {
        // An output with a caller's buffer: the kernel writes there (same dtype and dims).
        b = OutputBufferAt(fn, static_cast<uint32_t>(ip - code));
        if (b != nullptr && (static_cast<uint32_t>(b->dtype()) != in.word<F::kDType>() ||
                             b->dims() != absl::Span<const int64_t>(d, dims.size()) ||
                             O(in.reg<F::kStorage>()).st->device() != Device::kCPU)) {
          b = nullptr;  // not the buffer's shape: computed in the pool, refused at ret
        }
      }
      if (b != nullptr) {
        O(in.reg<F::kDst>()).t = *b;
      } else {
        absl::StatusOr<Tensor> t = ops::ViewOf(
            O(in.reg<F::kStorage>()).st, VAL(in.value<F::kOffset>()),
            static_cast<DType>(in.word<F::kDType>()), absl::Span<const int64_t>(d, dims.size()));
        if (!t.ok()) FAIL(t.status());
        O(in.reg<F::kDst>()).t = *std::move(t);
      }
    }
    NEXT();
  }
  CASE(AllocGrowable) {
    DECODE(AllocGrowable);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      Allocator* a = pool.get();
      std::shared_ptr<Allocator> keep = pool;
      if (in.word<F::kDevice>() != static_cast<uint32_t>(Device::kCPU)) {
        absl::StatusOr<DeviceContext*> dc = DeviceFor(static_cast<Device>(in.word<F::kDevice>()));
        if (!dc.ok()) FAIL(dc.status());
        a = &(*dc)->allocator();
        keep = (*dc)->allocator_ref();
      }
      const absl::Span<const uint32_t> dims = in.list<F::kDims>();
      int64_t d[Tensor::kMaxRank];
      for (size_t k = 0; k < dims.size(); ++k) d[k] = VAL(dims[k]);
      absl::StatusOr<Tensor> t =
          ops::AllocGrowable(*a, static_cast<DType>(in.word<F::kDType>()),
                             static_cast<int>(in.word<F::kAxis>()), VAL(in.value<F::kCapacity>()),
                             absl::Span<const int64_t>(d, dims.size()), std::move(keep));
      if (!t.ok()) FAIL(t.status());
      O(in.reg<F::kDst>()).t = *std::move(t);
      if constexpr (kProfile) SampleMemory();
    }
    NEXT();
  }
  CASE(Append) {
    DECODE(Append);
    if (O(in.reg<F::kTensor>()).t.device() == Device::kCPU) {
      CHECK_OK(ops::Append(*pool, O(in.reg<F::kTensor>()).t, O(in.reg<F::kPart>()).t,
                           static_cast<int>(in.word<F::kAxis>()), pool, cuda.get()));
    } else {
      if (cuda == nullptr)
        FAIL(absl::FailedPreconditionError("append to a device tensor without a device context"));
      CHECK_OK(ops::Append(cuda->allocator(), O(in.reg<F::kTensor>()).t, O(in.reg<F::kPart>()).t,
                           static_cast<int>(in.word<F::kAxis>()), cuda->allocator_ref(),
                           cuda.get()));
    }
    if constexpr (kProfile) SampleMemory();
    NEXT();
  }
  CASE(Extend) {
    DECODE(Extend);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      Tensor& t = O(in.reg<F::kTensor>()).t;
      const int axis = static_cast<int>(in.word<F::kAxis>());
      const int64_t length = VAL(in.value<F::kLength>());
      if (t.device() == Device::kCPU) {
        CHECK_OK(ops::Extend(*pool, t, axis, length, pool, cuda.get()));
      } else {
        if (cuda == nullptr)
          FAIL(absl::FailedPreconditionError("extend of a device tensor without a device context"));
        CHECK_OK(
            ops::Extend(cuda->allocator(), t, axis, length, cuda->allocator_ref(), cuda.get()));
      }
    }
    if constexpr (kProfile) SampleMemory();
    NEXT();
  }
  CASE(LoadConst) {
    DECODE(LoadConst);
    O(in.reg<F::kDst>()).t = constants[in.word<F::kConst>()];
    NEXT();
  }
  CASE(Reshape) {
    DECODE(Reshape);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const absl::Span<const uint32_t> dims = in.list<F::kDims>();
      int64_t d[Tensor::kMaxRank];
      for (size_t k = 0; k < dims.size(); ++k) d[k] = VAL(dims[k]);
      absl::StatusOr<Tensor> t =
          ops::Reshape(O(in.reg<F::kSrc>()).t, absl::Span<const int64_t>(d, dims.size()));
      if (!t.ok()) FAIL(t.status());
      O(in.reg<F::kDst>()).t = *std::move(t);
    }
    NEXT();
  }
  CASE(View) {
    DECODE(View);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const absl::Span<const uint32_t> dims = in.list<F::kDims>();
      const absl::Span<const uint32_t> strides = in.list<F::kStrides>();
      int64_t d[Tensor::kMaxRank], st[Tensor::kMaxRank];
      for (size_t k = 0; k < dims.size(); ++k) {
        d[k] = VAL(dims[k]);
        st[k] = VAL(strides[k]);
      }
      absl::StatusOr<Tensor> t = ops::View(O(in.reg<F::kSrc>()).t, VAL(in.value<F::kOffset>()),
                                           absl::Span<const int64_t>(d, dims.size()),
                                           absl::Span<const int64_t>(st, dims.size()));
      if (!t.ok()) FAIL(t.status());
      O(in.reg<F::kDst>()).t = *std::move(t);
    }
    NEXT();
  }
  CASE(Copy) {
    DECODE(Copy);
    CHECK_OK(ops::Copy(O(in.reg<F::kSrc>()).t, O(in.reg<F::kDst>()).t, cuda.get()));
    NEXT();
  }
  CASE(Invoke) {
    DECODE(Invoke);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const Executable::KernelEntry& k = exe->kernel_entry(static_cast<int>(in.word<F::kKernel>()));
      const absl::Span<const uint32_t> ins = in.list<F::kInputs>();
      const absl::Span<const uint32_t> outs = in.list<F::kOutputs>();
      const uint32_t num_ins = static_cast<uint32_t>(ins.size());
      const uint32_t num_outs = static_cast<uint32_t>(outs.size());
      for (uint32_t j = 0; j < num_ins; ++j) {
        const uint32_t r = ins[j];
        in_buf[j] = r == kAbsentRegister ? nullptr : &O(r).t;
      }
      for (uint32_t j = 0; j < num_outs; ++j) {
        const uint32_t r = outs[j];
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
        CHECK_OK(PrepareDeviceInvoke(k, num_ins));
      } else if (cuda != nullptr) {
        CHECK_OK(PrepareHostInvoke(num_ins, num_outs));
      }
      ctx.set_site(&fn_sites[in.word<F::kSite>()]);
      [[maybe_unused]] int64_t start = 0;
      if constexpr (kProfile) start = profiler->Now();
      status = k.kernel->Run(ctx, absl::Span<const Tensor* const>(in_buf.data(), num_ins),
                             absl::Span<Tensor* const>(out_buf.data(), num_outs));
      if (StorageRef& ws = fn_sites[in.word<F::kSite>()].workspace;
          ws && ws->size() > kMaxKeptWorkspaceBytes) {
        ws.Reset();
      }
      if constexpr (kProfile) {
        const int64_t end = profiler->Now();
        if (status.ok()) {
          profiler->Kernel(static_cast<int>(in.word<F::kKernel>()), function, in.word<F::kSite>(),
                           static_cast<uint32_t>(ip - code), start, end, in_buf.data(), num_ins,
                           out_buf.data(), num_outs);
          SampleMemory();
        }
      }
      if (moved_inputs) {  // the copies die now, not at some later invoke
        for (uint32_t j = 0; j < num_ins; ++j) device_in_buf[j] = Tensor();
        moved_inputs = false;
      }
      if (!status.ok()) goto error;
    }
    NEXT();
  }
  CASE(Emit) {
    DECODE(Emit);
    if (on_emit != nullptr && *on_emit) {
      const Tensor& t = O(in.reg<F::kTensor>()).t;
      if (t.defined() && t.device() != Device::kCPU) {
        // The host sees a copy (a sync point).
        absl::StatusOr<Tensor> host = Tensor::Allocate(*pool, t.dtype(), t.dims(), pool);
        if (!host.ok()) FAIL(host.status());
        CHECK_OK(ops::Copy(t, *host, cuda.get()));
        CHECK_OK((*on_emit)(static_cast<int>(in.word<F::kStream>()), *host));
      } else {
        CHECK_OK((*on_emit)(static_cast<int>(in.word<F::kStream>()), t));
      }
    }
    NEXT();
  }
  CASE(SeqNew) {
    DECODE(SeqNew);
    O(in.reg<F::kDst>()).seq = std::make_shared<Sequence>();
    NEXT();
  }
  CASE(SeqPush) {
    DECODE(SeqPush);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(in.reg<F::kSeq>()).seq;
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);  // values: copy on write
      q->items.push_back(O(in.reg<F::kTensor>()).t);
    }
    NEXT();
  }
  CASE(SeqInsert) {
    DECODE(SeqInsert);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(in.reg<F::kSeq>()).seq;
      int64_t pos = S(in.reg<F::kIndex>()).i;
      const int64_t n = static_cast<int64_t>(q->items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos > n)
        FAIL(absl::OutOfRangeError(
            absl::StrCat("seq_insert position out of range: ", S(in.reg<F::kIndex>()).i,
                         " for a sequence of ", n)));
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);
      q->items.insert(q->items.begin() + pos, O(in.reg<F::kTensor>()).t);
    }
    NEXT();
  }
  CASE(SeqErase) {
    DECODE(SeqErase);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      std::shared_ptr<Sequence>& q = O(in.reg<F::kSeq>()).seq;
      int64_t pos = S(in.reg<F::kIndex>()).i;
      const int64_t n = static_cast<int64_t>(q->items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos >= n)
        FAIL(absl::OutOfRangeError(
            absl::StrCat("seq_erase position out of range: ", S(in.reg<F::kIndex>()).i,
                         " for a sequence of ", n)));
      if (q.use_count() > 1) q = std::make_shared<Sequence>(*q);
      q->items.erase(q->items.begin() + pos);
    }
    NEXT();
  }
  CASE(SeqAt) {
    DECODE(SeqAt);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      const Sequence& q = *O(in.reg<F::kSeq>()).seq;
      int64_t pos = S(in.reg<F::kIndex>()).i;
      const int64_t n = static_cast<int64_t>(q.items.size());
      if (pos < 0) pos += n;
      if (pos < 0 || pos >= n)
        FAIL(absl::OutOfRangeError(absl::StrCat(
            "seq_at position out of range: ", S(in.reg<F::kIndex>()).i, " for a sequence of ", n)));
      O(in.reg<F::kDst>()).t = q.items[pos];
    }
    NEXT();
  }
  CASE(SeqLen) {
    DECODE(SeqLen);
    S(in.reg<F::kDst>()).i = static_cast<int64_t>(O(in.reg<F::kSeq>()).seq->items.size());
    NEXT();
  }
  CASE(OptNone) {
    DECODE(OptNone);
    O(in.reg<F::kDst>()).Clear();
    NEXT();
  }
  CASE(OptSome) {
    DECODE(OptSome);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      Object v = O(in.reg<F::kContent>());
      O(in.reg<F::kDst>()) = std::move(v);
      O(in.reg<F::kDst>()).has = true;
    }
    NEXT();
  }
  CASE(OptHas) {
    DECODE(OptHas);
    S(in.reg<F::kDst>()).i = O(in.reg<F::kOpt>()).has;
    NEXT();
  }
  CASE(OptGet) {
    DECODE(OptGet);
    {  // scope: locals end before the dispatch (clang checks indirect gotos)
      if (!O(in.reg<F::kOpt>()).has)
        FAIL(absl::FailedPreconditionError("opt_get of an empty optional"));
      Object v = O(in.reg<F::kOpt>());
      v.has = false;
      O(in.reg<F::kDst>()) = std::move(v);
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
