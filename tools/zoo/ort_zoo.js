// ONNX Runtime for the model zoo (tools/zoo/zoo.py): one persistent node process that keeps
// sessions open, so that a streaming model runs 100 chunks on one session and a benchmark
// times runs without a process per call.
//
//   node ort_zoo.js NODE_MODULES_DIR
//
// Framing as tests/differential/ort_worker.js: a 4-byte little-endian length, a JSON header of
// that many bytes, then header.payload bytes of raw little-endian tensor data. Requests:
//   {op: "open", model: PATH, threads, optimize: bool}      -> {ok, id}
//   {op: "run", id, inputs: [{name, type, dims, offset, length}]}
//                                                           -> {ok, outputs: [...same...]}
//   {op: "bench", id, inputs, repeat, warmup}               -> {ok, ms: [per-run wall ms]}
//   {op: "close", id}                                       -> {ok}
// A failure answers {ok: false, error}. Sessions run on the CPU, sequentially, with
// `threads` intra-op threads; `optimize` chooses all graph optimizations (benchmarks) or none
// (the correctness oracle: ORT's kernels, not its rewrites).
'use strict';
const path = require('path');

const ort = require(path.join(path.resolve(process.argv[2]), 'onnxruntime-node'));

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};

const sessions = new Map();
let nextId = 1;

function tensorFrom(spec, payload) {
  const Arr = ARRAYS[spec.type];
  if (!Arr) throw new Error(`input ${spec.name}: unsupported type ${spec.type}`);
  const bytes = new Uint8Array(spec.length);
  bytes.set(payload.subarray(spec.offset, spec.offset + spec.length));
  const data = new Arr(bytes.buffer, 0, spec.length / Arr.BYTES_PER_ELEMENT);
  return new ort.Tensor(spec.type, data, spec.dims);
}

function feedsFrom(header, payload) {
  const feeds = {};
  for (const spec of header.inputs) feeds[spec.name] = tensorFrom(spec, payload);
  return feeds;
}

function encode(header, chunks) {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.length, 0);
  return Buffer.concat([len, json, ...chunks]);
}

function session(id) {
  const s = sessions.get(id);
  if (!s) throw new Error(`no session ${id}`);
  return s;
}

async function open(header) {
  const s = await ort.InferenceSession.create(header.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: header.threads || 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: header.optimize ? 'all' : 'disabled',
    logSeverityLevel: 4,
  });
  const id = nextId++;
  sessions.set(id, s);
  return encode({ok: true, payload: 0, id}, []);
}

async function run(header, payload) {
  const s = session(header.id);
  const result = await s.run(feedsFrom(header, payload));
  const outputs = [];
  const chunks = [];
  let offset = 0;
  for (const name of s.outputNames) {
    const t = result[name];
    if (!t || !ARRAYS[t.type]) throw new Error(`output ${name}: unsupported type`);
    const d = t.data;
    const buf = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
    outputs.push({name, type: t.type, dims: t.dims, offset, length: buf.length});
    chunks.push(Buffer.from(buf));
    offset += buf.length;
  }
  return encode({ok: true, payload: offset, outputs}, chunks);
}

async function bench(header, payload) {
  const s = session(header.id);
  const feeds = feedsFrom(header, payload);
  for (let i = 0; i < (header.warmup || 0); ++i) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < header.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return encode({ok: true, payload: 0, ms}, []);
}

async function handle(header, payload) {
  switch (header.op) {
    case 'open': return open(header);
    case 'run': return run(header, payload);
    case 'bench': return bench(header, payload);
    case 'close': {
      const s = session(header.id);
      sessions.delete(header.id);
      if (s.release) await s.release();
      return encode({ok: true, payload: 0}, []);
    }
    default: throw new Error(`unknown op ${header.op}`);
  }
}

let pending = Buffer.alloc(0);
let busy = false;

async function pump() {
  if (busy) return;
  busy = true;
  try {
    for (;;) {
      if (pending.length < 4) break;
      const hlen = pending.readUInt32LE(0);
      if (pending.length < 4 + hlen) break;
      const header = JSON.parse(pending.subarray(4, 4 + hlen).toString());
      const total = 4 + hlen + header.payload;
      if (pending.length < total) break;
      const payload = pending.subarray(4 + hlen, total);
      let reply;
      try {
        reply = await handle(header, payload);
      } catch (e) {
        reply = encode({ok: false, payload: 0, error: String(e && e.message || e)}, []);
      }
      pending = pending.subarray(total);
      await new Promise((resolve) => process.stdout.write(reply, resolve));
    }
  } finally {
    busy = false;
  }
  if (pending.length >= 4) setImmediate(pump);
}

process.stdin.on('data', (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  pump();
});
process.stdin.on('end', () => process.exit(0));
