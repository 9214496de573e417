// The oneDNN backend's com.microsoft GroupQueryAttention, MultiHeadAttention and Attention and
// ONNX Attention 23 (msft_attention.cc) against the reference kernels
// (kernels/reference/msft_attention.cc, in double; itself checked against ONNX Runtime by
// tests/conformance/msft): first prompts (ragged by seqlens_k), decode steps over pasts of 0 to 300
// keys (ragged too), a later prompt of several tokens, grouped heads (1 to 8 query heads per KV
// head), head sizes that are not a multiple of any vector width, packed QKV, rotary (halves and
// interleaved, partial, by position_ids), local windows, softcap, attention_bias (broadcast too),
// smooth_softmax and head_sink, without the present outputs; for Attention 23 3-D and 4-D inputs,
// grouped heads, pasts of 0 to 300, bool and f32 masks (broadcast too), is_causal, softcap, V's own
// head size; for MultiHeadAttention every key_padding_mask form, attention_bias, biases, pasts,
// cached cross-attention keys, unidirectional; for com.microsoft Attention the projection,
// qkv_hidden_sizes, mask_index, past; at one and two threads and at every instruction-set level
// this machine has.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::KernelCall;

Tensor Random(std::vector<int64_t> dims, std::mt19937& rng, float range = 2.0f) {
  std::uniform_real_distribution<float> dist(-range, range);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

struct Case {
  std::string name;
  int64_t batch = 1, seq = 1, past = 0, heads = 4, kv_heads = 2, head = 16;
  int64_t total = 0;             // total_sequence_length
  std::vector<int32_t> seqlens;  // per batch (total_b - 1)
  bool packed = false, rotary = false, interleaved = false, position_ids = false;
  int64_t rot_half = 0;  // cos/sin cache width (0: head / 2)
  int64_t window = -1;
  float softcap = 0.0f, scale = 0.0f;
  int bias = 0;  // 0 none, 1 [B, N, S, T], 2 [1, 1, S, T + 3]
  bool smooth = false, sink = false, presents = true;
};

// Runs one backend; the outputs (presents after the output when wanted).
std::vector<Tensor> RunGqa(const Case& c, const char* backend, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.batch * 7919 + c.seq * 131 + c.past * 17 + c.head));
  const int64_t n = c.heads, nkv = c.kv_heads, h = c.head, t = std::max(c.total, c.past);
  KernelCall call("GroupQueryAttention", "com.microsoft");
  if (c.packed) {
    call.In(Random({c.batch, c.seq, (n + 2 * nkv) * h}, rng)).Absent().Absent();
  } else {
    call.In(Random({c.batch, c.seq, n * h}, rng))
        .In(Random({c.batch, c.seq, nkv * h}, rng))
        .In(Random({c.batch, c.seq, nkv * h}, rng));
  }
  if (c.past > 0) {
    call.In(Random({c.batch, nkv, c.past, h}, rng)).In(Random({c.batch, nkv, c.past, h}, rng));
  } else {
    call.Absent().Absent();
  }
  call.In(testing::I32({c.batch}, c.seqlens)).In(testing::I32({}, {static_cast<int32_t>(c.total)}));
  const bool extras = c.rotary || c.bias != 0 || c.sink;
  if (c.rotary) {
    const int64_t half = c.rot_half > 0 ? c.rot_half : h / 2, positions = t + 8;
    std::vector<float> cv, sv;
    for (int64_t p = 0; p < positions; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double theta = p * std::pow(10000.0, -2.0 * i / (2 * half));
        cv.push_back(static_cast<float>(std::cos(theta)));
        sv.push_back(static_cast<float>(std::sin(theta)));
      }
    }
    call.In(testing::F32({positions, half}, cv)).In(testing::F32({positions, half}, sv));
    if (c.position_ids) {
      std::vector<int64_t> ids;
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t s = 0; s < c.seq; ++s) ids.push_back((b * 5 + s * 3) % positions);
      }
      call.In(testing::I64({c.batch, c.seq}, ids));
    } else if (extras) {
      call.Absent();
    }
  } else if (extras) {
    call.Absent().Absent().Absent();
  }
  if (c.bias == 1) {
    call.In(Random({c.batch, n, c.seq, t}, rng));
  } else if (c.bias == 2) {
    call.In(Random({1, 1, c.seq, t + 3}, rng));
  } else if (c.sink) {
    call.Absent();
  }
  if (c.sink) call.In(Random({n}, rng));
  call.Out(DType::kF32);
  if (c.presents) call.Out(DType::kF32).Out(DType::kF32);
  call.Attr("num_heads", n).Attr("kv_num_heads", nkv);
  if (c.rotary) call.Attr("do_rotary", int64_t{1});
  if (c.interleaved) call.Attr("rotary_interleaved", int64_t{1});
  if (c.window >= 0) call.Attr("local_window_size", c.window);
  if (c.softcap > 0) call.Attr("softcap", c.softcap);
  if (c.scale != 0) call.Attr("scale", c.scale);
  if (c.smooth) call.Attr("smooth_softmax", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> r = call.Backend(backend).Run(threads);
  EXPECT_TRUE(r.ok()) << c.name << " " << backend << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>();
}

