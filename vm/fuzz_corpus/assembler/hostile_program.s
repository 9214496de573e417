.producer "hostile_executable_test"
.string "wrong sum"
.const f32 [4] name="w" weight values:[1, 2, 3, 4]
.const f32 [4] values:[0.5, 0.5, 0.5, 0.5]
.kernel "Add" in(f32, f32) out(f32)

.function twice
  .params 0 1
  .sregs i64 i64
  .sresults i64
  add_i %s1, %s0, %s0
  ret (), (%s1)
.end

.function main
  .params 0 0
  .sregs i64 f64 f64 bool i64
  .oregs tensor:f32 tensor:f32 storage storage tensor:f32 tensor:f32
  .oresults tensor:f32
  .output y [4]
  load_const %o0, c0
  load_const %o1, c1
  alloc_storage %o2, 16, cpu
  alloc_storage %o3, 16, cpu
  alloc_tensor %o4, %o2, 0, f32, [4]
  alloc_tensor %o5, %o3, 0, f32, [4]
  copy %o4, %o0
  const_i %s4, 3
  call @twice, (), (%s4), (), (%s4)
  loop %s0, %s4
    invoke k0, #0, (%o4, %o1), (%o5)
    pmove (%o4, %o5), (%o5, %o4)
  endloop
  ; 1 + 6 * 0.5
  read_f %s1, %o4, 0
  const_f %s2, 4
  eq_f %s3, %s1, %s2
  if %s3
    nop
  else
    fail str0
  endif
  ret (%o4), ()
.end
