// Times one decoding-strategy model (tools/models/export_search.py: beam search with the loop in
// the graph) with ONNX Runtime (onnxruntime-node, CPU) for tools/bench/search_compare.py: one
// warm-up run, then --repeat timed runs of the whole search; prints one JSON line
// {"median_ms", "min_ms", "best"} (best: the best beam's tokens, row-major).
//
//   node ort_search.js --node-modules DIR --model FILE.onnx --threads N --repeat N
//        --prompt 3,14,15;9,2,6 (rows separated by ';') --max-new-tokens N
'use strict';
const c = require('./ort_common');

async function main() {
  const a = c.parseArgs(process.argv, {
    '--prompt': ['prompt', (v) => v.split(';').map(c.intList)],
    '--max-new-tokens': ['maxNewTokens', (v) => parseInt(v, 10)],
  });
  if (!a.prompt || !(a.maxNewTokens >= 0) || a.prompt.some((r) => r.length !== a.prompt[0].length)) {
    throw new Error('usage: see the header of ort_search.js');
  }
  const {ort, session} = await c.openSession(a);
  const flat = a.prompt.flat();
  const feeds = {
    prompt: new ort.Tensor('int64', BigInt64Array.from(flat.map(BigInt)),
                           [a.prompt.length, a.prompt[0].length]),
    max_new_tokens: new ort.Tensor('int64', BigInt64Array.from([BigInt(a.maxNewTokens)]), []),
  };
  let out = await session.run(feeds);
  const ms = await c.timeRuns(async () => { out = await session.run(feeds); }, a.repeat);
  console.log(JSON.stringify({
    median_ms: c.median(ms),
    min_ms: Math.min(...ms),
    best: Array.from(out.best.data, Number),
  }));
}

c.runMain('ort_search', main);
