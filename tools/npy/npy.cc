#include "tools/npy/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "allocator/storage.h"
#include "common/status_macros.h"
#include "kernels/strings.h"
#include "schema/mapped_file.h"

namespace dynvm::npy {
namespace {

static_assert(std::endian::native == std::endian::little, "npy.cc assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// NumPy aligns the start of the data to this many bytes (numpy.lib.format.ARRAY_ALIGN).
constexpr int64_t kDataAlignment = 64;
// Our headers are a few hundred bytes at most (rank <= 8); anything far larger is garbage.
constexpr uint32_t kMaxHeaderBytes = uint32_t{1} << 20;

// Quoted for an error message: bytes outside printable ASCII escaped, cut short when long.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (char c : s.substr(0, kMax)) {
    if (c >= ' ' && c <= '~' && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
    }
  }
  out.push_back('\'');
  if (s.size() > kMax) out.append("...");
  return out;
}

std::string ShapeRepr(absl::Span<const int64_t> dims) {
  if (dims.size() == 1) return absl::StrCat("(", dims[0], ",)");
  return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
}

// ---------------------------------------------------------------------------------------------
// descr codes

struct DescrCode {
  absl::string_view code;  // without the byte-order prefix
  DType dtype;
};
constexpr DescrCode kDescrCodes[] = {
    {"f2", DType::kF16}, {"f4", DType::kF32}, {"f8", DType::kF64}, {"i1", DType::kI8},
    {"i2", DType::kI16}, {"i4", DType::kI32}, {"i8", DType::kI64}, {"u1", DType::kU8},
    {"u2", DType::kU16}, {"u4", DType::kU32}, {"u8", DType::kU64}, {"b1", DType::kBool},
};

absl::Status ParseDescr(absl::string_view descr, NpyHeader* h) {
  if (descr.empty()) return absl::InvalidArgumentError("npy: empty descr");
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: descr ", Quote(descr), " lacks a byte-order prefix ('<', '>', '|' or '=')"));
  }
  const absl::string_view code = descr.substr(1);
  if (!code.empty() && code[0] == 'O') {
    return absl::InvalidArgumentError(
        "npy: object arrays ('|O') are not supported: they hold pickled Python objects; save "
        "an array of str as a.astype(str) (descr '<U')");
  }
  if (!code.empty() && code[0] == 'U' && order != '|') {
    int64_t width = 0;
    if (code.size() < 2 || code.size() > 10 || !absl::SimpleAtoi(code.substr(1), &width) ||
        width < 0 || code[1] == '+' || code[1] == '-') {
      return absl::InvalidArgumentError(absl::StrCat("npy: bad string width in ", Quote(descr)));
    }
    h->dtype = DType::kString;
    h->str_width = width;
    h->big_endian = order == '>';
    return absl::OkStatus();
  }
  if (!code.empty() && (code[0] == 'U' || code[0] == 'S' || code[0] == 'a')) {
    return absl::UnimplementedError(
        absl::StrCat("npy: string arrays (descr ", Quote(descr), ") are not supported yet"));
  }
  for (const DescrCode& c : kDescrCodes) {
    if (c.code != code) continue;
    if (order == '|' && DTypeSize(c.dtype) > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "npy: descr ", Quote(descr), ": byte order '|' is only valid for one-byte types"));
    }
    h->dtype = c.dtype;
    h->big_endian = order == '>' && DTypeSize(c.dtype) > 1;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("npy: unsupported descr ", Quote(descr)));
}

// ---------------------------------------------------------------------------------------------
// The header dict

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.';
}

