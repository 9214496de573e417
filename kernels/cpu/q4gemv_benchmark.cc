// Decode GEMV bandwidth: an N x K weight times one activation row (a decode step's product) in f32
// (cpu::Gemv: the dot form over [N, K] rows, and the axpy form down a [K, N] matrix;
// packed_gemm::MultiplyVector on the packed GEMM's 16-column panels, with "read f32", a pure read
// of the same bytes), int8
// (cpu::QGemvI8, per-row scales) and int4 (cpu::QGemvQ4, MatMulNBits blocks of 32 and 128,
// symmetric and with zero points; and "a4", ONNX Runtime's accuracy_level 4: cpu::QGemvQ4Int8 on
// the activation row quantized to int8 once), against a STREAM-like triad (a[i] = b[i] + s c[i]
// over three arrays far larger than L3) measured in the same run, on 1..T threads (the output rows
// split over kernels' ThreadPool as the MatMul kernels split them).
//
//   cpu_q4gemv_benchmark [--n 4096] [--k 4096] [--threads 2] [--rounds 7] [--mb 256] [--rows 1]
//                        [--filter NAME_PART] [--triad 0]
//
// "a4 quantize x" times QuantizeActivationsQ8 of the one activation row (blocks of 32; its GB/s
// counts the K floats read). --rows M adds, for each 4-bit form, "a4 MM": M activation rows at once
// (a prompt's product, the blocked GEMM), with its multiply-adds per second.
//
// Each variant cycles through copies of its weight totalling at least --mb MB, so every call
// reads its weight from memory, not from L3. Rounds interleave the variants (and the triad) so
// load from other processes touches all of them alike; each figure is the median over rounds of
// the round's best of 3 passes over the copies. GB/s counts the bytes a call must read: weights,
// scales and zero points (the activation row and output are in cache). "of triad" is that rate
// over the triad's, whose bytes are 3 arrays (read b and c, write a; the write-allocate read of a
// is not counted, as STREAM does not).
//
// The triad's arrays, the panel weights (and so "read f32") and the 4-bit copies (and so "read
// b32") are in 2 MB pages: anonymous memory from a 2 MB boundary advised MADV_HUGEPAGE before it
// is touched (HugeAllocator). Under THP `madvise` a std::vector gets 4 KB pages, which cut the
// read rate by a fifth to a half (docs/llm.md "s10"); the bandwidth limit is the machine's, and
// the executable's constants are in 2 MB pages too (LoadOptions::constant_pages). The f32 dot,
// axpy and int8 weights stay in ordinary heap vectors.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/q4gemv.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/cpu/target.h"
#include "kernels/thread_pool.h"

namespace dynvm::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Memory from mmap, from a 2 MB boundary, advised MADV_HUGEPAGE before the first touch: 2 MB
// pages where THP is `always` or `madvise`. (Ignored advice leaves 4 KB pages.)
template <class T>
struct HugeAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;
  HugeAllocator() = default;
  template <class U>
  HugeAllocator(const HugeAllocator<U>&) {}  // NOLINT: allocator rebinding
  static size_t Length(size_t n) { return (n * sizeof(T) + kHuge - 1) / kHuge * kHuge; }
  // Under 2 MB (the many copies of a small weight): the heap, as a page could not be filled and
  // a mapping each would exhaust vm.max_map_count.
  T* allocate(size_t n) {
    if (n * sizeof(T) < kHuge) return std::allocator<T>().allocate(n);
    const size_t len = Length(n);
    void* p =
        ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cannot allocate %zu bytes\n", len);
      std::exit(1);
    }
    const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
    const uintptr_t at = (raw + kHuge - 1) / kHuge * kHuge;
    if (at > raw) ::munmap(p, at - raw);
    if (raw + kHuge > at) ::munmap(reinterpret_cast<void*>(at + len), raw + kHuge - at);
    ::madvise(reinterpret_cast<void*>(at), len, MADV_HUGEPAGE);
    return reinterpret_cast<T*>(at);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) return std::allocator<T>().deallocate(p, n);
    ::munmap(p, Length(n));
  }
  template <class U>
  bool operator==(const HugeAllocator<U>&) const {
    return true;
  }
};
template <class T>
using HugeVector = std::vector<T, HugeAllocator<T>>;

