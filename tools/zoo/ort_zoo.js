// ONNX Runtime for the model zoo (tools/zoo/zoo.py): one persistent node process that keeps
// sessions open, so that a streaming model runs 100 chunks on one session and a benchmark
// times runs without a process per call.
//
//   node ort_zoo.js NODE_MODULES_DIR
//
// Framing and tensors as tests/differential/ort_worker.js's (tools/ort/frames.js): a 4-byte
// little-endian length, a JSON header of that many bytes, then header.payload bytes of raw
// little-endian tensor data. Requests:
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
const frames = require(path.join(__dirname, '..', 'ort', 'frames.js'));

const ort = require(path.join(path.resolve(process.argv[2]), 'onnxruntime-node'));

const sessions = new Map();
let nextId = 1;

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
  return frames.encode({ok: true, payload: 0, id}, []);
}

async function run(header, payload) {
  const s = session(header.id);
  return frames.encodeOutputs(s, await s.run(frames.feedsFrom(ort, header.inputs, payload)));
}

async function bench(header, payload) {
  const s = session(header.id);
  const feeds = frames.feedsFrom(ort, header.inputs, payload);
  for (let i = 0; i < (header.warmup || 0); ++i) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < header.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return frames.encode({ok: true, payload: 0, ms}, []);
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
      return frames.encode({ok: true, payload: 0}, []);
    }
    default: throw new Error(`unknown op ${header.op}`);
  }
}

frames.serve(handle);
