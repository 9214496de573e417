// Test-only helpers (not installed, not public API) shared by the loader fuzzers
// (vm/verifier_fuzzer.cc, vm/assembler_fuzzer.cc, vm/run_fuzzer.cc) and
// tests/hostile_executable_test.cc.
//
// FileFromFuzzInput: the checksum. A mutated file almost never keeps a correct CRC-32, so
// without help nearly every input would stop at the checksum and the verifier behind it would go
// unexplored. So when the input holds at least a header, bit 0 of the stored checksum (byte 64)
// picks one of two modes, about half of the inputs each:
//   1: the checksum is recomputed over the (mutated) header and flatbuffer first
//      (schema::Reseal), and the input reaches the flatbuffer and ISA verifiers;
//   0: the bytes are loaded as they are, which exercises the checksum check itself.
// The bit is free to use: in mode 1 the stored checksum is overwritten anyway, and a valid file
// loads the same in both modes.
//
// BindSmallInputs: binds small pseudo-random tensors to the inputs of an entry function, so that
// a fuzzed program with inputs reaches its kernels with data. Each symbol gets one size in 0..3
// (inputs that share a symbol agree, so the run gets past the binding checks); fixed dims keep
// their declared value; an input declared without a shape gets rank 0..2. Values are small
// integers in [-2, 5] (in range and out of range as indices), and for float dtypes also halves,
// zeros, NaN and infinities. Inputs too large to be worth binding (over `max_elements`), and
// non-tensor inputs, are left unbound: the run then fails with FailedPrecondition, which is fine
// for a fuzzer.
#ifndef DYNVM_VM_FUZZING_H_
#define DYNVM_VM_FUZZING_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "kernels/tensor.h"
#include "schema/format.h"
#include "schema/format_testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::fuzzing {

// The file a fuzz input stands for: the input itself, resealed when bit 0 of its byte 64 is set
// (see the top of this file).
inline std::string FileFromFuzzInput(const uint8_t* data, size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  if (size >= schema::kHeaderSize && (data[schema::kChecksumOffset] & 1) != 0) {
    schema::Reseal(file);
  }
  return file;
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

// A seed from bytes (FNV-1a), so that one fuzz input always gets the same tensors.
inline uint64_t SeedOf(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// Binds what it can of `info`'s inputs on `vm` (see the top of this file). Returns how many
// inputs it bound.
inline int BindSmallInputs(VirtualMachine& vm, const FunctionInfo& info, uint64_t seed,
                           int64_t max_elements = 4096) {
  SplitMix64 rng(seed);
  absl::flat_hash_map<std::string, int64_t> symbols;
  int bound = 0;
  for (const ParamInfo& p : info.inputs) {
    if (p.kind != ObjectKind::kTensor || p.dtype == DType::kString) continue;
    std::vector<int64_t> dims;
    if (p.has_shape) {
      for (const DimInfo& d : p.shape) {
        if (d.value >= 0) {
          dims.push_back(d.value);
        } else {
          auto [it, inserted] = symbols.try_emplace(d.symbol, 0);
          if (inserted) it->second = rng.Below(4);
          dims.push_back(it->second);
        }
      }
    } else {
      const int64_t rank = rng.Below(3);
      for (int64_t i = 0; i < rank; ++i) dims.push_back(1 + rng.Below(3));
    }
    int64_t n = 1;
    bool too_big = false;
    for (int64_t d : dims) {
      if (d > max_elements || (d > 0 && n > max_elements / d)) too_big = true;
      n *= too_big ? 1 : d;
    }
    if (too_big || n > max_elements) continue;
    absl::StatusOr<Tensor> t = Tensor::Allocate(HeapAllocator::Get(), p.dtype, dims);
    if (!t.ok()) continue;
    auto* out = static_cast<uint8_t*>(t->raw_data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = rng.Below(8) - 2;  // -2 .. 5
      double f = static_cast<double>(v);
      switch (rng.Below(16)) {
        case 0:
          f = std::numeric_limits<double>::quiet_NaN();
          break;
        case 1:
          f = std::numeric_limits<double>::infinity();
          break;
        case 2:
          f = -std::numeric_limits<double>::infinity();
          break;
        case 3:
          f = 0.5 * static_cast<double>(v);
          break;
        default:
          break;
      }
      auto put = [&](auto x) { std::memcpy(out + i * sizeof(x), &x, sizeof(x)); };
      switch (p.dtype) {
        case DType::kF32:
          put(static_cast<float>(f));
          break;
        case DType::kF64:
          put(f);
          break;
        case DType::kF16:
          put(Half(static_cast<float>(f)));
          break;
        case DType::kBF16:
          put(BFloat16(static_cast<float>(f)));
          break;
        case DType::kI8:
          put(static_cast<int8_t>(v));
          break;
        case DType::kI16:
          put(static_cast<int16_t>(v));
          break;
        case DType::kI32:
          put(static_cast<int32_t>(v));
          break;
        case DType::kI64:
          put(v);
          break;
        case DType::kU8:
          put(static_cast<uint8_t>(v));
          break;
        case DType::kU16:
          put(static_cast<uint16_t>(v));
          break;
        case DType::kU32:
          put(static_cast<uint32_t>(v));
          break;
        case DType::kU64:
          put(static_cast<uint64_t>(v));
          break;
        case DType::kBool:
          put(static_cast<uint8_t>(v > 1));
          break;
        case DType::kString:
          break;
      }
    }
    if (vm.SetInput(p.name, *t, info.name).ok()) ++bound;
  }
  return bound;
}

}  // namespace dynvm::fuzzing

#endif  // DYNVM_VM_FUZZING_H_
