; Growing values: alloc_growable and append, in place and by growth.
.string "grow"
.const f32 [1,2] values:[1, 2]

.function test_append_in_place_along_axis0
  .params 0 0
  .sregs i64 f64 f64 bool i64 i64
  .oregs tensor:f32 storage tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 0, 8, [0, 2]
  alloc_storage %o1, 8, cpu
  alloc_tensor %o2, %o1, 0, f32, [1, 2]
  loop %s0, 5
    i2f %s1, %s0
    write %o2, 0, %s1
    write %o2, 1, %s1
    append %o0, %o2, 0
  endloop
  dim %s4, %o0, 0
  const_i %s5, 5
  eq_i %s3, %s4, %s5
  assert %s3, str0
  ; row 3 holds 3.0
  read_f %s1, %o0, 7
  const_f %s2, 3
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ret (), ()
.end

.function test_append_grows_past_capacity
  .params 0 0
  .sregs i64 f64 f64 bool i64 i64
  .oregs tensor:f32 tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 0, 1, [0, 2]
  load_const %o1, c0
  loop %s0, 100
    append %o0, %o1, 0
  endloop
  dim %s4, %o0, 0
  const_i %s5, 100
  eq_i %s3, %s4, %s5
  assert %s3, str0
  read_f %s1, %o0, 199
  const_f %s2, 2
  eq_f %s3, %s1, %s2
  assert %s3, str0
  read_f %s1, %o0, 0
  const_f %s2, 1
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ret (), ()
.end

.function test_append_to_constant_copies
  .params 0 0
  .sregs f64 f64 bool i64 i64
  .oregs tensor:f32 tensor:f32 tensor:f32
  .entry
  load_const %o0, c0
  load_const %o1, c0
  mov %o2, %o0
  append %o2, %o1, 0
  dim %s3, %o2, 0
  const_i %s4, 2
  eq_i %s2, %s3, %s4
  assert %s2, str0
  ; the constant itself is unchanged
  dim %s3, %o0, 0
  const_i %s4, 1
  eq_i %s2, %s3, %s4
  assert %s2, str0
  read_f %s0, %o2, 3
  const_f %s1, 2
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end

.function test_append_along_axis1_like_a_kv_cache
  .params 0 0
  .sregs i64 f64 f64 bool i64 i64 i64
  .oregs tensor:f32 storage tensor:f32
  .entry
  ; cache [1, T, 4] growing along axis 1 with room for 3; five steps force one growth
  alloc_growable %o0, f32, cpu, 1, 3, [1, 0, 4]
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [1, 1, 4]
  loop %s0, 5
    loop %s6, 4
      mul_i %s4, %s0, %s0
      add_i %s4, %s4, %s6
      i2f %s1, %s4
      write %o2, %s6, %s1
    endloop
    append %o0, %o2, 1
  endloop
  dim %s4, %o0, 1
  const_i %s5, 5
  eq_i %s3, %s4, %s5
  assert %s3, str0
  ; element [0, 4, 3] = 4*4 + 3 = 19 at flat index 19
  read_f %s1, %o0, 19
  const_f %s2, 19
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ; element [0, 2, 1] = 4 + 1 = 5 at flat index 9
  read_f %s1, %o0, 9
  const_f %s2, 5
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ret (), ()
.end

.function test_two_appends_to_one_view_do_not_clobber
  .params 0 0
  .sregs f64 f64 bool
  .oregs tensor:f32 tensor:f32 storage tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 0, 8, [0]
  mov %o1, %o0
  alloc_storage %o2, 4, cpu
  alloc_tensor %o3, %o2, 0, f32, [1]
  const_f %s0, 1
  write %o3, 0, %s0
  append %o0, %o3, 0
  const_f %s0, 2
  write %o3, 0, %s0
  ; %o1 still ends where the storage's frontier was before: this append must copy
  append %o1, %o3, 0
  read_f %s0, %o0, 0
  const_f %s1, 1
  eq_f %s2, %s0, %s1
  assert %s2, str0
  read_f %s0, %o1, 0
  const_f %s1, 2
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end

; expect-error fail_append_shape_mismatch: other dims differ
.function fail_append_shape_mismatch
  .params 0 0
  .oregs tensor:f32 tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 0, 8, [0, 3]
  load_const %o1, c0
  append %o0, %o1, 0
  ret (), ()
.end

; extend: a growable [2, 1] (capacity 4 along axis 1) lengthened to 3 in place: the old rows
; stay where they are (the capacity's strides), the view shares the storage with the old one;
; then to 6, past the capacity: a new storage holding the old rows.
.function test_extend_in_place_then_grows
  .params 0 0
  .sregs f64 f64 bool i64 i64
  .oregs tensor:f32 tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 1, 4, [2, 1]
  const_f %s0, 5
  write %o0, 1, %s0
  mov %o1, %o0
  extend %o0, 1, 3
  dim %s3, %o0, 1
  const_i %s4, 3
  eq_i %s2, %s3, %s4
  assert %s2, str0
  ; [1, 0] of the extended view is the old [1, 0]
  read_f %s1, %o0, 3
  eq_f %s2, %s1, %s0
  assert %s2, str0
  ; in place: a write through the new view is seen through the old one
  const_f %s0, 9
  write %o0, 0, %s0
  read_f %s1, %o1, 0
  eq_f %s2, %s1, %s0
  assert %s2, str0
  extend %o0, 1, 6
  dim %s3, %o0, 1
  const_i %s4, 6
  eq_i %s2, %s3, %s4
  assert %s2, str0
  read_f %s1, %o0, 0
  eq_f %s2, %s1, %s0
  assert %s2, str0
  const_f %s0, 5
  read_f %s1, %o0, 6
  eq_f %s2, %s1, %s0
  assert %s2, str0
  ; grown: a new storage, the old view no longer shares it
  const_f %s0, 11
  write %o0, 0, %s0
  read_f %s1, %o1, 0
  eq_f %s2, %s1, %s0
  not %s2, %s2
  assert %s2, str0
  ret (), ()
.end

; expect-error fail_extend_shorter: shorter than it is
.function fail_extend_shorter
  .params 0 0
  .oregs tensor:f32
  .entry
  alloc_growable %o0, f32, cpu, 0, 4, [2]
  extend %o0, 0, 1
  ret (), ()
.end
