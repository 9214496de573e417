// dynvm's Winograd F(2x2, 3x3) (winograd.h). The vector code is AVX2 + FMA through explicit
// intrinsics in functions compiled for that target; a portable version of each step (plain loops)
// serves tests and CPUs without AVX2 (where kernels/dnnl/choice.h does not take it).
//
// Tuning notes (the AVX2 EPYC; winograd_test.cc's DISABLED_Timing: 1 thread, weights hot):
// 2.25x fewer multiply-adds than a direct convolution; the CRNN's convs 2-4 ran 1.35-1.75x faster
// than oneDNN's jit:avx2 direct kernels (which run at 80-95% of the FMA peak there), resnet18's
// 56x56-8x8 stages 1.5-3x; with 512 channels it is bound by reading its 16 MiB of transformed
// weights (7x7 at batch 1 even, at batch 8 1.5-2x faster), and with fewer than 16 tiles (a 4x4
// image at batch 1) it gains nothing end to end. End to end, 1 thread against ONNX Runtime
// (docs/results/wino-crnn-t1-2026-11-28.txt, wino-cnn-t1-2026-11-28.txt): CRNN 1.31x-1.54x ORT
// (0.93x-1.19x before), resnet18 1.14x / 1.33x (batch 1 / 8, 64x64), 1.26x / 1.10x (224x224).
// Rounding: |y - ref| <= 2e-5 sqrt(C) (1 + |ref| / sqrt(9C)) for inputs and weights in [-1, 1]
// (largest error seen 4e-5 at 256 channels).
//
// Transforms (Lavin & Gray's F(2x2, 3x3)):
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
// Layouts: V [16][tiles of the block][c]; packed U [m / 16 panels][16][c][16 lanes] (lanes past
// m zero); the products of one panel M [16][tiles][16].
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/target.h"

