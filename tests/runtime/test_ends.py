"""The run-time end checks of ``tpo.end_when``: how many steps run between host reads of the flag."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.runtime.ends import MAX_EVERY, every_for


@given(st.integers(1, 2000), st.floats(1e-7, 1e-2), st.floats(1e-6, 1e-1))
def test_the_steps_between_reads_cost_least(length, latency, step):
    k = every_for(length, latency, step)
    assert 1 <= k <= MAX_EVERY

    def cost(every):  # reads, and the steps run past the end on average
        return length / every * latency + (every - 1) / 2 * step

    best = min(range(1, MAX_EVERY + 1), key=cost)
    assert cost(k) <= cost(best) * 1.1 + 1e-12 or math.isclose(cost(k), cost(best))


def test_reads_are_spaced_by_the_square_root_of_their_cost_in_steps():
    assert every_for(10, 1e-6, 1e-3) == 1
    assert every_for(500, 1e-5, 1e-5) == 32           # sqrt(2 * 500), rounded
    assert every_for(10_000, 1.0, 1e-6) == MAX_EVERY


def expected_lengths(flags: np.ndarray) -> np.ndarray:
    """The NumPy loop: per iteration (axis 0), the step after the first where every flag holds, else
    the cap (flags: ``(iterations, steps, *elements)``)."""
    held = flags.reshape(flags.shape[0], flags.shape[1], -1).all(axis=2)
    return np.array([int(np.argmax(row)) + 1 if row.any() else len(row) for row in held])


@settings(deadline=None, max_examples=15)
@given(st.integers(1, 3), st.integers(0, 3), st.sampled_from([1, 2]), st.data())
def test_a_check_that_reads_its_flag_at_every_step_ends_where_a_numpy_loop_breaks(iterations, batch, every, data):
    """A flag of one element (a NumPy store hands its check an ``np.bool_``) or of ``batch``
    elements (every one holds), read at every step (``E<n>``, a plain function) or every other
    step (the check itself)."""
    cap = 6
    shape = (iterations, cap) + ((batch,) if batch else ())
    flags = np.array(data.draw(st.lists(st.booleans(), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                     bool).reshape(shape)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        flag = tpo.from_numpy(flags, dims=(i, t))  # of shape (batch,) with a batch
        tpo.end_when(flag)
        held = flag.cast("float32")[i, 0:T].sum()  # the flags that hold up to the end
        program = ctx.compile(fetch=[held], config=tpo.Config(end_check_every=every))
    (out,) = program.run({"I": iterations, "T": cap})
    lengths = expected_lengths(flags)
    np.testing.assert_array_equal(program.lengths["T"], lengths)
    np.testing.assert_array_equal(out, [flags[k, :n].sum() for k, n in enumerate(lengths)])
    check = program.end_checks["T"]
    if every == 1:
        assert check.steps == check.reads == lengths.sum()


def test_a_check_read_at_every_step_is_a_plain_function_of_the_flag():
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        x = tpo.from_numpy(np.array([[False, True, False], [False, False, False]]), dims=(i, t))
        tpo.end_when(x)
        program = ctx.compile(fetch=[x.cast("float32")[i, 0:T].sum()])
    program.run({"I": 2, "T": 3})
    check = program.end_checks["T"]
    assert "E" in program.code and callable(check.stepper()) and check.stepper() is not check
    assert check.steps == check.reads == 5 and program.lengths["T"].tolist() == [2, 3]
