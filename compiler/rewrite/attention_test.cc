// attention, attention_transpose (attention.cc): the forms torch writes, against the
// unoptimized program, the near misses left alone, and the run-time mask check.
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::compiler::rewrite {
namespace {

AttrValue Perm(std::vector<int64_t> p) { return AttrInts(std::move(p)); }

// nn.MultiheadAttention's form (torch 1.13): Q/K/V [L, G, hd] (G = batch x heads), Q
// transposed and divided by sqrt(hd), K transposed by [1, 2, 0], softmax, V transposed, the
// result transposed back.
struct MhaForm {
  int mask = 0;  // 0 none, 1 additive [G, 1, L] (key padding), 2 Where(bool [L, L], -inf, s)
  bool where_keep = false;  // Where(cond, s, -inf) instead
  int64_t softmax_axis = -1;
  bool share_probs = false;  // the probabilities are a second output
  bool mask_bigger = false;  // an additive mask [2, G, L, L] that broadcasts the scores
  bool mul_scale = false;    // Mul(MatMul, c) after the product instead of Div(Q, c)
};

Outcome RunMha(const MhaForm& f) {
  const int64_t L = 5, G = 6, hd = 4;
  std::vector<std::pair<std::string, Tensor>> in = {{"q", RandomF32({L, G, hd}, 1)},
                                                    {"k", RandomF32({L, G, hd}, 2)},
                                                    {"v", RandomF32({L, G, hd}, 3)}};
  if (f.mask == 1) {
    Tensor m = RandomF32({G, 1, L}, 4, -3, 0);
    in.push_back({"m", std::move(m)});
  }
  if (f.mask_bigger) in.push_back({"m", RandomF32({2, G, L, L}, 4, -3, 0)});
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* q = b.Input("q", DType::kF32, {L, G, hd});
        Value* k = b.Input("k", DType::kF32, {L, G, hd});
        Value* v = b.Input("v", DType::kF32, {L, G, hd});
        Value* qt = b.Op("Transpose", {q}, {{"perm", Perm({1, 0, 2})}});
        Value* kt = b.Op("Transpose", {k}, {{"perm", Perm({1, 2, 0})}});
        Value* vt = b.Op("Transpose", {v}, {{"perm", Perm({1, 0, 2})}});
        Value* s = f.mul_scale ? b.Op("Mul", {b.Op("MatMul", {qt, kt}), b.ScalarF32(0.5f)})
                               : b.Op("MatMul", {b.Op("Div", {qt, b.ScalarF32(2.0f)}), kt});
        if (f.mask == 1) s = b.Op("Add", {s, b.Input("m", DType::kF32, {G, 1, L})});
        if (f.mask_bigger) s = b.Op("Add", {s, b.Input("m", DType::kF32, {2, G, L, L})});
        if (f.mask == 2) {
          std::vector<uint8_t> tri(L * L);
          for (int64_t i = 0; i < L; ++i) {
            for (int64_t j = 0; j < L; ++j) tri[i * L + j] = (j > i) != f.where_keep;
          }
          Value* cond = b.Constant(*Tensor::FromVector<uint8_t>(DType::kBool, {L, L}, tri));
          Value* inf = b.ScalarF32(-std::numeric_limits<float>::infinity());
          s = f.where_keep ? b.Op("Where", {cond, s, inf}) : b.Op("Where", {cond, inf, s});
        }
        Value* p = b.Op("Softmax", {s}, {{"axis", AttrInt(f.softmax_axis)}});
        Value* o = b.Op("MatMul", {p, vt});
        b.Output("y", f.mask_bigger ? o : b.Op("Transpose", {o}, {{"perm", Perm({1, 0, 2})}}));
        if (f.share_probs) b.Output("p", p);
      },
      in, {}, 1e-5);
}

