// Times one ONNX model with ONNX Runtime (onnxruntime-node, CPU) on a seeded random f32 input,
// for tools/bench/conv_bench.py: one warm-up run, then --repeat timed runs; prints one JSON line
// {"median_ms", "min_ms"}.
//
//   node ort_cnn.js --node-modules DIR --model FILE.onnx --input NAME --dims 1,3,224,224
//        --threads N --repeat N
'use strict';
const c = require('./ort_common');

async function main() {
  const a = c.parseArgs(process.argv, {'--input': ['input', String], '--dims': ['dims', c.intList]});
  if (!a.input || !a.dims) throw new Error('--input and --dims are required');
  const {ort, session} = await c.openSession(a);
  // The seeded values conv_bench.py builds for dynvm (same LCG).
  const n = a.dims.reduce((x, y) => x * y, 1);
  const data = new Float32Array(n);
  let s = 12345;
  for (let i = 0; i < n; ++i) {
    s = (s * 1103515245 + 12345) % 2147483648;
    data[i] = s / 2147483648 * 2 - 1;
  }
  const feeds = {[a.input]: new ort.Tensor('float32', data, a.dims)};
  await session.run(feeds);
  const ms = await c.timeRuns(() => session.run(feeds), a.repeat);
  console.log(JSON.stringify({median_ms: c.median(ms), min_ms: Math.min(...ms)}));
}

c.runMain('ort_cnn', main);
