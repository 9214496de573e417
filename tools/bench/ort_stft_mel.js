// Times one forward pass of a model with ONNX Runtime (onnxruntime-node, CPU, all graph
// optimizations) for tools/bench/stft_mel_bench.py: ort_forward.js's contract (inputs from a
// JSON file, one warm-up run, --repeat timed runs, one JSON line {"ms": median}), and the first
// output written to --output as JSON {dims, data} so the bench can check both runtimes agree.
//
//   node ort_stft_mel.js --node-modules DIR --model FILE.onnx --inputs FILE.json --threads N
//        --repeat N --output FILE.json
'use strict';
const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
  const a = {threads: 1, repeat: 10};
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i], v = argv[i + 1];
    if (v === undefined) throw new Error(`${k} needs a value`);
    switch (k) {
      case '--node-modules': a.nodeModules = v; break;
      case '--model': a.model = v; break;
      case '--inputs': a.inputs = v; break;
      case '--threads': a.threads = parseInt(v, 10); break;
      case '--repeat': a.repeat = parseInt(v, 10); break;
      case '--output': a.output = v; break;
      default: throw new Error(`unknown flag ${k}`);
    }
  }
  if (!a.nodeModules || !a.model || !a.inputs) throw new Error('usage: see ort_stft_mel.js');
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
  const spec = JSON.parse(fs.readFileSync(a.inputs, 'utf8'));
  const feeds = {};
  for (const [name, t] of Object.entries(spec)) {
    let data;
    if (t.type === 'int64') data = BigInt64Array.from(t.data.map(BigInt));
    else if (t.type === 'bool') data = Uint8Array.from(t.data);
    else data = Float32Array.from(t.data);
    feeds[name] = new ort.Tensor(t.type, data, t.dims);
  }
  const first = await session.run(feeds);
  if (a.output) {
    const t = first[session.outputNames[0]];
    fs.writeFileSync(a.output, JSON.stringify({dims: t.dims, data: Array.from(t.data)}));
  }
  const times = [];
  for (let i = 0; i < a.repeat; ++i) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((x, y) => x - y);
  const n = times.length;
  const median = n % 2 ? times[(n - 1) / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  console.log(JSON.stringify({ms: median}));
}

main().catch((e) => {
  console.error(e.message || e);
  process.exit(1);
});
