// The oneDNN backend's dynvm::Attention (attention.cc) against the reference kernel under bool
// masks: causal masks (square, and a query block at the end of a longer prefix), key-padding
// masks, masks with holes, rows that keep no key, masks broadcast along queries or keys,
// decode steps (one query), fill -inf (where a block reads only the keys its rows keep) and a
// finite fill (where it reads all), both Where forms (mask_mode 2: the mask drops a key; 3: it
// keeps it), at one and two threads. Grouped-query decode steps (K and V shared by G query heads:
// the grouped kernels) against the reference kernel at every ISA level the CPU runs, odd head
// sizes, group sizes and lengths, and the same bits at one and two threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::KernelCall;

Tensor Random(std::vector<int64_t> dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2, 2);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

enum class MaskKind { kCausal, kPadding, kHoles, kEmptyRow, kPerKey, kPerQuery };

// A bool mask of `dims` whose last two dims are [mq, mk] (mq or mk 1 when broadcast), true
// where the key is dropped when `drop` is true (mask_mode 2), kept otherwise (mode 3).
Tensor Mask(MaskKind kind, std::vector<int64_t> dims, int64_t lq, int64_t lk, bool drop,
            std::mt19937& rng) {
  const int64_t mq = dims[dims.size() - 2], mk = dims.back();
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<bool> v(n);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t u = 0; u < n / (mq * mk); ++u) {
    const int64_t pad = 1 + u % std::max<int64_t>(lk - 1, 1);  // keys kept by padding: [0, pad)
    for (int64_t i = 0; i < mq; ++i) {
      for (int64_t j = 0; j < mk; ++j) {
        bool keep = true;
        switch (kind) {
          case MaskKind::kCausal:  // query i sits at position lk - lq + i of the prefix
            keep = j <= lk - lq + i;
            break;
          case MaskKind::kPadding:
            keep = j < pad;
            break;
          case MaskKind::kHoles:  // a causal band with random holes
            keep = j <= lk - lq + i && (j == 0 || coin(rng) != 0);
            break;
          case MaskKind::kEmptyRow:  // causal, but query 2 keeps nothing (its row is NaN)
            keep = j <= lk - lq + i && i != 2;
            break;
          case MaskKind::kPerKey:  // [.., 1, lk]: keys 3.. dropped for every query
            keep = j < 3;
            break;
          case MaskKind::kPerQuery:  // [.., lq, 1]: odd queries keep every key, even ones none
            keep = i % 2 == 1;
            break;
        }
        v[(u * mq + i) * mk + j] = keep != drop;
      }
    }
  }
  return testing::Bool(dims, v);
}

void Compare(MaskKind kind, int64_t lq, int64_t lk, int mode, float fill, int threads) {
  SCOPED_TRACE("mask kind " + std::to_string(static_cast<int>(kind)) + " lq " + std::to_string(lq) +
               " lk " + std::to_string(lk) + " mode " + std::to_string(mode) + " fill " +
               std::to_string(fill) + " threads " + std::to_string(threads));
  std::mt19937 rng(static_cast<uint32_t>(lq * 1000 + lk));
  const int64_t b = 2, h = 3, d = 16, dv = 24;
  const Tensor q = Random({b, lq, h, d}, rng);  // [B, L, H, D]: head split through q_perm
  const Tensor k = Random({b, h, lk, d}, rng);
  const Tensor v = Random({b, h, lk, dv}, rng);
  std::vector<int64_t> mdims = {b, 1, lq, lk};
  if (kind == MaskKind::kPerKey) mdims = {b, 1, 1, lk};
  if (kind == MaskKind::kPerQuery) mdims = {1, 1, lq, 1};
  if (kind == MaskKind::kPadding) mdims = {b, 1, 1, lk};
  const Tensor mask = Mask(kind, mdims, lq, lk, mode == 2, rng);
  std::vector<std::vector<double>> results;
  for (const char* backend : {"dnnl", "reference"}) {
    absl::StatusOr<std::vector<Tensor>> r = KernelCall("Attention", "dynvm")
                                                .In(q)
                                                .In(k)
                                                .In(v)
                                                .In(mask)
                                                .Out(DType::kF32)
                                                .Attr("q_perm", std::vector<int64_t>{0, 2, 1, 3})
                                                .Attr("k_perm", std::vector<int64_t>{0, 1, 3, 2})
                                                .Attr("scale", 0.25f)
                                                .Attr("mask_mode", int64_t{mode})
                                                .Attr("fill", fill)
                                                .Backend(backend)
                                                .Run(threads);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].dims(), (std::vector<int64_t>{b, h, lq, dv}));
    results.push_back(testing::ToDoubles((*r)[0]));
  }
  int nans = 0;
  for (size_t i = 0; i < results[0].size(); ++i) {
    const double got = results[0][i], want = results[1][i];
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << i;
    } else {
      EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want))) << i;
    }
  }
  // Rows that keep no key are NaN under fill -inf (softmax of -inf only), as unfused.
  const bool empty_rows = (kind == MaskKind::kEmptyRow && lq > 2) || kind == MaskKind::kPerQuery;
  if (std::isinf(fill)) {
    EXPECT_EQ(nans > 0, empty_rows);
  } else {
    EXPECT_EQ(nans, 0);
  }
}

