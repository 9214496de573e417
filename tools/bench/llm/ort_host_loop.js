// The LLM benchmark's peer: onnxruntime-node driving a step model (tools/bench/llm/
// export_step.py) with a host loop, greedy: the prompt in one run, then one token per run, each
// run's present.{i}.key/value fed back as the next past_key_values (the output tensors passed on
// as they are: no copy on the JavaScript side; ORT's node binding has no IO binding to share one
// buffer across runs). Prints one JSON line per round: the tokens, the time to the first token
// and each later token's time.
//
//   node ort_host_loop.js --node-modules DIR --model M.onnx --spec S.json --threads 1 --rounds 3
// S.json: {"prompt": [[ids...], ...], "new_tokens": N, "layers": L, "kv_heads": H, "head_dim": D,
//          "mask_type": "int64" (default) or "int32", "position_ids": true (default) or false}
// (ONNX Runtime GenAI's layout: an int32 attention_mask and no position_ids input.)
'use strict';
const fs = require('fs');
const {parseArgs, openSession} = require('../ort_common.js');

(async () => {
  const a = parseArgs(process.argv, {
    '--spec': ['spec', String],
    '--rounds': ['rounds', (v) => parseInt(v, 10)],
  }, {rounds: 1});
  const spec = JSON.parse(fs.readFileSync(a.spec, 'utf8'));
  const {ort, session} = await openSession(a);
  const batch = spec.prompt.length, plen = spec.prompt[0].length;
  const i64 = (values, dims) => new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims);
  const mask = (n, dims) => spec.mask_type === 'int32' ?
      new ort.Tensor('int32', new Int32Array(n).fill(1), dims) : i64(new Array(n).fill(1), dims);
  const withPositions = spec.position_ids !== false;
  for (let round = 0; round < a.rounds; ++round) {
    let past = {};
    for (let i = 0; i < spec.layers; ++i) {
      for (const kv of ['key', 'value']) {
        past[`past_key_values.${i}.${kv}`] =
            new ort.Tensor('float32', new Float32Array(0), [batch, spec.kv_heads, 0, spec.head_dim]);
      }
    }
    let ids = i64(spec.prompt.flat(), [batch, plen]);
    let pos = i64(Array.from({length: batch * plen}, (_, k) => k % plen), [batch, plen]);
    let total = plen;
    const tokens = Array.from({length: batch}, () => []);
    const times = [];
    for (let step = 0; step < spec.new_tokens; ++step) {
      const t0 = process.hrtime.bigint();
      const feeds = {input_ids: ids, attention_mask: mask(batch * total, [batch, total]), ...past};
      if (withPositions) feeds.position_ids = pos;
      const out = await session.run(feeds);
      const logits = out.logits, [, s, vocab] = logits.dims;
      const next = [];
      for (let b = 0; b < batch; ++b) {
        const base = (b * s + s - 1) * vocab;
        let best = 0;
        for (let v = 1; v < vocab; ++v) if (logits.data[base + v] > logits.data[base + best]) best = v;
        next.push(best);
        tokens[b].push(best);
      }
      past = {};
      for (let i = 0; i < spec.layers; ++i) {
        for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`];
      }
      ids = i64(next, [batch, 1]);
      pos = i64(new Array(batch).fill(total), [batch, 1]);
      total += 1;
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    console.log(JSON.stringify({tokens, first_ms: times[0], step_ms: times.slice(1)}));
  }
})().catch((e) => { console.error(e); process.exit(1); });