namespace dynvm::cpu::winograd {
namespace {

constexpr int64_t kPanel = 16;  // output channels per micro-kernel column block
constexpr int kRows = 6;        // tiles per micro-kernel row block
// Tiles per block: kVFloats / (16 c) (V of the block in 1 MiB: in L2 up to 64 channels, else
// read from L3 once per panel), rounded down to kRows, within [kMinBlock, kMaxBlock]. Each
// block reads all of U (16 c m floats), so fewer tiles would reread big weights too often
// (512 channels: 16 MiB per block); measured with winograd_test's DISABLED_Timing.
constexpr int64_t kVFloats = 16 * 16384;
constexpr int64_t kMinBlock = 24;
constexpr int64_t kMaxBlock = 120;

int64_t Panels(int64_t m) { return (m + kPanel - 1) / kPanel; }
int64_t RoundUp16(int64_t v) { return (v + 15) & ~int64_t{15}; }  // 64 bytes of floats

// The 16 input pixel pointers of tile t (a zero row of c floats where the window leaves the
// image).
void TilePointers(const Shape& s, const float* x, const float* zeros, int64_t t,
                  const float* rows[16]) {
  const int64_t th = (s.oh + 1) / 2, tw = (s.ow + 1) / 2;
  const int64_t n = t / (th * tw), r = t % (th * tw), ty = r / tw, tx = r % tw;
  const int64_t iy0 = 2 * ty - s.pad_top, ix0 = 2 * tx - s.pad_left;
  for (int i = 0; i < 4; ++i) {
    const int64_t iy = iy0 + i;
    for (int j = 0; j < 4; ++j) {
      const int64_t ix = ix0 + j;
      rows[i * 4 + j] = iy < 0 || iy >= s.h || ix < 0 || ix >= s.w
                            ? zeros
                            : x + ((n * s.h + iy) * s.w + ix) * s.c;
    }
  }
}

// The transcendental activations, as the reference kernel computes them.
float ApplyScalar(Act act, float x) {
  switch (act) {
    case Act::kSigmoid:
      return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    case Act::kHardSwish: {
      const double v = static_cast<double>(x) / 6.0 + 0.5;
      return static_cast<float>(x * (v < 0 ? 0.0 : (v > 1 ? 1.0 : v)));
    }
    case Act::kSiLU:
      return x * static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    case Act::kTanh:
      return static_cast<float>(std::tanh(static_cast<double>(x)));
    default:
      return x;
  }
}

struct Workspace {
  float *zeros, *v, *prod;
};

Workspace Carve(const Shape& s, float* ws) {
  const int64_t bt = TilesPerBlock(s);
  Workspace w;
  w.zeros = ws;
  w.v = w.zeros + RoundUp16(s.c);
  w.prod = w.v + RoundUp16(16 * bt * s.c);
  return w;
}

// ---- portable ----

// V = B^T d B of one channel: d[i * 4 + j] in, v[i * 4 + j] out.
void InputTransformScalar(const float d[16], float v[16]) {
  float t[16];
  for (int j = 0; j < 4; ++j) {
    t[0 + j] = d[0 + j] - d[8 + j];
    t[4 + j] = d[4 + j] + d[8 + j];
    t[8 + j] = d[8 + j] - d[4 + j];
    t[12 + j] = d[4 + j] - d[12 + j];
  }
  for (int i = 0; i < 4; ++i) {
    const float* r = t + 4 * i;
    v[4 * i + 0] = r[0] - r[2];
    v[4 * i + 1] = r[1] + r[2];
    v[4 * i + 2] = r[2] - r[1];
    v[4 * i + 3] = r[1] - r[3];
  }
}

void TransformInputPortable(const Shape& s, const float* x, const float* zeros, int64_t t0,
                            int64_t count, int64_t bt, float* v) {
  const int64_t mstride = bt * s.c;
  for (int64_t q = 0; q < count; ++q) {
    const float* rows[16];
    TilePointers(s, x, zeros, t0 + q, rows);
    float* out = v + q * s.c;
    for (int64_t ch = 0; ch < s.c; ++ch) {
      float d[16], r[16];
      for (int k = 0; k < 16; ++k) d[k] = rows[k][ch];
      InputTransformScalar(d, r);
      for (int k = 0; k < 16; ++k) out[k * mstride + ch] = r[k];
    }
  }
}

// prod[k][t][16] = V_k[t][:] * U_k of panel `upanel`, for the block's `count` tiles.
void ProductsPortable(int64_t c, const float* v, int64_t bt, int64_t count, const float* upanel,
                      float* prod) {
  for (int k = 0; k < 16; ++k) {
    const float* a = v + k * bt * c;
    const float* b = upanel + k * c * kPanel;
    float* out = prod + k * bt * kPanel;
    for (int64_t t = 0; t < count; ++t) {
      float acc[kPanel] = {};
      for (int64_t p = 0; p < c; ++p) {
        const float av = a[t * c + p];
        for (int64_t j = 0; j < kPanel; ++j) acc[j] += av * b[p * kPanel + j];
      }
      std::memcpy(out + t * kPanel, acc, sizeof(acc));
    }
  }
}

// The activation of one value, as the AVX2 step computes it (Relu and Clip as oneDNN's
// post-ops: a NaN becomes 0 / the bound).
float ActivateScalar(const PostOps& post, float v) {
  switch (post.act) {
    case Act::kNone:
      return v;
    case Act::kRelu:
      return v > 0.0f ? v : 0.0f;
    case Act::kLeakyRelu:
      return v < 0.0f ? v * post.alpha : v;
    case Act::kClip: {
      const float lo = v > post.alpha ? v : post.alpha;
      return lo < post.beta ? lo : post.beta;
    }
    default:
      return ApplyScalar(post.act, v);
  }
}

void TransformOutputPortable(const Shape& s, const float* prod, int64_t bt, int64_t t0,
                             int64_t count, int64_t p, const PostOps& post, float* y) {
  const int64_t th = (s.oh + 1) / 2, tw = (s.ow + 1) / 2;
  const int64_t lanes = std::min<int64_t>(kPanel, s.m - p * kPanel);
  for (int64_t q = 0; q < count; ++q) {
    const int64_t t = t0 + q;
    const int64_t n = t / (th * tw), r = t % (th * tw), oy0 = 2 * (r / tw), ox0 = 2 * (r % tw);
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int64_t m0 = p * kPanel + lane;
      float m[16];
      for (int k = 0; k < 16; ++k) m[k] = prod[(k * bt + q) * kPanel + lane];
      float s0[4], s1[4], out[4];
      for (int j = 0; j < 4; ++j) {
        s0[j] = m[0 + j] + m[4 + j] + m[8 + j];
        s1[j] = m[4 + j] - m[8 + j] - m[12 + j];
      }
      out[0] = s0[0] + s0[1] + s0[2];
      out[1] = s0[1] - s0[2] - s0[3];
      out[2] = s1[0] + s1[1] + s1[2];
      out[3] = s1[1] - s1[2] - s1[3];
      const float bias = post.bias != nullptr ? post.bias[m0] : 0.0f;
      for (int i = 0; i < 2 && oy0 + i < s.oh; ++i) {
        for (int j = 0; j < 2 && ox0 + j < s.ow; ++j) {
          const int64_t off = ((n * s.oh + oy0 + i) * s.ow + ox0 + j) * s.m + m0;
          float val = out[i * 2 + j] + bias;
          if (post.sum != nullptr) val += post.sum[off];
          y[off] = ActivateScalar(post, val);
        }
      }
    }
  }
}

#if DYNVM_CPU_X86

// ---- AVX2 ----

// Lanes [0, n) of a mask vector set (n in 1..8).
DYNVM_AVX2 inline __m256i TailMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// V = B^T d B for 8 channels: d[i * 4 + j] in, v[i * 4 + j] out.
DYNVM_AVX2 inline void InputTransform(const __m256 d[16], __m256 v[16]) {
  __m256 t[16];
  for (int j = 0; j < 4; ++j) {
    t[0 + j] = _mm256_sub_ps(d[0 + j], d[8 + j]);
    t[4 + j] = _mm256_add_ps(d[4 + j], d[8 + j]);
    t[8 + j] = _mm256_sub_ps(d[8 + j], d[4 + j]);
    t[12 + j] = _mm256_sub_ps(d[4 + j], d[12 + j]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m256* r = t + 4 * i;
    v[4 * i + 0] = _mm256_sub_ps(r[0], r[2]);
    v[4 * i + 1] = _mm256_add_ps(r[1], r[2]);
    v[4 * i + 2] = _mm256_sub_ps(r[2], r[1]);
    v[4 * i + 3] = _mm256_sub_ps(r[1], r[3]);
  }
}

// Transforms tiles [t0, t0 + count) into v (row stride c, matrix stride bt * c).
DYNVM_AVX2 void TransformInputAvx2(const Shape& s, const float* x, const float* zeros, int64_t t0,
                                   int64_t count, int64_t bt, float* v) {
  const int64_t c = s.c, full = c & ~int64_t{7};
  const __m256i tail = TailMask(c - full);
  const int64_t mstride = bt * c;
  for (int64_t q = 0; q < count; ++q) {
    const float* rows[16];
    TilePointers(s, x, zeros, t0 + q, rows);
    float* out = v + q * c;
    __m256 d[16], r[16];
    for (int64_t ch = 0; ch < full; ch += 8) {
      for (int k = 0; k < 16; ++k) d[k] = _mm256_loadu_ps(rows[k] + ch);
      InputTransform(d, r);
      for (int k = 0; k < 16; ++k) _mm256_storeu_ps(out + k * mstride + ch, r[k]);
    }
    if (full < c) {
      for (int k = 0; k < 16; ++k) d[k] = _mm256_maskload_ps(rows[k] + full, tail);
      InputTransform(d, r);
      for (int k = 0; k < 16; ++k) _mm256_maskstore_ps(out + k * mstride + full, tail, r[k]);
    }
  }
}

// ---- Products ----

// c[kR x 16] = a[kR x k] (row stride lda) * b[k x 16]. The accumulators are named variables
// (an array of them is kept on the stack by GCC, a store per FMA).
template <int kR>
DYNVM_AVX2 void Micro(int64_t k, const float* a, int64_t lda, const float* b, float* c) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float* a0 = a;
  const float* a1 = a + lda;
  const float* a2 = a + 2 * lda;
  const float* a3 = a + 3 * lda;
  const float* a4 = a + 4 * lda;
  const float* a5 = a + 5 * lda;
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * kPanel);
    const __m256 b1 = _mm256_loadu_ps(b + p * kPanel + 8);
#define DYNVM_ROW(r)                                 \
  if constexpr (kR > r) {                            \
    const __m256 av = _mm256_broadcast_ss(a##r + p); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);      \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);      \
  }
    DYNVM_ROW(0)
    DYNVM_ROW(1)
    DYNVM_ROW(2)
    DYNVM_ROW(3)
    DYNVM_ROW(4)
    DYNVM_ROW(5)
#undef DYNVM_ROW
  }
#define DYNVM_STORE(r)                             \
  if constexpr (kR > r) {                          \
    _mm256_storeu_ps(c + r * kPanel, c##r##0);     \
    _mm256_storeu_ps(c + r * kPanel + 8, c##r##1); \
  }
  DYNVM_STORE(0)
  DYNVM_STORE(1)
  DYNVM_STORE(2)
  DYNVM_STORE(3)
  DYNVM_STORE(4)
  DYNVM_STORE(5)
#undef DYNVM_STORE
}

// prod[k][t][16] = V_k[t][:] * U_k of panel `upanel`, for the block's `count` tiles.
DYNVM_AVX2 void ProductsAvx2(int64_t c, const float* v, int64_t bt, int64_t count,
                             const float* upanel, float* prod) {
  for (int k = 0; k < 16; ++k) {
    const float* a = v + k * bt * c;
    const float* b = upanel + k * c * kPanel;
    float* out = prod + k * bt * kPanel;
    int64_t t = 0;
    for (; t + kRows <= count; t += kRows) Micro<kRows>(c, a + t * c, c, b, out + t * kPanel);
    const float* at = a + t * c;
    float* ot = out + t * kPanel;
    switch (count - t) {
      case 5:
        Micro<5>(c, at, c, b, ot);
        break;
      case 4:
        Micro<4>(c, at, c, b, ot);
        break;
      case 3:
        Micro<3>(c, at, c, b, ot);
        break;
      case 2:
        Micro<2>(c, at, c, b, ot);
        break;
      case 1:
        Micro<1>(c, at, c, b, ot);
        break;
      default:
        break;
    }
  }
}

// The activation of 8 values. Relu and Clip as oneDNN's post-ops (a NaN becomes 0 / the bound).
DYNVM_AVX2 inline __m256 Activate(const PostOps& post, __m256 v) {
  switch (post.act) {
    case Act::kNone:
      return v;
    case Act::kRelu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case Act::kLeakyRelu: {
      const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(post.alpha)), neg);
    }
    case Act::kClip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(post.alpha)), _mm256_set1_ps(post.beta));
    default: {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, v);
      for (float& f : tmp) f = ApplyScalar(post.act, f);
      return _mm256_load_ps(tmp);
    }
  }
}