// Every output within 1e-5 (1 + |want|) of the reference's (which sums in double).
void ExpectClose(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].dims(), want[o].dims()) << "output " << o;
    const std::vector<double> g = testing::ToDoubles(got[o]), w = testing::ToDoubles(want[o]);
    int bad = 0;
    for (size_t i = 0; i < g.size() && bad < 5; ++i) {
      if (!(std::fabs(g[i] - w[i]) <= 1e-5 * (1 + std::fabs(w[i])))) {
        ADD_FAILURE() << "output " << o << " element " << i << ": " << g[i] << " vs " << w[i];
        ++bad;
      }
    }
  }
}

void Compare(const Case& c, int threads) {
  SCOPED_TRACE(absl::StrCat(c.name, " threads ", threads));
  ExpectClose(RunGqa(c, "dnnl", threads), RunGqa(c, "reference", 1));
}

// First prompts, decode steps, a later prompt; windows.
std::vector<Case> ShapeCases() {
  std::vector<Case> cs;
  auto add = [&cs](Case c) { cs.push_back(std::move(c)); };
  // First prompts: no past, padded rows (seqlens_k below S - 1).
  add({.name = "prompt",
       .batch = 2,
       .seq = 7,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 7,
       .seqlens = {6, 3}});
  add({.name = "prompt_mha_head20",
       .batch = 1,
       .seq = 5,
       .heads = 3,
       .kv_heads = 3,
       .head = 20,
       .total = 5,
       .seqlens = {4}});
  // Decode steps: one query after a past of 0 (a prompt of one), 1, 37, 300 keys; ragged.
  add({.name = "decode_past0",
       .batch = 1,
       .seq = 1,
       .heads = 8,
       .kv_heads = 2,
       .head = 64,
       .total = 1,
       .seqlens = {0}});
  add({.name = "decode_past1",
       .batch = 2,
       .seq = 1,
       .past = 1,
       .heads = 4,
       .kv_heads = 1,
       .head = 36,
       .total = 2,
       .seqlens = {1, 1}});
  add({.name = "decode_ragged",
       .batch = 3,
       .seq = 1,
       .past = 37,
       .heads = 8,
       .kv_heads = 2,
       .head = 20,
       .total = 38,
       .seqlens = {37, 12, 30}});
  add({.name = "decode_long",
       .batch = 1,
       .seq = 1,
       .past = 300,
       .heads = 8,
       .kv_heads = 1,
       .head = 128,
       .total = 301,
       .seqlens = {300}});
  add({.name = "decode_group1",
       .batch = 2,
       .seq = 1,
       .past = 40,
       .heads = 2,
       .kv_heads = 2,
       .head = 13,
       .total = 41,
       .seqlens = {40, 22}});
  // A later prompt of several tokens (batch 1), with a window.
  add({.name = "chunk",
       .batch = 1,
       .seq = 4,
       .past = 10,
       .heads = 4,
       .kv_heads = 2,
       .head = 24,
       .total = 14,
       .seqlens = {13}});
  add({.name = "chunk_window",
       .batch = 1,
       .seq = 4,
       .past = 10,
       .heads = 4,
       .kv_heads = 2,
       .head = 24,
       .total = 14,
       .seqlens = {13},
       .window = 5});
  add({.name = "decode_window",
       .batch = 2,
       .seq = 1,
       .past = 50,
       .heads = 6,
       .kv_heads = 3,
       .head = 40,
       .total = 51,
       .seqlens = {50, 20},
       .window = 16});
  return cs;
}

