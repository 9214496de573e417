; Structured control flow: if/else, loops, nested loops, break, continue, early exit.
.string "if/else"
.string "loop"
.string "nested"
.string "break"

.function test_if_else_both_define
  .params 0 0
  .sregs bool i64 bool i64
  .entry
  const_b %s0, 0
  if %s0
    const_i %s1, 1
  else
    const_i %s1, 2
  endif
  ; %s1 is defined on both paths, so reading it verifies
  const_i %s3, 2
  eq_i %s2, %s1, %s3
  assert %s2, str0
  const_b %s0, 1
  if %s0
    const_i %s1, 5
  endif
  const_i %s3, 5
  eq_i %s2, %s1, %s3
  assert %s2, str0
  ret (), ()
.end

.function test_loop_sum
  .params 0 0
  .sregs i64 i64 i64 bool
  .entry
  ; sum of 0..99 = 4950
  const_i %s1, 0
  loop %s0, 100
    add_i %s1, %s1, %s0
  endloop
  const_i %s2, 4950
  eq_i %s3, %s1, %s2
  assert %s3, str1
  ; the counter ends at the trip count
  const_i %s2, 100
  eq_i %s3, %s0, %s2
  assert %s3, str1
  ret (), ()
.end

.function test_zero_trip_loop
  .params 0 0
  .sregs i64 i64 i64 bool
  .entry
  const_i %s1, 7
  const_i %s2, 0
  loop %s0, %s2
    const_i %s1, 99
  endloop
  const_i %s2, 7
  eq_i %s3, %s1, %s2
  assert %s3, str1
  ret (), ()
.end

.function test_nested_loops
  .params 0 0
  .sregs i64 i64 i64 i64 bool i64
  .entry
  ; count pairs (i, j) with j <= i for i, j < 10: 55
  const_i %s2, 0
  loop %s0, 10
    loop %s1, 10
      le_i %s4, %s1, %s0
      if %s4
        addimm_i %s2, %s2, 1
      endif
    endloop
  endloop
  const_i %s3, 55
  eq_i %s4, %s2, %s3
  assert %s4, str2
  ret (), ()
.end

.function test_break_and_continue
  .params 0 0
  .sregs i64 i64 i64 bool i64 i64
  .entry
  ; sum odd i < 20, stop when i reaches 15: 1+3+...+13 = 49
  const_i %s1, 0
  const_i %s4, 2
  const_i %s5, 15
  loop %s0, 1000
    eq_i %s3, %s0, %s5
    break_if %s3
    mod_i %s2, %s0, %s4
    eq_i %s3, %s2, %s4
    ; %s2 is 0 or 1, never 2: exercise break_unless with a true condition
    not %s3, %s3
    break_unless %s3
    mod_i %s2, %s0, %s4
    const_i %s5, 0
    eq_i %s3, %s2, %s5
    const_i %s5, 15
    if %s3
      continue
    endif
    add_i %s1, %s1, %s0
  endloop
  const_i %s2, 49
  eq_i %s3, %s1, %s2
  assert %s3, str3
  ; the loop was left by break_if at 15
  eq_i %s3, %s0, %s5
  assert %s3, str3
  loop %s0, 5
    break
  endloop
  ret (), ()
.end

.function test_early_exit_from_loop
  .params 0 0
  .sregs i64 bool i64
  .entry
  const_i %s2, 3
  loop %s0, 10
    eq_i %s1, %s0, %s2
    if %s1
      ret (), ()
    endif
  endloop
  fail str1
.end

; expect-error fail_iteration_limit: iteration limit
.function fail_iteration_limit
  .params 0 0
  .sregs i64 i64
  .entry
  const_i %s1, 9223372036854775807
  loop %s0, %s1
    nop
  endloop
  ret (), ()
.end

.function test_if_inside_loop_defines_carried
  .params 0 0
  .sregs i64 i64 bool i64 i64
  .entry
  ; x = 1; for 10 iterations: if i is even x = x * 2 else x = x + 1
  const_i %s1, 1
  const_i %s3, 2
  loop %s0, 10
    mod_i %s4, %s0, %s3
    const_i %s3, 0
    eq_i %s2, %s4, %s3
    const_i %s3, 2
    if %s2
      mul_i %s1, %s1, %s3
    else
      addimm_i %s1, %s1, 1
    endif
  endloop
  ; 1 ->2 ->3 ->6 ->7 ->14 ->15 ->30 ->31 ->62 ->63
  const_i %s3, 63
  eq_i %s2, %s1, %s3
  assert %s2, str0
  ret (), ()
.end
