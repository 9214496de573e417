// GatheredConstants on assembled programs: which uses keep a constant a gathered table.
#include "vm/gathered_constants.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "isa/verifier.h"
#include "schema/executable_generated.h"

namespace dynvm {
namespace {

// c0 is gathered (axis 0, runtime indices), c9 too (axis -2 of a rank-2 table), c10 in a callee;
// every other table has a use that reads it otherwise: a gather along axis 1 (c1), an Add
// besides its gather (c2), constant indices (c3, the indices, and c4, the table), a return
// (c5), a call argument (c6), a tensor attribute (c8). c7 is not used. c11 is gathered through a
// register also written by a mov. c12, a string table, stays in the copy (the loader checks
// its offset table once, at load).
constexpr char kProgram[] = R"(
.const f32 [4,2] name="table" values:[0, 1, 2, 3, 4, 5, 6, 7]
.const f32 [4,2] name="axis1" values:[0, 1, 2, 3, 4, 5, 6, 7]
.const f32 [4,2] name="also_added" values:[0, 1, 2, 3, 4, 5, 6, 8]
.const i64 [2] name="const_ids" values:[0, 1]
.const f32 [4,2] name="by_const_ids" values:[0, 1, 2, 3, 4, 5, 6, 9]
.const f32 [4,2] name="returned" values:[0, 1, 2, 3, 4, 5, 6, 10]
.const f32 [4,2] name="passed" values:[0, 1, 2, 3, 4, 5, 6, 11]
.const f32 [4,2] name="unused" values:[0, 1, 2, 3, 4, 5, 6, 12]
.const f32 [4,2] name="attr" values:[0, 1, 2, 3, 4, 5, 6, 13]
.const f32 [4,2] name="neg_axis" values:[0, 1, 2, 3, 4, 5, 6, 14]
.const f32 [4,2] name="in_callee" values:[0, 1, 2, 3, 4, 5, 6, 15]
.const f32 [4,2] name="moved" values:[0, 1, 2, 3, 4, 5, 6, 16]
.const string [1] name="strings" hex:00000000000000000000000000000000
.kernel "Gather" in(f32, i64) out(dyn:f32)
.kernel "Gather" in(f32, i64) out(dyn:f32) attrs(axis=i:1)
.kernel "Add" in(f32, f32) out(dyn:f32)
.kernel "Gather" in(f32, i64) out(dyn:f32) attrs(axis=i:-2)
.kernel "Gather" in(f32, i64) out(dyn:f32) attrs(unused=t:c8)
.kernel "Gather" in(string, i64) out(dyn:string)

.function callee
  .params 2 0
  .oregs tensor:f32 tensor:i64 tensor:f32 tensor:f32
  load_const %o2, c10
  invoke k0, #0, (%o2, %o1), (%o3)
  ret (), ()
.end

.function main
  .params 1 0
  .oregs tensor:i64 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:i64 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:f32 tensor:string tensor:string
  .oresults tensor:f32
  load_const %o1, c0
  invoke k0, #0, (%o1, %o0), (%o2)
  load_const %o3, c1
  invoke k1, #1, (%o3, %o0), (%o4)
  load_const %o5, c2
  invoke k0, #2, (%o5, %o0), (%o6)
  invoke k2, #3, (%o5, %o6), (%o7)
  load_const %o8, c3
  load_const %o9, c4
  invoke k0, #4, (%o9, %o8), (%o10)
  load_const %o11, c5
  invoke k0, #5, (%o11, %o0), (%o12)
  load_const %o13, c6
  invoke k0, #6, (%o13, %o0), (%o14)
  call @callee, (%o13, %o0), (), (), ()
  load_const %o15, c8
  invoke k4, #7, (%o15, %o0), (%o16)
  load_const %o17, c9
  invoke k3, #8, (%o17, %o0), (%o18)
  load_const %o19, c11
  mov %o19, %o2
  invoke k0, #9, (%o19, %o0), (%o20)
  load_const %o22, c12
  invoke k5, #10, (%o22, %o0), (%o23)
  ret (%o11), ()
.end
)";

TEST(GatheredConstantsTest, OnlyTablesReadByRowGathersAlone) {
  absl::StatusOr<std::string> bytes = isa::AssembleToBytes(kProgram);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<isa::VerifiedFile> v = isa::VerifyFile(
      {reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, isa::VerifyLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  const std::vector<bool> got = GatheredConstants(*v->executable);
  const std::vector<bool> want = {true,  false, false, false, false, false, false,
                                  false, false, true,  true,  false, false};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace dynvm