TEST(DnnlAttentionTest, BoolMasksMatchTheReferenceKernel) {
  const float inf = std::numeric_limits<float>::infinity();
  for (MaskKind kind : {MaskKind::kCausal, MaskKind::kPadding, MaskKind::kHoles,
                        MaskKind::kEmptyRow, MaskKind::kPerKey, MaskKind::kPerQuery}) {
    // Square prefixes (a GPT recomputing its prefix), blocks at the end of a longer prefix,
    // one query (a decode step), and lengths across the 32-query blocks.
    for (auto [lq, lk] : std::vector<std::pair<int64_t, int64_t>>{{1, 1},
                                                                  {1, 9},
                                                                  {5, 5},
                                                                  {31, 31},
                                                                  {33, 33},
                                                                  {70, 70},
                                                                  {130, 130},
                                                                  {7, 40},
                                                                  {45, 200}}) {
      if (kind == MaskKind::kEmptyRow && lq < 3) continue;
      for (int mode : {2, 3}) {
        for (float fill : {-inf, -1e9f}) {
          Compare(kind, lq, lk, mode, fill, 1);
        }
      }
    }
  }
  Compare(MaskKind::kCausal, 130, 130, 2, -inf, 2);
  Compare(MaskKind::kHoles, 45, 200, 3, -inf, 2);
}

// One query per (batch, kv head, group head) against K' and V' [B, KVH, 1, ...]: the layout
// attention_kv_repeat gives a grouped-query decode step. Q [B, KVH, G, 1, D] (from [B, 1, KVH,
// G, D] through q_perm), K [B, KVH, 1, T, D] read through k_perm, V [B, KVH, 1, T, Dv], a
// causal-with-padding bool mask [B, 1, 1, 1, T] (fill -inf: the keys kept are a range) or none.
absl::StatusOr<std::vector<Tensor>> GroupedDecode(int64_t kvh, int64_t group, int64_t d, int64_t dv,
                                                  int64_t lk, bool masked, const char* backend,
                                                  int threads) {
  std::mt19937 rng(static_cast<uint32_t>(kvh * 7919 + group * 131 + d * 17 + dv * 3 + lk));
  const int64_t b = 2;
  const Tensor q = Random({b, 1, kvh, group, d}, rng);
  const Tensor k = Random({b, kvh, 1, lk, d}, rng);
  const Tensor v = Random({b, kvh, 1, lk, dv}, rng);
  KernelCall call("Attention", "dynvm");
  call.In(q).In(k).In(v);
  if (masked) {
    std::vector<bool> keep(b * lk);
    for (int64_t i = 0; i < b; ++i) {  // batch i drops i keys at each end, keeping one at least
      const int64_t lo = std::min(i, lk - 1), hi = std::max(lo + 1, lk - i);
      for (int64_t j = 0; j < lk; ++j) keep[i * lk + j] = j >= lo && j < hi;
    }
    call.In(testing::Bool({b, 1, 1, 1, lk}, keep))
        .Attr("mask_mode", int64_t{3})
        .Attr("fill", -std::numeric_limits<float>::infinity());
  }
  return call.Out(DType::kF32)
      .Attr("q_perm", std::vector<int64_t>{0, 2, 3, 1, 4})
      .Attr("k_perm", std::vector<int64_t>{0, 1, 2, 4, 3})
      .Attr("scale", 0.125f)
      .Backend(backend)
      .Run(threads);
}