// A strict parser of the dict literal NumPy writes. It knows the three keys and the type of
// each value, so it is a handful of small functions rather than a general Python parser.
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, bool allow_long_suffix)
      : text_(text), allow_long_suffix_(allow_long_suffix) {}

  absl::Status Parse(NpyHeader* h) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      absl::StatusOr<absl::string_view> key = ParseString("a quoted key or '}'");
      if (!key.ok()) return key.status();
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key ", Quote(*key)));
      SkipSpace();
      if (*key == "descr") {
        if (std::exchange(seen_descr, true)) return Error("duplicate key 'descr'");
        if (Peek() == '[') {
          return absl::UnimplementedError(
              "npy: structured dtypes (a list as descr) are not supported");
        }
        DYNVM_ASSIGN_OR_RETURN(absl::string_view descr, ParseString("a quoted descr"));
        DYNVM_RETURN_IF_ERROR(ParseDescr(descr, h));
      } else if (*key == "fortran_order") {
        if (std::exchange(seen_fortran, true)) return Error("duplicate key 'fortran_order'");
        DYNVM_ASSIGN_OR_RETURN(bool b, ParseBool());
        h->fortran_order = b;
      } else if (*key == "shape") {
        if (std::exchange(seen_shape, true)) return Error("duplicate key 'shape'");
        DYNVM_RETURN_IF_ERROR(ParseShape(&h->dims));
      } else {
        return Error(absl::StrCat("unknown key ", Quote(*key)));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}' after a value");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the dict");
    for (auto [seen, name] :
         {std::pair{seen_descr, "descr"}, std::pair{seen_fortran, "fortran_order"},
          std::pair{seen_shape, "shape"}}) {
      if (!seen) {
        return absl::InvalidArgumentError(absl::StrCat("npy: header lacks the key '", name, "'"));
      }
    }
    return absl::OkStatus();
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= text_.size(); }
  void SkipSpace() {
    while (!AtEnd() && IsSpace(text_[pos_])) ++pos_;
  }
  bool Consume(char c) {
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t end = pos_ + word.size();
    if (end < text_.size() && IsWordChar(text_[end])) return false;
    pos_ = end;
    return true;
  }

  absl::Status Error(absl::string_view what) const {
    const std::string here = AtEnd() ? "end of header" : Quote(text_.substr(pos_, 16));
    return absl::InvalidArgumentError(
        absl::StrCat("npy: malformed header at byte ", pos_, " (", here, "): ", what));
  }

  // A Python string literal in single or double quotes, without escapes or prefixes.
  absl::StatusOr<absl::string_view> ParseString(absl::string_view what) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error(absl::StrCat("expected ", what));
    const size_t start = ++pos_;
    while (!AtEnd() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') return Error("escape sequences in strings are not supported");
      if (text_[pos_] == '\n') return Error("unterminated string");
      ++pos_;
    }
    if (AtEnd()) return Error("unterminated string");
    ++pos_;
    return text_.substr(start, pos_ - 1 - start);
  }

  absl::StatusOr<bool> ParseBool() {
    if (ConsumeWord("True")) return true;
    if (ConsumeWord("False")) return false;
    return Error("fortran_order must be True or False");
  }

  // A tuple of non-negative decimal integers: (), (3,), (2, 3) or (2, 3,).
  absl::Status ParseShape(std::vector<int64_t>* dims) {
    dims->clear();
    if (!Consume('(')) return Error("shape must be a tuple");
    SkipSpace();
    if (Consume(')')) return absl::OkStatus();
    while (true) {
      if (dims->size() == Tensor::kMaxRank) {
        return absl::InvalidArgumentError(
            absl::StrCat("npy: shape has more than ", Tensor::kMaxRank, " dimensions"));
      }
      DYNVM_ASSIGN_OR_RETURN(int64_t d, ParseDim());
      dims->push_back(d);
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
        if (Consume(')')) return absl::OkStatus();
        continue;
      }
      if (Consume(')')) {
        // (3) is the integer 3 in Python, not a tuple.
        if (dims->size() == 1) return Error("shape (n) is not a tuple; write (n,)");
        return absl::OkStatus();
      }
      return Error("expected ',' or ')' in shape");
    }
  }

  absl::StatusOr<int64_t> ParseDim() {
    const size_t start = pos_;
    if (Peek() == '-') return Error("negative dimension in shape");
    if (!IsDigit(Peek())) return Error("expected a dimension in shape");
    if (Peek() == '0' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1])) {
      return Error("dimension with a leading zero");
    }
    uint64_t v = 0;
    bool overflow = false;
    while (!AtEnd() && IsDigit(text_[pos_])) {
      overflow |= __builtin_mul_overflow(v, uint64_t{10}, &v);
      overflow |= __builtin_add_overflow(v, static_cast<uint64_t>(text_[pos_] - '0'), &v);
      ++pos_;
    }
    if (overflow || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("npy: dimension ",
                                                     Quote(text_.substr(start, pos_ - start)),
                                                     " does not fit in a signed 64-bit integer"));
    }
    if (allow_long_suffix_ && Peek() == 'L') ++pos_;  // written by NumPy on Python 2
    if (!AtEnd() && IsWordChar(text_[pos_])) return Error("malformed dimension in shape");
    return static_cast<int64_t>(v);
  }

  absl::string_view text_;
  bool allow_long_suffix_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Element copies