// Y = A^T m A of 8 channels: m[i * 4 + j] in, y[0..3] = rows 0-1, columns 0-1.
DYNVM_AVX2 inline void OutputTransform(const __m256 m[16], __m256 y[4]) {
  __m256 s0[4], s1[4];
  for (int j = 0; j < 4; ++j) {
    s0[j] = _mm256_add_ps(_mm256_add_ps(m[0 + j], m[4 + j]), m[8 + j]);
    s1[j] = _mm256_sub_ps(_mm256_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
  }
  y[0] = _mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]);
  y[1] = _mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]);
  y[2] = _mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]);
  y[3] = _mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]);
}

// Writes the outputs of panel `p` for tiles [t0, t0 + count) from prod.
DYNVM_AVX2 void TransformOutputAvx2(const Shape& s, const float* prod, int64_t bt, int64_t t0,
                                    int64_t count, int64_t p, const PostOps& post, float* y) {
  const int64_t th = (s.oh + 1) / 2, tw = (s.ow + 1) / 2;
  for (int half = 0; half < 2; ++half) {
    const int64_t m0 = p * kPanel + half * 8;
    if (m0 >= s.m) break;
    const int64_t lanes = std::min<int64_t>(8, s.m - m0);
    const __m256i mask = TailMask(lanes);
    const __m256 bias =
        post.bias != nullptr ? _mm256_maskload_ps(post.bias + m0, mask) : _mm256_setzero_ps();
    for (int64_t q = 0; q < count; ++q) {
      const int64_t t = t0 + q;
      const int64_t n = t / (th * tw), r = t % (th * tw), oy0 = 2 * (r / tw), ox0 = 2 * (r % tw);
      __m256 m[16], out[4];
      for (int k = 0; k < 16; ++k) m[k] = _mm256_loadu_ps(prod + (k * bt + q) * kPanel + half * 8);
      OutputTransform(m, out);
      for (int i = 0; i < 2; ++i) {
        if (oy0 + i >= s.oh) break;
        for (int j = 0; j < 2; ++j) {
          if (ox0 + j >= s.ow) break;
          const int64_t off = ((n * s.oh + oy0 + i) * s.ow + ox0 + j) * s.m + m0;
          __m256 val = _mm256_add_ps(out[i * 2 + j], bias);
          if (post.sum != nullptr) {
            val = _mm256_add_ps(val, lanes == 8 ? _mm256_loadu_ps(post.sum + off)
                                                : _mm256_maskload_ps(post.sum + off, mask));
          }
          val = Activate(post, val);
          if (lanes == 8) {
            _mm256_storeu_ps(y + off, val);
          } else {
            _mm256_maskstore_ps(y + off, mask, val);
          }
        }
      }
    }
  }
}

