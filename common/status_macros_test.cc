#include "common/status_macros.h"

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace dynvm {
namespace {

int evaluated = 0;

absl::Status Fails(absl::StatusCode code) { return absl::Status(code, "inner"); }
absl::StatusOr<int> Value(bool ok) {
  if (!ok) return absl::NotFoundError("no value");
  return 7;
}
absl::StatusOr<std::unique_ptr<int>> MoveOnly() { return std::make_unique<int>(3); }
std::string Costly() {
  ++evaluated;
  return "costly";
}

absl::Status Plain(absl::StatusCode code) {
  DYNVM_RETURN_IF_ERROR(Fails(code));
  return absl::OkStatus();
}
absl::Status Annotated(absl::StatusCode code) {
  DYNVM_RETURN_IF_ERROR(Fails(code), "node ", 3, " (", Costly(), ")");
  return absl::OkStatus();
}
absl::StatusOr<int> Assign(bool ok) {
  DYNVM_ASSIGN_OR_RETURN(int v, Value(ok));
  DYNVM_ASSIGN_OR_RETURN(auto p, MoveOnly());
  return v + *p;
}
absl::StatusOr<int> AssignAnnotated(bool ok) {
  int v = 0;
  DYNVM_ASSIGN_OR_RETURN(v, Value(ok), "reading ", "x");
  return v;
}

TEST(StatusMacros, ReturnIfErrorPassesTheStatusOn) {
  EXPECT_TRUE(Plain(absl::StatusCode::kOk).ok());
  absl::Status s = Plain(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "inner");
}

TEST(StatusMacros, AnnotationKeepsTheCodeAndIsEvaluatedOnlyOnError) {
  evaluated = 0;
  EXPECT_TRUE(Annotated(absl::StatusCode::kOk).ok());
  EXPECT_EQ(evaluated, 0);
  absl::Status s = Annotated(absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "node 3 (costly): inner");
}

TEST(StatusMacros, AssignOrReturn) {
  EXPECT_EQ(*Assign(true), 10);
  EXPECT_EQ(Assign(false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*AssignAnnotated(true), 7);
  absl::Status s = AssignAnnotated(false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "reading x: no value");
}

}  // namespace
}  // namespace dynvm
