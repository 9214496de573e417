// The oneDNN backend's SimplifiedLayerNormalization, RMSNormalization (opset 23) and
// com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization and
// InstanceNormalization (normalization.cc, on cpu::RmsNormRows / LayerNormRows) against the
// reference kernels (kernels/reference/msft.cc and nn.cc, in double; themselves checked against
// ONNX Runtime by tests/conformance): rows of sizes that are not a multiple of any vector width,
// several normalized axes, negative axes, scales of other shapes, skips repeated over rows, bias
// and beta present or not, the sum output wanted or not; at one and two threads and at every
// instruction-set level this machine has. Each fast run must be served by the fast kernel itself
// (no fallback run), and the cases it leaves to the reference kernel (a scale that broadcasts) must
// fall back. com.microsoft RotaryEmbedding and ONNX RotaryEmbedding 23 (rotary.cc, on cpu::Rotary)
// likewise: 3-D and 4-D X, halves and interleaved pairs, partial rotary_embedding_dim, head sizes
// that are no multiple of a vector width, position_ids [B, S], ORT's one-value offset and ONNX's
// per-token caches.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/fallback_kernel.h"
#include "kernels/registry.h"
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

struct Result {
  std::vector<Tensor> outs;  // the wanted outputs, in order
  int64_t fallback_runs = 0;
};

// Runs `call` (inputs and attributes given; no outputs) on `backend` with `outputs` ports, the
// ones not in `wanted` absent (nullptr).
Result Run(KernelCall call, const char* backend, int outputs, std::vector<int> wanted,
           int threads) {
  KernelSpec spec = call.spec();
  spec.backend = backend;
  Result r;
  for (int o = 0; o < outputs; ++o) {
    PortSpec p;
    p.dtype = static_cast<uint8_t>(DType::kF32);
    p.dynamic = true;
    p.optional = o > 0;
    spec.outputs.push_back(p);
  }
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return r;
  std::vector<Tensor> outs(outputs);
  std::vector<Tensor*> out(outputs, nullptr);
  for (int o : wanted) out[o] = &outs[o];
  KernelContext ctx(&HeapAllocator::Get(), threads);
  const std::vector<const Tensor*> in = call.inputs();
  absl::Status s = (*k)->Run(ctx, in, out);
  EXPECT_TRUE(s.ok()) << backend << ": " << s;
  for (int o : wanted) r.outs.push_back(outs[o]);
  if (auto* f = dynamic_cast<FallbackKernel*>(k->get())) r.fallback_runs = f->fallback_runs();
  return r;
}

void ExpectClose(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
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

// Fast (no fallback) and close to the reference kernel, at every ISA level and 1 and 2 threads.
void Check(const KernelCall& call, int outputs, std::vector<int> wanted, bool fast) {
  const Result want = Run(call, "reference", outputs, wanted, 1);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting level(isa);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("isa ", static_cast<int>(isa), " threads ", threads));
      const Result got = Run(call, "dnnl", outputs, wanted, threads);
      EXPECT_EQ(got.fallback_runs, fast ? 0 : 1);
      ExpectClose(got.outs, want.outs);
    }
  }
}

TEST(DnnlNormTest, SimplifiedLayerNormalization) {
  std::mt19937 rng(1);
  struct C {
    std::vector<int64_t> x, scale;
    int64_t axis;
  };
  for (const C& c : std::vector<C>{{{3, 7}, {7}, -1},
                                   {{2, 5, 67}, {67}, -1},
                                   {{2, 5, 67}, {67}, 2},
                                   {{4, 3, 17}, {3, 17}, 1},
                                   {{4, 3, 17}, {51}, -2},
                                   {{64, 4096}, {4096}, -1},
                                   {{1, 1, 1}, {1}, -1}}) {
    SCOPED_TRACE(absl::StrCat("x rank ", c.x.size(), " last ", c.x.back(), " axis ", c.axis));
    KernelCall call("SimplifiedLayerNormalization");
    call.In(Random(c.x, rng)).In(Random(c.scale, rng)).Attr("axis", c.axis).Attr("epsilon", 1e-3f);
    Check(call, 2, {0}, /*fast=*/true);
    Check(call, 2, {0, 1}, /*fast=*/true);  // with inv_std_var
  }
}

