"""``tpo.end_when`` gives every spelling of a program the same lengths and values.

Programs over ``(i, t)`` drawn by hypothesis end ``t`` by a flag from one of
several sources (a constant, a comparison computed from the data, a
recurrence's comparison, a random draw's) and read the data in several ways
(a prefix sum ``r[i, 0:T]``, a suffix sum ``r[i, t:T]``, a window, a point,
a recurrence read at ``0:T``, ...), each alone or several together, on every
backend, the flag read on the host at every step or every few; each is checked against a NumPy loop that breaks at the same step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo

FLAGS = ("constant", "comparison", "elementwise", "recurrence", "random")
READS = ("prefix", "suffix", "window", "point", "recurrence", "last", "mean", "affine", "weighted", "returns")
BACKENDS = ("numpy", "torch", "jax")
DECAY = np.float32(0.75)


@dataclass(frozen=True)
class Case:
    """One drawn program: its flag's source, its reads, its data (``x`` over ``(i, t)``, a scalar or
    a vector at each point) and, by the flag, the constant stops or the threshold."""

    flag: str
    reads: tuple[str, ...]
    seed: int
    x: np.ndarray
    stops: np.ndarray
    threshold: np.float32


def case_of(flag: str, reads: tuple[str, ...], seed: int, shape: tuple[int, int, int]) -> Case:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, shape if shape[2] else shape[:2]).astype(np.float32)
    stops = rng.uniform(size=shape[:2]) < rng.uniform(0.0, 0.6)
    row = sums(x)
    threshold = {"comparison": rng.uniform(0.2, 0.9) * row.max(initial=0.0) + 1e-3,
                 "elementwise": rng.uniform(0.0, 0.5),
                 "recurrence": rng.uniform(0.5, 4.0),
                 "random": rng.uniform(0.5, 0.98)}.get(flag, 0.0)
    return Case(flag, reads, seed, x, stops, np.float32(threshold))


def sums(x: np.ndarray) -> np.ndarray:
    """Each point's sum of ``x`` (its value where it is a scalar)."""
    return x.sum(axis=2) if x.ndim == 3 else x


def recurrence(r, i, t):
    """``h[i, 0] = sum(r[i, 0])``, ``h[i, t + 1] = DECAY * h[i, t] + sum(r[i, t + 1])``."""
    h = tpo.placeholder((), "float32", dims=(i, t))
    h[i, 0] = r[i, 0].sum()
    h[i, t + 1] = h[i, t] * float(DECAY) + r[i, t + 1].sum()
    return h


def build(case: Case, backend: str, every: int | None = None):
    with tpo.Context(seed=case.seed) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        u = tpo.random.uniform((), dims=(i, t)) if case.flag == "random" else None  # stream 0, as in draws()
        r = tpo.from_numpy(case.x, dims=(i, t))
        if case.flag == "constant":
            flag = tpo.from_numpy(case.stops, dims=(i, t))
        elif case.flag == "comparison":
            flag = r[i, t].sum() > float(case.threshold)
        elif case.flag == "elementwise":  # holds where every element does
            flag = r > float(case.threshold)
        elif case.flag == "recurrence":
            flag = recurrence(r, i, t)[i, t] > float(case.threshold)
        else:
            flag = u > float(case.threshold)
        tpo.end_when(flag)
        spelled = {"prefix": lambda: r[i, 0:T].sum(),
                   "suffix": lambda: r[i, t:T].sum(),
                   "window": lambda: r[i, tpo.max(0, t - 2):t + 1].sum(),
                   "point": lambda: r[i, t].sum(),
                   "recurrence": lambda: recurrence(r, i, t)[i, 0:T].sum(),
                   "last": lambda: r[i, T - 1].sum(),
                   "mean": lambda: r[i, 0:T].mean(),
                   "affine": lambda: (r * 2.0 + 1.0)[i, 0:T].sum(),
                   "weighted": lambda: (r.sum() * tpo.eval_symbol(t).cast("float32"))[i, 0:T].sum(),
                   "returns": lambda: r.sum()[i, t:T].discounted_sum(float(DECAY))}
        return ctx.compile(fetch=[spelled[read]() for read in case.reads], backend=backend,
                           config=tpo.Config(end_check_every=every))