#endif  // DYNVM_CPU_X86

// The blocks [b0, b1) with one level's steps.
template <typename Steps>
void RunBlocksT(const Shape& s, const float* x, const float* packed, const PostOps& post, float* y,
                int64_t b0, int64_t b1, float* ws) {
  const Workspace w = Carve(s, ws);
  std::memset(w.zeros, 0, static_cast<size_t>(s.c) * sizeof(float));
  const int64_t bt = TilesPerBlock(s), tiles = Tiles(s);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = b * bt, count = std::min(bt, tiles - t0);
    Steps::TransformInput(s, x, w.zeros, t0, count, bt, w.v);
    for (int64_t p = 0; p < Panels(s.m); ++p) {
      Steps::Products(s.c, w.v, bt, count, packed + p * 16 * s.c * kPanel, w.prod);
      Steps::TransformOutput(s, w.prod, bt, t0, count, p, post, y);
    }
  }
}

struct PortableSteps {
  static void TransformInput(const Shape& s, const float* x, const float* zeros, int64_t t0,
                             int64_t count, int64_t bt, float* v) {
    TransformInputPortable(s, x, zeros, t0, count, bt, v);
  }
  static void Products(int64_t c, const float* v, int64_t bt, int64_t count, const float* upanel,
                       float* prod) {
    ProductsPortable(c, v, bt, count, upanel, prod);
  }
  static void TransformOutput(const Shape& s, const float* prod, int64_t bt, int64_t t0,
                              int64_t count, int64_t p, const PostOps& post, float* y) {
    TransformOutputPortable(s, prod, bt, t0, count, p, post, y);
  }
};

