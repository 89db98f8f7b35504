"""Reads out of range are judged on the program as written, before any pass.

Simplification folds arithmetic on constants (an all-zero tensor plus
anything is that thing), so a check after the passes would see a read of an
all-zero constant vanish and accept the program. The verdict must not depend
on the data: every constant, whatever its values, gives the same error.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo

CONSTANTS = {
    "zeros": lambda n, rng: np.zeros(n, np.float32),
    "ones": lambda n, rng: np.ones(n, np.float32),
    "random": lambda n, rng: rng.standard_normal(n).astype(np.float32),
}


def _run(data: np.ndarray, offset: int, combine: str):
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(data, dims=(t,))
        read = x[t + offset]
        y = {"add": read + x[t], "mul": read * x[t], "alone": read}[combine]
        return ctx.run(bounds={T: len(data)}, fetch=[y])


def _outcome(data: np.ndarray, offset: int, combine: str) -> str:
    try:
        _run(data, offset, combine)
    except tpo.DomainError as err:
        return str(err).splitlines()[0]
    return "ran"


def test_an_out_of_range_read_of_all_zeros_is_a_domain_error():
    with pytest.raises(tpo.DomainError, match=r"temporal read out of range.* at \[t \+ 1\]"):
        _run(np.zeros(5, np.float32), 1, "add")


@settings(max_examples=12, deadline=None)
@given(offset=st.integers(1, 3), size=st.integers(4, 7), combine=st.sampled_from(["add", "mul", "alone"]),
       seed=st.integers(0, 2**16))
def test_the_verdict_is_the_same_for_every_constant(offset, size, combine, seed):
    rng = np.random.default_rng(seed)
    outcomes = {name: _outcome(make(size, rng), offset, combine) for name, make in CONSTANTS.items()}
    assert len(set(outcomes.values())) == 1, outcomes
    assert outcomes["zeros"].startswith("temporal read out of range"), outcomes


def test_an_in_range_read_of_zeros_still_runs():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(np.zeros(5, np.float32), dims=(t,))
        y = x[tpo.min(t + 1, T - 1)] + x[t]
        out, = ctx.run(bounds={T: 5}, fetch=[y])
    np.testing.assert_array_equal(out, np.zeros(5, np.float32))