TEST(AttentionTest, FusesMultiheadForms) {
  for (int form = 0; form < 5; ++form) {
    SCOPED_TRACE(form);
    MhaForm f;
    f.mask = form == 1 ? 1 : form >= 2 && form <= 3 ? 2 : 0;
    f.where_keep = form == 3;
    f.mul_scale = form == 4;
    Outcome o = RunMha(f);
    EXPECT_EQ(o.fired["attention"], 1);
    EXPECT_EQ(o.fired["attention_transpose"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
    EXPECT_FALSE(o.HasKernel("Softmax"));
    EXPECT_FALSE(o.HasKernel("MatMul"));
    EXPECT_FALSE(o.HasKernel("Transpose"));
  }
}

TEST(AttentionTest, LeavesNearMissesAlone) {
  MhaForm other_axis;
  other_axis.softmax_axis = 1;
  EXPECT_EQ(RunMha(other_axis).fired["attention"], 0);
  MhaForm shared;
  shared.share_probs = true;
  Outcome o = RunMha(shared);
  EXPECT_EQ(o.fired["attention"], 0);
  EXPECT_TRUE(o.HasKernel("Softmax"));
  MhaForm bigger;
  bigger.mask_bigger = true;
  EXPECT_EQ(RunMha(bigger).fired["attention"], 0);
}

// A GPT block's form: [B, H, T, hd] from Transpose(Reshape) of [B, T, d], K transposed by
// [0, 2, 3, 1], the scale after the product, the output transposed by [0, 2, 1, 3]; one query
// (a decode step) takes the GEMV path, 150 queries run in two blocks of the fixed scratch.
TEST(AttentionTest, FusesGptFormAndDecodeStep) {
  for (int64_t t : {7, 1, 150}) {
    SCOPED_TRACE(t);
    const int64_t B = 2, T = t, H = 3, hd = 4;
    std::vector<std::pair<std::string, Tensor>> in = {{"q", RandomF32({B, T, H, hd}, 5)},
                                                      {"k", RandomF32({B, T, H, hd}, 6)},
                                                      {"v", RandomF32({B, T, H, hd}, 7)},
                                                      {"m", RandomF32({T, T}, 8, -2, 0)}};
    Outcome o = CompareWithUnoptimized(
        [&](GraphBuilder& b) {
          Value* q = b.Op("Transpose", {b.Input("q", DType::kF32, {B, T, H, hd})},
                          {{"perm", Perm({0, 2, 1, 3})}});
          Value* k = b.Op("Transpose", {b.Input("k", DType::kF32, {B, T, H, hd})},
                          {{"perm", Perm({0, 2, 3, 1})}});
          Value* v = b.Op("Transpose", {b.Input("v", DType::kF32, {B, T, H, hd})},
                          {{"perm", Perm({0, 2, 1, 3})}});
          Value* s = b.Op("Mul", {b.ScalarF32(0.5f), b.Op("MatMul", {q, k})});
          s = b.Op("Add", {b.Input("m", DType::kF32, {T, T}), s});
          Value* o = b.Op("MatMul", {b.Op("Softmax", {s}, {{"axis", AttrInt(3)}}), v});
          b.Output("y", b.Op("Transpose", {o}, {{"perm", Perm({0, 2, 1, 3})}}));
        },
        in, {}, 1e-5);
    EXPECT_EQ(o.fired["attention"], 1);
    EXPECT_EQ(o.fired["attention_transpose"], 1);
    EXPECT_FALSE(o.HasKernel("Transpose"));
    EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
  }
}

// Q' with its D axis strided (Q given as [G, D, L]) and K' read as given: the oneDNN kernel
// runs the reference loops, against the unfused program.
TEST(AttentionTest, StridedOperandsTakeTheReferenceLoops) {
  const int64_t G = 3, L = 5, D = 4;
  Outcome o = CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        Value* q =
            b.Op("Transpose", {b.Input("q", DType::kF32, {G, D, L})}, {{"perm", Perm({0, 2, 1})}});
        Value* s = b.Op("MatMul", {q, b.Input("k", DType::kF32, {G, D, L})});
        Value* p = b.Op("Softmax", {b.Op("Div", {s, b.ScalarF32(3.0f)})}, {{"axis", AttrInt(-1)}});
        b.Output("y", b.Op("MatMul", {p, b.Input("v", DType::kF32, {G, L, D})}));
      },
      {{"q", RandomF32({G, D, L}, 11)},
       {"k", RandomF32({G, D, L}, 12)},
       {"v", RandomF32({G, L, D}, 13)}},
      {}, 1e-5);
  EXPECT_EQ(o.fired["attention"], 1);
  EXPECT_FALSE(o.HasKernel("Softmax"));
}

