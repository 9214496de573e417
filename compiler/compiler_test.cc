// Compiler execution and memory-plan tests: graphs built with the C++ builder are compiled,
// run in the VM, and compared with the reference kernels run directly (an independent path:
// no compiler, no VM).
#include "compiler/compiler.h"

#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/compiler_testing.h"
#include "compiler/passes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "kernels/testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Disassembly(const CompileResult& r) {
  const auto* data = reinterpret_cast<const uint8_t*>(r.bytes.data());
  absl::StatusOr<isa::VerifiedFile> v = isa::VerifyFile({data, r.bytes.size()});
  if (!v.ok()) return v.status().ToString();
  isa::DisassembleOptions o;
  o.constant_data = false;
  absl::StatusOr<std::string> s = isa::Disassemble(*v->executable, {}, o);
  return s.ok() ? *s : s.status().ToString();
}

void ExpectNear(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.dims(), want.dims()) << got.DebugString() << " vs " << want.DebugString();
  std::vector<double> a = testing::ToDoubles(got), b = testing::ToDoubles(want);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

Tensor Ref(const std::string& op, const std::vector<Tensor>& ins, DType out,
           const Attrs& attrs = {}) {
  testing::KernelCall call(op);
  for (const Tensor& t : ins) call.In(t);
  call.Out(out);
  for (const auto& [k, v] : attrs) {
    switch (v.type) {
      case AttrValue::Type::kInt:
        call.Attr(k, v.i);
        break;
      case AttrValue::Type::kInts:
        call.Attr(k, v.ints);
        break;
      case AttrValue::Type::kFloat:
        call.Attr(k, v.f);
        break;
      default:
        break;
    }
  }
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

// The reference kernel's output, or its error (an input it does not take).
absl::StatusOr<Tensor> RefOr(const std::string& op, const std::vector<Tensor>& ins,
                             const Attrs& attrs = {}) {
  testing::KernelCall call(op);
  for (const Tensor& t : ins) call.In(t);
  call.Out(DType::kF32);
  for (const auto& [k, v] : attrs) {
    if (v.type == AttrValue::Type::kInt) call.Attr(k, v.i);
    if (v.type == AttrValue::Type::kInts) call.Attr(k, v.ints);
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<Tensor> r, call.Run());
  return r[0];
}

TEST(CompilerTest, StraightLineMatchesReferenceKernels) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Tensor w = RandomF32({4, 3}, 1), bias = RandomF32({3}, 2);
  Value* x = b.Input("x", DType::kF32, {"batch", 4});
  Value* h = b.Op("MatMul", {x, b.Constant(w, "w", true)});
  Value* y = b.Op("Tanh", {b.Op("Add", {h, b.Constant(bias, "b", true)})});
  b.Output("y", y);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.exe->num_weights(), 2);
  Tensor xv = RandomF32({5, 4}, 3);
  std::vector<Tensor> out = RunOrDie(c.exe, {{"x", xv}});
  ASSERT_EQ(out.size(), 1u);
  Tensor want = Ref("Tanh", {Ref("Add", {Ref("MatMul", {xv, w}, DType::kF32), bias}, DType::kF32)},
                    DType::kF32);
  ExpectNear(out[0], want);
}

// --disable-rewrite takes the pattern rules' names and the compiler's own two passes; an
// unknown name is refused with every accepted name listed.
TEST(CompilerTest, UnknownDisabledRewriteListsRulesAndPasses) {
  Module m;
  GraphBuilder g(m.AddFunction("main"));
  g.Output("y", g.Op("Relu", {g.Input("x", DType::kF32, {4})}));
  CompileOptions o;
  o.disabled_rewrites = {"transpose_weights", "unstack_loop_carried"};
  EXPECT_TRUE(Compile(m, o).ok());
  o.disabled_rewrites = {"no_such_rule"};
  absl::StatusOr<CompileResult> r = Compile(m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unknown rewrite rule 'no_such_rule'"));
  EXPECT_THAT(r.status().message(), HasSubstr("pow_const"));
  EXPECT_THAT(r.status().message(), HasSubstr("unstack_loop_carried"));
  EXPECT_THAT(r.status().message(), HasSubstr("transpose_weights"));
}

TEST(CompilerTest, ChainOfSameSizedOpsUsesTwoArenaBuffers) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {16, 16});
  Value* v = x;
  for (int i = 0; i < 10; ++i) v = b.Op(i % 2 ? "Tanh" : "Relu", {v});
  v = b.Op("Sigmoid", {v});
  b.Output("y", v);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  // Ten intermediates of 1 KiB each ping-pong between two slots; the output has its own storage.
  EXPECT_EQ(c.result.functions[0].arena_bytes, 2 * 16 * 16 * 4) << c.result.ReportText();
  Tensor xv = RandomF32({16, 16}, 4);
  std::vector<Tensor> out = RunOrDie(c.exe, {{"x", xv}});
  Tensor want = xv;
  for (int i = 0; i < 10; ++i) want = Ref(i % 2 ? "Tanh" : "Relu", {want}, DType::kF32);
  want = Ref("Sigmoid", {want}, DType::kF32);
  ExpectNear(out[0], want);
}

TEST(CompilerTest, MlpWithBoundedBatchHasOneArenaAndNoDynamicAllocations) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"batch", 32});
  Value* v = x;
  std::vector<Tensor> weights;
  for (int layer = 0; layer < 20; ++layer) {
    weights.push_back(RandomF32({32, 32}, 10 + layer));
    v = b.Op("Relu", {b.Op("MatMul", {v, b.Constant(weights.back(), "w", true)})});
  }
  b.Output("y", v);
  CompileOptions o;
  o.bounds = {{"batch", 64}};
  Compiled c = CompileOrDie(m, o);
  ASSERT_TRUE(c.exe);
  const FunctionReport& r = c.result.functions[0];
  EXPECT_GT(r.arena_bytes, 0);
  EXPECT_LE(r.arena_bytes, 2 * 64 * 32 * 4) << c.result.ReportText();
  // The arena holds every intermediate; the output gets its own storage (it must survive the
  // next run), counted apart.
  EXPECT_EQ(r.dynamic_alloc_sites, 0) << c.result.ReportText();
  EXPECT_EQ(r.output_allocs, 1) << c.result.ReportText();
  EXPECT_THAT(c.result.ReportText(), HasSubstr("arenas=1 dynamic_alloc_sites=0"));
  Tensor xv = RandomF32({7, 32}, 99);
  std::vector<Tensor> out = RunOrDie(c.exe, {{"x", xv}});
  Tensor want = xv;
  for (const Tensor& w : weights)
    want = Ref("Relu", {Ref("MatMul", {want, w}, DType::kF32)}, DType::kF32);
  ExpectNear(out[0], want, 1e-4);
  // A batch above the bound is refused, naming the symbol.
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  ASSERT_TRUE((*vm)->SetInput("x", RandomF32({65, 32}, 5)).ok());
  absl::Status s = (*vm)->Run();
  EXPECT_THAT(s.message(), HasSubstr("batch"));
}

TEST(CompilerTest, IfSelectsABranch) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {3});
  Value* c = b.Input("c", DType::kBool, {});
  std::vector<Value*> r = b.If(
      c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Relu", {x})}; },
      [&](GraphBuilder& e) { return std::vector<Value*>{e.Op("Neg", {x})}; });
  b.Output("y", r[0]);
  Compiled comp = CompileOrDie(m);
  ASSERT_TRUE(comp.exe);
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {3}, {-1, 2, -3});
  Tensor yes = testing::Bool({}, {true}), no = testing::Bool({}, {false});
  ExpectNear(RunOrDie(comp.exe, {{"x", xv}, {"c", yes}})[0],
             *Tensor::FromVector<float>(DType::kF32, {3}, {0, 2, 0}));
  ExpectNear(RunOrDie(comp.exe, {{"x", xv}, {"c", no}})[0],
             *Tensor::FromVector<float>(DType::kF32, {3}, {1, -2, 3}));
}

// An If's result is its taken branch's value: that value's arena slot stays live as long
// as anything views the result (an Identity, a Dropout: kept with --no-optimize), and as
// long as a later If passes it on. Before, its slot ended with the If's own last use, so a
// later value (here `later`) was placed over it and the sum read the later value's bits
// (fuzzer seed 20261129 graphs 7568 and 13229).
TEST(CompilerTest, ViewsOfAnIfResultKeepItsBranchValueAlive) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {5});
  Value* c = b.Input("c", DType::kBool, {});
  std::vector<Value*> r = b.If(
      c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Neg", {x})}; },
      [&](GraphBuilder& e) { return std::vector<Value*>{e.Op("Relu", {x})}; });
  Value* view = b.Op("Identity", {r[0]});
  std::vector<Value*> passed = b.If(
      c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Identity", {view})}; },
      [&](GraphBuilder& e) { return std::vector<Value*>{e.Op("Identity", {view})}; });
  Value* later = b.Op("Exp", {x});
  b.Output("y", b.Op("Add", {b.Op("Identity", {passed[0]}), later}));
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {5}, {-1, 2, -3, 0.5f, 4});
  for (bool optimize : {false, true}) {
    CompileOptions options;
    options.optimize = optimize;
    Compiled comp = CompileOrDie(m, options);
    ASSERT_TRUE(comp.exe);
    for (bool cond : {true, false}) {
      Tensor branch = Ref(cond ? "Neg" : "Relu", {xv}, DType::kF32);
      Tensor want = Ref("Add", {branch, Ref("Exp", {xv}, DType::kF32)}, DType::kF32);
      std::vector<Tensor> got = RunOrDie(comp.exe, {{"x", xv}, {"c", testing::Bool({}, {cond})}});
      ASSERT_EQ(got.size(), 1u);
      SCOPED_TRACE(absl::StrCat("optimize ", optimize, ", cond ", cond));
      ExpectNear(got[0], want);
    }
  }
}

// Outputs keep the names the graph gave them. Optimized, CSE merges two outputs computing
// the same value into one value, and Identity removal replaces an output by its input; the
// signature took the value's name, so 'b' came out as 'a_1' and 'c' under another name
// (known.py's dynvm-bug-duplicate-outputs-renamed).
TEST(CompilerTest, OutputsMergedByTheOptimizerKeepTheirNames) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {3});
  Value* a = b.Op("Neg", {x});
  b.Output("a", a);
  b.Output("b", b.Op("Neg", {x}));
  b.Output("c", b.Op("Identity", {b.Op("Exp", {x})}));
  b.Output("d", b.Op("Exp", {x}));
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {3}, {-1, 2, 0.5f});
  Tensor neg = Ref("Neg", {xv}, DType::kF32), exp = Ref("Exp", {xv}, DType::kF32);
  for (bool optimize : {false, true}) {
    SCOPED_TRACE(absl::StrCat("optimize ", optimize));
    CompileOptions options;
    options.optimize = optimize;
    Compiled comp = CompileOrDie(m, options);
    ASSERT_TRUE(comp.exe);
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(comp.exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->SetInput("x", xv).ok());
    ASSERT_TRUE((*vm)->Run().ok());
    for (const auto& [name, want] : std::vector<std::pair<std::string, Tensor>>{
             {"a", neg}, {"b", neg}, {"c", exp}, {"d", exp}}) {
      absl::StatusOr<Tensor> got = (*vm)->GetOutput(name);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status();
      ExpectNear(*got, want);
    }
  }
}