// Packed QKV, rotary (halves, interleaved, partial, position_ids), softcap, attention_bias,
// sinks, scale, no presents.
std::vector<Case> FeatureCases() {
  std::vector<Case> cs;
  auto add = [&cs](Case c) { cs.push_back(std::move(c)); };
  add({.name = "packed_prompt",
       .batch = 2,
       .seq = 6,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 6,
       .seqlens = {5, 5},
       .packed = true});
  add({.name = "rotary_prompt",
       .batch = 2,
       .seq = 5,
       .heads = 4,
       .kv_heads = 2,
       .head = 20,
       .total = 5,
       .seqlens = {4, 2},
       .rotary = true});
  add({.name = "rotary_decode_interleaved",
       .batch = 2,
       .seq = 1,
       .past = 33,
       .heads = 8,
       .kv_heads = 2,
       .head = 36,
       .total = 34,
       .seqlens = {33, 9},
       .rotary = true,
       .interleaved = true});
  add({.name = "rotary_partial_ids_packed",
       .batch = 1,
       .seq = 3,
       .past = 6,
       .heads = 4,
       .kv_heads = 1,
       .head = 24,
       .total = 9,
       .seqlens = {8},
       .packed = true,
       .rotary = true,
       .position_ids = true,
       .rot_half = 5});
  add({.name = "softcap_bias",
       .batch = 2,
       .seq = 1,
       .past = 20,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 21,
       .seqlens = {20, 7},
       .softcap = 3.0f,
       .bias = 1});
  add({.name = "bias_broadcast_prompt",
       .batch = 2,
       .seq = 5,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 5,
       .seqlens = {4, 4},
       .scale = 0.3f,
       .bias = 2});
  add({.name = "smooth",
       .batch = 1,
       .seq = 1,
       .past = 12,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 13,
       .seqlens = {12},
       .smooth = true});
  add({.name = "head_sink_prompt",
       .batch = 1,
       .seq = 6,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 6,
       .seqlens = {5},
       .window = 2,
       .sink = true});
  add({.name = "no_presents",
       .batch = 2,
       .seq = 1,
       .past = 9,
       .heads = 4,
       .kv_heads = 2,
       .head = 16,
       .total = 10,
       .seqlens = {9, 3},
       .presents = false});
  return cs;
}

TEST(DnnlGroupQueryAttentionTest, MatchesTheReferenceKernelAtEveryLevel) {
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    SCOPED_TRACE(absl::StrCat("isa ", static_cast<int>(isa)));
    for (const auto& cases : {ShapeCases(), FeatureCases()}) {
      for (const Case& c : cases) {
        for (int threads : {1, 2}) Compare(c, threads);
      }
    }
  }
}

// ---- ONNX Attention 23 ----

struct OnnxCase {
  std::string name;
  int rank = 4;
  int64_t batch = 1, q_heads = 4, kv_heads = 2, sq = 1, skv = 1, past = 0, head = 16, v_head = 16;
  int mask = 0;  // 0 none, 1 bool [B, qN, Sq, T], 2 f32 [Sq, T], 3 bool [B, 1, Sq, 1]
  bool causal = false, presents = true;
  float softcap = 0.0f, scale = 0.0f;
};

std::vector<Tensor> RunOnnx(const OnnxCase& c, const char* backend, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.sq * 7919 + c.skv * 131 + c.past * 17 + c.head));
  const int64_t b = c.batch, qn = c.q_heads, kvn = c.kv_heads, t = c.past + c.skv;
  KernelCall call("Attention");
  if (c.rank == 3) {
    call.In(Random({b, c.sq, qn * c.head}, rng))
        .In(Random({b, c.skv, kvn * c.head}, rng))
        .In(Random({b, c.skv, kvn * c.v_head}, rng));
  } else {
    call.In(Random({b, qn, c.sq, c.head}, rng))
        .In(Random({b, kvn, c.skv, c.head}, rng))
        .In(Random({b, kvn, c.skv, c.v_head}, rng));
  }
  if (c.mask == 1 || c.mask == 3) {
    const std::vector<int64_t> dims =
        c.mask == 1 ? std::vector<int64_t>{b, qn, c.sq, t} : std::vector<int64_t>{b, 1, c.sq, 1};
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    std::vector<bool> keep(static_cast<size_t>(count));
    std::bernoulli_distribution coin(0.7);
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = c.mask == 3 ? i % 3 != 1 : coin(rng);
    call.In(testing::Bool(dims, keep));
  } else if (c.mask == 2) {
    call.In(Random({c.sq, t}, rng, 3.0f));
  } else if (c.past > 0) {
    call.Absent();
  }
  if (c.past > 0) {
    call.In(Random({b, kvn, c.past, c.head}, rng)).In(Random({b, kvn, c.past, c.v_head}, rng));
  }
  call.Out(DType::kF32);
  if (c.presents) call.Out(DType::kF32).Out(DType::kF32);
  if (c.rank == 3) call.Attr("q_num_heads", qn).Attr("kv_num_heads", kvn);
  if (c.causal) call.Attr("is_causal", int64_t{1});
  if (c.softcap > 0) call.Attr("softcap", c.softcap);
  if (c.scale != 0) call.Attr("scale", c.scale);
  absl::StatusOr<std::vector<Tensor>> r = call.Backend(backend).Run(threads);
  EXPECT_TRUE(r.ok()) << c.name << " " << backend << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>();
}

