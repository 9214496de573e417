// Times one ONNX model with ONNX Runtime (onnxruntime-node, CPU) on a seeded random f32 input,
// for tools/bench/conv_bench.py: one warm-up run, then --repeat timed runs; prints one JSON line
// {"median_ms", "min_ms"}.
//
//   node ort_cnn.js --node-modules DIR --model FILE.onnx --input NAME --dims 1,3,224,224
//        --threads N --repeat N
'use strict';
const path = require('path');

function parseArgs(argv) {
  const a = {threads: 1, repeat: 10};
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i], v = argv[i + 1];
    switch (k) {
      case '--node-modules': a.nodeModules = v; break;
      case '--model': a.model = v; break;
      case '--input': a.input = v; break;
      case '--dims': a.dims = v.split(',').map((s) => parseInt(s, 10)); break;
      case '--threads': a.threads = parseInt(v, 10); break;
      case '--repeat': a.repeat = parseInt(v, 10); break;
      default: throw new Error(`unknown flag ${k}`);
    }
  }
  if (!a.nodeModules || !a.model || !a.input || !a.dims) throw new Error('see ort_cnn.js');
  return a;
}

async function main() {
  const a = parseArgs(process.argv);
  const ort = require(path.join(path.resolve(a.nodeModules), 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(a.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
  });
  const n = a.dims.reduce((x, y) => x * y, 1);
  const data = new Float32Array(n);
  let s = 12345;
  for (let i = 0; i < n; ++i) {
    s = (s * 1103515245 + 12345) % 2147483648;
    data[i] = s / 2147483648 * 2 - 1;
  }
  const feeds = {[a.input]: new ort.Tensor('float32', data, a.dims)};
  await session.run(feeds);
  const times = [];
  for (let i = 0; i < a.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((x, y) => x - y);
  const m = times.length;
  const median = m % 2 ? times[(m - 1) / 2] : (times[m / 2 - 1] + times[m / 2]) / 2;
  console.log(JSON.stringify({median_ms: median, min_ms: times[0]}));
}

main().catch((e) => { console.error(e.message); process.exit(1); });
