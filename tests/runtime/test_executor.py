"""The executor frees each tensor's points once no later iteration can read them."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.runtime.executor import Executor

K, ITERATIONS = 4, 10


def _block_reader_program():
    """s sums x at the start of each block of K iterations; x adds up s, so the two
    recurrences share one loop over i (as parameters and episodes do in PPO).
    ``never_run`` reads x but nothing needs it, so it is never scheduled."""
    ctx = tpo.Context()
    with ctx:
        ((i, I),) = ctx.dims("i")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[0] = tpo.full((), 1.0, "float64")
        s = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[i + 1] = x[i] + s[i]
        s[0] = x[0]
        s[i + 1] = s[i] + x[((i + 1) // K) * K]
        never_run = x * 3.0  # noqa: F841 - a reader that never runs must not pin x
        program = ctx.compile(fetch=[s], passes={"vectorize": False})
    return program, x, s


def test_block_reads_free_all_but_the_current_block():
    program, x, s = _block_reader_program()
    executor = Executor(program.sdg, program.ast, program.backend, {"I": ITERATIONS},
                        keep={s.node.id})
    executor.run()
    # x[8], the last block start read, is all that is left (x[9] is read by no one)
    assert sorted(p[0] for p in executor.stores[(x.node.id, 0)].data) == [8]
    assert len(executor.stores[(s.node.id, 0)].data) == ITERATIONS  # fetched: kept


def test_freeing_does_not_change_results():
    program, _, _ = _block_reader_program()
    (got,) = program.run({"I": ITERATIONS})
    x, s = [1.0], [1.0]
    for u in range(1, ITERATIONS):
        x.append(x[u - 1] + s[u - 1])
        s.append(s[u - 1] + x[(u // K) * K])
    np.testing.assert_array_equal(got, s)


def test_window_reads_keep_only_the_window():
    """s[i] = s[i-1] + sum(x[max(0, i - 2):i + 1]), x[i] = x[i-1] + s[i-1] / 2: x keeps only what a later window reads."""
    ctx = tpo.Context()
    with ctx:
        ((i, I),) = ctx.dims("i")
        x = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(i,))
        x[0] = tpo.full((), 1.0, "float64")
        x[i + 1] = x[i] + s[i] * 0.5
        s[0] = x[0]
        s[i + 1] = s[i] + x[tpo.max(0, i - 1):i + 2].sum()
        program = ctx.compile(fetch=[s], passes={"vectorize": False})
    executor = Executor(program.sdg, program.ast, program.backend, {"I": ITERATIONS},
                        keep={s.node.id})
    executor.run()
    assert sorted(p[0] for p in executor.stores[(x.node.id, 0)].data) == [8, 9]  # the next window
    (got,) = program.run({"I": ITERATIONS})
    xs, ss = [1.0], [1.0]
    for u in range(1, ITERATIONS):
        xs.append(xs[u - 1] + ss[u - 1] * 0.5)
        ss.append(ss[u - 1] + sum(xs[max(0, u - 2):u + 1]))
    np.testing.assert_allclose(got, ss, rtol=1e-12)