TEST(DnnlAttentionTest, GroupedQueryDecodeMatchesTheReferenceKernel) {
  std::vector<cpu::Isa> levels = {cpu::Isa::kPortable};
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectedIsa() >= isa) levels.push_back(isa);
  }
  struct Case {
    int64_t kvh, group, d, dv, lk;
  };
  // Group sizes across the blocks of four heads, head sizes with tails of every vector width,
  // value sizes across the 64- and 16-column steps, lengths from one key.
  const std::vector<Case> cases = {{1, 2, 64, 64, 1},  {2, 4, 64, 64, 33},  {3, 3, 5, 7, 9},
                                   {2, 5, 24, 24, 40}, {1, 6, 70, 72, 17},  {2, 7, 16, 130, 65},
                                   {1, 8, 1, 1, 5},    {2, 4, 64, 64, 200}, {1, 9, 33, 80, 31}};
  for (cpu::Isa isa : levels) {
    cpu::ScopedIsaForTesting level(isa);
    for (const Case& c : cases) {
      for (bool masked : {false, true}) {
        SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " kvh " + std::to_string(c.kvh) + " group " +
                     std::to_string(c.group) + " d " + std::to_string(c.d) + " dv " +
                     std::to_string(c.dv) + " lk " + std::to_string(c.lk) + " masked " +
                     std::to_string(masked));
        auto want = GroupedDecode(c.kvh, c.group, c.d, c.dv, c.lk, masked, "reference", 1);
        auto one = GroupedDecode(c.kvh, c.group, c.d, c.dv, c.lk, masked, "dnnl", 1);
        auto two = GroupedDecode(c.kvh, c.group, c.d, c.dv, c.lk, masked, "dnnl", 2);
        ASSERT_TRUE(want.ok() && one.ok() && two.ok())
            << want.status() << one.status() << two.status();
        ASSERT_EQ((*one)[0].dims(), (std::vector<int64_t>{2, c.kvh, c.group, 1, c.dv}));
        const std::vector<double> w = testing::ToDoubles((*want)[0]);
        const std::vector<double> a = testing::ToDoubles((*one)[0]);
        const std::vector<double> t = testing::ToDoubles((*two)[0]);
        ASSERT_EQ(a.size(), w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          ASSERT_FALSE(std::isnan(w[i])) << i;
          EXPECT_NEAR(a[i], w[i], 1e-5 * (1 + std::fabs(w[i]))) << i;
          EXPECT_EQ(a[i], t[i]) << i;  // the bits do not depend on the thread count
        }
      }
    }
  }
}

// The decoders' grid: query heads per KV head 1 (no group: the per-head path), 4 and 8, head sizes
// 32, 64 and 128, 1 to 1000 keys (across the key blocks of the grouped scores and their
// prefetch distance, and not multiples of any vector width), every ISA level, 1 and 2 threads
// bit-equal.
TEST(DnnlAttentionTest, GroupedQueryDecodeGridMatchesTheReferenceKernel) {
  std::vector<cpu::Isa> levels = {cpu::Isa::kPortable};
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectedIsa() >= isa) levels.push_back(isa);
  }
  for (cpu::Isa isa : levels) {
    cpu::ScopedIsaForTesting level(isa);
    for (int64_t group : {1, 4, 8}) {
      for (int64_t d : {32, 64, 128}) {
        for (int64_t lk : {1, 7, 16, 17, 31, 48, 49, 100, 255, 640, 1000}) {
          const bool masked = (group + d + lk) % 2 == 0;
          SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " group " + std::to_string(group) + " d " +
                       std::to_string(d) + " lk " + std::to_string(lk) + " masked " +
                       std::to_string(masked));
          auto want = GroupedDecode(2, group, d, d, lk, masked, "reference", 1);
          auto one = GroupedDecode(2, group, d, d, lk, masked, "dnnl", 1);
          auto two = GroupedDecode(2, group, d, d, lk, masked, "dnnl", 2);
          ASSERT_TRUE(want.ok() && one.ok() && two.ok())
              << want.status() << one.status() << two.status();
          const std::vector<double> w = testing::ToDoubles((*want)[0]);
          const std::vector<double> a = testing::ToDoubles((*one)[0]);
          const std::vector<double> t = testing::ToDoubles((*two)[0]);
          ASSERT_EQ(a.size(), w.size());
          ASSERT_EQ(t.size(), w.size());
          for (size_t i = 0; i < w.size(); ++i) {
            ASSERT_FALSE(std::isnan(w[i])) << i;
            ASSERT_NEAR(a[i], w[i], 1e-5 * (1 + std::fabs(w[i]))) << i;
            ASSERT_EQ(a[i], t[i]) << i;  // the bits do not depend on the thread count
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dynvm
