// Times one forward pass of a model with ONNX Runtime (onnxruntime-node, CPU, all graph
// optimizations) for tools/bench/encoder_bench.py and stft_mel_bench.py: inputs from a JSON file
// {name: {type: "int64"|"bool"|"float32", dims: [...], data: [...]}}; one warm-up run, then
// --repeat timed runs; prints one JSON line {"ms": median}. With --output, the warm-up run's
// first output is written there as JSON {dims, data} (so a bench can check the runtimes agree).
//
//   node ort_forward.js --node-modules DIR --model FILE.onnx --inputs FILE.json --threads N
//        --repeat N [--output FILE.json]
'use strict';
const fs = require('fs');
const c = require('./ort_common');

async function main() {
  const a = c.parseArgs(process.argv, {'--inputs': ['inputs', String], '--output': ['output', String]});
  if (!a.inputs) throw new Error('--inputs is required');
  const {ort, session} = await c.openSession(a);
  const feeds = c.feedsFromJson(ort, a.inputs);
  const first = await session.run(feeds);
  if (a.output) {
    const t = first[session.outputNames[0]];
    fs.writeFileSync(a.output, JSON.stringify({dims: t.dims, data: Array.from(t.data)}));
  }
  const ms = await c.timeRuns(() => session.run(feeds), a.repeat);
  console.log(JSON.stringify({ms: c.median(ms)}));
}

c.runMain('ort_forward', main);