struct Variant {
  std::string name;
  int64_t bytes = 0;  // read per call
  std::function<void(int copy, int64_t r0, int64_t r1)> run;
  int copies = 1;
  std::vector<double> best_us;  // per round
  int64_t rows = 1;             // activation rows per call
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A pure read of bytes [b, e) (32-byte loads OR-ed into four registers): the rate a GEMV over
// the same bytes could reach if its arithmetic were free.
#if DYNVM_CPU_X86
DYNVM_AVX2 uint64_t ReadBytes(const uint8_t* b, const uint8_t* e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (; b + 128 <= e; b += 128) {
    a0 = _mm256_or_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    a1 = _mm256_or_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32)));
    a2 = _mm256_or_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64)));
    a3 = _mm256_or_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 96)));
  }
  const __m256i a = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
  uint64_t r = static_cast<uint64_t>(_mm256_extract_epi64(a, 0) | _mm256_extract_epi64(a, 3));
  for (; b < e; ++b) r |= *b;
  return r;
}
#else
uint64_t ReadBytes(const uint8_t* b, const uint8_t* e) {
  uint64_t r = 0;
  for (; b < e; ++b) r |= *b;
  return r;
}
#endif
volatile uint64_t read_sink = 0;

int64_t Flag(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return def;
}

// f32 on the packed GEMM's panels, and a pure read of the same bytes.
void AddPanelVariants(int64_t n, int64_t k, int64_t total, std::mt19937& rng,
                      const std::vector<float>& x, std::vector<float>& y,
                      std::vector<Variant>& variants) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // f32 packed into panels of 16 columns (packed_gemm.h): packed_gemm::MultiplyVector, one
  // sequential stream per panel. A thread's rows [r0, r1) become panels [ceil(r0/16), ceil(r1/16)).
  {
    const int64_t bytes = packed_gemm::PackedFloats(k, n) * 4;
    const int c = static_cast<int>(std::max<int64_t>(2, (total + bytes - 1) / bytes));
    auto w = std::make_shared<std::vector<HugeVector<float>>>(
        c, HugeVector<float>(packed_gemm::PackedFloats(k, n)));
    for (auto& m : *w) {
      for (float& v : m) v = u(rng);
    }
    variants.push_back({"f32 panels",
                        bytes,
                        [=, &x, &y](int i, int64_t r0, int64_t r1) {
                          packed_gemm::MultiplyVector((r0 + 15) / 16, (r1 + 15) / 16, n, k,
                                                      x.data(), (*w)[i].data(), y.data());
                        },
                        c,
                        {}});
    // The same bytes read and nothing else (the rate the panel GEMV could reach).
    variants.push_back({"read f32",
                        bytes,
                        [=](int i, int64_t r0, int64_t r1) {
                          const auto* p = reinterpret_cast<const uint8_t*>((*w)[i].data());
                          read_sink = read_sink + ReadBytes(p + (r0 + 15) / 16 * 64 * k,
                                                            p + (r1 + 15) / 16 * 64 * k);
                        },
                        c,
                        {}});
  }
}

// The copies of one 4-bit weight: each copy is one buffer, the packed bytes, the scales and the
// zero points each from a 64-byte boundary, the zero points' room kept in the symmetric copies
// too. Separate allocations put the scales at offsets from the weights that differed between
// variants (mmap against heap), and that alone moved a variant by 10% (the symmetric GEMV
// "slower" than the one with zero points, with the same instructions per 32 bytes).
struct Q4Copy {
  HugeVector<uint8_t> buf;
  uint8_t* packed = nullptr;
  float* scales = nullptr;
  uint8_t* zps = nullptr;
};

