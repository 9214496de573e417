; Calls with several results over both banks, and recursion.
.string "call results"
.string "fib"

; returns (a + b, a * b, a < b)
.function sum_product
  .params 0 2
  .sregs i64 i64 i64 i64 bool
  .sresults i64 i64 bool
  add_i %s2, %s0, %s1
  mul_i %s3, %s0, %s1
  lt_i %s4, %s0, %s1
  ret (), (%s2, %s3, %s4)
.end

.function fib
  .params 0 1
  .sregs i64 i64 bool i64 i64 i64
  .sresults i64
  const_i %s1, 2
  lt_i %s2, %s0, %s1
  if %s2
    ret (), (%s0)
  endif
  addimm_i %s3, %s0, -1
  call @fib, (), (%s3), (), (%s4)
  addimm_i %s3, %s0, -2
  call @fib, (), (%s3), (), (%s5)
  add_i %s4, %s4, %s5
  ret (), (%s4)
.end

.function forever
  .params 0 1
  .sregs i64 i64
  .sresults i64
  call @forever, (), (%s0), (), (%s1)
  ret (), (%s1)
.end

.function test_several_results
  .params 0 0
  .sregs i64 i64 i64 i64 bool bool i64
  .entry
  const_i %s0, 3
  const_i %s1, 4
  call @sum_product, (), (%s0, %s1), (), (%s2, %s3, %s4)
  const_i %s6, 7
  eq_i %s5, %s2, %s6
  assert %s5, str0
  const_i %s6, 12
  eq_i %s5, %s3, %s6
  assert %s5, str0
  assert %s4, str0
  ret (), ()
.end

.function test_recursion
  .params 0 0
  .sregs i64 i64 bool i64
  .entry
  const_i %s0, 15
  call @fib, (), (%s0), (), (%s1)
  const_i %s3, 610
  eq_i %s2, %s1, %s3
  assert %s2, str1
  ret (), ()
.end

; expect-error fail_call_depth: call depth limit
.function fail_call_depth
  .params 0 0
  .sregs i64 i64
  .entry
  const_i %s0, 1
  call @forever, (), (%s0), (), (%s1)
  ret (), ()
.end

.function test_calls_work_after_depth_failure
  .params 0 0
  .sregs i64 i64 bool i64
  .entry
  const_i %s0, 10
  call @fib, (), (%s0), (), (%s1)
  const_i %s3, 55
  eq_i %s2, %s1, %s3
  assert %s2, str1
  ret (), ()
.end
