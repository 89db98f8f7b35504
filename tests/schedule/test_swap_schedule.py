"""Evict and load statements scheduled by isl with the computation (TEMPO Fig. 15b): walking the
schedule, no point is read while it is evicted without a load, and the computation runs in the
same order as without the moves."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api.compile import compile_program
from tempo.plan import swap
from tempo.transforms import tile
from tests.schedule.chains import build_chain
from tests.schedule.test_deallocation_schedule import walk
from tests.schedule.test_swap_plan import XS, acting_then_learning

BOUNDS = {"I": 3, "T": 6}


def with_and_without_moves(build, passes=None):
    """``build``'s program compiled under a budget with every sliced tensor swapped, and under the
    same budget with none swapped (the same passes and frees)."""
    programs = []
    kept = swap.MIN_BYTES
    try:
        for min_bytes in (0, 1 << 62):
            swap.MIN_BYTES = min_bytes
            with tpo.Context() as ctx:
                fetch, bounds = build(ctx)
                programs.append(compile_program(ctx, fetch, bounds=bounds, passes=passes,
                                                memory={"device_budget": "64MB"}))
    finally:
        swap.MIN_BYTES = kept
    return programs


def executed(trace: list) -> list:
    return [s for s in trace if s[0] == "execute"]


def test_the_moves_are_statements_of_the_schedule_around_their_producer_and_readers():
    moving, still = with_and_without_moves(acting_then_learning)
    trace, bad = walk(moving, BOUNDS)
    assert not bad and {"evict", "load"} <= {kind for kind, _, _ in trace}
    assert executed(trace) == executed(walk(still, BOUNDS)[0])
    assert not any(kind in ("evict", "load") for kind, _, _ in walk(still, BOUNDS)[0])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "shift", "window", "causal", "whole", "recur", "next"]),
                min_size=1, max_size=4), st.booleans(), st.sampled_from([0, 2, 4]), st.integers(1, 6))
def test_no_point_is_read_while_evicted_and_the_computation_keeps_its_order(chain_ops, fuse, tiles, steps):
    """On isl's schedule tree, and on shift fusion's flat map where tiles of the whole-dim read
    run inside the loop producing what they read."""
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        v, outs = build_chain(chain_ops, XS, i, t, T)
        return outs + [v[i, 0:T].mean(axis=0)], {I: 3, T: 6}

    passes = {"tile": tile.Config(tiles={"t": tiles}) if tiles else False, **({} if fuse else {"fuse": False})}
    moving, still = with_and_without_moves(build, passes)
    bounds = {"I": 2, "T": steps}
    trace, bad = walk(moving, bounds)
    assert not bad, bad
    assert executed(trace) == executed(walk(still, bounds)[0])
    for got, want in zip(moving.run(BOUNDS), still.run(BOUNDS)):
        np.testing.assert_array_equal(got, want)
