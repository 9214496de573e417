// The framing and tensor encoding shared by the persistent ONNX Runtime workers
// (tests/differential/ort_worker.js, the fuzzer's oracle; tools/zoo/ort_zoo.js, the zoo's):
// one node process reads requests on stdin and answers on stdout, so a model costs a session,
// not a process.
//
// A frame is a 4-byte little-endian length, a JSON header of that many bytes, then
// header.payload bytes. Tensors travel as specs {name, type, dims, offset, length} in the header
// and their raw little-endian data at [offset, offset + length) of the payload.
'use strict';

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};

function encode(header, chunks) {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.length, 0);
  return Buffer.concat([len, json, ...chunks]);
}

function encodeError(e) {
  return encode({ok: false, payload: 0, error: String(e && e.message || e)}, []);
}

// The ort.Tensor of one input spec. Copied into an aligned buffer of its own: the payload
// offset need not be aligned.
function tensorFrom(ort, spec, payload) {
  const Arr = ARRAYS[spec.type];
  if (!Arr) throw new Error(`input ${spec.name}: unsupported type ${spec.type}`);
  const bytes = new Uint8Array(spec.length);
  bytes.set(payload.subarray(spec.offset, spec.offset + spec.length));
  const data = new Arr(bytes.buffer, 0, spec.length / Arr.BYTES_PER_ELEMENT);
  return new ort.Tensor(spec.type, data, spec.dims);
}

function feedsFrom(ort, inputs, payload) {
  const feeds = {};
  for (const spec of inputs) feeds[spec.name] = tensorFrom(ort, spec, payload);
  return feeds;
}

// The reply to a run: every output of the session, in its order, as specs and data.
function encodeOutputs(session, result) {
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
}

// Reads frames from stdin and answers each, in order, with `await handle(header, payload)` (a
// frame); a handler's exception is answered as {ok: false, error}. Exits when stdin ends.
function serve(handle) {
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
          reply = encodeError(e);
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
}

module.exports = {ARRAYS, encode, encodeOutputs, feedsFrom, serve, tensorFrom};