// An If result (or a Loop result) that is a Loop's carried initial value, passed through the
// body unchanged, is held by the Loop's result until that is last read: its branch's slot
// must not be reused by the body's values (here a Gather of `big`). Before, the loop
// returned the Gather's bits (the fuzzer's dynvm-bug-carried-aliasing: regressions
// if-result-carried-by-a-loop, loop-result-carried-through-a-loop).
TEST(CompilerTest, RegionResultsCarriedThroughALoopKeepTheirValues) {
  std::vector<int64_t> cv(25);
  for (int64_t i = 0; i < 25; ++i) cv[i] = i - 12;
  Tensor c = *Tensor::FromVector<int64_t>(DType::kI64, {5, 5}, cv);
  Tensor big = RandomF32({1, 5, 3}, 13);
  for (bool from_loop : {false, true}) {
    for (bool optimize : {false, true}) {
      SCOPED_TRACE(absl::StrCat(from_loop ? "a Loop" : "an If", " result, optimize ", optimize));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* cond = b.Input("cond", DType::kBool, {});
      Value* cin = b.Input("c", DType::kI64, {5, 5});
      Value* bigv = b.Input("big", DType::kF32, {1, 5, 3});
      Value* trip = b.ScalarI64(3);
      Value* init;
      if (from_loop) {
        init = b.Loop(trip, nullptr, {cin}, 0,
                      [&](GraphBuilder& body, Value*, Value* cnd, const std::vector<Value*>& s) {
                        return std::vector<Value*>{cnd, body.Op("Abs", {s[0]})};
                      })[0];
      } else {
        init = b.If(
            cond, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Identity", {cin})}; },
            [&](GraphBuilder& e) { return std::vector<Value*>{e.Op("Abs", {cin})}; })[0];
      }
      std::vector<Value*> r =
          b.Loop(trip, nullptr, {init}, 1,
                 [&](GraphBuilder& body, Value* it, Value* cnd, const std::vector<Value*>& s) {
                   Value* g = body.Op("Gather", {bigv, it}, {{"axis", AttrInt(2)}});
                   return std::vector<Value*>{cnd, body.Op("Identity", {s[0]}), g};
                 });
      b.Output("sf", r[0]);
      b.Output("gs", r[1]);
      CompileOptions options;
      options.optimize = optimize;
      Compiled comp = CompileOrDie(m, options);
      ASSERT_TRUE(comp.exe);
      std::vector<Tensor> got =
          RunOrDie(comp.exe, {{"cond", testing::Bool({}, {false})}, {"c", c}, {"big", big}});
      ASSERT_EQ(got.size(), 2u);
      ExpectNear(got[0], Ref("Abs", {c}, DType::kI64), 0);
    }
  }
}

// BatchNormalization's scale, B, mean and var hold one value per channel. One of another
// length is refused, naming the node: at compile time when both sizes are known, at run time
// when the length is a symbol. Before, a known mismatch compiled (fuzzer seed 20261129 graph
// 10460: ONNX Runtime refuses it).
TEST(CompilerTest, BatchNormParametersOfAnotherLengthThanTheChannelsAreRefused) {
  auto build = [](Module& m, std::vector<DimSpec> param, int wrong) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {1, 3, 4});
    std::vector<Value*> ins = {x};
    const char* names[] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; ++i) {
      ins.push_back(i == wrong ? b.Input(names[i], DType::kF32, param)
                               : b.Input(names[i], DType::kF32, {3}));
    }
    b.set_node_name("bn");
    b.Output("y", b.Op("BatchNormalization", ins));
  };
  const char* params[] = {"scale", "B", "input_mean", "input_var"};
  for (int wrong = 0; wrong < 4; ++wrong) {
    SCOPED_TRACE(params[wrong]);
    Module known;
    build(known, {2}, wrong);
    absl::StatusOr<CompileResult> r = Compile(known, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("'bn'"));
    EXPECT_THAT(r.status().message(),
                HasSubstr(absl::StrCat(params[wrong], " holds 2 values, but X has 3 channels")));
    Module matrix;
    build(matrix, {3, 1}, wrong);
    r = Compile(matrix, {});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("(rank 1), got rank 2"));
  }
  // A symbolic length: compiled, refused at run time for 2 values, run for 3.
  Module sym;
  build(sym, {"n"}, 0);
  Compiled comp = CompileOrDie(sym);
  ASSERT_TRUE(comp.exe);
  Tensor x = RandomF32({1, 3, 4}, 7), three = RandomF32({3}, 8);
  Tensor var = *Tensor::FromVector<float>(DType::kF32, {3}, {0.5f, 1.0f, 2.0f});
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(comp.exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  for (const auto& [name, t] :
       std::vector<std::pair<std::string, Tensor>>{{"x", x},
                                                   {"scale", RandomF32({2}, 9)},
                                                   {"bias", three},
                                                   {"mean", three},
                                                   {"var", var}}) {
    ASSERT_TRUE((*vm)->SetInput(name, t).ok()) << name;
  }
  absl::Status s = (*vm)->Run();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'bn'"));
  EXPECT_THAT(s.message(), HasSubstr("input 1 must be [3]"));
  Tensor scale = RandomF32({3}, 10);
  std::vector<Tensor> got = RunOrDie(
      comp.exe, {{"x", x}, {"scale", scale}, {"bias", three}, {"mean", three}, {"var", var}});
  ASSERT_EQ(got.size(), 1u);
  ExpectNear(got[0], Ref("BatchNormalization", {x, scale, three, three, var}, DType::kF32));
}

// An If whose condition shape arithmetic decides (a scripted export's rank check) is replaced
// by its taken branch at compile time: the other branch, which could not compile for these
// shapes (a MatMul whose inner dims differ), is dropped, with and without optimization. The
// comparisons, Not and a bool constant all decide; a run-time condition does not.
TEST(CompilerTest, StaticIfCompilesOnlyTheTakenBranch) {
  for (const bool optimize : {true, false}) {
    for (const std::string form : {"Equal", "Not", "Greater", "LessOrEqual", "Constant"}) {
      SCOPED_TRACE(absl::StrCat(form, optimize ? "" : " --no-optimize"));
      Module m;
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {DimSpec("batch"), 3, 4});
      Value* rank = b.Op("Size", {b.Op("Shape", {x})});
      Value* cond = nullptr;  // true: x has rank 3
      if (form == "Equal") cond = b.Op("Equal", {rank, b.ScalarI64(3)});
      if (form == "Not") cond = b.Op("Not", {b.Op("Equal", {rank, b.ScalarI64(2)})});
      if (form == "Greater") cond = b.Op("Greater", {rank, b.ScalarI64(2)});
      if (form == "LessOrEqual") cond = b.Op("LessOrEqual", {b.ScalarI64(3), rank});
      if (form == "Constant") cond = b.Constant(testing::Bool({}, {true}));
      Value* w = b.Constant(RandomF32({5, 7}, 3), "w", /*is_weight=*/true);
      std::vector<Value*> r = b.If(
          cond, 2,
          [&](GraphBuilder& t) {
            return std::vector<Value*>{t.Op("Relu", {x}), x};
          },
          [&](GraphBuilder& e) {
            return std::vector<Value*>{e.Op("MatMul", {x, w}), e.Op("Neg", {x})};
          });
      b.Output("y", r[0]);
      b.Output("z", r[1]);
      CompileOptions options;
      options.optimize = optimize;
      Compiled comp = CompileOrDie(m, options);
      ASSERT_TRUE(comp.exe);
      EXPECT_FALSE(absl::StrContains(Disassembly(comp.result), "\n  if "));
      Tensor xv = RandomF32({2, 3, 4}, 7);
      std::vector<Tensor> out = RunOrDie(comp.exe, {{"x", xv}});
      ASSERT_EQ(out.size(), 2u);
      ExpectNear(out[0], Ref("Relu", {xv}, DType::kF32));
      ExpectNear(out[1], xv);
    }
  }
  // A condition known only at run time keeps both branches, so the bad one is an error.
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {2, 3, 4});
  Value* c = b.Input("c", DType::kBool, {});
  Value* w = b.Constant(RandomF32({5, 7}, 3), "w", /*is_weight=*/true);
  std::vector<Value*> r = b.If(
      c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Relu", {x})}; },
      [&](GraphBuilder& e) {
        return std::vector<Value*>{e.Op("MatMul", {x, w})};
      });
  b.Output("y", r[0]);
  absl::StatusOr<CompileResult> bad = Compile(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("else_branch"));
}

// Values whose rank data decides: Ifs nested 1 to 3 deep, each of whose branches makes its own
// rank (x with a leading unit axis squeezed, one rank lower, one rank higher), under run-time
// conditions
// (Silero VAD squeezes a dim only when it is 1, inside two Ifs). The compiler types the result
// as far as it can, compiles every consumer of it (an LSTM, LayerNormalization, Gemm, MatMul,
// Softmax, a reduction), and the kernels check the ranks at run time: the path whose rank the
// consumer takes matches the reference kernel; a path that gives it a rank it cannot take is an
// error naming the consumer, and the VM runs again after it.
TEST(CompilerTest, RanksDecidedByNestedIfsReachTheirConsumers) {
  struct Consumer {
    const char* op;
    std::vector<int64_t> x_dims;  // the rank of the path where every condition holds
    Attrs attrs;
    std::vector<Tensor> weights;
  };
  const std::vector<Consumer> consumers = {
      {"LSTM",
       {2, 3, 5},
       {{"hidden_size", AttrInt(4)}},
       {RandomF32({1, 16, 5}, 11), RandomF32({1, 16, 4}, 12)}},
      {"LayerNormalization", {2, 3, 5}, {}, {RandomF32({5}, 13)}},
      {"Gemm", {3, 5}, {}, {RandomF32({5, 3}, 14)}},
      {"MatMul", {2, 3, 5}, {}, {RandomF32({5, 3}, 14)}},
      {"Softmax", {2, 3, 5}, {}, {}},
  };
  for (const Consumer& consumer : consumers) {
    for (int depth = 1; depth <= 3; ++depth) {
      for (const std::string other : {"lower", "higher"}) {
        SCOPED_TRACE(absl::StrCat(consumer.op, ", depth ", depth, ", the other branch ", other));
        // x: the consumer's rank with a leading 1 that the taken path squeezes; the other
        // branches hand the consumer one rank less (a sum over the leading axis) or one more.
        std::vector<int64_t> dims = consumer.x_dims;
        dims.insert(dims.begin(), 1);
        Module m;
        GraphBuilder b(m.AddFunction("main"));
        std::vector<DimSpec> spec(dims.begin(), dims.end());
        spec.back() = DimSpec("t");  // symbolic, as an audio chunk's length
        Value* x = b.Input("x", DType::kF32, spec);
        std::vector<Value*> conds;
        for (int i = 0; i < depth; ++i) {
          conds.push_back(b.Input(absl::StrCat("c", i), DType::kBool, {}));
        }
        // Level i: If(c_i) then (level i + 1, innermost: x squeezed) else (another rank).
        std::function<Value*(GraphBuilder&, int)> level = [&](GraphBuilder& lb, int i) -> Value* {
          return lb.If(
              conds[i], 1,
              [&](GraphBuilder& t) {
                return std::vector<Value*>{i + 1 < depth ? level(t, i + 1)
                                                         : t.Op("Squeeze", {x, t.VectorI64({0})})};
              },
              [&](GraphBuilder& e) {
                Value* lower = e.Op("ReduceSum", {e.Op("Squeeze", {x, e.VectorI64({0})})},
                                    {{"axes", AttrInts({0})}, {"keepdims", AttrInt(0)}});
                return std::vector<Value*>{
                    other == "lower" ? lower : e.Op("Unsqueeze", {x, e.VectorI64({0})})};
              })[0];
        };
        std::vector<Value*> ins = {level(b, 0)};
        for (const Tensor& t : consumer.weights) ins.push_back(b.Constant(t));
        b.Output("y", b.Op(consumer.op, ins, consumer.attrs));
        Compiled comp = CompileOrDie(m);
        ASSERT_TRUE(comp.exe);
        // What each path hands the consumer, and the reference kernel's answer to it.
        const Tensor xv = RandomF32(dims, 21 + depth);
        const Tensor squeezed = *Tensor::FromVector<float>(
            DType::kF32, consumer.x_dims, absl::MakeConstSpan(xv.data<float>(), xv.numel()));
        std::vector<int64_t> higher_dims = dims;
        higher_dims.insert(higher_dims.begin(), 1);
        const Tensor other_value =
            other == "lower"
                ? *RefOr("ReduceSum", {squeezed},
                         {{"axes", AttrInts({0})}, {"keepdims", AttrInt(0)}})
                : *Tensor::FromVector<float>(DType::kF32, higher_dims,
                                             absl::MakeConstSpan(xv.data<float>(), xv.numel()));
        auto reference = [&](const Tensor& v) {
          std::vector<Tensor> args = {v};
          args.insert(args.end(), consumer.weights.begin(), consumer.weights.end());
          return RefOr(consumer.op, args, consumer.attrs);
        };
        absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(comp.exe);
        ASSERT_TRUE(vm.ok()) << vm.status();
        auto run = [&](int false_at) -> absl::StatusOr<Tensor> {
          DYNVM_RETURN_IF_ERROR((*vm)->SetInput("x", xv));
          for (int i = 0; i < depth; ++i) {
            DYNVM_RETURN_IF_ERROR(
                (*vm)->SetInput(absl::StrCat("c", i), testing::Bool({}, {i != false_at})));
          }
          DYNVM_RETURN_IF_ERROR((*vm)->Run());
          return (*vm)->GetOutput("y");
        };
        // Every condition true, then each one false in turn, then all true again: the VM is
        // usable after an error.
        for (int false_at = -1; false_at <= depth; ++false_at) {
          const int at = false_at == depth ? -1 : false_at;
          absl::StatusOr<Tensor> want = reference(at < 0 ? squeezed : other_value);
          absl::StatusOr<Tensor> got = run(at);
          SCOPED_TRACE(absl::StrCat("false at level ", at));
          if (want.ok()) {
            ASSERT_TRUE(got.ok()) << got.status();
            ExpectNear(*got, *want, 1e-5);
          } else {
            ASSERT_FALSE(got.ok()) << "the reference refuses: " << want.status();
            EXPECT_THAT(got.status().message(), HasSubstr(consumer.op));
          }
        }
      }
    }
  }
}

