; Sequences and optionals.
.string "seq"
.const i64 [2] values:[10, 20]

.function test_sequence_ops
  .params 0 0
  .sregs i64 i64 bool i64
  .oregs seq:i64 tensor:i64 seq:i64 tensor:i64
  .entry
  seq_new %o0
  load_const %o1, c0
  seq_push %o0, %o1
  seq_push %o0, %o1
  seq_len %s0, %o0
  const_i %s1, 2
  eq_i %s2, %s0, %s1
  assert %s2, str0
  ; values: a copy is unaffected by pushes to the original
  mov %o2, %o0
  seq_push %o0, %o1
  seq_len %s0, %o2
  eq_i %s2, %s0, %s1
  assert %s2, str0
  const_i %s3, -1
  seq_at %o3, %o0, %s3
  read_i %s0, %o3, 1
  const_i %s1, 20
  eq_i %s2, %s0, %s1
  assert %s2, str0
  const_i %s3, 0
  seq_erase %o0, %s3
  seq_insert %o0, %o1, %s3
  seq_len %s0, %o0
  const_i %s1, 3
  eq_i %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end

; expect-error fail_seq_at_out_of_range: out of range
.function fail_seq_at_out_of_range
  .params 0 0
  .sregs i64
  .oregs seq:i64 tensor:i64
  .entry
  seq_new %o0
  const_i %s0, 0
  seq_at %o1, %o0, %s0
  ret (), ()
.end

.function test_optionals
  .params 0 0
  .sregs bool i64 i64 bool
  .oregs opt:tensor:i64 tensor:i64 tensor:i64
  .entry
  opt_none %o0
  opt_has %s0, %o0
  not %s0, %s0
  assert %s0, str0
  load_const %o1, c0
  opt_some %o0, %o1
  opt_has %s0, %o0
  assert %s0, str0
  opt_get %o2, %o0
  read_i %s1, %o2, 0
  const_i %s2, 10
  eq_i %s3, %s1, %s2
  assert %s3, str0
  ret (), ()
.end

; expect-error fail_opt_get_none: empty optional
.function fail_opt_get_none
  .params 0 0
  .oregs opt:tensor:i64 tensor:i64
  .entry
  opt_none %o0
  opt_get %o1, %o0
  ret (), ()
.end
