// Status propagation macros, the one copy for the whole project.
//
//   DYNVM_RETURN_IF_ERROR(expr);                       // returns expr's status if not OK
//   DYNVM_RETURN_IF_ERROR(expr, "loading ", path);     // ... with "loading <path>: " before its
//   message DYNVM_ASSIGN_OR_RETURN(auto x, MakeX());           // x = *MakeX(), or returns its
//   status DYNVM_ASSIGN_OR_RETURN(y, MakeY(), "node ", name); // assigns an existing y; annotated
//
// The optional trailing arguments are absl::StrCat'ed and put before the original message
// ("<annotation>: <message>"); the status code is kept. They are evaluated only on error.
// The left-hand side of DYNVM_ASSIGN_OR_RETURN must not contain an unparenthesized comma.
#ifndef DYNVM_COMMON_STATUS_MACROS_H_
#define DYNVM_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dynvm::internal {

// `status` with `prefix: ` before its message, same code (payloads are not kept).
inline absl::Status Annotate(absl::Status status, absl::string_view prefix) {
  if (status.ok() || prefix.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}
inline absl::Status Annotate(absl::Status status) { return status; }

}  // namespace dynvm::internal

#define DYNVM_STATUS_CONCAT_INNER_(a, b) a##b
#define DYNVM_STATUS_CONCAT_(a, b) DYNVM_STATUS_CONCAT_INNER_(a, b)

#define DYNVM_RETURN_IF_ERROR(expr, ...)                                                 \
  do {                                                                                   \
    if (::absl::Status dynvm_status_ = (expr); !dynvm_status_.ok()) {                    \
      return ::dynvm::internal::Annotate(std::move(dynvm_status_)                        \
                                             __VA_OPT__(, ::absl::StrCat(__VA_ARGS__))); \
    }                                                                                    \
  } while (0)

#define DYNVM_ASSIGN_OR_RETURN(lhs, expr, ...)                                       \
  DYNVM_ASSIGN_OR_RETURN_IMPL_(DYNVM_STATUS_CONCAT_(dynvm_statusor_, __LINE__), lhs, \
                               expr __VA_OPT__(, ) __VA_ARGS__)

#define DYNVM_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr, ...)                              \
  auto var = (expr);                                                                   \
  if (!var.ok()) {                                                                     \
    return ::dynvm::internal::Annotate(std::move(var).status()                         \
                                           __VA_OPT__(, ::absl::StrCat(__VA_ARGS__))); \
  }                                                                                    \
  lhs = *std::move(var)

#endif  // DYNVM_COMMON_STATUS_MACROS_H_