// Reshape with 0 (copy the input's dim) and -1 (infer it) in its target, of a value whose rank
// only the run decides, inside a Loop body inside a Loop body (a Llama export's
// repeat_interleave): typed with the target's rank, the dims from the kernel. A 0 past the end of
// an input of known rank is still refused at compile time.
TEST(CompilerTest, ReshapeCopiesDimsOfAnInputOfUnknownRankAtRunTime) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {2, 3, DimSpec("t")});
  Value* c = b.Input("c", DType::kBool, {});
  Value* one = b.ScalarI64(1);
  std::vector<Value*> outer = b.Loop(
      one, nullptr, {x}, 0,
      [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>& v) {
        std::vector<Value*> inner = l.Loop(
            one, nullptr, {v[0]}, 0,
            [&](GraphBuilder& l2, Value*, Value* cond2, const std::vector<Value*>& w) {
              Value* r = l2.If(
                  c, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Identity", {x})}; },
                  [&](GraphBuilder& e) {
                    return std::vector<Value*>{e.Op("Unsqueeze", {x, e.VectorI64({0})})};
                  })[0];
              Value* y = l2.Op("Reshape", {r, l2.VectorI64({0, -1, 0})});
              return std::vector<Value*>{cond2, l2.Op("Add", {y, l2.ScalarF32(1)})};
            });
        return std::vector<Value*>{cond, inner[0]};
      });
  b.Output("y", outer[0]);
  Compiled comp = CompileOrDie(m);
  ASSERT_TRUE(comp.exe);
  const Tensor xv = RandomF32({2, 3, 4}, 5);
  auto expect = [&](bool taken, std::vector<int64_t> dims) {
    std::vector<Tensor> out = RunOrDie(comp.exe, {{"x", xv}, {"c", testing::Bool({}, {taken})}});
    ASSERT_EQ(out.size(), 1u);
    Tensor want = *Tensor::FromVector<float>(DType::kF32, dims,
                                             absl::MakeConstSpan(xv.data<float>(), xv.numel()));
    for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += 1;
    ExpectNear(out[0], want);
  };
  expect(true, {2, 3, 4});   // [2, 3, 4] -> [0, -1, 0] = [2, 3, 4]
  expect(false, {1, 8, 3});  // [1, 2, 3, 4] -> [0, -1, 0] = [1, 8, 3]
  // Known rank, and a 0 where the input has no dim: refused naming the node.
  Module bad;
  GraphBuilder bb(bad.AddFunction("main"));
  Value* z = bb.Input("z", DType::kF32, {6});
  bb.Output("y", bb.Op("Reshape", {z, bb.VectorI64({3, 0})}));
  absl::StatusOr<CompileResult> r = Compile(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("copies a dim the input lacks"));
}

// A static shape whose element count (or byte size) overflows 64 bits is refused at compile
// time, naming the node, instead of compiling and failing at run time.
TEST(CompilerTest, OverflowingStaticShapesAreRefusedAtCompileTime) {
  // A Reshape's element count overflows; a ConstantOfShape's elements fit but its bytes do not.
  for (const std::string op : {"Reshape", "ConstantOfShape"}) {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {4});
    const int64_t big = op == "Reshape" ? int64_t{1} << 40 : int64_t{1} << 31;
    Value* shape = b.VectorI64({big, big});
    Value* y = op == "Reshape" ? b.Op("Reshape", {x, b.VectorI64({big, big, 4})})
                               : b.Op("ConstantOfShape", {shape});
    b.Output("y", y);
    absl::StatusOr<CompileResult> r = Compile(m);
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(op));
    EXPECT_THAT(r.status().message(), HasSubstr("than fit in 64 bits"));
  }
}

// h_{t+1} = tanh(h_t W + x_t U): an RNN cell driven by a Loop, with the per-step output
// collected as a scan output.
TEST(CompilerTest, RnnCellLoopMatchesAStepByStepReference) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Tensor w = RandomF32({8, 8}, 21), u = RandomF32({4, 8}, 22);
  Value* xs = b.Input("xs", DType::kF32, {"steps", 2, 4});
  Value* h0 = b.Input("h0", DType::kF32, {2, 8});
  Value* trip = b.Op("Gather", {b.Op("Shape", {xs}), b.ScalarI64(0)});
  Value* wv = b.Constant(w, "W", true);
  Value* uv = b.Constant(u, "U", true);
  std::vector<Value*> outs = b.Loop(
      trip, nullptr, {h0}, 1,
      [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
        Value* x = l.Op("Gather", {xs, i});
        Value* h = l.Op("Tanh",
                        {l.Op("Add", {l.Op("MatMul", {carried[0], wv}), l.Op("MatMul", {x, uv})})});
        return std::vector<Value*>{cond, h, h};
      });
  b.Output("h", outs[0]);
  b.Output("hs", outs[1]);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe) << m.Dump();
  Tensor xsv = RandomF32({5, 2, 4}, 23), h0v = RandomF32({2, 8}, 24);
  std::vector<Tensor> out = RunOrDie(c.exe, {{"xs", xsv}, {"h0", h0v}});
  ASSERT_EQ(out.size(), 2u);
  Tensor h = h0v;
  std::vector<float> all;
  for (int t = 0; t < 5; ++t) {
    Tensor x = Ref("Gather", {xsv, Tensor::ScalarI64(t)}, DType::kF32);
    h = Ref("Tanh",
            {Ref("Add", {Ref("MatMul", {h, w}, DType::kF32), Ref("MatMul", {x, u}, DType::kF32)},
                 DType::kF32)},
            DType::kF32);
    for (double v : testing::ToDoubles(h)) all.push_back(static_cast<float>(v));
  }
  ExpectNear(out[0], h, 1e-5);
  ExpectNear(out[1], *Tensor::FromVector<float>(DType::kF32, {5, 2, 8}, all), 1e-5);
}

// A Loop's carried value that starts as another region's result (an If's, a Loop's), as a
// value of an enclosing loop body, or as another input of the same Loop (its trip count) and
// is passed through unchanged keeps its data while the body writes other values: the storage
// it starts in stays live through the loop, and a carried value that is a nested loop's
// result gets storage of its own. Checked optimized and not, against the reference kernels.
TEST(CompilerTest, CarriedValuesKeepTheDataOfWhatTheyStartAs) {
  auto pass_through_gathering = [](GraphBuilder& b, Value* init, Value* big, Value* trip) {
    return b.Loop(trip, nullptr, {init}, 1,
                  [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& s) {
                    Value* g = l.Op("Gather", {big, i}, {{"axis", AttrInt(2)}});
                    return std::vector<Value*>{cond, l.Op("Identity", {s[0]}), g};
                  });
  };
  for (bool optimize : {true, false}) {
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* cond = b.Input("cond", DType::kBool, {});
    Value* c = b.Input("c", DType::kI64, {5, 5});
    Value* big = b.Input("big", DType::kF32, {1, 5, 3});
    Value* x = b.Input("x", DType::kF32, {4, 4});
    Value* m3 = b.ScalarI64(4);
    Tensor w = RandomF32({4, 4}, 31);
    Value* wv = b.Constant(w, "W", true);
    Value* three = b.ScalarI64(3);
    // (a) an If result, and a Loop result, passed through a Loop whose body writes a Gather.
    Value* from_if = b.If(
        cond, 1, [&](GraphBuilder& t) { return std::vector<Value*>{t.Op("Identity", {c})}; },
        [&](GraphBuilder& e) { return std::vector<Value*>{e.Op("Abs", {c})}; })[0];
    b.Output("if_through", pass_through_gathering(b, from_if, big, three)[0]);
    Value* from_loop =
        b.Loop(three, nullptr, {c}, 0,
               [&](GraphBuilder& l, Value*, Value* lc, const std::vector<Value*>& s) {
                 return std::vector<Value*>{lc, l.Op("Abs", {s[0]})};
               })[0];
    b.Output("loop_through", pass_through_gathering(b, from_loop, big, three)[0]);
    // (b) an outer carried value starts a nested loop that computes into its double buffer;
    // the outer body reads it again after the nested loop: s <- s W W + s.
    Value* nested =
        b.Loop(three, nullptr, {x}, 0,
               [&](GraphBuilder& l, Value*, Value* oc, const std::vector<Value*>& s) {
                 Value* two = l.ScalarI64(2);
                 Value* inner =
                     l.Loop(two, nullptr, {s[0]}, 0,
                            [&](GraphBuilder& l2, Value*, Value* ic, const std::vector<Value*>& t) {
                              return std::vector<Value*>{ic, l2.Op("MatMul", {t[0], wv})};
                            })[0];
                 return std::vector<Value*>{oc, l.Op("Add", {inner, s[0]})};
               })[0];
    b.Output("nested", nested);
    // (c) the trip count (a constant) is also the carried initial value.
    b.Output("trip", b.Loop(m3, nullptr, {m3}, 0,
                            [&](GraphBuilder&, Value*, Value* lc, const std::vector<Value*>& s) {
                              return std::vector<Value*>{lc, s[0]};
                            })[0]);
    CompileOptions options;
    options.optimize = optimize;
    Compiled comp = CompileOrDie(m, options);
    ASSERT_TRUE(comp.exe) << m.Dump();
    std::vector<int64_t> cs(25);
    for (int k = 0; k < 25; ++k) cs[k] = k - 12;
    const Tensor cv = *Tensor::FromVector<int64_t>(DType::kI64, {5, 5}, cs);
    Tensor bigv = RandomF32({1, 5, 3}, 32), xv = RandomF32({4, 4}, 33);
    std::vector<Tensor> out = RunOrDie(
        comp.exe, {{"cond", testing::Bool({}, {false})}, {"c", cv}, {"big", bigv}, {"x", xv}});
    ASSERT_EQ(out.size(), 4u);
    const Tensor abs_c = Ref("Abs", {cv}, DType::kI64);
    EXPECT_EQ(testing::ToInts(out[0]), testing::ToInts(abs_c)) << "optimize " << optimize;
    EXPECT_EQ(testing::ToInts(out[1]), testing::ToInts(abs_c)) << "optimize " << optimize;
    Tensor s = xv;
    for (int k = 0; k < 3; ++k) {
      Tensor t = Ref("MatMul", {Ref("MatMul", {s, w}, DType::kF32), w}, DType::kF32);
      s = Ref("Add", {t, s}, DType::kF32);
    }
    ExpectNear(out[2], s, 1e-4);
    EXPECT_EQ(testing::ToInts(out[3]), std::vector<int64_t>{4}) << "optimize " << optimize;
  }
}