// Copies `n` elements of `esize` bytes, `src_stride` bytes apart, to consecutive places at `dst`,
// reversing the bytes of each element when `swap`.
void CopyRow(const uint8_t* src, int64_t n, int64_t src_stride, int64_t esize, bool swap,
             uint8_t* dst) {
  if (!swap && src_stride == esize) {
    std::memcpy(dst, src, static_cast<size_t>(n * esize));
    return;
  }
  for (int64_t i = 0; i < n; ++i, src += src_stride, dst += esize) {
    if (swap) {
      for (int64_t b = 0; b < esize; ++b) dst[b] = src[esize - 1 - b];
    } else {
      std::memcpy(dst, src, static_cast<size_t>(esize));
    }
  }
}

// Copies the elements of the strided array at `src` (`byte_strides` per dim, any sign) into
// the contiguous row-major buffer `dst`. REQUIRES: every element lies in readable memory, the
// product of `dims` is positive, and a dim of 1 has byte stride 0 (so no stride is ever large).
void GatherStrided(const uint8_t* src, absl::Span<const int64_t> dims,
                   absl::Span<const int64_t> byte_strides, int64_t esize, bool swap, uint8_t* dst) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    CopyRow(src, 1, esize, esize, swap, dst);
    return;
  }
  const int64_t inner = dims[rank - 1];
  int64_t idx[Tensor::kMaxRank] = {};
  const uint8_t* row = src;
  while (true) {
    CopyRow(row, inner, byte_strides[rank - 1], esize, swap, dst);
    dst += inner * esize;
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < dims[d]) {
        row += byte_strides[d];
        break;
      }
      idx[d] = 0;
      row -= byte_strides[d] * (dims[d] - 1);
    }
    if (d < 0) return;
  }
}

// True when Fortran order and C order place the elements alike: at most one dim exceeds 1.
bool OrderIsIrrelevant(absl::Span<const int64_t> dims) {
  int big = 0;
  for (int64_t d : dims) big += d > 1;
  return big <= 1;
}

absl::Status CheckDataPresent(const NpyHeader& h, size_t file_bytes) {
  const uint64_t available = file_bytes - static_cast<uint64_t>(h.data_offset);
  if (available < static_cast<uint64_t>(h.data_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: data truncated: shape ", ShapeRepr(h.dims), " of ", DTypeName(h.dtype),
                     " needs ", h.data_bytes, " bytes but only ", available, " follow the header"));
  }
  return absl::OkStatus();
}

// Appends code point `c` to `out` in UTF-8; false for a surrogate or a value above U+10FFFF.
bool AppendUtf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF) return false;
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    return false;
  }
  return true;
}

