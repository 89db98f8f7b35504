"""Strongly connected components against brute-force reachability, on random graphs."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.ir.components import cycles, strongly_connected


def reachable(succ: dict[int, set[int]], start: int) -> set[int]:
    seen, stack = set(), [start]
    while stack:
        for w in succ[stack.pop()]:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))))
def test_components_are_the_mutually_reachable_sets(graph):
    n, edges = graph
    succ = {v: set() for v in range(n)}
    for a, b in edges:
        succ[a].add(b)
    reach = {v: reachable(succ, v) for v in range(n)}
    components = strongly_connected(succ)
    assert sorted(v for c in components for v in c) == list(range(n))
    for c in components:
        for v in c:
            assert {w for w in range(n) if w == v or (w in reach[v] and v in reach[w])} == set(c)
    assert {frozenset(c) for c in cycles(succ)} == {frozenset(c) for c in components
                                                    if len(c) > 1 or c[0] in succ[c[0]]}


def test_a_long_chain_needs_no_recursion():
    succ = {v: {v + 1} for v in range(20_000)}
    succ[20_000] = {0}
    assert len(cycles(succ)) == 1
