// Public API. Reading and writing NumPy `.npy` files (format versions 1.0, 2.0 and 3.0, as
// described in numpy/lib/format.py).
//
// Supported element types (descr codes): f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, little-endian
// ('<', or '|' for one-byte types, or '=' for native) and big-endian ('>', byte-swapped on
// read). NumPy has no bfloat16: dynvm's bf16 travels as '<u2'. EncodeNpy writes bf16 tensors as
// '<u2', and a reader turns the loaded u16 tensor back into bf16 with ReinterpretAs.
//
// Strings (docs/strings.md): a '<Un' or '>Un' array (n UTF-32 code points per element,
// NUL-padded: NumPy's str arrays) reads as a string tensor in UTF-8, trailing NULs dropped as
// NumPy drops them; a code point that is a surrogate or above U+10FFFF is InvalidArgument.
// EncodeNpy writes string tensors as '<Un', n the longest element in code points (at least 1).
// Object arrays ('|O') hold pickled Python objects and are refused (InvalidArgument, saying to
// save `a.astype(str)`); byte strings ('|S') return Unimplemented.
//
// Not supported: structured dtypes (a list as descr) return Unimplemented; every other descr
// returns InvalidArgument. Arrays of rank above Tensor::kMaxRank are refused.
//
// Trust: the bytes of a file are untrusted. Every malformed input (truncated file, wrong magic,
// unsupported version, oversized header, a header that is not the exact dict literal NumPy
// writes, negative dims, byte counts that overflow 64 bits, data shorter than the shape needs)
// gives an error status that names the problem; nothing aborts, throws or reads out of bounds.
// Data beyond what the shape needs is ignored. The header is parsed by a strict parser of the
// Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }: keys in any
// order, single or double quotes, any whitespace between tokens, an optional trailing comma;
// exactly the three keys, each once; Python 2 'L' suffixes on dims in versions 1.0 and 2.0.
//
// Values read from a file are always C-order (row-major) and native little-endian. Bool
// elements are normalized to 0 or 1 (NumPy reads any nonzero byte as True).
//
// Thread safety: all functions are thread-safe (no shared state).
#ifndef DYNVM_TOOLS_NPY_NPY_H_
#define DYNVM_TOOLS_NPY_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "kernels/tensor.h"

namespace dynvm::npy {

// The decoded header of an .npy file.
struct NpyHeader {
  int major_version = 1;       // 1, 2 or 3 (the minor version is always 0)
  DType dtype = DType::kF32;   // bf16 never appears: NumPy has none
  int64_t str_width = 0;       // kString: code points per element (4 bytes each)
  bool big_endian = false;     // multi-byte elements stored most significant byte first
  bool fortran_order = false;  // elements stored column-major
  std::vector<int64_t> dims;   // at most Tensor::kMaxRank entries, each >= 0
  int64_t data_offset = 0;     // bytes from the start of the file to the first element
  int64_t data_bytes = 0;      // numel * element size; checked not to overflow
  int64_t element_bytes() const {
    return dtype == DType::kString ? 4 * str_width : DTypeSize(dtype);
  }
};

// Parses the magic, version and header dict at the start of `bytes`. Does not check that the
// data is present (so a caller may peek at the first bytes of a large file).
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::Span<const uint8_t> bytes);

// Parses a whole .npy file held in memory and copies its elements into a fresh, contiguous
// CPU tensor from the process heap. The result does not refer to `bytes`.
absl::StatusOr<Tensor> ParseNpy(absl::Span<const uint8_t> bytes);

// Reads the .npy file at `path` by mapping it read-only (schema::MappedFile::Open).
// When the elements need no conversion (little-endian or one byte wide, C order, bools all 0 or
// 1) and start at a 64-byte aligned offset (NumPy aligns the header to 64), the result views the
// mapping directly: a Storage of Kind::kExternal that keeps the mapping alive until the last
// view of it is dropped. Its contents must not be written. Otherwise the elements are copied
// into a heap tensor (byte-swapped, transposed from Fortran order). `zero_copy`, when not null,
// is set to whether the result views the mapping. Errors name `path`.
absl::StatusOr<Tensor> LoadNpy(const std::string& path, bool* zero_copy = nullptr);

// Encodes `t` as an .npy file of format version 1.0, byte for byte what numpy.save writes for
// the same little-endian C-order array: the header is padded with spaces so the data starts at
// a multiple of 64. `t` may be strided (any strides, including negative and zero); its elements
// are written in row-major order. bf16 is written as '<u2'.
// Errors: `t` undefined or not on the CPU; a string element that is not valid UTF-8.
absl::StatusOr<std::string> EncodeNpy(const Tensor& t);

// EncodeNpy, then writes the bytes to `path` (replacing it).
absl::Status SaveNpy(const std::string& path, const Tensor& t);

// The header EncodeNpy writes for a C-order array of `dtype` and `dims` (its length is a
// multiple of 64).
absl::StatusOr<std::string> EncodeNpyHeader(DType dtype, absl::Span<const int64_t> dims);

// Creates (replacing) the .npy file `path` for an array of `dtype` and `dims` and returns a
// writable tensor over its data, mapped shared: what is written into the tensor is the file's
// content (64-byte aligned, no copy). The elements start as zeros. The mapping lives until the
// last view of the tensor is dropped. Errors name `path`.
absl::StatusOr<Tensor> CreateMappedNpy(const std::string& path, DType dtype,
                                       absl::Span<const int64_t> dims);

// A view of the same storage, offset, dims and strides with elements of type `dtype`: same
// bytes, no copy. Typically turns the u16 tensor read from a '<u2' file back into bf16.
// REQUIRES nothing; returns InvalidArgument unless both dtypes have the same element size and
// neither is string, or when turning a non-bool tensor into bool (its bytes might be neither 0
// nor 1).
absl::StatusOr<Tensor> ReinterpretAs(const Tensor& t, DType dtype);

}  // namespace dynvm::npy

#endif  // DYNVM_TOOLS_NPY_NPY_H_
