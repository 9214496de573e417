#include "tools/vocab.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dynvm::cli {

absl::StatusOr<std::vector<uint32_t>> ParseVocab(absl::string_view text, absl::string_view path) {
  std::vector<uint32_t> vocab;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    int64_t cp;
    if (!absl::SimpleAtoi(line, &cp) || cp < 0 || cp > 0x10FFFF) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", line_no, ": expected a Unicode code point"));
    }
    vocab.push_back(static_cast<uint32_t>(cp));
  }
  if (vocab.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return vocab;
}

absl::StatusOr<std::vector<uint32_t>> ReadVocab(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open vocabulary ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseVocab(ss.str(), path);
}

std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> EncodeText(absl::string_view text,
                                                const std::vector<uint32_t>& vocab,
                                                absl::string_view what) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is not valid UTF-8"));
    }
    uint32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (size_t k = 1; k < n; ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    i += n;
    auto it = std::find(vocab.begin(), vocab.end(), cp);
    if (it == vocab.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("character '", Utf8(cp), "' of ", what, " is not in the vocabulary"));
    }
    ids.push_back(it - vocab.begin());
  }
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  return ids;
}

}  // namespace dynvm::cli