std::vector<OnnxCase> OnnxCases() {
  return {
      {.name = "4d_prompt", .sq = 5, .skv = 5},
      {.name = "4d_prompt_causal_gqa",
       .q_heads = 8,
       .kv_heads = 2,
       .sq = 6,
       .skv = 6,
       .causal = true},
      {.name = "3d_decode_long_past",
       .rank = 3,
       .q_heads = 8,
       .kv_heads = 2,
       .past = 300,
       .head = 64,
       .v_head = 64,
       .causal = true},
      {.name = "3d_decode_past1_group4",
       .rank = 3,
       .batch = 2,
       .q_heads = 4,
       .kv_heads = 1,
       .past = 1,
       .head = 20,
       .v_head = 12},
      {.name = "4d_chunk_causal_bool_mask",
       .batch = 2,
       .sq = 3,
       .skv = 3,
       .past = 7,
       .mask = 1,
       .causal = true},
      {.name = "3d_f32_mask_softcap",
       .rank = 3,
       .sq = 4,
       .skv = 4,
       .past = 9,
       .head = 13,
       .v_head = 13,
       .mask = 2,
       .softcap = 2.5f,
       .scale = 0.2f},
      {.name = "4d_query_mask_broadcast_keys",
       .batch = 2,
       .q_heads = 2,
       .kv_heads = 2,
       .sq = 3,
       .skv = 5,
       .mask = 3},
      {.name = "4d_cross_more_keys",
       .q_heads = 6,
       .kv_heads = 3,
       .sq = 2,
       .skv = 17,
       .head = 36,
       .v_head = 8,
       .causal = true},
      {.name = "3d_no_presents",
       .rank = 3,
       .batch = 2,
       .sq = 2,
       .skv = 2,
       .past = 5,
       .presents = false},
  };
}

TEST(DnnlOnnxAttentionTest, MatchesTheReferenceKernelAtEveryLevel) {
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (const OnnxCase& c : OnnxCases()) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(c.name, " isa ", static_cast<int>(isa), " threads ", threads));
        ExpectClose(RunOnnx(c, "dnnl", threads), RunOnnx(c, "reference", 1));
      }
    }
  }
}

// ---- MultiHeadAttention ----

struct MhaCase {
  std::string name;
  int64_t batch = 2, heads = 2, seq = 1, kv_seq = 1, past = 0, head = 16, v_head = 16;
  bool bias = false, bnsh = false, causal = false, presents = true;
  int mask = 0;       // 0 none, 1 [B] lengths, 2 [2B] ends and starts, 3 [B, T], 4 [B, S, T]
  int attn_bias = 0;  // 0 none, 1 [B, N, S, T], 2 [1, 1, S, T]
};