std::shared_ptr<std::vector<Q4Copy>> MakeQ4Copies(int copies, int64_t n, int64_t blocks,
                                                  int64_t block, bool zp, std::mt19937& rng) {
  auto line = [](int64_t b) { return (b + 63) / 64 * 64; };
  const int64_t packed_bytes = n * blocks * block / 2, scale_bytes = n * blocks * 4;
  const int64_t zp_bytes = n * ((blocks + 1) / 2);
  auto w = std::make_shared<std::vector<Q4Copy>>(copies);
  for (Q4Copy& m : *w) {
    m.buf.resize(64 + line(packed_bytes) + line(scale_bytes) + line(zp_bytes));
    uint8_t* base = m.buf.data() + (64 - reinterpret_cast<uintptr_t>(m.buf.data()) % 64);
    m.packed = base;
    m.scales = reinterpret_cast<float*>(base + line(packed_bytes));
    m.zps = base + line(packed_bytes) + line(scale_bytes);
    for (int64_t i = 0; i < packed_bytes; ++i) m.packed[i] = static_cast<uint8_t>(rng());
    std::fill(m.scales, m.scales + n * blocks, 0.05f);
    if (zp) {
      for (int64_t i = 0; i < zp_bytes; ++i) m.zps[i] = static_cast<uint8_t>(rng());
    }
  }
  return w;
}