// An If whose branches differ in rank has a result of unknown rank; when the branch taken
// gives a function input (or a view of one), the output is copied into storage of its own at
// run time, with the dims the run gives (it failed to compile: "an output of unknown shape is
// not pool-owned").
TEST(CompilerTest, OutputOfUnknownRankThatIsAnInputIsCopied) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* c = b.Input("c", DType::kBool, {});
  Value* v = b.Input("v", DType::kF32, {1});
  Value* x = b.Input("x", DType::kF32, {2, 3});
  std::vector<Value*> r = b.If(
      c, 2,
      [&](GraphBuilder& t) {
        return std::vector<Value*>{t.Op("Greater", {v, t.ScalarF32(0)}),
                                   t.Op("Unsqueeze", {x, t.VectorI64({0})})};
      },
      [&](GraphBuilder& e) {
        return std::vector<Value*>{e.Op("Identity", {c}), e.Op("Identity", {x})};
      });
  b.Output("y", r[0]);
  b.Output("z", r[1]);
  Compiled comp = CompileOrDie(m);
  ASSERT_TRUE(comp.exe);
  const Tensor xv = RandomF32({2, 3}, 41);
  for (bool taken : {false, true}) {
    std::vector<Tensor> out =
        RunOrDie(comp.exe, {{"c", testing::Bool({}, {taken})},
                            {"v", *Tensor::FromVector<float>(DType::kF32, {1}, {1.5f})},
                            {"x", xv}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].dims().size(), taken ? 1u : 0u);
    EXPECT_EQ(testing::ToInts(out[0]), std::vector<int64_t>{taken ? 1 : 0});
    const std::vector<int64_t> dims =
        taken ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{2, 3};
    ExpectNear(out[1], *Tensor::FromVector<float>(DType::kF32, dims,
                                                  absl::MakeConstSpan(xv.data<float>(), 6)));
    EXPECT_NE(out[1].data<float>(), xv.data<float>());
  }
}

// tokens = concat(tokens, [i]) every iteration: a value that grows in place.
Compiled GrowingLoop(Module& m, std::optional<int64_t> bound) {
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* init = b.Input("init", DType::kI64, {1, 1});
  std::vector<Value*> outs =
      b.Loop(n, nullptr, {init}, 0,
             [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
               Value* step = l.Op("Reshape", {i, l.VectorI64({1, 1})});
               Value* grown = l.Op("Concat", {carried[0], step}, {{"axis", AttrInt(1)}});
               return std::vector<Value*>{cond, grown};
             });
  b.Output("tokens", outs[0]);
  CompileOptions o;
  if (bound) o.bounds = {{"n", *bound}};
  return CompileOrDie(m, o);
}

TEST(CompilerTest, GrowingValueIsAppendedInPlace) {
  Module m;
  Compiled c = GrowingLoop(m, std::nullopt);
  ASSERT_TRUE(c.exe);
  EXPECT_THAT(Disassembly(c.result), HasSubstr("append"));
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("init", *Tensor::FromVector<int64_t>(DType::kI64, {1, 1}, {7})).ok());
  ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(1000)).ok());
  const AllocatorStats before = (*vm)->memory_stats();
  ASSERT_TRUE((*vm)->Run().ok());
  const AllocatorStats after = (*vm)->memory_stats();
  Tensor out = *(*vm)->GetOutput("tokens");
  ASSERT_EQ(out.dim(1), 1001);
  std::vector<int64_t> v = testing::ToInts(out);
  EXPECT_EQ(v[0], 7);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[1000], 999);
  // Geometric growth: O(log n) allocations for 1000 appends, not 1000.
  EXPECT_LT(after.allocs - before.allocs, 20) << "allocations: " << (after.allocs - before.allocs);
}

// A loop body's growth for the tests below: carried [2, n] ++ [[i], [i]] along axis 1.
Value* GrowByIteration(GraphBuilder& l, Value* i, Value* carried) {
  Value* f = l.Op("Cast", {i}, {{"to", AttrInt(1)}});
  Value* piece = l.Op("Expand", {f, l.VectorI64({2, 1})});
  return l.Op("Concat", {carried, piece}, {{"axis", AttrInt(1)}});
}

// A carried value grown by Concat along its second axis lives in a growable storage with spare
// capacity: a strided tensor. A Reshape of it (after the loop, or of the grown value in the
// body) copies through its kernel instead of viewing it ("reshape of a non-contiguous"), and a
// scan output that is such a value is copied contiguous before it is appended.
TEST(CompilerTest, ReshapeOfAValueGrownAlongItsSecondAxisCopiesIt) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* init = b.Input("init", DType::kF32, {2, 1});
  std::vector<Value*> outs =
      b.Loop(b.ScalarI64(5), nullptr, {init}, 1,
             [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
               Value* grown = GrowByIteration(l, i, carried[0]);
               Value* flat = l.Op("Reshape", {grown, l.VectorI64({-1})});
               return std::vector<Value*>{cond, grown,
                                          l.Op("ReduceSum", {flat}, {{"keepdims", AttrInt(0)}})};
             });
  b.Output("grown", outs[0]);
  b.Output("sums", outs[1]);
  b.Output("flat", b.Op("Reshape", {outs[0], b.VectorI64({3, 4})}));
  // The same growing loop nested in a loop whose scan output is its result: each element is
  // copied contiguous before it is appended.
  std::vector<Value*> outer =
      b.Loop(b.ScalarI64(2), nullptr, {}, 1,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>&) {
               Value* grown = l.Loop(
                   l.ScalarI64(5), nullptr, {init}, 0,
                   [&](GraphBuilder& l2, Value* i, Value* c2, const std::vector<Value*>& carried) {
                     return std::vector<Value*>{c2, GrowByIteration(l2, i, carried[0])};
                   })[0];
               return std::vector<Value*>{cond, grown};
             });
  b.Output("stacked", outer[0]);
  Compiled comp = CompileOrDie(m);
  ASSERT_TRUE(comp.exe);
  EXPECT_THAT(Disassembly(comp.result), HasSubstr("append"));
  std::vector<Tensor> out =
      RunOrDie(comp.exe, {{"init", *Tensor::FromVector<float>(DType::kF32, {2, 1}, {7, 8})}});
  ASSERT_EQ(out.size(), 4u);
  const std::vector<double> rows = {7, 0, 1, 2, 3, 4, 8, 0, 1, 2, 3, 4};
  std::vector<double> twice = rows;
  twice.insert(twice.end(), rows.begin(), rows.end());
  EXPECT_EQ(testing::ToDoubles(out[3]), twice);
  EXPECT_EQ(testing::ToDoubles(out[0]), rows);
  EXPECT_EQ(testing::ToDoubles(out[1]), (std::vector<double>{15, 17, 21, 27, 35}));
  EXPECT_EQ(std::vector<int64_t>(out[2].dims().begin(), out[2].dims().end()),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(testing::ToDoubles(out[2]), rows);
}

// Unsqueeze and Squeeze of a value grown along its second axis (strided within its capacity)
// are views, not copies: they only insert or remove extent-1 dimensions (a KV cache read with
// a group axis by attention every decode step). Their results, in the body and after the loop,
// equal the grown values.
TEST(CompilerTest, UnsqueezeOfAValueGrownAlongItsSecondAxisViewsIt) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* init = b.Input("init", DType::kF32, {2, 1});
  std::vector<Value*> outs =
      b.Loop(b.ScalarI64(5), nullptr, {init}, 1,
             [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
               Value* grown = GrowByIteration(l, i, carried[0]);
               Value* wide = l.Op("Unsqueeze", {grown, l.VectorI64({0, 2})});
               Value* back = l.Op("Squeeze", {wide, l.VectorI64({0, 2})});
               return std::vector<Value*>{cond, grown,
                                          l.Op("ReduceSum", {back}, {{"keepdims", AttrInt(0)}})};
             });
  b.Output("wide", b.Op("Unsqueeze", {outs[0], b.VectorI64({1})}));
  b.Output("sums", outs[1]);
  Compiled comp = CompileOrDie(m);
  ASSERT_TRUE(comp.exe);
  const std::string dis = Disassembly(comp.result);
  EXPECT_THAT(dis, HasSubstr("append"));
  EXPECT_THAT(dis, Not(HasSubstr(".kernel \"Unsqueeze\"")));
  EXPECT_THAT(dis, Not(HasSubstr(".kernel \"Squeeze\"")));
  std::vector<Tensor> out =
      RunOrDie(comp.exe, {{"init", *Tensor::FromVector<float>(DType::kF32, {2, 1}, {7, 8})}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::vector<int64_t>(out[0].dims().begin(), out[0].dims().end()),
            (std::vector<int64_t>{2, 1, 6}));
  EXPECT_EQ(testing::ToDoubles(out[0]), (std::vector<double>{7, 0, 1, 2, 3, 4, 8, 0, 1, 2, 3, 4}));
  EXPECT_EQ(testing::ToDoubles(out[1]), (std::vector<double>{15, 17, 21, 27, 35}));
}

// x = concat(relu(x), [[1]]) every iteration: the carried value and what the body computes
// from it gain a column per iteration. The trip count comes from the scalar input n.
Compiled ReluAppendLoop(Module& m, std::optional<int64_t> bound) {
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* init = b.Input("init", DType::kF32, {1, 2});
  Value* one = b.Constant(*Tensor::FromVector<float>(DType::kF32, {1, 1}, {1.0f}));
  std::vector<Value*> outs =
      b.Loop(n, nullptr, {init}, 0,
             [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
               Value* y = l.Op("Relu", {carried[0]});
               return std::vector<Value*>{cond, l.Op("Concat", {y, one}, {{"axis", AttrInt(1)}})};
             });
  b.Output("x", outs[0]);
  CompileOptions o;
  if (bound) o.bounds = {{"n", *bound}};
  return CompileOrDie(m, o);
}

// A trip count read from a scalar input is a symbol that --bound bounds, and a carried dim the
// body advances by a fixed step is then bounded too (init + n * step): everything the loop
// makes is planned at its maximum in the arena, so its iterations allocate nothing.
TEST(CompilerTest, BoundedTripCountBoundsTheDimsALoopGrows) {
  for (const std::optional<int64_t> bound :
       {std::optional<int64_t>(10), std::optional<int64_t>()}) {
    SCOPED_TRACE(bound ? "bounded" : "unbounded");
    Module m;
    Compiled c = ReluAppendLoop(m, bound);
    ASSERT_TRUE(c.exe);
    const FunctionReport& r = c.result.functions[0];
    if (bound) {
      EXPECT_EQ(r.loop_alloc_sites, 0) << c.result.ReportText();
      // Two slots (double-buffered) of the largest x, f32[1,12], and the largest relu.
      EXPECT_GE(r.arena_bytes, 3 * 64) << c.result.ReportText();
    } else {
      EXPECT_GT(r.loop_alloc_sites, 0) << c.result.ReportText();
    }
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(c.exe);
    ASSERT_TRUE(vm.ok());
    ASSERT_TRUE(
        (*vm)->SetInput("init", *Tensor::FromVector<float>(DType::kF32, {1, 2}, {-3, 5})).ok());
    ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(10)).ok());
    ASSERT_TRUE((*vm)->Run().ok());
    ExpectNear(
        *(*vm)->GetOutput("x"),
        *Tensor::FromVector<float>(DType::kF32, {1, 12}, {0, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
    const RunMemoryStats mem = (*vm)->last_run_memory();
    ASSERT_TRUE(mem.first_iteration_ended);
    if (bound) {
      EXPECT_EQ(mem.system_allocs_after_first_iteration, 0);
      // Beyond the bound: refused before the loop, naming the symbol.
      ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(11)).ok());
      absl::Status s = (*vm)->Run();
      EXPECT_THAT(s.message(), HasSubstr("symbol 'n' exceeds its declared bound 10"));
    }
    // A negative trip count runs no iteration, as in ONNX Runtime and PyTorch: x is init.
    for (int64_t negative : {int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
      ASSERT_TRUE((*vm)->SetInput("n", Tensor::ScalarI64(negative)).ok());
      absl::Status s = (*vm)->Run();
      ASSERT_TRUE(s.ok()) << s;
      ExpectNear(*(*vm)->GetOutput("x"), *Tensor::FromVector<float>(DType::kF32, {1, 2}, {-3, 5}));
      EXPECT_EQ((*vm)->last_run_iterations(), 0);
    }
  }
}

