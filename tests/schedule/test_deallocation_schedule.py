"""Deallocation statements scheduled by isl with the computation (TEMPO Fig. 15a): walking the
schedule, no point is read after its free, and the computation runs in the same order as without frees."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.schedule import ast
from tempo.symbolic.evaluate import evaluate
from tests.schedule.chains import build_chain
from tests.schedule.test_deallocations import XS, chain, compiled


def walk(program, bounds: dict) -> tuple[list, list]:
    """The statements ``program.ast`` runs at ``bounds``, in order, as ``(kind, node, point)``, and
    every read of a freed point, or of one evicted and not loaded back (``(reader, node, output,
    point)``), found on the way."""
    sdg, env, trace, freed, bad = program.sdg, program._check_bounds(bounds), [], set(), []
    host = set()  # the points evicted to the host and not loaded back

    def points(item, at):
        value = evaluate(item, at)
        return range(value.start, value.stop) if isinstance(value, slice) else [value]

    def run(stmt, at):
        if isinstance(stmt, ast.Sequence):
            for s in stmt.body:
                run(s, at)
        elif isinstance(stmt, ast.Loop):
            k = evaluate(stmt.start, at)
            while evaluate(stmt.cond, {**at, stmt.var: k}):
                run(stmt.body, {**at, stmt.var: k})
                k += stmt.step
        elif isinstance(stmt, ast.If):
            if evaluate(stmt.cond, at):
                run(stmt.then, at)
            elif stmt.orelse is not None:
                run(stmt.orelse, at)
        elif isinstance(stmt, ast.Free):
            node = sdg.nodes[stmt.node_id]
            rows = [list(points(item, at)) for item in stmt.point]
            for j in stmt.freed(len(node.shapes)):
                freed.update((stmt.node_id, j, p) for p in _product(rows))
            trace.append(("free", stmt.node_id, tuple(tuple(r) for r in rows)))
        elif isinstance(stmt, ast.Evict):  # a load too
            node = sdg.nodes[stmt.node_id]
            rows = [list(points(item, at)) for item in stmt.index]
            moved = {(stmt.node_id, j, p) for j in stmt.moved(len(node.shapes)) for p in _product(rows)}
            if isinstance(stmt, ast.Load):
                host.difference_update(moved)
            else:
                host.update(moved)
            trace.append((type(stmt).__name__.lower(), stmt.node_id, tuple(tuple(r) for r in rows)))
        elif isinstance(stmt, ast.Execute):
            node = sdg.nodes[stmt.node_id]
            point = tuple(evaluate(p, at) for p in stmt.point)
            here = {**env, **{d.name: v for d, v in zip(node.domain, point)}}
            for e in sdg.in_edges(stmt.node_id):
                if e.cond is not None and not evaluate(e.cond, here):
                    continue
                for p in _product([list(points(item, here)) for item in e.index.args]):
                    if (e.src, e.src_out, p) in freed or (e.src, e.src_out, p) in host:
                        bad.append((stmt.node_id, e.src, e.src_out, p))
            host.difference_update((stmt.node_id, j, point) for j in range(len(node.shapes)))
            trace.append(("execute", stmt.node_id, point))

    run(program.ast, dict(env))
    return trace, bad


def _product(rows: list[list[int]]) -> list[tuple[int, ...]]:
    out = [()]
    for row in rows:
        out = [p + (v,) for p in out for v in row]
    return out


def test_the_frees_are_statements_of_the_schedule_right_after_their_last_reader():
    (on, _), (off, _) = compiled(chain, passes={"fuse": False}), \
        compiled(chain, {"deallocate": False}, passes={"fuse": False})
    trace, bad = walk(on, {"I": 3, "T": 6})
    assert not bad and any(kind == "free" for kind, _, _ in trace)
    assert [s for s in trace if s[0] == "execute"] == walk(off, {"I": 3, "T": 6})[0]
    assert "free " in str(on.ast) and ".free_point(" in on.code


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["tanh", "square", "shift", "window", "causal", "recur", "next"]),
                min_size=1, max_size=5), st.booleans(), st.integers(1, 7))
def test_no_point_is_read_after_its_free_and_the_computation_keeps_its_order(chain_ops, fuse, steps):
    def build(ctx):
        (i, I), (t, T) = ctx.dims("i", "t")
        v, outs = build_chain(chain_ops, XS, i, t, T)
        return outs + [v], {I: 3, T: 6}

    passes = None if fuse else {"fuse": False}
    with tpo.Context() as ctx:
        fetch, _ = build(ctx)
        on = ctx.compile(fetch, passes=passes)
        off = ctx.compile(fetch, passes=passes, memory={"deallocate": False})
    bounds = {"I": 2, "T": min(steps, 6)}
    trace, bad = walk(on, bounds)
    assert not bad, bad
    assert [s for s in trace if s[0] == "execute"] == walk(off, bounds)[0]
    for got, want in zip(on.run(bounds), off.run(bounds)):
        np.testing.assert_array_equal(got, want)
