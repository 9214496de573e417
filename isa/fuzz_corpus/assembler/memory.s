; Storages, views, constants, element access, reshape, copy, kill.
.string "memory"
.const f32 [2,3] name="w" weight values:[1, 2, 3, 4, 5, 6]

.function test_load_const_and_read
  .params 0 0
  .sregs f64 f64 bool i64 i64
  .oregs tensor:f32
  .entry
  load_const %o0, c0
  read_f %s0, %o0, 4
  const_f %s1, 5
  eq_f %s2, %s0, %s1
  assert %s2, str0
  dim %s3, %o0, 1
  const_i %s4, 3
  eq_i %s2, %s3, %s4
  assert %s2, str0
  rank %s3, %o0
  const_i %s4, 2
  eq_i %s2, %s3, %s4
  assert %s2, str0
  numel %s3, %o0
  const_i %s4, 6
  eq_i %s2, %s3, %s4
  assert %s2, str0
  ret (), ()
.end

.function test_alloc_write_read
  .params 0 0
  .sregs i64 f64 f64 f64 bool i64
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 64, cpu
  const_i %s5, 4
  alloc_tensor %o1, %o0, 0, f32, [%s5]
  loop %s0, 4
    i2f %s1, %s0
    add_f %s1, %s1, %s1
    write %o1, %s0, %s1
  endloop
  const_f %s2, 0
  loop %s0, 4
    read_f %s1, %o1, %s0
    add_f %s2, %s2, %s1
  endloop
  ; 0 + 2 + 4 + 6
  const_f %s3, 12
  eq_f %s4, %s2, %s3
  assert %s4, str0
  ret (), ()
.end

; expect-error fail_view_does_not_fit: does not fit
.function fail_view_does_not_fit
  .params 0 0
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 16, cpu
  alloc_tensor %o1, %o0, 0, f32, [8]
  ret (), ()
.end

; expect-error fail_view_offset_past_end: does not fit
.function fail_view_offset_past_end
  .params 0 0
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 16, cpu
  alloc_tensor %o1, %o0, 8, f32, [3]
  ret (), ()
.end

; expect-error fail_huge_dims: overflows
.function fail_huge_dims
  .params 0 0
  .sregs i64
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 16, cpu
  const_i %s0, 4611686018427387904
  alloc_tensor %o1, %o0, 0, f32, [%s0, %s0]
  ret (), ()
.end

; expect-error fail_read_out_of_range: out of range
.function fail_read_out_of_range
  .params 0 0
  .sregs f64
  .oregs tensor:f32
  .entry
  load_const %o0, c0
  read_f %s0, %o0, 6
  ret (), ()
.end

; expect-error fail_write_constant: read-only
.function fail_write_constant
  .params 0 0
  .sregs f64
  .oregs tensor:f32
  .entry
  load_const %o0, c0
  const_f %s0, 1
  write %o0, 0, %s0
  ret (), ()
.end

.function test_reshape_view_copy
  .params 0 0
  .sregs f64 f64 bool i64 i64
  .oregs tensor:f32 tensor:f32 tensor:f32 storage tensor:f32
  .entry
  load_const %o0, c0
  reshape %o1, %o0, [3, 2]
  dim %s3, %o1, 0
  const_i %s4, 3
  eq_i %s2, %s3, %s4
  assert %s2, str0
  read_f %s0, %o1, 5
  const_f %s1, 6
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ; transpose as a view: t[i][j] = w[j][i]; t.flat[1] = t[0][1] = w[1][0] = 4
  view %o2, %o0, 0, [3, 2], [1, 3]
  read_f %s0, %o2, 1
  const_f %s1, 4
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ; materialize the transpose
  alloc_storage %o3, 24, cpu
  alloc_tensor %o4, %o3, 0, f32, [3, 2]
  copy %o4, %o2
  read_f %s0, %o4, 1
  eq_f %s2, %s0, %s1
  assert %s2, str0
  read_f %s0, %o4, 5
  const_f %s1, 6
  eq_f %s2, %s0, %s1
  assert %s2, str0
  kill %o4
  alloc_tensor %o4, %o3, 0, f32, [6]
  read_f %s0, %o4, 2
  const_f %s1, 2
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end

; expect-error fail_reshape_non_contiguous: non-contiguous
.function fail_reshape_non_contiguous
  .params 0 0
  .oregs tensor:f32 tensor:f32 tensor:f32
  .entry
  load_const %o0, c0
  view %o1, %o0, 0, [3, 2], [1, 3]
  reshape %o2, %o1, [6]
  ret (), ()
.end

; expect-error fail_view_negative_reach: does not fit
.function fail_view_negative_reach
  .params 0 0
  .sregs i64
  .oregs tensor:f32 tensor:f32
  .entry
  load_const %o0, c0
  const_i %s0, -1
  view %o1, %o0, 0, [2], [%s0]
  ret (), ()
.end

; expect-error fail_dim_out_of_range: rank-2
.function fail_dim_out_of_range
  .params 0 0
  .sregs i64
  .oregs tensor:f32
  .entry
  load_const %o0, c0
  dim %s0, %o0, 5
  ret (), ()
.end

; expect-error fail_copy_shape_mismatch: shapes differ
.function fail_copy_shape_mismatch
  .params 0 0
  .oregs tensor:f32 storage tensor:f32
  .entry
  load_const %o0, c0
  alloc_storage %o1, 64, cpu
  alloc_tensor %o2, %o1, 0, f32, [6]
  copy %o2, %o0
  ret (), ()
.end

.function test_loop_carried_double_buffer
  .params 0 0
  .sregs f64 f64 bool i64
  .oregs storage storage tensor:f32 tensor:f32
  .entry
  ; cur lives in storage a, next in storage b; each iteration next := cur * 2 (by a copy and
  ; a scalar update), then cur := next and the storages swap: no allocation per iteration.
  alloc_storage %o0, 4, cpu
  alloc_storage %o1, 4, cpu
  alloc_tensor %o2, %o0, 0, f32, []
  const_f %s0, 1
  write %o2, 0, %s0
  loop %s3, 10
    alloc_tensor %o3, %o1, 0, f32, []
    read_f %s0, %o2, 0
    add_f %s0, %s0, %s0
    write %o3, 0, %s0
    pmove (%o2, %o0, %o1), (%o3, %o1, %o0)
  endloop
  read_f %s0, %o2, 0
  const_f %s1, 1024
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end