// A carried dim the body shrinks (x = x[:, :-1]) is largest on entry: a bounded trip count must
// not bound it by init + trips * step with a negative step (that would plan x too small).
TEST(CompilerTest, ShrinkingCarriedDimIsNotBoundedByTheTripCount) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* init = b.Input("init", DType::kF32, {1, 10});
  std::vector<Value*> outs =
      b.Loop(n, nullptr, {init}, 0,
             [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>& carried) {
               Value* rest = l.Op(
                   "Slice", {carried[0], l.VectorI64({0}), l.VectorI64({-1}), l.VectorI64({1})});
               return std::vector<Value*>{cond, l.Op("Relu", {rest})};
             });
  b.Output("x", outs[0]);
  CompileOptions o;
  o.bounds = {{"n", 5}};
  Compiled c = CompileOrDie(m, o);
  ASSERT_TRUE(c.exe);
  std::vector<Tensor> out = RunOrDie(
      c.exe,
      {{"n", Tensor::ScalarI64(5)},
       {"init", *Tensor::FromVector<float>(DType::kF32, {1, 10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {1, 5}, {0, 1, 2, 3, 4}));
}

// Regression: Range(0, n, 1) sized ceil(n / 1) = -1 * (-1 * n) did not fold back to n, so a
// Range over a bounded length (the GPT's positions) had no upper bound and left the arena.
TEST(CompilerTest, NestedConstantProductsFold) {
  SymbolicContext s;
  const Dim n = s.Symbol("n");
  EXPECT_EQ(s.CeilDiv(n, s.Const(1)), n);
  EXPECT_EQ(s.Mul(s.Const(-1), s.Mul(n, s.Const(-1))), n);
  EXPECT_EQ(s.Mul(s.Const(3), s.Mul(s.Const(2), n)), s.Mul(s.Const(6), n));
  s.SetBound("n", 8);
  EXPECT_EQ(s.UpperBound(s.CeilDiv(s.Add(n, s.Const(1)), s.Const(2))), 5);  // ceil(9 / 2)
}

TEST(CompilerTest, BoundedGrowingValueHasItsCapacityUpFront) {
  Module m;
  Compiled c = GrowingLoop(m, 100);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.result.functions[0].loop_alloc_sites, 0) << c.result.ReportText();
  std::vector<Tensor> out =
      RunOrDie(c.exe, {{"init", *Tensor::FromVector<int64_t>(DType::kI64, {1, 1}, {7})},
                       {"n", Tensor::ScalarI64(100)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dim(1), 101);
  EXPECT_EQ(testing::ToInts(out[0])[100], 99);
}

// Regression (ONNX test_loop11): a scan output whose element dims are known only inside the
// body (here a Slice with data-dependent bounds). The growable storage made before the loop
// has zero-sized element dims; the first iteration must make it again with the real ones,
// or the first append fails ("other dims differ").
TEST(CompilerTest, ScanOutputWithElementDimsKnownOnlyInsideTheBody) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* n = b.Input("n", DType::kI64, {});
  Value* x = b.Input("x", DType::kF32, {5});
  std::vector<Value*> outs = b.Loop(
      n, nullptr, {}, 1, [&](GraphBuilder& l, Value* i, Value* cond, const std::vector<Value*>&) {
        Value* start = l.Op("Unsqueeze", {i, l.VectorI64({0})});
        Value* end = l.Op("Add", {start, l.VectorI64({1})});
        return std::vector<Value*>{cond, l.Op("Slice", {x, start, end})};
      });
  b.Output("ys", outs[0]);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {5}, {1, 2, 3, 4, 5});
  std::vector<Tensor> out = RunOrDie(c.exe, {{"n", Tensor::ScalarI64(3)}, {"x", xv}});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {3, 1}, {1, 2, 3}));
}

// Regression (ONNX LayerNormalization *_expanded): a shape inferred from a value that was
// dynamic before constant folding (ConstantOfShape of a folded Neg) named a fresh symbol that
// only the folded-away kernel would have defined. Shapes are inferred again after folding.
TEST(CompilerTest, ShapesAreInferredAgainAfterConstantFolding) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {3, 4});
  Value* prefix = b.Op("Slice", {b.Op("Shape", {x}), b.VectorI64({0}), b.VectorI64({-1})});
  Value* ones = b.Op("ConstantOfShape", {b.Op("Neg", {b.VectorI64({-1})})},
                     {{"value", AttrTensor(*Tensor::FromVector<int64_t>(DType::kI64, {1}, {1}))}});
  Value* target = b.Op("Concat", {prefix, ones}, {{"axis", AttrInt(0)}});
  Value* mean = b.Op("ReduceMean", {x}, {{"axes", AttrInts({1})}, {"keepdims", AttrInt(0)}});
  b.Output("y", b.Op("Reshape", {mean, target}));
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, 0, 4, 0, 4});
  std::vector<Tensor> out = RunOrDie(c.exe, {{"x", xv}});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {3, 1}, {1, 2, 2}));
}

// A Scan node built by hand: `body` gets (state, x_t) and returns (state + x_t, state + x_t).
Node* AddCumulativeScan(GraphBuilder& b, std::vector<Value*> inputs, Attrs attrs, DType dtype) {
  Module& m = b.module();
  std::vector<Value*> outs = b.Ops("Scan", inputs, attrs, 2);
  Node* scan = outs[0]->producer;
  std::unique_ptr<Graph> body = m.NewGraph(b.graph(), scan);
  GraphBuilder bb(body.get());
  Value* s = m.NewValue(dtype, std::nullopt, body.get(), "s");
  Value* xt = m.NewValue(dtype, std::nullopt, body.get(), "x_t");
  body->inputs = {s, xt};
  Value* sum = bb.Op("Add", {s, xt});
  body->outputs = {sum, bb.Op("Identity", {sum})};
  scan->subgraphs.emplace_back("body", std::move(body));
  return scan;
}

// Scan is lowered to Loop: scan inputs read backwards, scan outputs reversed and moved to
// another axis.
TEST(CompilerTest, ScanWithDirectionsAndOutputAxisRunsAsALoop) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* init = b.Input("init", DType::kF32, {2});
  Value* xs = b.Input("xs", DType::kF32, {"steps", 2});
  Node* scan = AddCumulativeScan(b, {init, xs},
                                 {{"num_scan_inputs", AttrInt(1)},
                                  {"scan_input_directions", AttrInts({1})},
                                  {"scan_output_directions", AttrInts({1})},
                                  {"scan_output_axes", AttrInts({-1})}},
                                 DType::kF32);
  b.Output("final", scan->outputs[0]);
  b.Output("partial", scan->outputs[1]);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  EXPECT_THAT(Disassembly(c.result), HasSubstr("loop"));
  Tensor iv = *Tensor::FromVector<float>(DType::kF32, {2}, {0, 100});
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out = RunOrDie(c.exe, {{"init", iv}, {"xs", xv}});
  ASSERT_EQ(out.size(), 2u);
  // Reading backwards: partial sums 5, 8, 9 (and 106, 110, 112); written backwards along the
  // last axis: [[9, 8, 5], [112, 110, 106]].
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {2}, {9, 112}));
  ExpectNear(out[1], *Tensor::FromVector<float>(DType::kF32, {2, 3}, {9, 8, 5, 112, 110, 106}));
}

// A Scan that moves its scan output's axis is inferred before it is lowered when its body's
// shapes are known only then: the iteration axis must stand where scan_output_axes puts it.
// Before, it was inferred in front, and a consumer reading the dims (an Add against a
// [2, 3] tensor) failed to compile: "do not broadcast" (known.py's
// dynvm-bug-scan-output-axes-inferred-late).
TEST(CompilerTest, ScanOutputAxesAreInferredWhereTheAxisGoes) {
  for (int64_t axis : {1, -1, 0}) {
    SCOPED_TRACE(absl::StrCat("scan_output_axes ", axis));
    Module m;
    GraphBuilder b(m.AddFunction("main"));
    Value* init = b.Input("init", DType::kF32, {2});
    Value* xs = b.Input("xs", DType::kF32, {3, 2});
    Node* scan = AddCumulativeScan(
        b, {init, xs}, {{"num_scan_inputs", AttrInt(1)}, {"scan_output_axes", AttrInts({axis})}},
        DType::kF32);
    const bool moved = axis != 0;
    Value* other = b.Input("other", DType::kF32, {moved ? 2 : 3, moved ? 3 : 2});
    b.Output("y", b.Op("Add", {scan->outputs[1], other}));
    Compiled c = CompileOrDie(m);
    ASSERT_TRUE(c.exe);
    Tensor iv = *Tensor::FromVector<float>(DType::kF32, {2}, {0, 100});
    Tensor xv = *Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
    Tensor ov = RandomF32({moved ? 2 : 3, moved ? 3 : 2}, 12);
    // Partial sums [1, 102], [4, 106], [9, 112]: stacked along axis 0, or along axis 1
    // ([[1, 4, 9], [102, 106, 112]]).
    Tensor partial =
        moved ? *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, 4, 9, 102, 106, 112})
              : *Tensor::FromVector<float>(DType::kF32, {3, 2}, {1, 102, 4, 106, 9, 112});
    std::vector<Tensor> out = RunOrDie(c.exe, {{"init", iv}, {"xs", xv}, {"other", ov}});
    ASSERT_EQ(out.size(), 1u);
    ExpectNear(out[0], Ref("Add", {partial, ov}, DType::kF32));
  }
}

// Scan of opset 8: a batch axis on states and scan inputs, scan axis 1.
TEST(CompilerTest, Opset8ScanLoopsOverTheBatch) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* init = b.Input("init", DType::kF32, {2, 1});
  Value* xs = b.Input("xs", DType::kF32, {2, 3, 1});
  Node* scan =
      AddCumulativeScan(b, {nullptr, init, xs},
                        {{"num_scan_inputs", AttrInt(1)}, {"opset8", AttrInt(1)}}, DType::kF32);
  b.Output("final", scan->outputs[0]);
  b.Output("partial", scan->outputs[1]);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  Tensor iv = *Tensor::FromVector<float>(DType::kF32, {2, 1}, {0, 10});
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {2, 3, 1}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out = RunOrDie(c.exe, {{"init", iv}, {"xs", xv}});
  ASSERT_EQ(out.size(), 2u);
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {2, 1}, {6, 25}));
  ExpectNear(out[1], *Tensor::FromVector<float>(DType::kF32, {2, 3, 1}, {1, 3, 6, 14, 19, 25}));
}

// Regression (found by the ONNX importer fuzzer): a Scan with an absent scan input that is
// inferred before it is lowered (it moves an output axis) is refused, not dereferenced.
TEST(CompilerTest, ScanWithAnAbsentInputIsRefused) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* init = b.Input("init", DType::kF32, {2});
  Node* scan = AddCumulativeScan(
      b, {init, nullptr}, {{"num_scan_inputs", AttrInt(1)}, {"scan_output_axes", AttrInts({1})}},
      DType::kF32);
  b.Output("partial", scan->outputs[1]);
  absl::StatusOr<CompileResult> r = Compile(m);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("input 1 is missing"));
}