// A '<Un' / '>Un' array as a string tensor (UTF-8, trailing NULs dropped).
absl::StatusOr<Tensor> DecodeStrings(const NpyHeader& h, const uint8_t* data) {
  // A '<U0' array stores no bytes, so the file size does not bound its element count; each
  // element still costs a table entry (32 bytes) in memory. Checked multiply, and a cap far
  // above any real input: 2^30 strings, and 2^20 for a '<U0' array (all empty strings: a
  // 32 MiB table from a header alone; npy_fuzzer's 2 GiB limit found 2 x 211111111 of them).
  constexpr int64_t kMaxStrings = int64_t{1} << 30;
  constexpr int64_t kMaxEmptyStrings = int64_t{1} << 20;
  const int64_t cap = h.str_width == 0 ? kMaxEmptyStrings : kMaxStrings;
  int64_t n = 1;
  for (int64_t d : h.dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > cap) {
      return absl::InvalidArgumentError(
          absl::StrCat("npy: a string array of shape ", DimsString(h.dims), " has more than ",
                       h.str_width == 0 ? "2^20 elements of width 0" : "2^30 elements",
                       ", more than dynvm takes"));
    }
  }
  std::vector<std::string> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Element i in file order; Fortran order is mapped back to row-major below.
    const uint8_t* e = data + i * 4 * h.str_width;
    int64_t len = h.str_width;
    auto at = [&](int64_t k) {
      const uint8_t* b = e + 4 * k;
      return h.big_endian
                 ? (uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3])
                 : (uint32_t{b[3]} << 24 | uint32_t{b[2]} << 16 | uint32_t{b[1]} << 8 | b[0]);
    };
    while (len > 0 && at(len - 1) == 0) --len;
    std::string& out = values[static_cast<size_t>(i)];
    for (int64_t k = 0; k < len; ++k) {
      if (!AppendUtf8(at(k), out)) {
        return absl::InvalidArgumentError(absl::StrCat("npy: string element ", i, " holds 0x",
                                                       absl::Hex(at(k)),
                                                       ", which is not a Unicode scalar value"));
      }
    }
  }
  if (h.fortran_order && !OrderIsIrrelevant(h.dims)) {
    std::vector<std::string> row_major(values.size());
    const int rank = static_cast<int>(h.dims.size());
    for (int64_t i = 0; i < n; ++i) {  // i: row-major index; f: its column-major position
      int64_t rest = i, f = 0, stride = 1;
      int64_t idx[Tensor::kMaxRank];
      for (int d = rank - 1; d >= 0; --d) {
        idx[d] = rest % h.dims[d];
        rest /= h.dims[d];
      }
      for (int d = 0; d < rank; ++d) {
        f += idx[d] * stride;
        stride *= h.dims[d];
      }
      row_major[static_cast<size_t>(i)] = std::move(values[static_cast<size_t>(f)]);
    }
    values = std::move(row_major);
  }
  return StringTensor(h.dims, values);
}

// Copies the elements at `data` (laid out as `h` says) into a fresh heap tensor.
absl::StatusOr<Tensor> DecodeToHeap(const NpyHeader& h, const uint8_t* data) {
  if (h.dtype == DType::kString) return DecodeStrings(h, data);
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(h.dtype, h.dims));
  if (t.numel() == 0) return t;
  const int64_t esize = DTypeSize(h.dtype);
  auto* dst = static_cast<uint8_t*>(t.raw_data());
  if (!h.big_endian && (!h.fortran_order || OrderIsIrrelevant(h.dims))) {
    std::memcpy(dst, data, static_cast<size_t>(h.data_bytes));
  } else {
    const int rank = static_cast<int>(h.dims.size());
    int64_t strides[Tensor::kMaxRank];
    int64_t s = esize;  // no overflow: the partial products are at most data_bytes
    if (h.fortran_order) {
      for (int i = 0; i < rank; ++i) {
        strides[i] = h.dims[i] == 1 ? 0 : s;
        s *= h.dims[i];
      }
    } else {
      for (int i = rank - 1; i >= 0; --i) {
        strides[i] = h.dims[i] == 1 ? 0 : s;
        s *= h.dims[i];
      }
    }
    GatherStrided(data, h.dims, absl::MakeConstSpan(strides, rank), esize, h.big_endian, dst);
  }
  if (h.dtype == DType::kBool) {
    for (int64_t i = 0; i < h.data_bytes; ++i) dst[i] = dst[i] != 0;
  }
  return t;
}

