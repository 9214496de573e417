// The attention reference kernels (kernels/reference/msft_attention.cc: com.microsoft
// GroupQueryAttention and MultiHeadAttention, ONNX's Attention 23) against answers computed here
// from the operators' definitions; tests/conformance/{msft,opset18} check them against ONNX
// Runtime itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::I32;
using testing::KernelCall;
using testing::ToDoubles;

constexpr char kMs[] = "com.microsoft";

std::vector<float> Iota(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.7f + 0.3f) * scale;
  return v;
}

// softmax(q . k_j * scale) . v over keys [0, n) (k and v rows of `h` values).
std::vector<double> Naive(const float* q, const std::vector<const float*>& k,
                          const std::vector<const float*>& v, int64_t h, double scale) {
  std::vector<double> s;
  double m = -1e300, sum = 0;
  for (const float* kj : k) {
    double d = 0;
    for (int64_t e = 0; e < h; ++e) d += static_cast<double>(q[e]) * kj[e];
    s.push_back(d * scale);
    m = std::max(m, s.back());
  }
  for (double& x : s) sum += (x = std::exp(x - m));
  std::vector<double> out(static_cast<size_t>(h), 0.0);
  for (size_t j = 0; j < s.size(); ++j) {
    for (int64_t e = 0; e < h; ++e) out[e] += s[j] / sum * v[j][e];
  }
  return out;
}

// Decoding one token with a past of 2: present = past ++ the new key; both query heads read the
// one KV head.
TEST(MsftAttentionKernelTest, GroupQueryAttentionDecodesWithAPast) {
  const int64_t h = 8;
  const std::vector<float> q = Iota(2 * h, 1.0f), k = Iota(h, 0.5f), v = Iota(h, -1.5f);
  const std::vector<float> pk = Iota(2 * h, 0.8f), pv = Iota(2 * h, 1.2f);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("GroupQueryAttention", kMs)
                                              .In(F32({1, 1, 2 * h}, q))
                                              .In(F32({1, 1, h}, k))
                                              .In(F32({1, 1, h}, v))
                                              .In(F32({1, 1, 2, h}, pk))
                                              .In(F32({1, 1, 2, h}, pv))
                                              .In(I32({1}, {2}))
                                              .In(I32({}, {3}))
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Attr("num_heads", int64_t{2})
                                              .Attr("kv_num_heads", int64_t{1})
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)[1].rank(), 4);
  EXPECT_EQ((*r)[1].dim(2), 3);
  const std::vector<double> present_k = ToDoubles((*r)[1]);
  for (int64_t e = 0; e < h; ++e) {
    EXPECT_EQ(present_k[e], pk[e]);
    EXPECT_EQ(present_k[2 * h + e], k[e]);
  }
  const std::vector<const float*> ks = {pk.data(), pk.data() + h, k.data()};
  const std::vector<const float*> vs = {pv.data(), pv.data() + h, v.data()};
  const std::vector<double> got = ToDoubles((*r)[0]);
  for (int head = 0; head < 2; ++head) {
    const std::vector<double> want = Naive(q.data() + head * h, ks, vs, h, 1 / std::sqrt(8.0));
    for (int64_t e = 0; e < h; ++e) EXPECT_NEAR(got[head * h + e], want[e], 1e-6);
  }
}

// A local window of 1 leaves each query its own key: the output is V's row.
TEST(MsftAttentionKernelTest, GroupQueryAttentionLocalWindowOfOneReadsTheOwnRow) {
  const int64_t h = 8, s = 3;
  const std::vector<float> q = Iota(s * h, 1), k = Iota(s * h, 2), v = Iota(s * h, 3);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("GroupQueryAttention", kMs)
                                              .In(F32({1, s, h}, q))
                                              .In(F32({1, s, h}, k))
                                              .In(F32({1, s, h}, v))
                                              .Absent()
                                              .Absent()
                                              .In(I32({1}, {2}))
                                              .In(I32({}, {3}))
                                              .Out(DType::kF32)
                                              .Attr("num_heads", int64_t{1})
                                              .Attr("kv_num_heads", int64_t{1})
                                              .Attr("local_window_size", int64_t{1})
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> got = ToDoubles((*r)[0]);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(got[i], v[i], 1e-6);
}

TEST(MsftAttentionKernelTest, GroupQueryAttentionRefusesBadShapes) {
  const Tensor q = F32({1, 2, 12}, Iota(24, 1));
  // 12 is not a multiple of 8 heads.
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("GroupQueryAttention", kMs)
                                              .In(q)
                                              .In(q)
                                              .In(q)
                                              .Absent()
                                              .Absent()
                                              .In(I32({1}, {1}))
                                              .In(I32({}, {2}))
                                              .Out(DType::kF32)
                                              .Attr("num_heads", int64_t{8})
                                              .Attr("kv_num_heads", int64_t{8})
                                              .Run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("query's hidden size 12"), std::string::npos) << r.status();
}

// key_padding_mask [B] of valid lengths 1: every query reads key 0 only (-10000 elsewhere
// underflows to 0).
TEST(MsftAttentionKernelTest, MultiHeadAttentionKeyLengthOneReadsTheFirstValue) {
  const int64_t h = 4, n = 2, s = 2;
  const std::vector<float> v = Iota(s * n * h, 2);
  const Tensor q = F32({1, s, n * h}, Iota(s * n * h, 0.1f));
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("MultiHeadAttention", kMs)
                                              .In(q)
                                              .In(q)
                                              .In(F32({1, s, n * h}, v))
                                              .Absent()
                                              .In(I32({1}, {1}))
                                              .Out(DType::kF32)
                                              .Attr("num_heads", n)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> got = ToDoubles((*r)[0]);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t e = 0; e < n * h; ++e) EXPECT_NEAR(got[i * n * h + e], v[e], 1e-6);
  }
}

// is_causal: query 0 reads key 0 only; query 1 the softmax over keys 0 and 1.
TEST(MsftAttentionKernelTest, OnnxAttentionCausal) {
  const int64_t h = 4;
  const std::vector<float> q = Iota(2 * h, 1), k = Iota(2 * h, -1), v = Iota(2 * h, 3);
  absl::StatusOr<std::vector<Tensor>> r = KernelCall("Attention")
                                              .In(F32({1, 1, 2, h}, q))
                                              .In(F32({1, 1, 2, h}, k))
                                              .In(F32({1, 1, 2, h}, v))
                                              .Out(DType::kF32)
                                              .Attr("is_causal", int64_t{1})
                                              .Attr("scale", 0.5f)
                                              .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> got = ToDoubles((*r)[0]);
  const std::vector<double> row1 =
      Naive(q.data() + h, {k.data(), k.data() + h}, {v.data(), v.data() + h}, h, 0.5);
  for (int64_t e = 0; e < h; ++e) {
    EXPECT_NEAR(got[e], v[e], 1e-6);
    EXPECT_NEAR(got[h + e], row1[e], 1e-6);
  }
}

}  // namespace
}  // namespace dynvm
