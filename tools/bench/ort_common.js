// What every ONNX Runtime driver in tools/bench shares: flag parsing, the session options the
// comparisons use (CPU, all graph optimizations, N intra-op threads, sequential), feeds from a
// JSON file, timed runs and the median. The drivers (ort_bench.js, ort_forward.js, ort_cnn.js,
// ort_search.js) keep only what differs: their inputs and what they print.
'use strict';
const fs = require('fs');
const path = require('path');

// Parses `--flag value` pairs. `flags` maps a flag to [key, parse]; `defaults` gives the
// starting values (threads 1 and repeat 10 unless overridden).
function parseArgs(argv, flags, defaults = {}) {
  const a = {threads: 1, repeat: 10, ...defaults};
  const all = {
    '--node-modules': ['nodeModules', String],
    '--model': ['model', String],
    '--threads': ['threads', (v) => parseInt(v, 10)],
    '--repeat': ['repeat', (v) => parseInt(v, 10)],
    ...flags,
  };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i], v = argv[i + 1];
    if (!(k in all)) throw new Error(`unknown flag ${k}`);
    if (v === undefined) throw new Error(`${k} needs a value`);
    const [key, parse] = all[k];
    a[key] = parse(v);
  }
  if (!a.nodeModules || !a.model) throw new Error('--node-modules and --model are required');
  if (!(a.threads > 0) || !(a.repeat > 0)) throw new Error('--threads and --repeat must be > 0');
  return a;
}

const intList = (v) => v.split(',').map((s) => parseInt(s, 10));

// Loads onnxruntime-node from DIR/onnxruntime-node and opens `a.model` with `a.threads`
// intra-op threads. Returns {ort, session}.
async function openSession(a) {
  const ort = require(path.join(path.resolve(a.nodeModules), 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(a.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
  });
  return {ort, session};
}

// Feeds from a JSON file {name: {type: "int64"|"bool"|"float32", dims: [...], data: [...]}}.
function feedsFromJson(ort, file) {
  const spec = JSON.parse(fs.readFileSync(file, 'utf8'));
  const feeds = {};
  for (const [name, t] of Object.entries(spec)) {
    let data;
    if (t.type === 'int64') data = BigInt64Array.from(t.data.map(BigInt));
    else if (t.type === 'bool') data = Uint8Array.from(t.data);
    else data = Float32Array.from(t.data);
    feeds[name] = new ort.Tensor(t.type, data, t.dims);
  }
  return feeds;
}

// Runs `fn` (async) `repeat` times; returns the wall times in ms, in run order.
async function timeRuns(fn, repeat) {
  const ms = [];
  for (let i = 0; i < repeat; ++i) {
    const t0 = process.hrtime.bigint();
    await fn();
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return ms;
}

function median(values) {
  const s = [...values].sort((x, y) => x - y);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// Runs main(); an error is printed as `name: message` and exits with status 1.
function runMain(name, main) {
  main().catch((e) => {
    console.error(`${name}: ${e.message || e}`);
    process.exit(1);
  });
}

module.exports = {parseArgs, intList, openSession, feedsFromJson, timeRuns, median, runMain};