// A node no kernel accepts is refused at compile time, naming the node and its dtypes.
TEST(CompilerTest, NodeWithoutAKernelIsRefusedNamingIt) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kI64, {2});
  b.set_node_name("the_erf");
  b.Output("y", b.Op("Erf", {x}));
  absl::StatusOr<CompileResult> r = Compile(m);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("Erf 'the_erf': no kernel for Erf(i64) -> (i64)"));
}

// A transformer-like block whose caller keeps only the last position's logits (a decode step):
// NarrowSelectedRows makes the rows after the last attention compute one position. The
// optimized program must give what the unoptimized one (no passes) gives, for any length,
// and the logits MatMul must have become a [batch, 1, vocab] product.
struct LastRowModel {
  Value* logits_matmul = nullptr;
  Value* hidden = nullptr;
};

LastRowModel BuildLastRowModel(Module& m, bool also_output_hidden) {
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"batch", "seq", 8});
  Value* ln = b.Op("LayerNormalization",
                   {x, b.Constant(RandomF32({8}, 40)), b.Constant(RandomF32({8}, 41))},
                   {{"axis", AttrInt(-1)}});
  Value* q = b.Op("MatMul", {ln, b.Constant(RandomF32({8, 8}, 42), "wq", true)});
  Value* k = b.Op("MatMul", {ln, b.Constant(RandomF32({8, 8}, 43), "wk", true)});
  Value* s =
      b.Op("Mul", {b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", AttrInts({0, 2, 1})}})}),
                   b.ScalarF32(0.35f)});
  Value* p = b.Op("Softmax", {s}, {{"axis", AttrInt(-1)}});
  Value* a = b.Op("MatMul", {p, k});
  // Split into 2 heads and back, through shapes computed at run time (from the block's input,
  // as PyTorch's exports do: a Shape of `a` itself would need `a` whole).
  Value* prefix = b.Op("Slice", {b.Op("Shape", {x}), b.VectorI64({0}), b.VectorI64({2})});
  Value* heads =
      b.Op("Reshape", {a, b.Op("Concat", {prefix, b.VectorI64({2, 4})}, {{"axis", AttrInt(0)}})});
  Value* back = b.Op("Transpose", {b.Op("Transpose", {heads}, {{"perm", AttrInts({0, 2, 1, 3})}})},
                     {{"perm", AttrInts({0, 2, 1, 3})}});
  Value* merged = b.Op("Reshape", {back, b.Op("Shape", {x})});
  Value* h = b.Op("Add", {x, merged});
  Value* g = b.Op("Mul", {h, b.Op("Erf", {b.Op("Div", {h, b.ScalarF32(1.41f)})})});
  Value* mm = b.Op("MatMul", {g, b.Constant(RandomF32({8, 5}, 44), "wo", true)});
  Value* logits = b.Op("Add", {mm, b.Constant(RandomF32({5}, 45), "bo", true)});
  b.Output("last", b.Op("Gather", {logits, b.ScalarI64(-1)}, {{"axis", AttrInt(1)}}));
  if (also_output_hidden) b.Output("hidden", h);
  return {mm, h};
}

TEST(CompilerTest, OnlyTheSelectedRowIsComputed) {
  for (bool also_hidden : {false, true}) {
    SCOPED_TRACE(also_hidden ? "hidden also an output" : "last row only");
    Module narrowed;
    LastRowModel model = BuildLastRowModel(narrowed, also_hidden);
    ASSERT_TRUE(InferShapes(narrowed).ok());
    const int count = NarrowSelectedRows(narrowed);
    ASSERT_TRUE(InferShapes(narrowed).ok()) << narrowed.Dump();
    ASSERT_TRUE(model.logits_matmul->shape.has_value());
    EXPECT_EQ(SymbolicContext::AsConst((*model.logits_matmul->shape)[1]), 1) << narrowed.Dump();
    // With `hidden` an output, h is needed whole: the rows stop there.
    if (also_hidden) {
      EXPECT_EQ(count, 5) << narrowed.Dump();  // Add (bias), MatMul, Mul, Erf, Div
      EXPECT_NE(SymbolicContext::AsConst((*model.hidden->shape)[1]), 1);
    } else {
      EXPECT_GE(count, 14) << narrowed.Dump();
      EXPECT_EQ(SymbolicContext::AsConst((*model.hidden->shape)[1]), 1);
    }

    Module opt_module, plain_module;
    BuildLastRowModel(opt_module, also_hidden);
    BuildLastRowModel(plain_module, also_hidden);
    CompileOptions plain_options;
    plain_options.optimize = false;
    Compiled opt = CompileOrDie(opt_module);
    Compiled plain = CompileOrDie(plain_module, plain_options);
    ASSERT_TRUE(opt.exe && plain.exe);
    for (int64_t seq : {1, 3, 7}) {
      Tensor xv = RandomF32({2, seq, 8}, 50 + static_cast<uint32_t>(seq));
      std::vector<Tensor> got = RunOrDie(opt.exe, {{"x", xv}});
      std::vector<Tensor> want = RunOrDie(plain.exe, {{"x", xv}});
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ExpectNear(got[i], want[i], 1e-5);
    }
  }
}

// dynvm's activations are row-wise: a decode step that keeps the last position computes the
// products and the activation before it for that position only, on every activation, whether
// or not the compile quantizes the weights (which leaves the activation unfused).
TEST(CompilerTest, DynvmActivationsAreNarrowedToTheSelectedRow) {
  for (const char* act : {"Gelu", "GeluTanh", "Silu"}) {
    for (bool quantize : {false, true}) {
      SCOPED_TRACE(absl::StrCat(act, quantize ? " int8" : " f32"));
      auto build = [&](Module& m) {
        GraphBuilder b(m.AddFunction("main"));
        Value* x = b.Input("x", DType::kF32, {"batch", "seq", 64});
        Value* h = b.Op("MatMul", {x, b.Constant(RandomF32({64, 64}, 60), "w1", true)});
        Value* a = b.Op(act, {h}, {}, "dynvm");
        Value* y = b.Op("MatMul", {a, b.Constant(RandomF32({64, 64}, 61), "w2", true)});
        b.Output("last", b.Op("Gather", {y, b.ScalarI64(-1)}, {{"axis", AttrInt(1)}}));
        return h;
      };
      Module narrowed;
      Value* h = build(narrowed);
      ASSERT_TRUE(InferShapes(narrowed).ok());
      EXPECT_GE(NarrowSelectedRows(narrowed), 3) << narrowed.Dump();  // both products, act
      ASSERT_TRUE(InferShapes(narrowed).ok()) << narrowed.Dump();
      EXPECT_EQ(SymbolicContext::AsConst((*h->shape)[1]), 1) << narrowed.Dump();

      Module opt_module, plain_module;
      build(opt_module);
      build(plain_module);
      CompileOptions options, plain_options;
      if (quantize) {
        options.quantize_weights = DType::kI8;
        options.quantize_min_bytes = 0;
        plain_options = options;
      }
      plain_options.optimize = false;
      Compiled opt = CompileOrDie(opt_module, options);
      Compiled plain = CompileOrDie(plain_module, plain_options);
      ASSERT_TRUE(opt.exe && plain.exe);
      for (int64_t seq : {1, 5}) {
        Tensor xv = RandomF32({2, seq, 64}, 70 + static_cast<uint32_t>(seq));
        std::vector<Tensor> got = RunOrDie(opt.exe, {{"x", xv}});
        std::vector<Tensor> want = RunOrDie(plain.exe, {{"x", xv}});
        ASSERT_EQ(got.size(), 1u);
        ExpectNear(got[0], want[0], quantize ? 1e-3 : 1e-5);
      }
    }
  }
}

// --- Narrowing through dynvm::Attention, Gemm and unit-dim Reshapes (a BERT-like pooler that
// keeps one position). Each case: the pass's count and narrowed shapes on the IR, and the
// optimized compile against the unoptimized one on random inputs of several lengths.

Tensor RandomBool(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = *Tensor::Empty(DType::kBool, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = (rng() & 1) != 0;
  return t;
}

// Runs both programs on the same inputs and compares every output.
void ExpectSameOutputs(const Compiled& opt, const Compiled& plain,
                       const std::vector<std::pair<std::string, Tensor>>& inputs) {
  ASSERT_TRUE(opt.exe && plain.exe);
  std::vector<Tensor> got = RunOrDie(opt.exe, inputs);
  std::vector<Tensor> want = RunOrDie(plain.exe, inputs);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t i = 0; i < got.size(); ++i) ExpectNear(got[i], want[i], 1e-5);
}

// Compiles what `build` makes twice: optimized, and with optimize=false.
template <typename Build>
std::pair<Compiled, Compiled> CompileBoth(Build build) {
  Module opt_module, plain_module;
  build(opt_module);
  build(plain_module);
  CompileOptions plain_options;
  plain_options.optimize = false;
  Compiled opt = CompileOrDie(opt_module);
  Compiled plain = CompileOrDie(plain_module, plain_options);
  return {std::move(opt), std::move(plain)};
}

// Runs InferShapes, NarrowSelectedRows and InferShapes again; the pass's count.
int NarrowAndInfer(Module& m) {
  EXPECT_TRUE(InferShapes(m).ok()) << m.Dump();
  const int count = NarrowSelectedRows(m);
  absl::Status s = InferShapes(m);
  EXPECT_TRUE(s.ok()) << s << "\n" << m.Dump();
  return count;
}

enum class MaskKind { kNone, kKeyPadding, kCausal, kAdditive };

struct AttentionCase {
  MaskKind mask = MaskKind::kNone;
  bool torch_layout = true;  // Q, K, V [L, B*H, hd] (perms [1, 0, 2]); else [B*H, L, hd]
  bool trans_a = false;      // the out-projection Gemm reads A transposed
  bool full_c = false;       // its C is [L, E], not a broadcast bias
  int64_t index = 0;         // the position kept
};

constexpr int64_t kHeads = 2, kHeadDim = 4, kEmbed = kHeads * kHeadDim;

struct AttentionModel {
  Value* attention = nullptr;
  Value* projection = nullptr;
};