def draws(case: Case) -> np.ndarray:
    """The random flag's uniform numbers at every point up to the cap (a run without an end)."""
    iterations, cap = case.x.shape[:2]
    with tpo.Context(seed=case.seed) as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        program = ctx.compile(fetch=[tpo.random.uniform((), dims=(i, t))])
    return program.run({I: iterations, T: cap})[0]


def reference(case: Case) -> tuple[np.ndarray, list[np.ndarray]]:
    """The NumPy loop: each iteration's steps until the flag holds (that step included)."""
    iterations, cap = case.x.shape[:2]
    row = sums(case.x)
    h = np.zeros((iterations, cap), np.float32)
    for i in range(iterations):
        h[i, 0] = row[i, 0]
        for t in range(1, cap):
            h[i, t] = h[i, t - 1] * DECAY + row[i, t]
    flags = {"constant": lambda: case.stops, "comparison": lambda: row > case.threshold,
             "elementwise": lambda: (case.x > case.threshold).reshape(iterations, cap, -1).all(axis=2),
             "recurrence": lambda: h > case.threshold, "random": lambda: draws(case) > case.threshold}[case.flag]()
    lengths = np.full(iterations, cap)
    for i in range(iterations):
        for t in range(cap):
            if flags[i, t]:
                lengths[i] = t + 1
                break
    over_t = {read: np.full((iterations, cap), np.nan, np.float32) for read in ("suffix", "window", "point", "returns")}
    prefix, total = np.zeros(iterations, np.float32), np.zeros(iterations, np.float32)
    for i, n in enumerate(lengths):
        prefix[i], total[i] = row[i, :n].sum(), h[i, :n].sum()
        for t in range(n):
            over_t["suffix"][i, t] = row[i, t:n].sum()
            over_t["window"][i, t] = row[i, max(0, t - 2):t + 1].sum()
            over_t["point"][i, t] = row[i, t]
            over_t["returns"][i, t] = (DECAY ** np.arange(n - t) * row[i, t:n]).sum()
    per_point = row.size and case.x.size // row.size
    ends = {"last": [row[i, n - 1] for i, n in enumerate(lengths)],
            "mean": [row[i, :n].sum() / (n * per_point) for i, n in enumerate(lengths)],
            "affine": [2 * row[i, :n].sum() + n * per_point for i, n in enumerate(lengths)],
            "weighted": [(np.arange(n) * row[i, :n]).sum() for i, n in enumerate(lengths)]}
    values = {"prefix": prefix, "recurrence": total, **over_t, **{k: np.array(v, np.float32) for k, v in ends.items()}}
    return lengths, [values[read] for read in case.reads]


def check(case: Case, backend: str, every: int | None = None) -> None:
    """``case`` on ``backend``, its flag read on the host every ``every`` steps, against :func:`reference`."""
    pytest.importorskip(backend)
    program = build(case, backend, every)
    iterations, cap = case.x.shape[:2]
    out = program.run({"I": iterations, "T": cap})
    lengths, expected = reference(case)
    np.testing.assert_array_equal(program.lengths["T"], lengths, err_msg=f"lengths of {case.reads}")
    for read, got, want in zip(case.reads, out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True,
                                   err_msg=f"{read} of {case.reads} ended by a {case.flag} flag on {backend}")


programs = st.builds(
    lambda flag, reads, seed, shape, backend, every: (case_of(flag, tuple(reads), seed, shape), backend, every),
    st.sampled_from(FLAGS), st.lists(st.sampled_from(READS), min_size=1, max_size=len(READS), unique=True),
    st.integers(0, 2 ** 16),
    st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 4, 5, 7]), st.sampled_from([0, 1, 3])),
    st.sampled_from(BACKENDS), st.sampled_from([None, 3]))


@settings(deadline=None, max_examples=40)
@given(programs)
def test_every_spelling_of_a_read_ends_where_a_numpy_loop_breaks(drawn):
    check(*drawn)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("read", READS)
def test_each_read_alone_ends_where_a_numpy_loop_breaks_at_a_constant_flag(read, backend):
    stops = np.array([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], bool)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    check(Case("constant", (read,), 0, x, stops, np.float32(0.0)), backend)


@pytest.mark.parametrize("flag", FLAGS)
def test_all_reads_together_end_where_a_numpy_loop_breaks(flag):
    for backend in BACKENDS:
        check(case_of(flag, READS, 7, (3, 6, 2)), backend)
