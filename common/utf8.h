// Public API. UTF-8 validation for string tensors (docs/strings.md): every string that enters
// the VM (a bound input, a constant, a number formatted by Cast) is valid UTF-8.
#ifndef DYNVM_COMMON_UTF8_H_
#define DYNVM_COMMON_UTF8_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dynvm {

// The byte offset of the first invalid sequence in `s`, or -1 when `s` is valid UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
inline int64_t InvalidUtf8Offset(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return -1;
}

}  // namespace dynvm

#endif  // DYNVM_COMMON_UTF8_H_
