"""Strongly connected components of a graph given as successor sets (Tarjan's algorithm, without recursion)."""
from __future__ import annotations


def strongly_connected(succ: dict[int, set[int]]) -> list[list[int]]:
    """Every strongly connected component of the graph ``succ`` (node -> its successors)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack, on, out = [], set(), []
    for root in succ:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        component.append(x)
                        if x == v:
                            break
                    out.append(component)
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(succ[w])))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def cycles(succ: dict[int, set[int]]) -> list[set[int]]:
    """The components that hold a cycle: two or more nodes, or one that is its own successor."""
    return [set(c) for c in strongly_connected(succ) if len(c) > 1 or c[0] in succ[c[0]]]
