"""The graph generator: `generate(seed, index)` is graph number `index` of seed `seed`.

Each graph is a pure function of (seed, index): its opsets, its nodes, its inputs' data. It
draws one or two opsets in 7-17 (weighted towards the ones exporters write), keeps the op
generators valid at all of them (compiler/ops' signatures, each generator's own range), grows
a few random nodes (a fifth of the graphs lead with If, Loop or Scan), then picks outputs
among the values nothing else reads. The same graph is then written at each of its opsets
(graph.Emitter), attributes that became inputs written in the form each opset takes.
"""
import numpy as np

import ops_control  # noqa: F401 - registers generators
import ops_elementwise  # noqa: F401
import ops_misc  # noqa: F401
import ops_nn  # noqa: F401
import ops_tensor  # noqa: F401
from builder import REGISTRY, Builder, Ctx, Skip
from graph import Graph, known

OPSET_WEIGHTS = {7: 1, 8: 1, 9: 2, 10: 2, 11: 4, 12: 3, 13: 5, 14: 5, 15: 4, 16: 4, 17: 6}
P_CONTROL_FLOW_LEAD = 0.2


class Generated:
    """One generated graph: the Graph, its input data, its opsets and what it holds."""

    def __init__(self, graph, inputs, opsets, control_flow, seed, index, values):
        self.graph = graph
        self.values = values  # every value, by name
        self.inputs = inputs
        self.opsets = opsets
        self.control_flow = control_flow
        self.seed = seed
        self.index = index


def choose_opsets(rng):
    opsets = sorted(OPSET_WEIGHTS)
    w = np.array([OPSET_WEIGHTS[o] for o in opsets], np.float64)
    first = int(rng.choice(opsets, p=w / w.sum()))
    chosen = {first}
    if rng.random() < 0.5:
        chosen.add(int(rng.choice(opsets, p=w / w.sum())))
    return sorted(chosen)


def eligible(ctx, control_flow=None):
    out = []
    for key in sorted(REGISTRY):
        g = REGISTRY[key]
        if not (g.lo <= ctx.lo and ctx.hi <= g.hi and ctx.valid(g.name)):
            continue
        if control_flow is not None and g.cf != control_flow:
            continue
        out.append(g)
    return out


def _pick(b, gens):
    w = np.array([g.weight for g in gens], np.float64)
    return gens[int(b.rng.choice(len(gens), p=w / w.sum()))]


def grow(b, n, gens=None):
    """Adds n random ops to builder b (fewer when generators keep not applying)."""
    gens = gens or eligible(b.ctx)
    if b.cf_depth >= b.ctx.max_cf_depth:
        gens = [g for g in gens if not g.cf]
    made, tries = 0, 0
    while made < n and tries < 8 * n + 8:
        tries += 1
        g = _pick(b, gens)
        mark = (len(b.graph.nodes), len(b.pool), dict(b.graph.initializers),
                len(b.ctx.root.graph.inputs), b.ctx.control_flow)
        b.finite = g.finite
        try:
            g.fn(b)
            made += 1
        except Skip:
            _rollback(b, mark)
        finally:
            b.finite = False
    return made


def _rollback(b, mark):
    """Undoes a generator that gave up halfway (nodes, values, inputs it added)."""
    nodes, pool, inits, root_inputs, cf = mark
    del b.graph.nodes[nodes:]
    del b.pool[pool:]
    b.graph.initializers = inits
    root = b.ctx.root
    for v, _ in root.graph.inputs[root_inputs:]:
        root.input_data.pop(v.name, None)
        if v in root.pool:
            root.pool.remove(v)
    del root.graph.inputs[root_inputs:]
    b.ctx.control_flow = cf


def generate(seed, index, opdefs, max_ops=8):
    rng = np.random.default_rng([seed, index])
    opsets = choose_opsets(rng)
    ctx = Ctx(rng, opsets, opdefs)
    g = Graph("difftest")
    b = Builder(ctx, g)
    gens = eligible(ctx)
    if rng.random() < P_CONTROL_FLOW_LEAD:
        cf = [x for x in gens if x.cf]
        if cf:
            grow(b, 1, cf)
    grow(b, int(rng.integers(1, max_ops + 1)), gens)
    _choose_outputs(b)
    return Generated(g, b.input_data, opsets, ctx.control_flow, seed, index, ctx.values)


def _choose_outputs(b):
    made = [v for v in b.pool if not v.is_seq and v.dtype != "str" and
            not hasattr(v, "const") and v.name not in b.input_data]
    if not made:
        v = b.fresh(b.choice(list({x for x in (np.dtype("float32"),)})), b.rand_shape(),
                    const=False)
        made = [b.node1("Identity", [v])]
    leaves = [v for v in made if v.uses == 0]
    outs = leaves[-6:] if leaves else made[-1:]
    for v in made:
        if v not in outs and len(outs) < 8 and b.chance(0.1):
            outs.append(v)
    b.graph.outputs = [(v, b.chance(0.2) and known(v.shape)) for v in outs]
