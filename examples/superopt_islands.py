"""tempo.superopt on a Tempo program's static islands: the superopt pass, island by island.

    tempo run examples/superopt_islands.py --agent greedy --budget 1

A two-head tanh network (a policy head and a value head on a shared input, as
in actor-critic methods) at every step of a batch of sequences. The script
compiles it, shows each fused island before and after the optimiser (steps,
rules applied, the island's latency measured on the runtime's own kernels at
the run's sizes, or why the island was kept), then compiles and runs it with
the superopt pass and checks the values against the program without it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tempo as tpo
from tempo.ir.ops import FusedOp
from tempo.transforms import superopt


@dataclass
class Args:
    agent: str = "greedy"
    """optimiser: greedy, backtrack, eqsat or rl"""
    budget: float = 1.0
    """optimisation seconds per island"""
    batch: int = 16
    """sequences (the vectorized dim b)"""
    steps: int = 20
    """steps per sequence"""


def build(ctx, args: Args):
    rng = np.random.default_rng(0)
    (b, B), (t, T) = ctx.dims("b", "t")
    x = tpo.from_numpy(rng.standard_normal((args.batch, args.steps, 8)).astype(np.float32), dims=(b, t))
    w_pi, w_v = (tpo.from_numpy((rng.standard_normal((8, 16)) * 0.3).astype(np.float32)) for _ in range(2))
    head_pi, head_v = (tpo.from_numpy((rng.standard_normal((16, 1)) * 0.3).astype(np.float32)) for _ in range(2))
    h = x.unsqueeze(0)
    logits = (h @ w_pi).tanh() @ head_pi
    value = (h @ w_v).tanh() @ head_v
    advantage = (logits - value).squeeze(0)
    return [advantage], {B: args.batch, T: args.steps}


def main(args: Args) -> None:
    config = superopt.Config(agent=args.agent, budget_s=args.budget, sizes={"B": args.batch, "T": args.steps})
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx, args)
        program = ctx.compile(fetch)
        _, outcomes = superopt.optimise_islands(program.sdg, config)
    for node_id, outcome in outcomes.items():
        island = program.sdg.nodes[node_id].op
        print(f"island %{node_id}: {' -> '.join(step.op.name for step in island.steps)}")
        print(f"  after: {' -> '.join(step.op.name for step in outcome.op.steps)}")
        print(f"  rules: {', '.join(outcome.applied) or '-'}; "
              + (f"kept: {outcome.kept}" if outcome.kept else
                 f"measured {outcome.before_ms * 1e3:.1f} -> {outcome.after_ms * 1e3:.1f} us"))
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx, args)
        (plain,) = ctx.compile(fetch).run(bounds)
    with tpo.Context() as ctx:
        fetch, bounds = build(ctx, args)
        optimised = ctx.compile(fetch, passes={"superopt": config})
        (rewritten,) = optimised.run(bounds)
    steps = [sum(len(n.op.steps) for n in p.sdg.nodes.values() if isinstance(n.op, FusedOp))
             for p in (program, optimised)]
    np.testing.assert_allclose(rewritten, plain, rtol=1e-5, atol=1e-6)
    print(f"island steps {steps[0]} -> {steps[1]}; superopt pass {optimised.timings['superopt']:.2f} s; "
          f"ok: the same values with and without the pass")


if __name__ == "__main__":
    main(tpo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
