// com.microsoft::QLinearAdd and dynvm::Requantize (kernels/reference/qeltwise.cc, qeltwise.cc):
// the reference QLinearAdd against the exact sum in double (identical but within f32's
// rounding of a tie), the vector kernels against the reference bit for bit at every ISA level,
// 1 and 2 threads, odd lengths; Requantize against the unfused DequantizeLinear -> [Relu] ->
// QuantizeLinear reference kernels bit for bit; channels-last QLinearAdd (with a broadcast)
// against the plain layout; bad parameters named in the error.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/channels_last.h"
#include "kernels/cpu/isa.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

double At(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kU8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

struct AddCase {
  Tensor a, as, az, b, bs, bz, cs, cz;
};

AddCase RandomAdd(DType dt, const std::vector<int64_t>& da, const std::vector<int64_t>& db,
                  std::mt19937& rng) {
  std::uniform_real_distribution<float> s(0.002f, 0.2f);
  std::uniform_int_distribution<int> z(dt == DType::kU8 ? 0 : -128, dt == DType::kU8 ? 255 : 127);
  return {testing::RandomInt8(dt, da, rng), testing::F32({}, {s(rng)}),
          testing::Int8Scalar(dt, z(rng)),  testing::RandomInt8(dt, db, rng),
          testing::F32({}, {s(rng)}),       testing::Int8Scalar(dt, z(rng)),
          testing::F32({}, {s(rng)}),       testing::Int8Scalar(dt, z(rng))};
}

KernelCall AddCall(const AddCase& c, DType dt, const std::string& backend) {
  KernelCall k("QLinearAdd", "com.microsoft");
  k.In(c.a).In(c.as).In(c.az).In(c.b).In(c.bs).In(c.bz).In(c.cs).In(c.cz).Out(dt);
  k.Backend(backend);
  return k;
}

TEST(QLinearAdd, ReferenceIsTheExactSumButAtF32Ties) {
  std::mt19937 rng(7);
  int64_t ties = 0, outputs = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const DType dt = trial % 2 == 0 ? DType::kU8 : DType::kI8;
    const std::vector<int64_t> da = {2, 3, 5, 7};
    const std::vector<int64_t> db = trial % 3 == 0 ? std::vector<int64_t>{1, 3, 1, 1} : da;
    const AddCase c = RandomAdd(dt, da, db, rng);
    absl::StatusOr<std::vector<Tensor>> got = AddCall(c, dt, "reference").Run();
    ASSERT_TRUE(got.ok()) << got.status();
    const Tensor& y = (*got)[0];
    ASSERT_EQ(y.dims(), std::vector<int64_t>(da.begin(), da.end()));
    const double as = c.as.data<float>()[0], bs = c.bs.data<float>()[0], cs = c.cs.data<float>()[0];
    const double lo = dt == DType::kU8 ? 0 : -128, hi = dt == DType::kU8 ? 255 : 127;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const int64_t ch = (i / 35) % 3;
      const int64_t bi = db[0] == 1 ? ch : i;
      const double v =
          ((At(c.a, i) - At(c.az, 0)) * as + (At(c.b, bi) - At(c.bz, 0)) * bs) / cs + At(c.cz, 0);
      const double want = std::clamp(std::nearbyint(v), lo, hi);
      ++outputs;
      if (At(y, i) == want) continue;
      const double to_tie = std::abs(v - std::floor(v) - 0.5);
      ASSERT_TRUE(std::abs(At(y, i) - want) == 1 && to_tie <= std::ldexp(std::abs(v) + 1, -18))
          << "trial " << trial << " output " << i << ": " << At(y, i) << ", exact " << v;
      ++ties;
    }
  }
  EXPECT_LT(ties * 1000, outputs) << ties << " ties in " << outputs;
}

TEST(QLinearAdd, VectorKernelsMatchTheReferenceBitForBit) {
  std::mt19937 rng(11);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int64_t n : {1, 7, 15, 16, 17, 33, 1000, 70001}) {
      for (DType dt : {DType::kU8, DType::kI8}) {
        for (int threads : {1, 2}) {
          SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " n ", n, " ", DTypeName(dt), " ", threads,
                                    " threads"));
          const AddCase c = RandomAdd(dt, {n}, {n}, rng);
          absl::StatusOr<std::vector<Tensor>> want = AddCall(c, dt, "reference").Run();
          absl::StatusOr<std::vector<Tensor>> got = AddCall(c, dt, "dnnl").Run(threads);
          ASSERT_TRUE(want.ok() && got.ok());
          EXPECT_EQ(testing::ToDoubles((*got)[0]), testing::ToDoubles((*want)[0]));
        }
      }
    }
  }
}