absl::Status WithPath(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::Span<const uint8_t> bytes) {
  const size_t size = bytes.size();
  if (size > 0 && std::memcmp(bytes.data(), kMagic, std::min(size, kMagicBytes)) != 0) {
    return absl::InvalidArgumentError("npy: not an .npy file (bad magic)");
  }
  if (size < kMagicBytes + 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: file of ", size, " bytes is truncated before the format version"));
  }
  NpyHeader h;
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    return absl::UnimplementedError(
        absl::StrCat("npy: unsupported format version ", major, ".", minor));
  }
  h.major_version = major;
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicBytes + 2 + len_bytes;
  if (size < header_start) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: file of ", size, " bytes is truncated in the header length"));
  }
  uint32_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= uint32_t{bytes[8 + i]} << (8 * i);
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (size - header_start < header_len) {
    return absl::InvalidArgumentError(absl::StrCat("npy: file truncated: a header of ", header_len,
                                                   " bytes at offset ", header_start,
                                                   " but the file has ", size, " bytes"));
  }
  const absl::string_view text(reinterpret_cast<const char*>(bytes.data()) + header_start,
                               header_len);
  // Versions 1.0 and 2.0 are latin-1 and 3.0 is utf-8; everything we accept is ASCII.
  DYNVM_RETURN_IF_ERROR(HeaderParser(text, /*allow_long_suffix=*/major < 3).Parse(&h));
  h.data_offset = static_cast<int64_t>(header_start + header_len);
  int64_t n = 1;
  for (int64_t d : h.dims) {
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("npy: shape ", ShapeRepr(h.dims), " has more than 2^63 elements"));
    }
  }
  if (__builtin_mul_overflow(n, h.element_bytes(), &h.data_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("npy: shape ", ShapeRepr(h.dims), " of ",
                                                   DTypeName(h.dtype),
                                                   " needs more than 2^63 bytes"));
  }
  // An empty array may have huge other dims, e.g. (0, 2^40, 2^40). Its row-major strides
  // (products of the dims, counting 0 as 1) must still fit in 64 bits, in bytes too. A string
  // array counts at least 8 bytes an element: it is written back at least as '<U1' (4 bytes)
  // and held as a table of 8-byte entries (npy_fuzzer found a '<U0' shape whose strides fit
  // only at width 0).
  const int64_t min_element = h.dtype == DType::kString ? 8 : 1;
  int64_t extent = std::max<int64_t>(h.element_bytes(), min_element);
  for (int64_t d : h.dims) {
    if (__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent)) {
      return absl::InvalidArgumentError(absl::StrCat("npy: the strides of the empty shape ",
                                                     ShapeRepr(h.dims), " overflow 64 bits"));
    }
  }
  return h;
}

absl::StatusOr<Tensor> ParseNpy(absl::Span<const uint8_t> bytes) {
  DYNVM_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes));
  DYNVM_RETURN_IF_ERROR(CheckDataPresent(h, bytes.size()));
  return DecodeToHeap(h, bytes.data() + h.data_offset);
}

absl::StatusOr<Tensor> LoadNpy(const std::string& path, bool* zero_copy) {
  if (zero_copy != nullptr) *zero_copy = false;
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const schema::MappedFile> file,
                         schema::MappedFile::Open(path));
  const absl::Span<const uint8_t> bytes = (file)->bytes();
  absl::StatusOr<NpyHeader> h = ParseNpyHeader(bytes);
  if (!h.ok()) return WithPath(path, h.status());
  if (absl::Status s = CheckDataPresent(*h, bytes.size()); !s.ok()) return WithPath(path, s);

  const uint8_t* data = bytes.data() + h->data_offset;
  bool direct = h->dtype != DType::kString && !h->big_endian &&
                (!h->fortran_order || OrderIsIrrelevant(h->dims)) &&
                reinterpret_cast<uintptr_t>(data) % kDataAlignment == 0;
  if (direct && h->dtype == DType::kBool) {
    for (int64_t i = 0; i < h->data_bytes && direct; ++i) direct = data[i] <= 1;
  }
  if (!direct) {
    absl::StatusOr<Tensor> t = DecodeToHeap(*h, data);
    if (!t.ok()) return WithPath(path, t.status());
    return t;
  }
  // The storage owns a reference to the mapping; dropping its last view unmaps the file.
  StorageRef storage = Storage::Wrap(Storage::Kind::kExternal, const_cast<uint8_t*>(data),
                                     static_cast<size_t>(h->data_bytes), Device::kCPU,
                                     [keep = std::move(file)]() mutable { keep.reset(); });
  absl::StatusOr<Tensor> t = Tensor::View(std::move(storage), 0, h->dtype, h->dims);
  if (!t.ok()) return WithPath(path, t.status());
  if (zero_copy != nullptr) *zero_copy = true;
  return t;
}