#if DYNVM_CPU_X86
struct Avx2Steps {
  static void TransformInput(const Shape& s, const float* x, const float* zeros, int64_t t0,
                             int64_t count, int64_t bt, float* v) {
    TransformInputAvx2(s, x, zeros, t0, count, bt, v);
  }
  static void Products(int64_t c, const float* v, int64_t bt, int64_t count, const float* upanel,
                       float* prod) {
    ProductsAvx2(c, v, bt, count, upanel, prod);
  }
  static void TransformOutput(const Shape& s, const float* prod, int64_t bt, int64_t t0,
                              int64_t count, int64_t p, const PostOps& post, float* y) {
    TransformOutputAvx2(s, prod, bt, t0, count, p, post, y);
  }
};
#endif

}  // namespace

int64_t Tiles(const Shape& s) { return s.n * ((s.oh + 1) / 2) * ((s.ow + 1) / 2); }

int64_t TilesPerBlock(const Shape& s) {
  int64_t bt = kVFloats / (16 * std::max<int64_t>(s.c, 1));
  bt = std::clamp(bt - bt % kRows, kMinBlock, kMaxBlock);
  // At least one block per thread where there are tiles enough (whole micro-kernel rows).
  const int64_t per_thread = (Tiles(s) + s.threads - 1) / std::max<int64_t>(s.threads, 1);
  bt = std::min(bt, std::max<int64_t>(kRows, (per_thread + kRows - 1) / kRows * kRows));
  return std::min(bt, std::max<int64_t>(Tiles(s), 1));
}