std::vector<Tensor> RunMha(const MhaCase& c, const char* backend, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.seq * 7919 + c.kv_seq * 131 + c.past * 17 + c.head));
  const int64_t b = c.batch, n = c.heads, t = c.past + c.kv_seq;
  KernelCall call("MultiHeadAttention", "com.microsoft");
  call.In(Random({b, c.seq, n * c.head}, rng));
  if (c.bnsh) {
    call.In(Random({b, n, c.kv_seq, c.head}, rng)).In(Random({b, n, c.kv_seq, c.v_head}, rng));
  } else {
    call.In(Random({b, c.kv_seq, n * c.head}, rng)).In(Random({b, c.kv_seq, n * c.v_head}, rng));
  }
  if (c.bias) {
    call.In(Random({n * (2 * c.head + c.v_head)}, rng));
  } else {
    call.Absent();
  }
  std::vector<int32_t> m;
  std::vector<int64_t> md;
  for (int64_t i = 0; i < b; ++i) m.push_back(static_cast<int32_t>(t - 1 - i % t));
  if (c.mask == 1) md = {b};
  if (c.mask == 2) {
    for (int64_t i = 0; i < b; ++i) m.push_back(static_cast<int32_t>(i % 2));
    md = {2 * b};
  }
  if (c.mask == 3 || c.mask == 4) {
    md = c.mask == 3 ? std::vector<int64_t>{b, t} : std::vector<int64_t>{b, c.seq, t};
    m.assign(static_cast<size_t>(c.mask == 3 ? b * t : b * c.seq * t), 1);
    for (size_t i = 0; i < m.size(); i += 3) m[i] = 0;
  }
  if (c.mask != 0) {
    call.In(testing::I32(md, m));
  } else {
    call.Absent();
  }
  if (c.attn_bias == 1) {
    call.In(Random({b, n, c.seq, t}, rng));
  } else if (c.attn_bias == 2) {
    call.In(Random({1, 1, c.seq, t}, rng));
  } else {
    call.Absent();
  }
  if (c.past > 0) {
    call.In(Random({b, n, c.past, c.head}, rng)).In(Random({b, n, c.past, c.v_head}, rng));
  }
  call.Out(DType::kF32);
  if (c.presents) call.Out(DType::kF32).Out(DType::kF32);
  call.Attr("num_heads", n);
  if (c.causal) call.Attr("unidirectional", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> r = call.Backend(backend).Run(threads);
  EXPECT_TRUE(r.ok()) << c.name << " " << backend << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>();
}

TEST(DnnlMultiHeadAttentionTest, MatchesTheReferenceKernelAtEveryLevel) {
  const std::vector<MhaCase> cases = {
      {.name = "self", .seq = 5, .kv_seq = 5},
      {.name = "self_bias_causal_lengths",
       .seq = 6,
       .kv_seq = 6,
       .bias = true,
       .causal = true,
       .mask = 1},
      {.name = "decode_past",
       .heads = 4,
       .kv_seq = 1,
       .past = 70,
       .head = 20,
       .v_head = 12,
       .bias = true,
       .mask = 3,
       .attn_bias = 1},
      {.name = "chunk_past_causal_2b",
       .seq = 3,
       .kv_seq = 3,
       .past = 4,
       .causal = true,
       .mask = 2,
       .attn_bias = 2},
      {.name = "cross_bnsh_3d_mask",
       .heads = 3,
       .seq = 4,
       .kv_seq = 9,
       .head = 13,
       .v_head = 7,
       .bnsh = true,
       .mask = 4},
      {.name = "long_prompt_blocks",
       .batch = 1,
       .seq = 70,
       .kv_seq = 70,
       .head = 8,
       .v_head = 8,
       .causal = true},
      {.name = "past_without_presents", .seq = 2, .kv_seq = 2, .past = 3, .presents = false},
  };
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (const MhaCase& c : cases) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(c.name, " isa ", static_cast<int>(isa), " threads ", threads));
        ExpectClose(RunMha(c, "dnnl", threads), RunMha(c, "reference", 1));
      }
    }
  }
}

// ---- Attention (com.microsoft) ----

struct MsftCase {
  std::string name;
  int64_t batch = 2, heads = 2, seq = 3, din = 10, dq = 16, dv = 16, past = 0;
  bool sizes = false, causal = false, present = true, attn_bias = false;
  int mask = 0;  // 0 none, 1 [B], 3 [B, T]
};