namespace {
std::string HeaderWithDescr(absl::string_view descr, absl::Span<const int64_t> dims);
}  // namespace

absl::StatusOr<std::string> EncodeNpyHeader(DType dtype, absl::Span<const int64_t> dims) {
  absl::string_view code;
  if (dtype == DType::kBF16) {
    code = "u2";  // NumPy has no bfloat16; see ReinterpretAs.
  } else {
    for (const DescrCode& c : kDescrCodes) {
      if (c.dtype == dtype) code = c.code;
    }
    if (code.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("npy: cannot encode tensors of dtype ", DTypeName(dtype)));
    }
  }
  const int64_t esize = DTypeSize(dtype);
  return HeaderWithDescr(absl::StrCat(esize == 1 ? "|" : "<", code), dims);
}

namespace {

std::string HeaderWithDescr(absl::string_view descr, absl::Span<const int64_t> dims) {
  const std::string dict = absl::StrCat(
      "{'descr': '", descr, "', 'fortran_order': False, 'shape': ", ShapeRepr(dims), ", }");
  // As numpy.lib.format._wrap_header: pad with spaces and end with '\n' so the data starts at
  // a multiple of 64 (a full 64 bytes of padding when already aligned, as NumPy does).
  constexpr size_t kPrefixBytes = kMagicBytes + 2 + 2;
  const size_t hlen = dict.size() + 1;
  const size_t pad = kDataAlignment - (kPrefixBytes + hlen) % kDataAlignment;
  const size_t header_len = hlen + pad;
  // header_len fits: a dict of at most kMaxRank dims is far below 64 KiB.
  std::string out;
  out.append(kMagic, kMagicBytes);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_len & 0xFF));
  out.push_back(static_cast<char>(header_len >> 8));
  out.append(dict);
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

