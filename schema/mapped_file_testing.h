// Test-only helpers for MappedFile (not installed, not public API): used by
// schema/mapped_file_test.cc and tests/weights_test.cc.
#ifndef DYNVM_SCHEMA_MAPPED_FILE_TESTING_H_
#define DYNVM_SCHEMA_MAPPED_FILE_TESTING_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace dynvm::schema {

// The /proc/self/maps line of the mapping that holds `p` ("" if none): a file mapping names its
// file at the end; anonymous memory names none.
inline std::string MappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return line;
  }
  return "";
}

}  // namespace dynvm::schema

#endif  // DYNVM_SCHEMA_MAPPED_FILE_TESTING_H_