// A mask whose size the compiler cannot compare with the scores' (two symbols) fuses; at run
// time a mask that would broadcast the scores (m = 3 rows against t = 1 query) is an error
// naming the node, and the VM stays usable.
TEST(AttentionTest, MaskOfAnotherShapeFailsAtRunTimeNamingTheNode) {
  Module m;
  GraphBuilder b(m.AddFunction("main"));
  Value* q = b.Input("q", DType::kF32, {2, "t", 4});
  Value* k = b.Input("k", DType::kF32, {2, 4, 5});
  Value* v = b.Input("v", DType::kF32, {2, 5, 4});
  Value* mask = b.Input("m", DType::kF32, {2, "m", 5});
  Value* s = b.Op("Add", {b.Op("MatMul", {q, k}), mask});
  b.Output("y", b.Op("MatMul", {b.Op("Softmax", {s}, {{"axis", AttrInt(-1)}}), v}));
  absl::StatusOr<CompileResult> r = Compile(m, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rewrites["attention"], 1);
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(r->bytes.data()), r->bytes.size()});
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto run = [&](int64_t t, int64_t rows) {
    EXPECT_TRUE((*vm)->SetInput("q", RandomF32({2, t, 4}, 1)).ok());
    EXPECT_TRUE((*vm)->SetInput("k", RandomF32({2, 4, 5}, 2)).ok());
    EXPECT_TRUE((*vm)->SetInput("v", RandomF32({2, 5, 4}, 3)).ok());
    EXPECT_TRUE((*vm)->SetInput("m", RandomF32({2, rows, 5}, 4)).ok());
    return (*vm)->Run();
  };
  absl::Status bad = run(1, 3);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("node '"), std::string::npos) << bad;
  EXPECT_NE(bad.message().find("Attention: the mask f32[2,3,5]"), std::string::npos) << bad;
  EXPECT_TRUE(run(3, 1).ok());  // a broadcast row: fine
  EXPECT_TRUE(run(3, 3).ok());
}

// onnx_attention: ONNX's Attention 23 (run unfused by its reference kernel) as dynvm::Attention,
// 4-D and 3-D, without a mask, with a bool and with a float one; the forms it leaves alone.
struct OnnxAttentionForm {
  int rank = 4;
  int mask = 0;  // 0 none, 1 bool [Sq, T], 2 float [B, 1, Sq, T]
  bool causal = false;
  bool past = false;
  int64_t kv_heads = 2;
};

Outcome RunOnnxAttention(const OnnxAttentionForm& f) {
  const int64_t B = 2, N = 2, Sq = 3, T = 5, H = 4, Hv = 6, P = 2;
  const int64_t kvn = f.kv_heads;
  std::vector<int64_t> qd = {B, N, Sq, H}, kd = {B, kvn, T, H}, vd = {B, kvn, T, Hv};
  if (f.rank == 3) {
    qd = {B, Sq, N * H};
    kd = {B, T, kvn * H};
    vd = {B, T, kvn * Hv};
  }
  auto dims = [](const std::vector<int64_t>& d) {
    return std::vector<DimSpec>(d.begin(), d.end());
  };
  std::vector<std::pair<std::string, Tensor>> in = {
      {"q", RandomF32(qd, 1)}, {"k", RandomF32(kd, 2)}, {"v", RandomF32(vd, 3)}};
  std::vector<uint8_t> keep(Sq * T);
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = i % T == 0 || (i * 7) % 3 != 0;
  if (f.mask == 1) in.push_back({"m", *Tensor::FromVector<uint8_t>(DType::kBool, {Sq, T}, keep)});
  if (f.mask == 2) in.push_back({"m", RandomF32({B, 1, Sq, T}, 4, -2, 2)});
  if (f.past) {
    in.push_back({"pk", RandomF32({B, kvn, P, H}, 5)});
    in.push_back({"pv", RandomF32({B, kvn, P, Hv}, 6)});
  }
  return CompareWithUnoptimized(
      [&](GraphBuilder& b) {
        std::vector<Value*> ins = {b.Input("q", DType::kF32, dims(qd)),
                                   b.Input("k", DType::kF32, dims(kd)),
                                   b.Input("v", DType::kF32, dims(vd))};
        if (f.mask == 1) ins.push_back(b.Input("m", DType::kBool, {Sq, T}));
        if (f.mask == 2) ins.push_back(b.Input("m", DType::kF32, {B, 1, Sq, T}));
        if (f.past) {
          if (f.mask == 0) ins.push_back(nullptr);
          ins.push_back(b.Input("pk", DType::kF32, {B, kvn, P, H}));
          ins.push_back(b.Input("pv", DType::kF32, {B, kvn, P, Hv}));
        }
        Attrs attrs = {{"scale", AttrFloat(0.4f)}};
        if (f.rank == 3) {
          attrs["q_num_heads"] = AttrInt(N);
          attrs["kv_num_heads"] = AttrInt(kvn);
        }
        if (f.causal) attrs["is_causal"] = AttrInt(1);
        // A past needs the present outputs.
        std::vector<Value*> outs = b.Ops("Attention", ins, attrs, f.past ? 3 : 1);
        b.Output("y", outs[0]);
        if (f.past) {
          b.Output("present_key", outs[1]);
          b.Output("present_value", outs[2]);
        }
      },
      in, {}, 1e-5);
}

