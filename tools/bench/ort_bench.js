// Times greedy decoding with ONNX Runtime (the onnxruntime-node package, CPU) for
// tools/bench/compare.py: a decode model with the loop in the graph (--mode loop) or a
// single-step model (token, h, c) -> (next, h_out, c_out) driven by a JavaScript loop
// (--mode step). One warm-up decode, then --repeat timed decodes; prints one JSON line
// {"mode", "tokens", "ms"}.
//
//   node ort_bench.js --node-modules DIR --model FILE.onnx --mode loop|step --threads N
//        --repeat N --prompt 3,14,15,9 --max-new-tokens N [--stop-token T] [--state-dims 2,1,256]
'use strict';
const c = require('./ort_common');

async function main() {
  const a = c.parseArgs(process.argv, {
    '--mode': ['mode', String],
    '--prompt': ['prompt', c.intList],
    '--max-new-tokens': ['maxNewTokens', (v) => parseInt(v, 10)],
    '--stop-token': ['stopToken', (v) => parseInt(v, 10)],
    '--state-dims': ['stateDims', c.intList],
  }, {stopToken: -1});
  if (!['loop', 'step'].includes(a.mode) || !a.prompt || !(a.maxNewTokens > 0) ||
      (a.mode === 'step' && !a.stateDims)) {
    throw new Error('usage: see the header of ort_bench.js');
  }
  const {ort, session} = await c.openSession(a);
  const i64 = (values, dims) => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims);

  let decode;
  if (a.mode === 'loop') {
    const feeds = {
      prompt: i64(a.prompt, [1, a.prompt.length]),
      max_new_tokens: i64([a.maxNewTokens], []),
    };
    if (session.inputNames.includes('stop_token')) feeds.stop_token = i64([a.stopToken], []);
    decode = async () => {
      const out = await session.run(feeds);
      return Array.from(out.tokens.data, Number);
    };
  } else {
    const n = a.stateDims.reduce((x, y) => x * y, 1);
    const zeros = new ort.Tensor('float32', new Float32Array(n), a.stateDims);
    const token = new BigInt64Array(1);
    const tokenTensor = new ort.Tensor('int64', token, [1, 1]);
    decode = async () => {
      let h = zeros, c = zeros, next = 0;
      const step = async (t) => {
        token[0] = BigInt(t);
        const out = await session.run({token: tokenTensor, h, c});
        h = out.h_out;
        c = out.c_out;
        return Number(out.next.data[0]);
      };
      for (const t of a.prompt) next = await step(t);
      const tokens = [];
      for (let i = 0; i < a.maxNewTokens; ++i) {
        tokens.push(next);
        if (next === a.stopToken || i + 1 === a.maxNewTokens) break;
        next = await step(next);
      }
      return tokens;
    };
  }
  const tokens = await decode();  // warm-up
  const ms = [];
  for (let r = 0; r < a.repeat; ++r) {
    const t0 = process.hrtime.bigint();
    const got = await decode();
    const t1 = process.hrtime.bigint();
    if (got.join(',') !== tokens.join(',')) throw new Error('a repeated decode gave other tokens');
    ms.push(Number(t1 - t0) / 1e6);
  }
  console.log(JSON.stringify({mode: a.mode, tokens, ms}));
}

c.runMain('ort_bench', main);
