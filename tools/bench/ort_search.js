// Times one decoding-strategy model (tools/models/export_search.py: beam search with the loop in
// the graph) with ONNX Runtime (onnxruntime-node, CPU) for tools/bench/search_compare.sh: one
// warm-up run, then --repeat timed runs of the whole search; prints one JSON line
// {"median_ms", "min_ms", "best"} (best: the best beam's tokens, row-major).
//
//   node ort_search.js --node-modules DIR --model FILE.onnx --threads N --repeat N
//        --prompt 3,14,15;9,2,6 (rows separated by ';') --max-new-tokens N
'use strict';
const path = require('path');

function parseArgs(argv) {
  const a = {threads: 1, repeat: 10};
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i], v = argv[i + 1];
    if (v === undefined) throw new Error(`${k} needs a value`);
    switch (k) {
      case '--node-modules': a.nodeModules = v; break;
      case '--model': a.model = v; break;
      case '--threads': a.threads = parseInt(v, 10); break;
      case '--repeat': a.repeat = parseInt(v, 10); break;
      case '--prompt': a.prompt = v.split(';').map((r) => r.split(',').map((s) => parseInt(s, 10))); break;
      case '--max-new-tokens': a.maxNewTokens = parseInt(v, 10); break;
      default: throw new Error(`unknown flag ${k}`);
    }
  }
  if (!a.nodeModules || !a.model || !a.prompt || !(a.maxNewTokens >= 0) || !(a.repeat > 0) ||
      a.prompt.some((r) => r.length !== a.prompt[0].length)) {
    throw new Error('usage: see the header of ort_search.js');
  }
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
  const flat = a.prompt.flat();
  const feeds = {
    prompt: new ort.Tensor('int64', BigInt64Array.from(flat.map(BigInt)),
                           [a.prompt.length, a.prompt[0].length]),
    max_new_tokens: new ort.Tensor('int64', BigInt64Array.from([BigInt(a.maxNewTokens)]), []),
  };
  let out = await session.run(feeds);
  const times = [];
  for (let i = 0; i < a.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((x, y) => x - y);
  console.log(JSON.stringify({
    median_ms: times[Math.floor(times.length / 2)],
    min_ms: times[0],
    best: Array.from(out.best.data, Number),
  }));
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
