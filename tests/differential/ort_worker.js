// ONNX Runtime as the differential fuzzer's oracle: one persistent node process that reads
// requests from stdin and answers on stdout, so a graph costs a session, not a process.
//
//   node ort_worker.js NODE_MODULES_DIR
//
// Framing and tensors: tools/ort/frames.js (shared with the zoo's worker). A frame is a 4-byte
// little-endian length, a JSON header of that many bytes, then header.payload bytes. Request
// header: {threads, model: [offset, length], inputs: [{name,
// type, dims, offset, length}]}, the model and the tensors' raw little-endian data in the
// payload. Reply header: {ok: true, outputs: [{name, type, dims, offset, length}]} or
// {ok: false, error}, the outputs' data in the payload. Sessions run on the CPU, sequentially,
// without graph optimizations: the oracle is ORT's kernels, not its graph rewrites.
'use strict';
const path = require('path');
const frames = require(path.join(__dirname, '..', '..', 'tools', 'ort', 'frames.js'));

const ort = require(path.join(path.resolve(process.argv[2]), 'onnxruntime-node'));

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
    const result = await session.run(frames.feedsFrom(ort, header.inputs, payload));
    return frames.encodeOutputs(session, result);
  } finally {
    if (session.release) await session.release();
  }
}

frames.serve(handle);