std::vector<Tensor> RunMsft(const MsftCase& c, const char* backend, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(c.seq * 7919 + c.din * 131 + c.past * 17 + c.dq));
  const int64_t b = c.batch, n = c.heads, t = c.past + c.seq;
  KernelCall call("Attention", "com.microsoft");
  call.In(Random({b, c.seq, c.din}, rng, 1.0f))
      .In(Random({c.din, 2 * c.dq + c.dv}, rng, 0.5f))
      .In(Random({2 * c.dq + c.dv}, rng));
  if (c.mask == 1) {
    std::vector<int32_t> m;
    for (int64_t i = 0; i < b; ++i) m.push_back(static_cast<int32_t>(t - i % t));
    call.In(testing::I32({b}, m));
  } else if (c.mask == 3) {
    std::vector<int32_t> m(static_cast<size_t>(b * t), 1);
    for (size_t i = 1; i < m.size(); i += 4) m[i] = 0;
    call.In(testing::I32({b, t}, m));
  } else {
    call.Absent();
  }
  if (c.past > 0) {
    call.In(Random({2, b, n, c.past, c.dq / n}, rng));
  } else if (c.attn_bias) {
    call.Absent();
  }
  if (c.attn_bias) call.In(Random({b, n, c.seq, t}, rng));
  call.Out(DType::kF32);
  if (c.present) call.Out(DType::kF32);
  call.Attr("num_heads", n);
  if (c.sizes) call.Attr("qkv_hidden_sizes", std::vector<int64_t>{c.dq, c.dq, c.dv});
  if (c.causal) call.Attr("unidirectional", int64_t{1});
  absl::StatusOr<std::vector<Tensor>> r = call.Backend(backend).Run(threads);
  EXPECT_TRUE(r.ok()) << c.name << " " << backend << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>();
}

// The present output holds K and V at one shape: with qkv_hidden_sizes giving them different
// head sizes it is refused, by both kernels.
TEST(DnnlMsftAttentionTest, APresentOfUnequalHeadSizesIsRefused) {
  for (const char* backend : {"dnnl", "reference"}) {
    std::mt19937 rng(3);
    absl::StatusOr<std::vector<Tensor>> r =
        KernelCall("Attention", "com.microsoft")
            .In(Random({1, 2, 4}, rng))
            .In(Random({4, 6}, rng))
            .In(Random({6}, rng))
            .Out(DType::kF32)
            .Out(DType::kF32)
            .Attr("num_heads", int64_t{1})
            .Attr("qkv_hidden_sizes", std::vector<int64_t>{2, 2, 2})
            .Backend(backend)
            .Run(1);
    EXPECT_TRUE(r.ok()) << backend << ": " << r.status();  // equal sizes: fine
    r = KernelCall("Attention", "com.microsoft")
            .In(Random({1, 2, 4}, rng))
            .In(Random({4, 7}, rng))
            .In(Random({7}, rng))
            .Out(DType::kF32)
            .Out(DType::kF32)
            .Attr("num_heads", int64_t{1})
            .Attr("qkv_hidden_sizes", std::vector<int64_t>{2, 2, 3})
            .Backend(backend)
            .Run(1);
    ASSERT_FALSE(r.ok()) << backend;
    EXPECT_NE(r.status().message().find("one head size"), std::string::npos) << r.status();
  }
}

TEST(DnnlMsftAttentionTest, MatchesTheReferenceKernelAtEveryLevel) {
  const std::vector<MsftCase> cases = {
      {.name = "plain"},
      {.name = "causal_lengths", .seq = 5, .causal = true, .mask = 1},
      {.name = "decode_past",
       .seq = 1,
       .din = 24,
       .dq = 24,
       .dv = 24,
       .past = 40,
       .causal = true,
       .mask = 3},
      {.name = "sizes_bias",
       .heads = 4,
       .seq = 4,
       .dq = 20,
       .dv = 12,
       .sizes = true,
       .present = false,
       .attn_bias = true},
      {.name = "past_no_mask_bias", .seq = 2, .past = 6, .attn_bias = true},
  };
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (const MsftCase& c : cases) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(c.name, " isa ", static_cast<int>(isa), " threads ", threads));
        ExpectClose(RunMsft(c, "dnnl", threads), RunMsft(c, "reference", 1));
      }
    }
  }
}

// ---- dynvm::RotateHalf (rotary.cc) ----