// A string tensor as '<Un': each element's code points, NUL-padded to the longest.
absl::StatusOr<std::string> EncodeStrings(const Tensor& t) {
  DYNVM_RETURN_IF_ERROR(ValidateStrings(t, "npy: string tensor"));
  std::vector<std::vector<uint32_t>> cps(static_cast<size_t>(t.numel()));
  size_t width = 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const absl::string_view s = StringAt(t, i);
    std::vector<uint32_t>& out = cps[static_cast<size_t>(i)];
    for (size_t k = 0; k < s.size();) {  // valid UTF-8 (checked above)
      const auto c = static_cast<unsigned char>(s[k]);
      const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (int j = 1; j < len; ++j) v = (v << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
      out.push_back(v);
      k += len;
    }
    width = std::max(width, out.size());
  }
  std::string out = HeaderWithDescr(absl::StrCat("<U", width), t.dims());
  const size_t start = out.size();
  out.resize(start + cps.size() * width * 4, '\0');
  for (size_t i = 0; i < cps.size(); ++i) {
    for (size_t k = 0; k < cps[i].size(); ++k) {
      const uint32_t v = cps[i][k];
      char* d = out.data() + start + (i * width + k) * 4;
      d[0] = static_cast<char>(v & 0xFF);
      d[1] = static_cast<char>((v >> 8) & 0xFF);
      d[2] = static_cast<char>((v >> 16) & 0xFF);
      d[3] = static_cast<char>(v >> 24);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> EncodeNpy(const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError("npy: cannot encode an undefined tensor");
  if (t.device() != Device::kCPU) {
    return absl::FailedPreconditionError(absl::StrCat(
        "npy: cannot encode a tensor on ", DeviceName(t.device()), "; copy it to the CPU first"));
  }
  if (t.dtype() == DType::kString) return EncodeStrings(t);
  DYNVM_ASSIGN_OR_RETURN(std::string header, EncodeNpyHeader(t.dtype(), t.dims()));
  const int64_t esize = DTypeSize(t.dtype());
  const size_t header_len = header.size();
  int64_t data_bytes;
  if (__builtin_mul_overflow(t.numel(), esize, &data_bytes) ||
      static_cast<uint64_t>(data_bytes) > std::string().max_size() - header_len) {
    return absl::ResourceExhaustedError(
        absl::StrCat("npy: tensor ", t.DebugString(), " is too large to encode"));
  }
  std::string out;
  out.reserve(header_len + static_cast<size_t>(data_bytes));
  out.append(header);
  const size_t data_start = out.size();
  out.resize(data_start + static_cast<size_t>(data_bytes));
  if (data_bytes == 0) return out;
  auto* dst = reinterpret_cast<uint8_t*>(out.data() + data_start);
  const auto* src = static_cast<const uint8_t*>(t.raw_data());
  if (t.is_contiguous()) {
    std::memcpy(dst, src, static_cast<size_t>(data_bytes));
  } else {
    int64_t strides[Tensor::kMaxRank];
    for (int i = 0; i < t.rank(); ++i) {
      // Tensor::View bounded (dim - 1) * stride * esize for every dim above 1.
      strides[i] = t.dim(i) == 1 ? 0 : t.stride(i) * esize;
    }
    GatherStrided(src, t.dims(), absl::MakeConstSpan(strides, t.rank()), esize,
                  /*swap=*/false, dst);
  }
  return out;
}

absl::Status SaveNpy(const std::string& path, const Tensor& t) {
  absl::StatusOr<std::string> bytes = EncodeNpy(t);
  if (!bytes.ok()) return WithPath(path, bytes.status());
  return schema::WriteStringToFile(path, *bytes);
}

absl::StatusOr<Tensor> CreateMappedNpy(const std::string& path, DType dtype,
                                       absl::Span<const int64_t> dims) {
  absl::StatusOr<std::string> header = EncodeNpyHeader(dtype, dims);
  if (!header.ok()) return WithPath(path, header.status());
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) {
      return WithPath(path, absl::InvalidArgumentError("npy: bad dims"));
    }
  }
  int64_t data_bytes;
  if (__builtin_mul_overflow(numel, DTypeSize(dtype), &data_bytes) ||
      data_bytes > std::numeric_limits<int64_t>::max() - static_cast<int64_t>(header->size())) {
    return WithPath(path, absl::ResourceExhaustedError("npy: array too large"));
  }
  const size_t total = header->size() + static_cast<size_t>(data_bytes);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(total)) == 0) {
    base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", path, " for writing: ", std::strerror(err)));
  }
  auto* bytes = static_cast<uint8_t*>(base);
  std::memcpy(bytes, header->data(), header->size());
  StorageRef storage = Storage::Wrap(Storage::Kind::kExternal, bytes + header->size(),
                                     static_cast<size_t>(data_bytes), Device::kCPU,
                                     [base, total]() { ::munmap(base, total); });
  absl::StatusOr<Tensor> t = Tensor::View(std::move(storage), 0, dtype, dims);
  if (!t.ok()) return WithPath(path, t.status());
  return t;
}

absl::StatusOr<Tensor> ReinterpretAs(const Tensor& t, DType dtype) {
  if (!t.defined()) {
    return absl::InvalidArgumentError("npy: cannot reinterpret an undefined tensor");
  }
  if (dtype == t.dtype()) return t;
  if (t.dtype() == DType::kString || dtype == DType::kString ||
      DTypeSize(t.dtype()) != DTypeSize(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: cannot reinterpret ", t.DebugString(), " as ", DTypeName(dtype)));
  }
  if (dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("npy: cannot reinterpret ", t.DebugString(),
                                                   " as bool: its bytes may be other than 0/1"));
  }
  return Tensor::View(t.storage(), t.byte_offset(), dtype, t.dims(), t.strides());
}

}  // namespace dynvm::npy
