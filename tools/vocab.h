// The character vocabulary of text models (tools/lm/vocab.txt: one Unicode code point per line,
// line i holding token id i), shared by vm-run (--vocab, --text) and dynvm-server (generate).
#ifndef DYNVM_TOOLS_VOCAB_H_
#define DYNVM_TOOLS_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dynvm::cli {

// Parses `text`, the contents of vocabulary file `path` (named in errors): one decimal code point
// (0 to 0x10FFFF) per non-blank line, surrounding whitespace ignored. Empty vocabularies are
// refused.
absl::StatusOr<std::vector<uint32_t>> ParseVocab(absl::string_view text, absl::string_view path);
// Reads and parses the vocabulary file at `path` (NotFound when it cannot be opened).
absl::StatusOr<std::vector<uint32_t>> ReadVocab(const std::string& path);

// UTF-8 of code point `cp`.
std::string Utf8(uint32_t cp);

// Decodes UTF-8 `text` into token ids; every character must be in `vocab`. `what` names the text
// in errors ("text_input is not valid UTF-8", "character 'X' of text_input is not in the
// vocabulary", "text_input is empty").
absl::StatusOr<std::vector<int64_t>> EncodeText(absl::string_view text,
                                                const std::vector<uint32_t>& vocab,
                                                absl::string_view what);

}  // namespace dynvm::cli

#endif  // DYNVM_TOOLS_VOCAB_H_
