; Scalar constants, arithmetic, comparisons and conversions.
.string "assertion failed"
.string "i64 arithmetic"
.string "floor division"
.string "f64 arithmetic"
.string "comparisons"
.string "conversions"

.function test_i64_arithmetic
  .params 0 0
  .sregs i64 i64 i64 i64 bool
  .entry
  const_i %s0, 7
  const_i %s1, -3
  add_i %s2, %s0, %s1
  const_i %s3, 4
  eq_i %s4, %s2, %s3
  assert %s4, str1
  sub_i %s2, %s0, %s1
  const_i %s3, 10
  eq_i %s4, %s2, %s3
  assert %s4, str1
  mul_i %s2, %s0, %s1
  const_i %s3, -21
  eq_i %s4, %s2, %s3
  assert %s4, str1
  addimm_i %s2, %s0, 100
  const_i %s3, 107
  eq_i %s4, %s2, %s3
  assert %s4, str1
  neg_i %s2, %s0
  const_i %s3, -7
  eq_i %s4, %s2, %s3
  assert %s4, str1
  min_i %s2, %s0, %s1
  eq_i %s4, %s2, %s1
  assert %s4, str1
  max_i %s2, %s0, %s1
  eq_i %s4, %s2, %s0
  assert %s4, str1
  ; wrapping, not undefined behaviour
  const_i %s0, 9223372036854775807
  const_i %s1, 1
  add_i %s2, %s0, %s1
  const_i %s3, -9223372036854775808
  eq_i %s4, %s2, %s3
  assert %s4, str1
  ret (), ()
.end

.function test_floor_division
  .params 0 0
  .sregs i64 i64 i64 i64 bool
  .entry
  const_i %s0, -7
  const_i %s1, 2
  div_i %s2, %s0, %s1
  const_i %s3, -4
  eq_i %s4, %s2, %s3
  assert %s4, str2
  mod_i %s2, %s0, %s1
  const_i %s3, 1
  eq_i %s4, %s2, %s3
  assert %s4, str2
  const_i %s0, 7
  const_i %s1, -2
  div_i %s2, %s0, %s1
  const_i %s3, -4
  eq_i %s4, %s2, %s3
  assert %s4, str2
  mod_i %s2, %s0, %s1
  const_i %s3, -1
  eq_i %s4, %s2, %s3
  assert %s4, str2
  ret (), ()
.end

; expect-error fail_div_by_zero: division by zero
.function fail_div_by_zero
  .params 0 0
  .sregs i64 i64 i64
  .entry
  const_i %s0, 1
  const_i %s1, 0
  div_i %s2, %s0, %s1
  ret (), ()
.end

; expect-error fail_div_overflow: overflows
.function fail_div_overflow
  .params 0 0
  .sregs i64 i64 i64
  .entry
  const_i %s0, -9223372036854775808
  const_i %s1, -1
  div_i %s2, %s0, %s1
  ret (), ()
.end

.function test_f64
  .params 0 0
  .sregs f64 f64 f64 f64 bool
  .entry
  const_f %s0, 1.5
  const_f %s1, 0.25
  add_f %s2, %s0, %s1
  const_f %s3, 1.75
  eq_f %s4, %s2, %s3
  assert %s4, str3
  sub_f %s2, %s0, %s1
  const_f %s3, 1.25
  eq_f %s4, %s2, %s3
  assert %s4, str3
  mul_f %s2, %s0, %s1
  const_f %s3, 0.375
  eq_f %s4, %s2, %s3
  assert %s4, str3
  div_f %s2, %s0, %s1
  const_f %s3, 6
  eq_f %s4, %s2, %s3
  assert %s4, str3
  min_f %s2, %s0, %s1
  eq_f %s4, %s2, %s1
  assert %s4, str3
  max_f %s2, %s0, %s1
  eq_f %s4, %s2, %s0
  assert %s4, str3
  neg_f %s2, %s0
  const_f %s3, -1.5
  eq_f %s4, %s2, %s3
  assert %s4, str3
  ; IEEE: 1/0 is +inf, and inf > 1e308
  const_f %s1, 0
  div_f %s2, %s0, %s1
  const_f %s3, 1e308
  lt_f %s4, %s3, %s2
  assert %s4, str3
  ; NaN compares unequal to itself (0x7ff8000000000000 is a quiet NaN)
  const_f %s2, 0x7ff8000000000000
  eq_f %s4, %s2, %s2
  not %s4, %s4
  assert %s4, str3
  ret (), ()
.end

.function test_comparisons_and_bools
  .params 0 0
  .sregs i64 i64 bool bool bool
  .entry
  const_i %s0, 3
  const_i %s1, 5
  lt_i %s2, %s0, %s1
  assert %s2, str4
  le_i %s2, %s0, %s0
  assert %s2, str4
  ne_i %s2, %s0, %s1
  assert %s2, str4
  lt_i %s3, %s1, %s0
  not %s3, %s3
  assert %s3, str4
  const_b %s2, 1
  const_b %s3, 0
  and %s4, %s2, %s3
  not %s4, %s4
  assert %s4, str4
  or %s4, %s2, %s3
  assert %s4, str4
  xor %s4, %s2, %s3
  assert %s4, str4
  xor %s4, %s2, %s2
  not %s4, %s4
  assert %s4, str4
  ret (), ()
.end

.function test_conversions_and_select
  .params 0 0
  .sregs i64 f64 i64 bool i64 f64
  .entry
  const_i %s0, -5
  i2f %s1, %s0
  f2i %s2, %s1
  eq_i %s3, %s0, %s2
  assert %s3, str5
  const_f %s1, 2.9
  f2i %s2, %s1
  const_i %s4, 2
  eq_i %s3, %s2, %s4
  assert %s3, str5
  ; saturation and NaN
  const_f %s1, 1e300
  f2i %s2, %s1
  const_i %s4, 9223372036854775807
  eq_i %s3, %s2, %s4
  assert %s3, str5
  const_f %s1, 0x7ff8000000000000
  f2i %s2, %s1
  const_i %s4, 0
  eq_i %s3, %s2, %s4
  assert %s3, str5
  const_b %s3, 1
  b2i %s2, %s3
  const_i %s4, 1
  eq_i %s3, %s2, %s4
  assert %s3, str5
  const_b %s3, 0
  const_i %s0, 10
  const_i %s2, 20
  select_i %s4, %s3, %s0, %s2
  eq_i %s3, %s4, %s2
  assert %s3, str5
  const_b %s3, 1
  const_f %s1, 1.5
  const_f %s5, 2.5
  select_f %s1, %s3, %s5, %s1
  eq_f %s3, %s1, %s5
  assert %s3, str5
  mov_s %s4, %s0
  pmove_s (%s0, %s2), (%s2, %s0)
  eq_i %s3, %s2, %s4
  assert %s3, str5
  ret (), ()
.end

; expect-error fail_assert: assertion failed
.function fail_assert
  .params 0 0
  .sregs bool
  .entry
  const_b %s0, 0
  assert %s0, str0
  ret (), ()
.end

; expect-error fail_message: comparisons
.function fail_message
  .params 0 0
  .entry
  fail str4
.end

.function test_after_failures_vm_still_works
  .params 0 0
  .sregs i64 bool
  .entry
  const_i %s0, 1
  nop
  eq_i %s1, %s0, %s0
  assert %s1, str0
  ret (), ()
.end