// Tables of every broadcast form (per position, per batch and position, one row for all) and a
// strided x (the reference's path, as the fallback), against the reference kernel.
TEST(DnnlRotateHalfTest, MatchesTheReferenceKernelForEveryBroadcast) {
  std::mt19937 rng(5);
  const Tensor x = Random({2, 3, 5, 20}, rng);
  const std::vector<std::vector<int64_t>> tables = {{5, 20}, {2, 1, 5, 20}, {1, 20}, {20}};
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (const std::vector<int64_t>& td : tables) {
      const Tensor c = Random(td, rng), s = Random(td, rng);
      for (int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat("table rank ", td.size(), " threads ", threads));
        std::vector<std::vector<Tensor>> r;
        for (const char* backend : {"dnnl", "reference"}) {
          absl::StatusOr<std::vector<Tensor>> o = KernelCall("RotateHalf", "dynvm")
                                                      .In(x)
                                                      .In(c)
                                                      .In(s)
                                                      .Out(DType::kF32)
                                                      .Backend(backend)
                                                      .Run(threads);
          ASSERT_TRUE(o.ok()) << o.status();
          r.push_back(*o);
        }
        ExpectClose(r[0], r[1]);
      }
    }
  }
  // Tables that broadcast x (batch 2 over x of batch 1: a [2, 5, 20] result).
  {
    const Tensor x1 = Random({1, 5, 20}, rng), c2 = Random({2, 5, 20}, rng),
                 s2 = Random({2, 1, 20}, rng);
    std::vector<std::vector<Tensor>> r;
    for (const char* backend : {"dnnl", "reference"}) {
      absl::StatusOr<std::vector<Tensor>> o = KernelCall("RotateHalf", "dynvm")
                                                  .In(x1)
                                                  .In(c2)
                                                  .In(s2)
                                                  .Out(DType::kF32)
                                                  .Backend(backend)
                                                  .Run(2);
      ASSERT_TRUE(o.ok()) << o.status();
      ASSERT_EQ((*o)[0].dims(), (std::vector<int64_t>{2, 5, 20}));
      r.push_back(*o);
    }
    ExpectClose(r[0], r[1]);
  }
  // Tables that broadcast x's last axis (or do not broadcast at all) are refused, naming it.
  for (const std::vector<int64_t>& td : std::vector<std::vector<int64_t>>{{5, 10}, {3, 20}}) {
    absl::StatusOr<std::vector<Tensor>> bad = KernelCall("RotateHalf", "dynvm")
                                                  .In(Random({1, 5, 20}, rng))
                                                  .In(Random(td, rng))
                                                  .In(Random(td, rng))
                                                  .Out(DType::kF32)
                                                  .Backend("dnnl")
                                                  .Run(1);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("RotateHalf"), std::string::npos) << bad.status();
  }
}

// dynvm::SwiGlu (rotary.cc): one shape (cpu::SiluMul) and a broadcast up (the reference kernel),
// against the reference kernel.
TEST(DnnlSwiGluTest, MatchesTheReferenceKernel) {
  std::mt19937 rng(6);
  const Tensor g = Random({3, 5, 37}, rng, 8.0f);
  for (const std::vector<int64_t>& ud : std::vector<std::vector<int64_t>>{{3, 5, 37}, {37}}) {
    const Tensor u = Random(ud, rng);
    for (cpu::Isa isa : cpu::SupportedIsas()) {
      cpu::ScopedIsaForTesting level(isa);
      for (int threads : {1, 2}) {
        std::vector<std::vector<Tensor>> r;
        for (const char* backend : {"dnnl", "reference"}) {
          absl::StatusOr<std::vector<Tensor>> o = KernelCall("SwiGlu", "dynvm")
                                                      .In(g)
                                                      .In(u)
                                                      .Out(DType::kF32)
                                                      .Backend(backend)
                                                      .Run(threads);
          ASSERT_TRUE(o.ok()) << o.status();
          r.push_back(*o);
        }
        ExpectClose(r[0], r[1]);
      }
    }
  }
}

// Bad input is refused by the shared checks, naming what is wrong.
TEST(DnnlGroupQueryAttentionTest, BadSeqlensAreRefusedNamingThem) {
  Case c{.name = "bad",
         .batch = 1,
         .seq = 1,
         .past = 4,
         .heads = 2,
         .kv_heads = 1,
         .head = 8,
         .total = 5,
         .seqlens = {9}};
  std::mt19937 rng(1);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("GroupQueryAttention", "com.microsoft")
                                              .In(Random({1, 1, 16}, rng))
                                              .In(Random({1, 1, 8}, rng))
                                              .In(Random({1, 1, 8}, rng))
                                              .In(Random({1, 1, 4, 8}, rng))
                                              .In(Random({1, 1, 4, 8}, rng))
                                              .In(testing::I32({1}, c.seqlens))
                                              .In(testing::I32({}, {5}))
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Attr("num_heads", int64_t{2})
                                              .Attr("kv_num_heads", int64_t{1})
                                              .Backend("dnnl")
                                              .Run(1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("seqlens_k[0] = 9"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace dynvm