// dynvm::Attention as compiler/rewrite/attention.cc emits it (batch 1, kHeads heads), the heads
// merged, a Gemm out-projection, then [L, E] -> [L, 1, E] -> [1, L, E] (what
// transpose_unit_axes makes of torch's batch-first Transpose) and one position kept.
AttentionModel BuildAttentionModel(Module& m, const AttentionCase& c) {
  GraphBuilder b(m.AddFunction("main"));
  const std::vector<DimSpec> dims = c.torch_layout ? std::vector<DimSpec>{"seq", kHeads, kHeadDim}
                                                   : std::vector<DimSpec>{kHeads, "seq", kHeadDim};
  Value* q = b.Input("q", DType::kF32, dims);
  std::vector<Value*> inputs = {q, b.Input("k", DType::kF32, dims),
                                b.Input("v", DType::kF32, dims)};
  const std::vector<int64_t> perm =
      c.torch_layout ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0, 1, 2};
  Attrs attrs = {{"q_perm", AttrInts(perm)},
                 {"k_perm", AttrInts(c.torch_layout ? std::vector<int64_t>{1, 2, 0}
                                                    : std::vector<int64_t>{0, 2, 1})},
                 {"v_perm", AttrInts(perm)},
                 {"out_perm", AttrInts(perm)},
                 {"scale", AttrFloat(0.5f)},
                 {"fill", AttrFloat(-std::numeric_limits<float>::infinity())}};
  int64_t mode = 0;
  if (c.mask == MaskKind::kKeyPadding) {  // broadcast along the queries
    inputs.push_back(b.Input("mask", DType::kBool, {kHeads, 1, "seq"}));
    mode = 2;
  } else if (c.mask == MaskKind::kCausal) {
    inputs.push_back(b.Input("mask", DType::kBool, {"seq", "seq"}));
    mode = 2;
  } else if (c.mask == MaskKind::kAdditive) {
    inputs.push_back(b.Input("mask", DType::kF32, {kHeads, "seq", "seq"}));
    mode = 1;
  }
  attrs["mask_mode"] = AttrInt(mode);
  Value* y = b.Op("Attention", inputs, attrs, "dynvm");
  Value* rows = c.torch_layout ? y : b.Op("Transpose", {y}, {{"perm", AttrInts({1, 0, 2})}});
  Value* flat = b.Op("Reshape", {rows, b.VectorI64({0, kEmbed})});  // [L, E]
  Value* a = c.trans_a ? b.Op("Transpose", {flat}, {{"perm", AttrInts({1, 0})}}) : flat;
  Value* bias = c.full_c ? b.Input("c", DType::kF32, {"seq", kEmbed})
                         : b.Constant(RandomF32({kEmbed}, 81), "bo", true);
  Value* proj = b.Op("Gemm", {a, b.Constant(RandomF32({kEmbed, kEmbed}, 80), "wo", true), bias},
                     {{"transA", AttrInt(c.trans_a ? 1 : 0)},
                      {"transB", AttrInt(1)},
                      {"alpha", AttrFloat(0.7f)},
                      {"beta", AttrFloat(1.3f)}});
  Value* unit = b.Op("Reshape", {proj, b.VectorI64({0, 1, kEmbed})});
  const int64_t seq_axis = c.torch_layout ? 0 : 1;
  Value* seq =
      b.Op("Slice", {b.Op("Shape", {q}), b.VectorI64({seq_axis}), b.VectorI64({seq_axis + 1})});
  Value* target =
      b.Op("Concat", {b.VectorI64({1}), seq, b.VectorI64({kEmbed})}, {{"axis", AttrInt(0)}});
  Value* h = b.Op("Add", {b.Op("Reshape", {unit, target}), b.Constant(RandomF32({kEmbed}, 82))});
  b.Output("pooled", b.Op("Gather", {h, b.ScalarI64(c.index)}, {{"axis", AttrInt(1)}}));
  return {y, proj};
}

std::vector<std::pair<std::string, Tensor>> AttentionInputs(const AttentionCase& c, int64_t seq,
                                                            uint32_t seed) {
  const std::vector<int64_t> dims = c.torch_layout ? std::vector<int64_t>{seq, kHeads, kHeadDim}
                                                   : std::vector<int64_t>{kHeads, seq, kHeadDim};
  std::vector<std::pair<std::string, Tensor>> in = {{"q", RandomF32(dims, seed)},
                                                    {"k", RandomF32(dims, seed + 1)},
                                                    {"v", RandomF32(dims, seed + 2)}};
  if (c.mask == MaskKind::kKeyPadding) {  // key 0 always kept (a row of all -inf is NaN)
    Tensor mask = RandomBool({kHeads, 1, seq}, seed + 3);
    for (int64_t h = 0; h < kHeads; ++h) mask.data<bool>()[h * seq] = false;
    in.emplace_back("mask", mask);
  } else if (c.mask == MaskKind::kCausal) {  // true above the diagonal: masked
    Tensor mask = *Tensor::Empty(DType::kBool, {seq, seq});
    for (int64_t i = 0; i < seq * seq; ++i) mask.data<bool>()[i] = i % seq > i / seq;
    in.emplace_back("mask", mask);
  } else if (c.mask == MaskKind::kAdditive) {
    in.emplace_back("mask", RandomF32({kHeads, seq, seq}, seed + 3));
  }
  if (c.full_c) in.emplace_back("c", RandomF32({seq, kEmbed}, seed + 4));
  return in;
}

void CheckAttentionCase(const AttentionCase& c) {
  Module narrowed;
  AttentionModel model = BuildAttentionModel(narrowed, c);
  // Attention, Reshape, Gemm, 2 Reshapes, Add; the Transposes of the variants.
  const int expected = 6 + (c.torch_layout ? 0 : 1) + (c.trans_a ? 1 : 0);
  EXPECT_EQ(NarrowAndInfer(narrowed), expected) << narrowed.Dump();
  ASSERT_TRUE(model.attention->shape && model.projection->shape);
  const int query_axis = c.torch_layout ? 0 : 1;
  EXPECT_EQ(SymbolicContext::AsConst((*model.attention->shape)[query_axis]), 1) << narrowed.Dump();
  EXPECT_EQ(SymbolicContext::AsConst((*model.projection->shape)[0]), 1) << narrowed.Dump();
  const Node* att = model.attention->producer;
  ASSERT_NE(att->inputs[0]->producer, nullptr);
  EXPECT_EQ(att->inputs[0]->producer->op, "Gather");  // Q's row
  EXPECT_EQ(att->inputs[1]->producer, nullptr);       // K, V whole
  EXPECT_EQ(att->inputs[2]->producer, nullptr);
  if (c.mask != MaskKind::kNone) {
    // A mask with the query axis at full size is read at the row; key padding whole.
    const Node* mask_producer = att->inputs[3]->producer;
    if (c.mask == MaskKind::kKeyPadding) {
      EXPECT_EQ(mask_producer, nullptr);
    } else {
      ASSERT_NE(mask_producer, nullptr);
      EXPECT_EQ(mask_producer->op, "Gather");
    }
  }
  const Node* gemm = model.projection->producer;
  EXPECT_EQ(gemm->inputs[2]->producer != nullptr, c.full_c);  // C [L, E] read at the row

  auto [opt, plain] = CompileBoth([&](Module& m) { BuildAttentionModel(m, c); });
  for (int64_t seq : {2, 5, 9}) {
    SCOPED_TRACE(absl::StrCat("seq ", seq));
    ExpectSameOutputs(opt, plain, AttentionInputs(c, seq, 90 + static_cast<uint32_t>(seq)));
  }
}

// A pooler that keeps one position computes the last attention's queries, out-projection and
// layout Reshapes for that position only, with every mask kind and both layouts.
TEST(CompilerTest, AttentionGemmAndUnitReshapesAreNarrowedToTheKeptPosition) {
  for (MaskKind mask :
       {MaskKind::kNone, MaskKind::kKeyPadding, MaskKind::kCausal, MaskKind::kAdditive}) {
    for (bool torch_layout : {true, false}) {
      for (int64_t index : {0, -1, 1}) {
        AttentionCase c;
        c.mask = mask;
        c.torch_layout = torch_layout;
        c.index = index;
        c.trans_a = index == -1;
        c.full_c = index == 1;
        SCOPED_TRACE(absl::StrCat("mask ", static_cast<int>(mask), torch_layout ? " torch" : "",
                                  " index ", index));
        CheckAttentionCase(c);
      }
    }
  }
}

// Near misses: an Attention whose output is kept along an axis other than its queries' (a
// head, or a column of the values) computes everything; an Attention read as the keys and
// values of another computes every row, the other one row. Self-attention on one value reads
// the queries' row of it and the keys and values whole.
TEST(CompilerTest, AttentionIsNarrowedOnlyAlongItsQueries) {
  struct Case {
    const char* name;
    int64_t axis;
    bool chained;  // y is the keys and values of another Attention, whose output is kept
    bool self;     // y = Attention(kv, kv, kv)
    int expected;
  };
  for (const Case& k :
       {Case{"head", 0, false, false, 0}, Case{"column", 2, false, false, 0},
        Case{"keys of another", 1, true, false, 1}, Case{"self", 1, false, true, 1}}) {
    SCOPED_TRACE(k.name);
    auto build = [&](Module& m) {
      GraphBuilder b(m.AddFunction("main"));
      const std::vector<DimSpec> dims = {kHeads, "seq", kHeadDim};
      Value *q = b.Input("q", DType::kF32, dims), *kv = b.Input("kv", DType::kF32, dims);
      Attrs attrs = {{"q_perm", AttrInts({0, 1, 2})}, {"k_perm", AttrInts({0, 2, 1})},
                     {"v_perm", AttrInts({0, 1, 2})}, {"out_perm", AttrInts({0, 1, 2})},
                     {"scale", AttrFloat(0.5f)},      {"mask_mode", AttrInt(0)}};
      Value* y = b.Op("Attention", {k.self ? kv : q, kv, kv}, attrs, "dynvm");
      Value* z = k.chained ? b.Op("Attention", {q, y, y}, attrs, "dynvm") : y;
      b.Output("kept", b.Op("Gather", {z, b.ScalarI64(1)}, {{"axis", AttrInt(k.axis)}}));
      return y;
    };
    Module narrowed;
    Value* y = build(narrowed);
    EXPECT_EQ(NarrowAndInfer(narrowed), k.expected) << narrowed.Dump();
    ASSERT_TRUE(y->shape);
    const Node* att = y->producer;
    if (k.self) {  // the queries' row of kv; the keys and values all of it
      EXPECT_EQ(SymbolicContext::AsConst((*y->shape)[1]), 1) << narrowed.Dump();
      ASSERT_NE(att->inputs[0]->producer, nullptr);
      EXPECT_EQ(att->inputs[0]->producer->op, "Gather");
      EXPECT_EQ(att->inputs[1], att->inputs[2]);
      EXPECT_EQ(att->inputs[1]->producer, nullptr);
    } else {
      EXPECT_EQ((*y->shape)[1], narrowed.sym().Symbol("seq")) << narrowed.Dump();
    }
    auto [opt, plain] = CompileBoth(build);
    for (int64_t seq : {2, 6}) {
      const uint32_t seed = 110 + static_cast<uint32_t>(seq);
      ExpectSameOutputs(opt, plain,
                        {{"q", RandomF32({kHeads, seq, kHeadDim}, seed)},
                         {"kv", RandomF32({kHeads, seq, kHeadDim}, seed + 1)}});
    }
  }
}

// Gemm: a row of Y is a row of A (A's axis 1 with transA) and of C when C is [M, N]; C
// broadcast along M is read whole. A column of Y needs every row: the Gemm is not narrowed.
TEST(CompilerTest, GemmIsNarrowedAlongItsRows) {
  enum class C { kNone, kVector, kRow, kFull };
  for (bool trans_a : {false, true}) {
    for (C c : {C::kNone, C::kVector, C::kRow, C::kFull}) {
      for (int64_t axis : {0, 1}) {
        SCOPED_TRACE(
            absl::StrCat(trans_a ? "transA " : "", "C ", static_cast<int>(c), " axis ", axis));
        auto build = [&](Module& m) {
          GraphBuilder b(m.AddFunction("main"));
          Value* a = b.Input("a", DType::kF32,
                             trans_a ? std::vector<DimSpec>{6, "m"} : std::vector<DimSpec>{"m", 6});
          std::vector<Value*> in = {a, b.Constant(RandomF32({6, 5}, 120), "w", true)};
          if (c == C::kVector) in.push_back(b.Constant(RandomF32({5}, 121)));
          if (c == C::kRow) in.push_back(b.Constant(RandomF32({1, 5}, 122)));
          if (c == C::kFull) in.push_back(b.Input("c", DType::kF32, {"m", 5}));
          Value* y =
              b.Op("Gemm", in, {{"transA", AttrInt(trans_a ? 1 : 0)}, {"beta", AttrFloat(0.5f)}});
          b.Output("kept",
                   b.Op("Gather", {b.Op("Relu", {y}), b.ScalarI64(2)}, {{"axis", AttrInt(axis)}}));
          return y;
        };
        Module narrowed;
        Value* y = build(narrowed);
        EXPECT_EQ(NarrowAndInfer(narrowed), axis == 0 ? 2 : 1) << narrowed.Dump();  // + Relu
        ASSERT_TRUE(y->shape);
        EXPECT_EQ(SymbolicContext::AsConst((*y->shape)[0]) == 1, axis == 0) << narrowed.Dump();
        if (c == C::kFull && axis == 0) {
          ASSERT_NE(y->producer->inputs[2]->producer, nullptr);
          EXPECT_EQ(y->producer->inputs[2]->producer->op, "Gather");
        }
        auto [opt, plain] = CompileBoth(build);
        for (int64_t m : {3, 7}) {
          const uint32_t seed = 130 + static_cast<uint32_t>(m);
          std::vector<std::pair<std::string, Tensor>> in = {
              {"a",
               RandomF32(trans_a ? std::vector<int64_t>{6, m} : std::vector<int64_t>{m, 6}, seed)}};
          if (c == C::kFull) in.emplace_back("c", RandomF32({m, 5}, seed + 1));
          ExpectSameOutputs(opt, plain, in);
        }
      }
    }
  }
}

