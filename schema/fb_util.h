// Small helpers for reading flatbuffers fields with abseil types.
#ifndef DYNVM_SCHEMA_FB_UTIL_H_
#define DYNVM_SCHEMA_FB_UTIL_H_

#include "absl/strings/string_view.h"
#include "flatbuffers/flatbuffers.h"

namespace dynvm::schema {

// The bytes of a flatbuffers string, or "" when the field is absent.
inline absl::string_view Sv(const flatbuffers::String* s) {
  return s == nullptr ? absl::string_view() : absl::string_view(s->c_str(), s->size());
}

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_FB_UTIL_H_
