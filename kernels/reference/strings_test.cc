// The string kernels (kernels/reference/strings.cc) against hand-computed values: ONNX's rules
// for Cast, stop words and case for StringNormalizer, n-gram counts for TfIdfVectorizer, and
// the edge cases the node tests do not reach (empty tensors, empty strings, multi-byte UTF-8).
#include "kernels/strings.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::I32;
using testing::I64;
using testing::KernelCall;
using testing::ToDoubles;
using testing::ToInts;

Tensor S(std::vector<int64_t> dims, std::vector<std::string> v) { return *StringTensor(dims, v); }

std::vector<std::string> Strings(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kString);
  std::vector<std::string> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.emplace_back(StringAt(t, i));
  return out;
}

const std::string kCafe = "caf\xc3\xa9";        // café
const std::string kEuro = "\xe2\x82\xac";       // €
const std::string kSmile = "\xf0\x9f\x98\x80";  // U+1F600

TEST(StringKernelsTest, CastFloatToString) {
  auto r = KernelCall("Cast")
               .In(F32({5}, {0.039187793f, 1.5f, NAN, INFINITY, -INFINITY}))
               .Attr("to", int64_t{8})
               .Out(DType::kString)
               .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Strings((*r)[0]),
            (std::vector<std::string>{"0.039187793", "1.5", "NaN", "INF", "-INF"}));
}

TEST(StringKernelsTest, CastIntToStringAndBack) {
  auto r = KernelCall("Cast")
               .In(I64({3}, {-7, 0, 1234567890123}))
               .Attr("to", int64_t{8})
               .Out(DType::kString)
               .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Strings((*r)[0]), (std::vector<std::string>{"-7", "0", "1234567890123"}));
  auto back = KernelCall("Cast").In((*r)[0]).Attr("to", int64_t{7}).Out(DType::kI64).Run();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToInts((*back)[0]), (std::vector<int64_t>{-7, 0, 1234567890123}));
}

TEST(StringKernelsTest, CastStringToFloatFollowsOnnx) {
  auto r = KernelCall("Cast")
               .In(S({2, 3}, {"0.47892547", "-1e-3", "NaN", "INF", "-INF", " 2.5 "}))
               .Attr("to", int64_t{1})
               .Out(DType::kF32)
               .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> v = ToDoubles((*r)[0]);
  EXPECT_EQ(v[0], static_cast<double>(0.47892547f));
  EXPECT_EQ(v[1], static_cast<double>(-1e-3f));
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], INFINITY);
  EXPECT_EQ(v[4], -INFINITY);
  EXPECT_EQ(v[5], 2.5);
}

TEST(StringKernelsTest, CastRefusesTextThatIsNotANumber) {
  for (const char* bad : {"abc", "", "1.5x"}) {
    auto r = KernelCall("Cast").In(S({1}, {bad})).Attr("to", int64_t{1}).Out(DType::kF32).Run();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto r = KernelCall("Cast").In(S({1}, {"300"})).Attr("to", int64_t{3}).Out(DType::kI8).Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);  // out of int8's range
}

TEST(StringKernelsTest, EmptyTensorsAndEmptyStrings) {
  auto r = KernelCall("Cast").In(F32({0, 3}, {})).Attr("to", int64_t{8}).Out(DType::kString).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{0, 3}));
  auto eq = KernelCall("Equal").In(S({3}, {"", "a", ""})).In(S({1}, {""})).Out(DType::kBool).Run();
  ASSERT_TRUE(eq.ok()) << eq.status();
  EXPECT_EQ(ToInts((*eq)[0]), (std::vector<int64_t>{1, 0, 1}));
}

TEST(StringKernelsTest, EqualBroadcastsAndComparesBytes) {
  auto r = KernelCall("Equal")
               .In(S({2, 1}, {kCafe, "cafe"}))
               .In(S({3}, {kCafe, "cafe", kEuro}))
               .Out(DType::kBool)
               .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ToInts((*r)[0]), (std::vector<int64_t>{1, 0, 0, 0, 1, 0}));
}