// The GEMVs timed, each over copies of its weight totalling at least `total` bytes.
std::vector<Variant> MakeVariants(int64_t rows, int64_t n, int64_t k, int64_t total,
                                  std::mt19937& rng, const std::vector<float>& x,
                                  std::vector<float>& y) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto copies_for = [&](int64_t bytes) {
    return static_cast<int>(std::max<int64_t>(2, (total + bytes - 1) / bytes));
  };
  std::vector<Variant> variants;
  // f32
  {
    const int64_t bytes = n * k * 4;
    const int c = copies_for(bytes);
    auto w = std::make_shared<std::vector<std::vector<float>>>(c, std::vector<float>(n * k));
    for (auto& m : *w)
      for (float& v : m) v = u(rng);
    variants.push_back({"f32",
                        bytes,
                        [=, &x, &y](int i, int64_t r0, int64_t r1) {
                          Gemv('T', r1 - r0, k, 1.0f, x.data(), (*w)[i].data() + r0 * k, k, 0.0f,
                               y.data() + r0);
                        },
                        c,
                        {}});
  }
  // f32 [K, N] row-major (torch's MatMul export of a bias-free Linear): Gemv's axpy form.
  {
    const int64_t bytes = n * k * 4;
    const int c = copies_for(bytes);
    auto w = std::make_shared<std::vector<std::vector<float>>>(c, std::vector<float>(n * k));
    for (auto& m : *w) {
      for (float& v : m) v = u(rng);
    }
    variants.push_back({"f32 [K,N]",
                        bytes,
                        [=, &x, &y](int i, int64_t r0, int64_t r1) {
                          Gemv('N', r1 - r0, k, 1.0f, x.data(), (*w)[i].data() + r0, n, 0.0f,
                               y.data() + r0);
                        },
                        c,
                        {}});
  }
  AddPanelVariants(n, k, total, rng, x, y, variants);
  // int8
  {
    const int64_t bytes = n * k + n * 4;
    const int c = copies_for(bytes);
    auto w = std::make_shared<std::vector<std::vector<int8_t>>>(c, std::vector<int8_t>(n * k));
    for (auto& m : *w)
      for (int8_t& v : m) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    auto s = std::make_shared<std::vector<float>>(n, 1.0f / 127);
    variants.push_back({"int8",
                        bytes,
                        [=, &x, &y](int i, int64_t r0, int64_t r1) {
                          QGemvI8(1, k, x.data(), k, (*w)[i].data(), k, s->data(), r0, r1, 0.0f,
                                  y.data(), n);
                        },
                        c,
                        {}});
  }
  // int4
  for (auto [block, zp] : {std::pair<int64_t, bool>{32, false}, {32, true}, {128, false}}) {
    const int64_t blocks = (k + block - 1) / block, zp_row = (blocks + 1) / 2;
    const int64_t bytes = n * blocks * block / 2 + n * blocks * 4 + (zp ? n * zp_row : 0);
    const int c = copies_for(bytes);
    auto w = MakeQ4Copies(c, n, blocks, block, zp, rng);
    const std::string name = "int4 b" + std::to_string(block) + (zp ? " zp" : "");
    if (block == 32 && !zp) {  // the same weight bytes read and nothing else
      variants.push_back({"read b32",
                          n * blocks * block / 2,
                          [=](int i, int64_t r0, int64_t r1) {
                            const uint8_t* p = (*w)[i].packed;
                            read_sink = read_sink + ReadBytes(p + r0 * (blocks * block / 2),
                                                              p + r1 * (blocks * block / 2));
                          },
                          c,
                          {}});
    }
    variants.push_back({name,
                        bytes,
                        [=, &x, &y](int i, int64_t r0, int64_t r1) {
                          Q4Weights q;
                          q.k = k;
                          q.block = block;
                          q.packed = (*w)[i].packed;
                          q.scales = (*w)[i].scales;
                          q.zero_points = zp ? (*w)[i].zps : nullptr;
                          QGemvQ4(1, x.data(), k, q, nullptr, r0, r1, y.data(), n);
                        },
                        c,
                        {}});
    // accuracy_level 4: the activation row quantized once (K values; outside the timing).
    Q4Weights shape;
    shape.k = k;
    shape.block = block;
    auto xq = std::make_shared<std::vector<uint8_t>>(Q8ActivationRowBytes(shape));
    QuantizeActivationsQ8(1, x.data(), k, shape, xq->data());
    if (block == 32 && !zp) {  // the activation row's quantization itself (once per call)
      auto xqt = std::make_shared<std::vector<uint8_t>>(Q8ActivationRowBytes(shape));
      variants.push_back({"a4 quantize x",
                          k * 4,
                          [=, &x](int /*copy*/, int64_t r0, int64_t /*r1*/) {
                            if (r0 == 0) QuantizeActivationsQ8(1, x.data(), k, shape, xqt->data());
                          },
                          1,
                          {}});
    }
    if (rows > 1) {  // --rows: a prompt's product, the activation rows quantized once
      std::vector<float> xm(rows * k);
      for (int64_t m = 0; m < rows; ++m) std::copy(x.begin(), x.end(), xm.begin() + m * k);
      auto xqm = std::make_shared<std::vector<uint8_t>>(rows * Q8ActivationRowBytes(shape));
      QuantizeActivationsQ8(rows, xm.data(), k, shape, xqm->data());
      auto ym = std::make_shared<std::vector<float>>(rows * n);
      variants.push_back({name + " a4 M" + std::to_string(rows),
                          bytes,
                          [=](int i, int64_t r0, int64_t r1) {
                            Q4Weights q = shape;
                            q.packed = (*w)[i].packed;
                            q.scales = (*w)[i].scales;
                            q.zero_points = zp ? (*w)[i].zps : nullptr;
                            QGemvQ4Int8(rows, xqm->data(), q, nullptr, r0, r1, ym->data(), n);
                          },
                          c,
                          {},
                          rows});
    }
    variants.push_back({name + " a4",
                        bytes,
                        [=, &y](int i, int64_t r0, int64_t r1) {
                          Q4Weights q = shape;
                          q.packed = (*w)[i].packed;
                          q.scales = (*w)[i].scales;
                          q.zero_points = zp ? (*w)[i].zps : nullptr;
                          QGemvQ4Int8(1, xq->data(), q, nullptr, r0, r1, y.data(), n);
                        },
                        c,
                        {}});
  }
  return variants;
}