TEST(AttentionTest, OnnxAttentionBecomesDynvmAttention) {
  for (int rank : {4, 3}) {
    for (int mask : {0, 1, 2}) {
      SCOPED_TRACE(absl::StrCat("rank ", rank, " mask ", mask));
      OnnxAttentionForm f;
      f.rank = rank;
      f.mask = mask;
      Outcome o = RunOnnxAttention(f);
      EXPECT_EQ(o.fired["onnx_attention"], 1);
      EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
      EXPECT_FALSE(o.HasKernel("Attention"));
    }
  }
}

// 4-D grouped heads (2 query heads per key/value head): Q reshaped to [B, 1, 2 Sq, H], the mask's
// rows tiled.
TEST(AttentionTest, OnnxAttentionGroupedHeadsBecomeDynvmAttention) {
  for (int form = 0; form < 4; ++form) {
    SCOPED_TRACE(form);
    OnnxAttentionForm f;
    f.kv_heads = 1;
    f.mask = form < 3 ? form : 0;
    f.causal = form == 3;
    Outcome o = RunOnnxAttention(f);
    EXPECT_EQ(o.fired["onnx_attention"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
    EXPECT_FALSE(o.HasKernel("Attention"));
  }
}

TEST(AttentionTest, OnnxAttentionCausalBecomesACausalMask) {
  for (int rank : {4, 3}) {
    SCOPED_TRACE(rank);
    OnnxAttentionForm f;
    f.rank = rank;
    f.causal = true;
    Outcome o = RunOnnxAttention(f);
    EXPECT_EQ(o.fired["onnx_attention"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
    EXPECT_TRUE(o.HasKernel("Trilu"));
    EXPECT_FALSE(o.HasKernel("Attention"));
  }
}

TEST(AttentionTest, OnnxAttentionNearMissesKeepTheirKernel) {
  OnnxAttentionForm causal;  // is_causal with attn_mask
  causal.causal = true;
  causal.mask = 1;
  OnnxAttentionForm past;
  past.past = true;
  OnnxAttentionForm grouped;  // 3-D grouped heads
  grouped.rank = 3;
  grouped.kv_heads = 1;
  for (const OnnxAttentionForm& f : {causal, past, grouped}) {
    Outcome o = RunOnnxAttention(f);
    EXPECT_EQ(o.fired["onnx_attention"], 0);
    EXPECT_TRUE(o.HasKernel("Attention"));
  }
}

// msft_multi_head_attention: com.microsoft MultiHeadAttention with a constant bias as
// dynvm::Attention (the bias added by parts); with a key_padding_mask it keeps its kernel.
TEST(AttentionTest, MultiHeadAttentionBecomesDynvmAttention) {
  for (bool mask : {false, true}) {
    SCOPED_TRACE(mask);
    const int64_t B = 2, S = 3, L = 4, N = 2, H = 4, Hv = 3;
    std::vector<std::pair<std::string, Tensor>> in = {{"q", RandomF32({B, S, N * H}, 1)},
                                                      {"k", RandomF32({B, L, N * H}, 2)},
                                                      {"v", RandomF32({B, L, N * Hv}, 3)}};
    if (mask) in.push_back({"m", *Tensor::FromVector<int32_t>(DType::kI32, {B}, {2, 4})});
    Outcome o = CompareWithUnoptimized(
        [&](GraphBuilder& b) {
          std::vector<Value*> ins = {b.Input("q", DType::kF32, {B, S, N * H}),
                                     b.Input("k", DType::kF32, {B, L, N * H}),
                                     b.Input("v", DType::kF32, {B, L, N * Hv}),
                                     b.Constant(RandomF32({N * (2 * H + Hv)}, 4))};
          if (mask) ins.push_back(b.Input("m", DType::kI32, {B}));
          b.Output("y",
                   b.Op("MultiHeadAttention", ins, {{"num_heads", AttrInt(N)}}, "com.microsoft"));
        },
        in, {}, 1e-5);
    EXPECT_EQ(o.fired["msft_multi_head_attention"], mask ? 0 : 1);
    EXPECT_EQ(o.HasKernel("dynvm::Attention"), !mask);
    EXPECT_EQ(o.HasKernel("com.microsoft::MultiHeadAttention"), mask);
  }
}

}  // namespace
}  // namespace dynvm::compiler::rewrite

namespace dynvm::compiler::rewrite {
namespace {

// attention_kv_repeat: grouped-query attention as Llama's exports write it, K and V [B, kvh, T, hd]
// repeated to the query heads by Unsqueeze + Expand + Reshape (the group after each kv head),
// Q [B, T, H, hd] transposed to heads first, the output transposed back. Without a mask, with an
// additive [T, T] one, with a bool [B, 1, T, T] one (Where): the repeat is folded (no Expand
// kernel left); a per-head mask [B, H, T, T] keeps the repeat. One query (a decode step) and 7,
// groups of 2 and 4. Against the unoptimized program.
TEST(AttentionTest, KvRepeatIsReadAsBroadcastKvHeads) {
  for (int64_t t : {1, 7}) {
    for (auto [kv_heads, group] : {std::pair<int64_t, int64_t>{2, 2}, {1, 4}}) {
      // Plain copies: lambdas cannot capture structured bindings before clang 16.
      const int64_t kvh = kv_heads, g = group;
      for (int mask = 0; mask < 4; ++mask) {
        SCOPED_TRACE(absl::StrCat("t ", t, " kvh ", kvh, " g ", g, " mask ", mask));
        const int64_t B = 2, T = t, H = kvh * g, hd = 4;
        std::vector<std::pair<std::string, Tensor>> in = {{"q", RandomF32({B, T, H, hd}, 15)},
                                                          {"k", RandomF32({B, kvh, T, hd}, 16)},
                                                          {"v", RandomF32({B, kvh, T, hd}, 17)}};
        if (mask == 1) in.push_back({"m", RandomF32({T, T}, 18, -2, 0)});
        if (mask == 3) in.push_back({"m", RandomF32({B, H, T, T}, 19, -2, 0)});
        if (mask == 2) {
          Tensor m = *Tensor::Empty(DType::kBool, {B, 1, T, T});
          for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = (i % T) > (i / T) % T;
          in.push_back({"m", std::move(m)});
        }
        Outcome o = CompareWithUnoptimized(
            [&](GraphBuilder& b) {
              auto repeat = [&](Value* x) {
                Value* u = b.Op("Unsqueeze", {x, b.VectorI64({2})});
                Value* e = b.Op("Expand", {u, b.VectorI64({B, kvh, g, T, hd})});
                return b.Op("Reshape", {e, b.VectorI64({B, H, T, hd})});
              };
              Value* q = b.Op("Transpose", {b.Input("q", DType::kF32, {B, T, H, hd})},
                              {{"perm", Perm({0, 2, 1, 3})}});
              Value* k = repeat(b.Input("k", DType::kF32, {B, kvh, T, hd}));
              Value* v = repeat(b.Input("v", DType::kF32, {B, kvh, T, hd}));
              Value* s =
                  b.Op("Mul",
                       {b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", Perm({0, 1, 3, 2})}})}),
                        b.ScalarF32(0.5f)});
              if (mask == 1 || mask == 3) {
                s = b.Op("Add", {s, b.Input("m", DType::kF32,
                                            mask == 1 ? std::vector<DimSpec>{T, T}
                                                      : std::vector<DimSpec>{B, H, T, T})});
              } else if (mask == 2) {
                s = b.Op("Where",
                         {b.Input("m", DType::kBool, {B, 1, T, T}), b.ScalarF32(-1e9f), s});
              }
              Value* o = b.Op("MatMul", {b.Op("Softmax", {s}, {{"axis", AttrInt(-1)}}), v});
              b.Output("y", b.Op("Transpose", {o}, {{"perm", Perm({0, 2, 1, 3})}}));
            },
            in, {}, 1e-5);
        EXPECT_EQ(o.fired["attention"], 1);
        EXPECT_EQ(o.fired["attention_kv_repeat"], mask == 3 ? 0 : 1);
        EXPECT_EQ(o.HasKernel("Expand"), mask == 3);
        EXPECT_TRUE(o.HasKernel("dynvm::Attention"));
      }
    }
  }
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