TEST(StringKernelsTest, ConcatAndGather) {
  auto c = KernelCall("Concat")
               .In(S({2, 1}, {"a", kEuro}))
               .In(S({2, 2}, {"", kSmile, "d", "e"}))
               .Attr("axis", int64_t{1})
               .Out(DType::kString)
               .Run();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Strings((*c)[0]), (std::vector<std::string>{"a", "", kSmile, kEuro, "d", "e"}));
  auto g = KernelCall("Gather")
               .In((*c)[0])
               .In(I64({2}, {-1, 0}))
               .Attr("axis", int64_t{1})
               .Out(DType::kString)
               .Run();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Strings((*g)[0]), (std::vector<std::string>{kSmile, "a", "e", kEuro}));
  auto bad = KernelCall("Gather")
                 .In((*c)[0])
                 .In(I64({1}, {3}))
                 .Attr("axis", int64_t{1})
                 .Out(DType::kString)
                 .Run();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StringKernelsTest, ReshapeSqueezeUnsqueezeCopyTheBytes) {
  const Tensor x = S({1, 3}, {"x", kCafe, ""});
  auto r = KernelCall("Reshape").In(x).In(I64({2}, {3, -1})).Out(DType::kString).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{3, 1}));
  EXPECT_NE((*r)[0].storage().get(), x.storage().get());
  auto s = KernelCall("Squeeze").In(x).In(I64({1}, {0})).Out(DType::kString).Run();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0].dims(), (std::vector<int64_t>{3}));
  auto u = KernelCall("Unsqueeze").In(x).In(I64({1}, {-1})).Out(DType::kString).Run();
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ((*u)[0].dims(), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(Strings((*u)[0]), (std::vector<std::string>{"x", kCafe, ""}));
}

TEST(StringKernelsTest, StringNormalizer) {
  auto r = KernelCall("StringNormalizer")
               .In(S({5}, {"Monday", "tuesday", kCafe, "MONDAY", "Ab" + kEuro}))
               .Attr("case_change_action", std::string("UPPER"))
               .Attr("stopwords", std::vector<std::string>{"monday"})
               .Out(DType::kString)
               .Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // Case-insensitive stop words; ASCII letters change case, multi-byte characters do not.
  EXPECT_EQ(Strings((*r)[0]), (std::vector<std::string>{"TUESDAY", "CAF\xc3\xa9", "AB" + kEuro}));
  auto sensitive = KernelCall("StringNormalizer")
                       .In(S({1, 3}, {"Monday", "monday", ""}))
                       .Attr("is_case_sensitive", int64_t{1})
                       .Attr("stopwords", std::vector<std::string>{"monday"})
                       .Out(DType::kString)
                       .Run();
  ASSERT_TRUE(sensitive.ok()) << sensitive.status();
  EXPECT_EQ((*sensitive)[0].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Strings((*sensitive)[0]), (std::vector<std::string>{"Monday", ""}));
  auto all = KernelCall("StringNormalizer")
                 .In(S({1, 2}, {"a", "A"}))
                 .Attr("stopwords", std::vector<std::string>{"a"})
                 .Out(DType::kString)
                 .Run();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)[0].dims(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(Strings((*all)[0]), (std::vector<std::string>{""}));
}

TEST(StringKernelsTest, TfIdfCountsSkipGramsOnce) {
  // Pool: unigrams {2, 3}, bigram {2, 3}; outputs 0, 1, 2.
  KernelCall call("TfIdfVectorizer");
  call.Attr("mode", std::string("TF"))
      .Attr("min_gram_length", int64_t{1})
      .Attr("max_gram_length", int64_t{2})
      .Attr("max_skip_count", int64_t{1})
      .Attr("ngram_counts", std::vector<int64_t>{0, 2})
      .Attr("ngram_indexes", std::vector<int64_t>{0, 1, 2})
      .Attr("pool_int64s", std::vector<int64_t>{2, 3, 2, 3});
  // Row [2, 3, 2, 9, 3]: unigrams 2 and 3 twice each (counted at skip 0 only, not once per
  // skip distance); bigram (2, 3) at positions 0-1 (skip 0) and 2-4 (skip 1).
  auto r = call.In(I32({1, 5}, {2, 3, 2, 9, 3})).Out(DType::kF32).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ToDoubles((*r)[0]), (std::vector<double>{2, 2, 2}));
}

TEST(StringKernelsTest, TfIdfOverStringsWithWeights) {
  KernelCall call("TfIdfVectorizer");
  call.Attr("mode", std::string("TFIDF"))
      .Attr("min_gram_length", int64_t{1})
      .Attr("max_gram_length", int64_t{1})
      .Attr("max_skip_count", int64_t{0})
      .Attr("ngram_counts", std::vector<int64_t>{0})
      .Attr("ngram_indexes", std::vector<int64_t>{1, 0})
      .Attr("pool_strings", std::vector<std::string>{kCafe, "tea"})
      .Attr("weights", std::vector<float>{0.5f, 2.0f});
  auto r = call.In(S({4}, {kCafe, "tea", kCafe, ""})).Out(DType::kF32).Run();
  ASSERT_TRUE(r.ok()) << r.status();
  // café (pool 0) -> output 1, count 2, weight 2; tea -> output 0, count 1, weight 0.5.
  EXPECT_EQ(ToDoubles((*r)[0]), (std::vector<double>{0.5, 4.0}));
}

TEST(StringKernelsTest, NumericKernelsNeverSeeStrings) {
  // Add has no string kernel: the registry refuses the spec rather than binding a float kernel.
  auto r = KernelCall("Add").In(S({1}, {"a"})).In(S({1}, {"b"})).Out(DType::kString).Run();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("does not take string tensors"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace dynvm