// Reshape: narrowed when the kept output axis is an input axis of the same size with as many
// elements before it (unit dims moved, leading dims split or merged before it, -1 after it), or
// one m times longer (the output split it: a block of m input rows, [24, 5] -> [6, 4, 5]); not
// when the output merged the axis with the dims after it and one row is part of an input row
// ([6, 4, 5] -> [24, 5]), when its size is inferred (-1), or when the target copies (0) the
// input's narrowed axis into another place.
TEST(CompilerTest, ReshapeIsNarrowedWhenItKeepsTheRows) {
  struct Case {
    std::vector<int64_t> in, target;
    int64_t axis;
    int expected;  // Relu and Reshape, or neither
  };
  const std::vector<Case> cases = {
      {{6, 8, 4}, {6, 32}, 0, 2},      {{6, 8, 4}, {6, -1}, 0, 2},   {{8, 1, 5}, {1, 8, 5}, 1, 2},
      {{2, 3, 3, 5}, {6, 3, 5}, 1, 2}, {{1, 8, 8}, {8, 8}, 0, 2},    {{24, 5}, {6, 4, 5}, 0, 2},
      {{6, 4, 5}, {24, 5}, 0, 0},      {{6, 4, 5}, {6, 4, 5}, 1, 2}, {{8, 1, 5}, {1, -1, 5}, 1, 0},
      {{1, 8, 8}, {8, 0}, 0, 0},       {{4, 6}, {4, 2, 3}, 2, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("[", absl::StrJoin(c.in, ","), "] -> [", absl::StrJoin(c.target, ","),
                              "] axis ", c.axis));
    auto build = [&](Module& m) {
      GraphBuilder b(m.AddFunction("main"));
      std::vector<DimSpec> dims(c.in.begin(), c.in.end());
      Value* r =
          b.Op("Reshape", {b.Op("Relu", {b.Input("x", DType::kF32, dims)}), b.VectorI64(c.target)});
      b.Output("kept", b.Op("Gather", {r, b.ScalarI64(1)}, {{"axis", AttrInt(c.axis)}}));
    };
    Module narrowed;
    build(narrowed);
    EXPECT_EQ(NarrowAndInfer(narrowed), c.expected) << narrowed.Dump();
    auto [opt, plain] = CompileBoth(build);
    ExpectSameOutputs(opt, plain, {{"x", RandomF32(c.in, 140)}});
  }
}

// A block of rows: a [6 * 4, 5] product between Reshapes that merge and split the kept axis
// (torch's batch-first [L, B, E] around a [L * B, E] Gemm): keeping position i of [6, 4, 3]
// computes rows [4 i, 4 i + 4) of the product, read through a Slice, and the row of x.
TEST(CompilerTest, BlocksOfRowsThroughMergedAndSplitAxes) {
  for (int64_t index : {2, -1, 0}) {
    SCOPED_TRACE(index);
    auto build = [&](Module& m) {
      GraphBuilder b(m.AddFunction("main"));
      Value* x = b.Input("x", DType::kF32, {6, 4, 5});
      Value* flat = b.Op("Reshape", {b.Op("Relu", {x}), b.VectorI64({24, 5})});
      Value* y = b.Op("MatMul", {flat, b.Constant(RandomF32({5, 3}, 150), "w", true)});
      Value* back = b.Op("Reshape", {b.Op("Tanh", {y}), b.VectorI64({6, 4, 3})});
      b.Output("kept", b.Op("Gather", {back, b.ScalarI64(index)}, {{"axis", AttrInt(0)}}));
      return y;
    };
    Module narrowed;
    Value* y = build(narrowed);
    EXPECT_EQ(NarrowAndInfer(narrowed), 5) << narrowed.Dump();  // Relu, 2 Reshapes, MatMul, Tanh
    ASSERT_TRUE(y->shape);
    EXPECT_EQ(SymbolicContext::AsConst((*y->shape)[0]), 4) << narrowed.Dump();
    auto [opt, plain] = CompileBoth(build);
    ExpectSameOutputs(opt, plain, {{"x", RandomF32({6, 4, 5}, 151)}});
  }
}

// Rows other than the first and the last (whose index reads a narrowed value right without
// being rewritten to 0), and two row-wise nodes that keep different rows of one value: each
// reads its own row of it.
TEST(CompilerTest, DifferentRowsOfOneValueAreGatheredSeparately) {
  auto build = [](Module& m) {
    GraphBuilder b(m.AddFunction("main"));
    Value* x = b.Input("x", DType::kF32, {"n", 8});
    b.Output("relu", b.Op("Gather", {b.Op("Relu", {x}), b.ScalarI64(1)}, {{"axis", AttrInt(0)}}));
    b.Output("neg", b.Op("Gather", {b.Op("Neg", {x}), b.ScalarI64(2)}, {{"axis", AttrInt(0)}}));
  };
  Module narrowed;
  build(narrowed);
  EXPECT_EQ(NarrowAndInfer(narrowed), 2) << narrowed.Dump();
  auto [opt, plain] = CompileBoth(build);
  for (int64_t n : {3, 5}) ExpectSameOutputs(opt, plain, {{"x", RandomF32({n, 8}, 150)}});
}

}  // namespace
}  // namespace dynvm::compiler

namespace dynvm::compiler {
namespace {

// torch.jit.script exports `t.expand(b, k, n)` with dynamic sizes as Expand(t, Where(Equal(s,
// ConstantOfShape(Shape(s), 1) * -1), ConstantOfShape(...), s)) (its guard for -1 sizes). The
// guard folds symbolically (a size is never -1), so the output shape is known at compile time:
// with n bounded everything is planned (the Expand is not allocated by its kernel), and inside a
// loop nothing is allocated per step.
TEST(CompilerTest, TorchExpandGuardFoldsToASymbolicShape) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"n", 3});
  Value* row = b.Input("row", DType::kF32, {1, 3});
  Value* n =
      b.Op("Unsqueeze", {b.Op("Gather", {b.Op("Shape", {x}), b.ScalarI64(0)}), b.VectorI64({0})});
  Value* target = b.Op("Concat", {n, b.VectorI64({3})}, {{"axis", AttrInt(0)}});
  Value* ones = b.Op("ConstantOfShape", {b.Op("Shape", {target})},
                     {{"value", AttrTensor(*Tensor::FromVector<int64_t>(DType::kI64, {1}, {1}))}});
  Value* minus = b.Op("Mul", {ones, b.ScalarI64(-1)});
  Value* guarded = b.Op("Where", {b.Op("Equal", {target, minus}), ones, target});
  b.Output("y", b.Op("Add", {b.Op("Expand", {row, guarded}), x}));
  CompileOptions bounded;
  bounded.bounds = {{"n", 4}};
  Compiled c = CompileOrDie(m, bounded);
  ASSERT_TRUE(c.exe);
  EXPECT_EQ(c.result.functions[0].dynamic_alloc_sites, 0) << c.result.ReportText();
  Tensor xv = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor rv = *Tensor::FromVector<float>(DType::kF32, {1, 3}, {10, 20, 30});
  std::vector<Tensor> out = RunOrDie(c.exe, {{"x", xv}, {"row", rv}});
  ASSERT_EQ(out.size(), 1u);
  ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {2, 3}, {11, 22, 33, 14, 25, 36}));
}

// An Equal the dims cannot decide (two unrelated sizes) keeps no content: the Where it feeds
// stays a run-time value, and the result is still right when the sizes are equal or not.
TEST(CompilerTest, UndecidedSymbolicEqualStaysARunTimeValue) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"a"});
  Value* y = b.Input("y", DType::kF32, {"b"});
  Value* sx = b.Op("Shape", {x});
  Value* sy = b.Op("Shape", {y});
  Value* pick = b.Op("Where", {b.Op("Equal", {sx, sy}), b.VectorI64({7}), sx});
  b.Output("z", b.Op("Cast", {pick}, {{"to", AttrInt(1)}}));
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  for (const auto& [a, bsize, want] :
       std::vector<std::tuple<int64_t, int64_t, float>>{{2, 2, 7.f}, {2, 3, 2.f}}) {
    std::vector<Tensor> out = RunOrDie(c.exe, {{"x", *Tensor::Empty(DType::kF32, {a})},
                                               {"y", *Tensor::Empty(DType::kF32, {bsize})}});
    ASSERT_EQ(out.size(), 1u);
    ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {1}, {want}));
  }
}

// A scan output whose elements hold no values (here a slice past the end: f32[0], and a
// shape of a scalar, i64[0]) appends nothing each iteration; the result is [trips, 0] (the append
// used to address a view past the growable's storage, which has no bytes).
TEST(CompilerTest, ScanOutputOfEmptyElementsHasNoValues) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {"n"});
  Value* s = b.Input("s", DType::kF32, {});
  std::vector<Value*> outs =
      b.Loop(b.Input("trips", DType::kI64, {}), nullptr, {}, 2,
             [&](GraphBuilder& l, Value*, Value* cond, const std::vector<Value*>&) {
               Value* past = l.Op("Slice", {x, l.VectorI64({5}), l.VectorI64({10})});
               return std::vector<Value*>{cond, past, l.Op("Shape", {s})};
             });
  b.Output("slices", outs[0]);
  b.Output("shapes", outs[1]);
  Compiled c = CompileOrDie(m);
  ASSERT_TRUE(c.exe);
  std::vector<Tensor> out =
      RunOrDie(c.exe, {{"x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})},
                       {"s", *Tensor::FromVector<float>(DType::kF32, {}, {1})},
                       {"trips", Tensor::ScalarI64(3)}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{3, 0}));
}

// An If result of unknown rank (an Unsqueeze whose axes are an input) returned from the
// function: each branch makes it in its own pool storage, so it is returned as it is (it was
// refused: "an output of unknown shape is not pool-owned").
TEST(CompilerTest, IfResultOfUnknownRankIsAFunctionOutput) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* x = b.Input("x", DType::kF32, {2});
  Value* axes = b.Input("axes", DType::kI64, {"k"});
  Value* c = b.Input("c", DType::kBool, {});
  std::vector<Value*> outs = b.If(
      c, 1,
      [&](GraphBuilder& t) {
        return std::vector<Value*>{t.Op("Unsqueeze", {x, axes})};
      },
      [&](GraphBuilder& e) {
        return std::vector<Value*>{e.Op("Unsqueeze", {e.Op("Neg", {x}), axes})};
      });
  b.Output("y", outs[0]);
  Compiled compiled = CompileOrDie(m);
  ASSERT_TRUE(compiled.exe);
  for (const bool cond : {true, false}) {
    Tensor cv = *Tensor::Empty(DType::kBool, {});
    cv.data<bool>()[0] = cond;
    std::vector<Tensor> out =
        RunOrDie(compiled.exe, {{"x", *Tensor::FromVector<float>(DType::kF32, {2}, {1, -2})},
                                {"axes", *Tensor::FromVector<int64_t>(DType::kI64, {2}, {0, 2})},
                                {"c", cv}});
    ASSERT_EQ(out.size(), 1u);
    const float sign = cond ? 1 : -1;
    ExpectNear(out[0], *Tensor::FromVector<float>(DType::kF32, {1, 2, 1}, {sign, -2 * sign}));
  }
}

}  // namespace
}  // namespace dynvm::compiler