TEST(DnnlNormTest, RmsNormalization) {
  std::mt19937 rng(2);
  struct C {
    std::vector<int64_t> x, scale;
    int64_t axis;
    bool fast;
  };
  for (const C& c : std::vector<C>{{{3, 7}, {7}, -1, true},
                                   {{2, 5, 67}, {5, 67}, -2, true},
                                   {{4, 3, 17}, {3, 17}, 1, true},
                                   {{4, 3, 17}, {17}, 1, false},  // broadcast along axis 1
                                   {{4, 3, 17}, {1}, -1, false},
                                   {{8, 1000}, {1000}, -1, true}}) {
    SCOPED_TRACE(absl::StrCat("x rank ", c.x.size(), " last ", c.x.back(), " axis ", c.axis));
    KernelCall call("RMSNormalization");
    call.In(Random(c.x, rng)).In(Random(c.scale, rng)).Attr("axis", c.axis);
    Check(call, 1, {0}, c.fast);
  }
}

TEST(DnnlNormTest, InstanceNormalization) {
  std::mt19937 rng(4);
  struct C {
    std::vector<int64_t> x;
    float mean;  // an offset of every value (a plane far from 0: the variance's cancellation)
  };
  for (const C& c : std::vector<C>{{{1, 3, 5}, 0},
                                   {{2, 4, 7, 9}, 0},
                                   {{2, 4, 7, 9}, 30},
                                   {{1, 64, 32, 32}, 0},
                                   {{3, 5, 2, 3, 4}, -4},
                                   {{2, 6, 1}, 0},
                                   {{1, 2, 4096}, 1}}) {
    SCOPED_TRACE(absl::StrCat("x rank ", c.x.size(), " last ", c.x.back()));
    Tensor x = Random(c.x, rng);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += c.mean;
    KernelCall call("InstanceNormalization");
    call.In(x).In(Random({c.x[1]}, rng)).In(Random({c.x[1]}, rng)).Attr("epsilon", 1e-3f);
    Check(call, 1, {0}, /*fast=*/true);
  }
  // A plane of one value: 0 times the scale, plus the bias.
  KernelCall call("InstanceNormalization");
  Tensor x = *Tensor::Empty(DType::kF32, {1, 2, 8});
  for (int64_t i = 0; i < 16; ++i) x.data<float>()[i] = 3.0f;
  call.In(x).In(Random({2}, rng)).In(Random({2}, rng));
  // The oneDNN backend's own kernel (not the reference kernel under the backend's name).
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  PortSpec y;
  y.dtype = static_cast<uint8_t>(DType::kF32);
  y.dynamic = true;
  spec.outputs.push_back(y);
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->name(), "instancenormalization.f32.dnnl");
  Check(call, 1, {0}, /*fast=*/true);
}

TEST(DnnlNormTest, SkipLayerNormalizations) {
  std::mt19937 rng(3);
  struct C {
    std::vector<int64_t> x, skip;
  };
  for (bool simplified : {false, true}) {
    for (const C& c : std::vector<C>{{{2, 3, 7}, {2, 3, 7}},
                                     {{2, 5, 67}, {5, 67}},
                                     {{2, 5, 67}, {1, 5, 67}},
                                     {{3, 16, 768}, {3, 16, 768}},
                                     {{1, 1, 33}, {1, 1, 33}}}) {
      for (bool bias : {false, true}) {
        for (bool beta : {false, true}) {
          if (simplified && beta) continue;
          for (bool sum : {false, true}) {
            SCOPED_TRACE(absl::StrCat(simplified ? "simplified" : "layer", " last ", c.x.back(),
                                      " skip rank ", c.skip.size(), " bias ", bias, " beta ", beta,
                                      " sum ", sum));
            const int64_t h = c.x.back();
            KernelCall call(
                simplified ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization",
                "com.microsoft");
            call.In(Random(c.x, rng)).In(Random(c.skip, rng)).In(Random({h}, rng));
            if (!simplified) beta ? call.In(Random({h}, rng)) : call.Absent();
            if (bias) call.In(Random({h}, rng));
            call.Attr("epsilon", 1e-5f);
            Check(call, 4, sum ? std::vector<int>{0, 3} : std::vector<int>{0}, /*fast=*/true);
          }
        }
      }
    }
  }
}