// channels_last = 1: A, B and C stored [N, spatial..., C]; against the plain layout, with B
// broadcast over the spatial dims and not.
TEST(QLinearAdd, ChannelsLastMatchesThePlainLayout) {
  std::mt19937 rng(13);
  for (bool broadcast : {false, true}) {
    for (const char* backend : {"reference", "dnnl"}) {
      SCOPED_TRACE(absl::StrCat(backend, broadcast ? ", B broadcast" : ""));
      const std::vector<int64_t> da = {2, 5, 3, 4};
      const std::vector<int64_t> db = broadcast ? std::vector<int64_t>{1, 5, 1, 1} : da;
      AddCase c = RandomAdd(DType::kU8, da, db, rng);
      absl::StatusOr<std::vector<Tensor>> plain = AddCall(c, DType::kU8, "reference").Run();
      ASSERT_TRUE(plain.ok()) << plain.status();
      c.a = *PermuteChannels8(c.a, true);
      c.b = *PermuteChannels8(c.b, true);
      KernelCall k = AddCall(c, DType::kU8, backend);
      k.Attr("channels_last", int64_t{1});
      absl::StatusOr<std::vector<Tensor>> got = k.Run(2);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(testing::ToDoubles(*PermuteChannels8((*got)[0], false)),
                testing::ToDoubles((*plain)[0]));
    }
  }
}

TEST(QLinearAdd, BadParametersAreNamed) {
  std::mt19937 rng(17);
  AddCase c = RandomAdd(DType::kU8, {4}, {4}, rng);
  c.bs = testing::F32({}, {0.0f});
  for (const char* backend : {"reference", "dnnl"}) {
    absl::StatusOr<std::vector<Tensor>> got = AddCall(c, DType::kU8, backend).Run();
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find("QLinearAdd: B_scale"), std::string::npos)
        << got.status();
  }
  AddCase mixed = RandomAdd(DType::kU8, {4}, {4}, rng);
  mixed.b = testing::RandomInt8(DType::kI8, {4}, rng);
  EXPECT_FALSE(AddCall(mixed, DType::kU8, "dnnl").Run().ok());
}

// Requantize against DequantizeLinear -> [Relu] -> QuantizeLinear on the reference kernels.
TEST(Requantize, IsTheUnfusedProgramBitForBit) {
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> s(0.001f, 0.3f);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int trial = 0; trial < 16; ++trial) {
      const DType xt = trial % 2 == 0 ? DType::kU8 : DType::kI8;
      const DType yt = trial % 4 < 2 ? DType::kU8 : DType::kI8;
      const bool relu = trial % 8 < 4;
      const int64_t n = std::vector<int64_t>{1, 31, 1025, 70003}[trial % 4];
      SCOPED_TRACE(absl::StrCat(cpu::IsaName(isa), " trial ", trial, " n ", n));
      Tensor x = testing::RandomInt8(xt, {1, n}, rng);
      std::uniform_int_distribution<int> zx(xt == DType::kU8 ? 0 : -128,
                                            xt == DType::kU8 ? 255 : 127);
      std::uniform_int_distribution<int> zy(yt == DType::kU8 ? 0 : -128,
                                            yt == DType::kU8 ? 255 : 127);
      Tensor xs = testing::F32({}, {s(rng)}), xz = testing::Int8Scalar(xt, zx(rng));
      Tensor ys = testing::F32({}, {s(rng)}), yz = testing::Int8Scalar(yt, zy(rng));
      absl::StatusOr<std::vector<Tensor>> f = KernelCall("DequantizeLinear")
                                                  .In(x)
                                                  .In(xs)
                                                  .In(xz)
                                                  .Out(DType::kF32)
                                                  .Backend("reference")
                                                  .Run();
      ASSERT_TRUE(f.ok()) << f.status();
      Tensor v = (*f)[0];
      if (relu) {
        absl::StatusOr<std::vector<Tensor>> r =
            KernelCall("Relu").In(v).Out(DType::kF32).Backend("reference").Run();
        ASSERT_TRUE(r.ok()) << r.status();
        v = (*r)[0];
      }
      absl::StatusOr<std::vector<Tensor>> want =
          KernelCall("QuantizeLinear").In(v).In(ys).In(yz).Out(yt).Backend("reference").Run();
      ASSERT_TRUE(want.ok()) << want.status();
      for (const char* backend : {"reference", "dnnl"}) {
        for (int threads : {1, 2}) {
          KernelCall k("Requantize", "dynvm");
          k.In(x).In(xs).In(xz).In(ys).In(yz).Out(yt).Attr("relu", int64_t{relu}).Backend(backend);
          absl::StatusOr<std::vector<Tensor>> got = k.Run(threads);
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ((*got)[0].dtype(), yt);
          EXPECT_EQ(testing::ToDoubles((*got)[0]), testing::ToDoubles((*want)[0]))
              << backend << ", " << threads << " threads";
        }
      }
    }
  }
}

}  // namespace
}  // namespace dynvm::onednn