int64_t Blocks(const Shape& s) {
  const int64_t bt = TilesPerBlock(s);
  return (Tiles(s) + bt - 1) / bt;
}

int64_t PackedWeightsFloats(int64_t c, int64_t m) { return Panels(m) * 16 * c * kPanel; }

void PackWeights(const float* w, const int64_t strides[4], int64_t c, int64_t m, float* packed) {
  std::memset(packed, 0, static_cast<size_t>(PackedWeightsFloats(c, m)) * sizeof(float));
  for (int64_t o = 0; o < m; ++o) {
    const int64_t p = o / kPanel, lane = o % kPanel;
    for (int64_t i = 0; i < c; ++i) {
      float g[3][3];
      for (int ky = 0; ky < 3; ++ky) {
        for (int kx = 0; kx < 3; ++kx) {
          g[ky][kx] = w[o * strides[0] + i * strides[1] + ky * strides[2] + kx * strides[3]];
        }
      }
      float gg[4][3];  // G g
      for (int kx = 0; kx < 3; ++kx) {
        gg[0][kx] = g[0][kx];
        gg[1][kx] = 0.5f * (g[0][kx] + g[1][kx] + g[2][kx]);
        gg[2][kx] = 0.5f * (g[0][kx] - g[1][kx] + g[2][kx]);
        gg[3][kx] = g[2][kx];
      }
      for (int a = 0; a < 4; ++a) {  // (G g) G^T
        const float u[4] = {gg[a][0], 0.5f * (gg[a][0] + gg[a][1] + gg[a][2]),
                            0.5f * (gg[a][0] - gg[a][1] + gg[a][2]), gg[a][2]};
        for (int b = 0; b < 4; ++b) packed[((p * 16 + a * 4 + b) * c + i) * kPanel + lane] = u[b];
      }
    }
  }
}

int64_t WorkspaceFloats(const Shape& s) {
  const int64_t bt = TilesPerBlock(s);
  return RoundUp16(s.c) + RoundUp16(16 * bt * s.c) + 16 * bt * kPanel;
}

void RunBlocks(const Shape& s, const float* x, const float* packed, const PostOps& post, float* y,
               int64_t b0, int64_t b1, float* ws) {
  internal::Table().winograd_run_blocks(s, x, packed, post, y, b0, b1, ws);
}

}  // namespace dynvm::cpu::winograd

namespace dynvm::cpu::internal {

void FillWinograd(Isa isa, Dispatch* d) {
  d->winograd_run_blocks = &winograd::RunBlocksT<winograd::PortableSteps>;
#if DYNVM_CPU_X86
  if (isa >= Isa::kAvx2) d->winograd_run_blocks = &winograd::RunBlocksT<winograd::Avx2Steps>;
#endif
}

}  // namespace dynvm::cpu::internal