Tensor Positions(int64_t b, int64_t s, int64_t positions, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dist(0, positions - 1);
  std::vector<int64_t> v(b * s);
  for (int64_t& p : v) p = dist(rng);
  return testing::I64({b, s}, v);
}

TEST(DnnlRotaryTest, MsftRotaryEmbedding) {
  std::mt19937 rng(4);
  struct C {
    std::vector<int64_t> x;
    int64_t num_heads, rotary_dim, half;
    bool offset;
  };
  for (const C& c : std::vector<C>{{{2, 5, 64}, 4, 0, 8, false},
                                   {{2, 5, 64}, 4, 0, 8, true},
                                   {{2, 5, 64}, 4, 10, 5, false},
                                   {{1, 7, 48}, 0, 0, 12, false},
                                   {{2, 3, 5, 10}, 0, 0, 5, false},
                                   {{2, 3, 5, 64}, 0, 32, 16, true},
                                   {{1, 32, 1, 128}, 0, 0, 64, true}}) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(absl::StrCat("x rank ", c.x.size(), " last ", c.x.back(), " rot ", c.rotary_dim,
                                " offset ", c.offset, " interleaved ", interleaved));
      const int64_t positions = 40, seq = c.x.size() == 3 ? c.x[1] : c.x[2];
      KernelCall call("RotaryEmbedding", "com.microsoft");
      call.In(Random(c.x, rng))
          .In(c.offset ? testing::I64({1}, {7}) : Positions(c.x[0], seq, positions, rng))
          .In(Random({positions, c.half}, rng, 1.0f))
          .In(Random({positions, c.half}, rng, 1.0f))
          .Attr("interleaved", int64_t{interleaved})
          .Attr("num_heads", c.num_heads)
          .Attr("rotary_embedding_dim", c.rotary_dim);
      Check(call, 1, {0}, /*fast=*/true);
    }
  }
}

TEST(DnnlRotaryTest, OnnxRotaryEmbedding) {
  std::mt19937 rng(5);
  struct C {
    std::vector<int64_t> x;
    int64_t num_heads, rotary_dim, width;  // width: the caches' last dim
    bool position_ids;
  };
  for (const C& c : std::vector<C>{{{2, 3, 5, 16}, 0, 0, 8, true},
                                   {{2, 5, 64}, 4, 0, 8, true},
                                   {{2, 3, 5, 16}, 0, 6, 8, true},
                                   {{2, 3, 5, 10}, 0, 0, 5, false},
                                   {{2, 5, 36}, 3, 8, 6, false}}) {
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(absl::StrCat("x rank ", c.x.size(), " last ", c.x.back(), " rot ", c.rotary_dim,
                                " position_ids ", c.position_ids, " interleaved ", interleaved));
      const int64_t positions = 40, seq = c.x.size() == 3 ? c.x[1] : c.x[2];
      const std::vector<int64_t> cache = c.position_ids
                                             ? std::vector<int64_t>{positions, c.width}
                                             : std::vector<int64_t>{c.x[0], seq, c.width};
      KernelCall call("RotaryEmbedding");
      call.In(Random(c.x, rng)).In(Random(cache, rng, 1.0f)).In(Random(cache, rng, 1.0f));
      if (c.position_ids) call.In(Positions(c.x[0], seq, positions, rng));
      call.Attr("interleaved", int64_t{interleaved})
          .Attr("num_heads", c.num_heads)
          .Attr("rotary_embedding_dim", c.rotary_dim);
      Check(call, 1, {0}, /*fast=*/true);
    }
  }
}

}  // namespace
}  // namespace dynvm