int Main(int argc, char** argv) {
  const int64_t n = Flag(argc, argv, "--n", 4096), k = Flag(argc, argv, "--k", 4096);
  const int max_threads = static_cast<int>(Flag(argc, argv, "--threads", 2));
  const int rounds = static_cast<int>(Flag(argc, argv, "--rounds", 7));
  const int64_t total = Flag(argc, argv, "--mb", 256) << 20;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(k), y(n);
  for (float& v : x) v = u(rng);

  std::vector<Variant> variants =
      MakeVariants(Flag(argc, argv, "--rows", 1), n, k, total, rng, x, y);
  // --filter S: only the variants whose name contains S (and f32, the reference column).
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--filter") != 0) continue;
    std::vector<Variant> kept;
    for (Variant& v : variants) {
      if (kept.empty() || v.name.find(argv[i + 1]) != std::string::npos) kept.push_back(v);
    }
    variants = kept;
  }
  const bool triad = Flag(argc, argv, "--triad", 1) != 0;  // --triad 0: skip it
  // The triad: three arrays of 2/3 of --mb each (512 MB in all at the default: far beyond L3).
  const int64_t triad_n = std::max<int64_t>(total / 4 / 3 * 2, int64_t{16} << 20);
  HugeVector<float> ta(triad_n, 0.0f), tb(triad_n, 1.0f), tc(triad_n, 2.0f);

  std::printf(
      "cpu level %s; N %lld, K %lld; weights cycled over >= %lld MB per variant; "
      "triad arrays 3 x %lld MB; %d rounds, median of per-round best of 3\n",
      IsaName(ActiveIsa()), static_cast<long long>(n), static_cast<long long>(k),
      static_cast<long long>(total >> 20), static_cast<long long>(triad_n * 4 >> 20), rounds);
  for (int threads = 1; threads <= max_threads; ++threads) {
    auto pool = ThreadPool::Create(threads);
    if (!pool.ok()) {
      std::fprintf(stderr, "%s\n", pool.status().ToString().c_str());
      return 1;
    }
    std::vector<double> triad_us;
    for (Variant& v : variants) v.best_us.clear();
    for (int round = 0; round < rounds; ++round) {
      double best = 1e30;
      for (int pass = 0; pass < (triad ? 3 : 0); ++pass) {
        const auto t0 = Clock::now();
        (*pool)->ParallelFor(triad_n, 4096, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ta[i] = tb[i] + 3.0f * tc[i];
        });
        best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      triad_us.push_back(triad ? best : 1e30);
      for (Variant& v : variants) {
        double vbest = 1e30;
        for (int pass = 0; pass < 3; ++pass) {
          for (int c = 0; c < v.copies; ++c) {
            const auto t0 = Clock::now();
            (*pool)->ParallelFor(n, 16, [&](int64_t r0, int64_t r1) { v.run(c, r0, r1); });
            vbest = std::min(vbest,
                             std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          }
        }
        v.best_us.push_back(vbest);
      }
    }
    // No triad passes (--triad 0): no rate, printed as 0 and "-".
    const double triad_gbs = triad ? 3.0 * triad_n * 4 / (Median(triad_us) * 1e3) : 0.0;
    if (triad) {
      std::printf("\nthreads %d: triad %.2f GB/s (median %.0f us)\n", threads, triad_gbs,
                  Median(triad_us));
    } else {
      std::printf("\nthreads %d: no triad (--triad 0)\n", threads);
    }
    std::printf("  %-16s %10s %10s %10s %9s %9s %10s\n", "weights", "MB/call", "us/call", "GB/s",
                "of triad", "x f32", "G MAC/s");
    const double f32_us = Median(variants[0].best_us);
    for (const Variant& v : variants) {
      const double us = Median(v.best_us), gbs = v.bytes / (us * 1e3);
      // With --triad 0 there is no triad to compare with: "-".
      char of_triad[32] = "-";
      if (triad_gbs > 0 && std::isfinite(triad_gbs)) {
        std::snprintf(of_triad, sizeof(of_triad), "%.0f%%", 100.0 * gbs / triad_gbs);
      }
      std::printf("  %-16s %10.2f %10.1f %10.2f %9s %8.2fx %10.1f\n", v.name.c_str(),
                  v.bytes / 1048576.0, us, gbs, of_triad, f32_us / us,
                  static_cast<double>(v.rows) * n * k / (us * 1e3));
    }
  }
  return 0;
}

}  // namespace
}  // namespace dynvm::cpu

int main(int argc, char** argv) { return dynvm::cpu::Main(argc, argv); }
