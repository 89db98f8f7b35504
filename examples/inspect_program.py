"""Look inside a Tempo program: its SDG, passes, fused islands, executed domains, schedule AST, generated code and memory.

    tempo run examples/inspect_program.py --steps 6 --dot /tmp/sdg.dot

A prefix sum written as a branching recurrent tensor, a forward window, a
conditional tensor and a chain of element-wise ops (which the fuse pass
makes one island); the script prints every stage a user debugs with.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tempo as tpo
from tempo.ir.ops import FusedOp
from tempo.rl.training import parse_args


@dataclass
class Args:
    steps: int = 6
    """number of timesteps T"""
    window: int = 3
    """forward window size"""
    dot: str = ""
    """write the SDG as Graphviz source to this path"""


args = parse_args(Args, __doc__.splitlines()[0])
rewards = np.arange(1.0, args.steps + 1)

ctx = tpo.Context()
with ctx:
    (t, T), = ctx.dims("t")
    r = tpo.from_numpy(rewards, dims=(t,))
    prefix = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
    prefix[0] = r[0]
    prefix[t + 1] = prefix[t] + r[t + 1]
    ahead = r[t:tpo.min(t + args.window, T)].sum()
    even = r[(t % 2) == 0]
    scaled = (r * 0.5 + 1.0).sqrt()  # element-wise ops at the same step: one fused island
    program = ctx.compile(fetch=[prefix, ahead, even, scaled])

print("== symbolic dependence graph ==")
print(program.sdg)
print("\n== what each pass did ==")
print(program.passes_report())
print("\n== fused islands (one launch per point each) ==")
for node in program.sdg.nodes.values():
    if isinstance(node.op, FusedOp):
        print(f"%{node.id}[{', '.join(d.name for d in node.domain)}]: "
              f"{' -> '.join(step.op.name for step in node.op.steps)}")
print("\n== executed domains (isl) ==")
for node_id, points in program.domains.executed.items():
    print(f"%{node_id}: {points}")
print("\n== schedule AST ==")
print(program.ast)
print("\n== the Python source the executor runs ==")
print(program.code)
prefix_out, ahead_out, even_out, scaled_out = program.run({T: args.steps})
print("\n== results ==")
print("prefix sums:   ", prefix_out)
print("forward window:", ahead_out)
print("even steps:    ", even_out, "(NaN where undefined)")
print("sqrt(r/2 + 1): ", scaled_out)
print("compile stages (s):", {k: round(v, 4) for k, v in program.timings.items()})
print("\n== memory ==")
print(program.memory_report())
if args.dot:
    with open(args.dot, "w") as f:
        f.write(program.sdg.to_dot())
    print(f"wrote {args.dot}")
