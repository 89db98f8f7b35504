"""Small random instances shaped like real programs, built by the tests themselves."""
from __future__ import annotations

import numpy as np
from tempo.memplan.problem import Buffer, Instance


def random_instance(seed: int, steps: int = 30, capacity: int = 64, alias_rate: float = 0.15,
                    max_operands: int = 3) -> Instance:
    """A program of ``steps`` instructions, each reading live tensors and writing one.

    Operand buffers live from their tensor's definition to their use; output
    buffers from definition to last use. Some outputs alias one of their
    instruction's operands (an in-place update), as XLA does.
    """
    rng = np.random.default_rng(seed)
    supply = rng.uniform(0.5, 3.0, steps).round(3)
    sizes, defined, uses = [], [], []
    for t in range(steps):
        sizes.append(int(rng.integers(1, capacity // 3)))
        defined.append(t)
        uses.append([])
    for t in range(1, steps):
        for tensor in set(rng.integers(max(0, t - 8), t, size=rng.integers(1, max_operands + 1))):
            uses[tensor].append(t)
    buffers, alias = [], 0
    for t in range(steps):
        reads = [k for k in range(t) if t in uses[k]]
        group = None
        if reads and rng.random() < alias_rate:
            alias += 1
            group = alias
        for j, k in enumerate(reads):
            buffers.append(dict(size=sizes[k], is_output=False, target_time=t, tensor_id=k,
                                alias_id=group if j == 0 else None, live_range=(defined[k], t)))
        last = max(uses[t], default=t)
        buffers.append(dict(size=sizes[t], is_output=True, target_time=t, tensor_id=t,
                            alias_id=group, live_range=(t, last)))
    out = []
    for i, b in enumerate(buffers):
        demand = round(b["size"] * float(rng.uniform(0.05, 0.3)), 3)
        benefit = round(b["size"] * float(rng.uniform(0.1, 1.0)), 3)
        out.append(Buffer(id=i, demand=demand, benefit=benefit, **b))
    return Instance(capacity, tuple(float(s) for s in supply), tuple(out),
                    hbm_latency=float(sum(b.benefit for b in out) * 2), name=f"random{seed}")

