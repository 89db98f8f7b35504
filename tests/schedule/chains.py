"""Random per-step programs for the memory property tests: a chain of ops over ``(i, t)``, each
reading the previous value at the same step, one step back, a window, the prefix or the whole dim."""
from __future__ import annotations

import numpy as np

import tempo as tpo


def build_chain(chain_ops: list[str], xs: np.ndarray, i, t, T):
    """``xs`` over ``(i, t)`` through ``chain_ops``: the last value and the values the prefix and
    whole-dim reads ("causal", "whole") give along the way."""
    width = xs.shape[-1]
    v, outs = tpo.from_numpy(xs, dims=(i, t)), []
    for op in chain_ops:
        if op == "tanh":
            v = v.tanh()
        elif op == "square":
            v = v * v + 0.5
        elif op == "shift":
            v = v[i, tpo.max(t - 1, 0)] * 0.5 + v
        elif op == "window":
            v = v[i, tpo.max(0, t - 2):t + 1].mean(axis=0)
        elif op == "causal":
            outs.append(v[i, 0:t + 1].sum(axis=0))
        elif op == "whole":
            outs.append(v[i, 0:T].sum())
        elif op == "recur":                      # read at t - 1 through a recurrence
            s = tpo.placeholder((width,), "float32", dims=(i, t))
            s[i, 0] = v[i, 0]
            s[i, t + 1] = (s[i, t] * 0.5).tanh() + v[i, t + 1]
            v = s
        else:
            assert op == "next", op              # read at t + 1, the last step kept as it is
            w = tpo.placeholder((width,), "float32", dims=(i, t))
            w[i, T - 1] = v[i, T - 1]
            w[i, t] = v[i, t + 1] * 2.0
            v = w
    return v, outs
