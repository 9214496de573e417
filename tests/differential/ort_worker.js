// ONNX Runtime as the differential fuzzer's oracle: one persistent node process that reads
// requests from stdin and answers on stdout, so a graph costs a session, not a process.
//
//   node ort_worker.js NODE_MODULES_DIR
//
// A frame is a 4-byte little-endian length, a JSON header of that many bytes, then
// header.payload bytes. Request header: {threads, model: [offset, length], inputs: [{name,
// type, dims, offset, length}]}, the model and the tensors' raw little-endian data in the
// payload. Reply header: {ok: true, outputs: [{name, type, dims, offset, length}]} or
// {ok: false, error}, the outputs' data in the payload. Sessions run on the CPU, sequentially,
// without graph optimizations: the oracle is ORT's kernels, not its graph rewrites.
'use strict';
const path = require('path');

const ort = require(path.join(path.resolve(process.argv[2]), 'onnxruntime-node'));

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};

function tensorFrom(spec, payload) {
  const Arr = ARRAYS[spec.type];
  if (!Arr) throw new Error(`unsupported input type ${spec.type}`);
  // Copy into an aligned buffer of its own (the payload offset need not be aligned).
  const bytes = new Uint8Array(spec.length);
  bytes.set(payload.subarray(spec.offset, spec.offset + spec.length));
  const data = new Arr(bytes.buffer, 0, spec.length / Arr.BYTES_PER_ELEMENT);
  return new ort.Tensor(spec.type, data, spec.dims);
}

function encode(header, chunks) {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.length, 0);
  return Buffer.concat([len, json, ...chunks]);
}

async function handle(header, payload) {
  const model = payload.subarray(header.model[0], header.model[0] + header.model[1]);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: header.threads || 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'disabled',
    logSeverityLevel: 4,
  });
  try {
    const feeds = {};
    for (const spec of header.inputs) feeds[spec.name] = tensorFrom(spec, payload);
    const result = await session.run(feeds);
    const outputs = [];
    const chunks = [];
    let offset = 0;
    for (const name of session.outputNames) {
      const t = result[name];
      if (!t || !ARRAYS[t.type]) {
        throw new Error(`output ${name}: unsupported type ${t ? t.type : 'none'}`);
      }
      const d = t.data;
      const buf = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
      outputs.push({name, type: t.type, dims: t.dims, offset, length: buf.length});
      chunks.push(Buffer.from(buf));
      offset += buf.length;
    }
    return encode({ok: true, payload: offset, outputs}, chunks);
  } finally {
    if (session.release) await session.release();
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
