"""The SDG's edge list, indexed by sink and by source node.

:class:`EdgeList` is a ``list`` of edges that keeps, beside its items, each
node's in-edges and out-edges in list order. Appending extends the index;
any other change to the list drops it, and the next look-up rebuilds it from
the list, so the index always agrees with a scan of the edges.
"""
from __future__ import annotations


def _dropping_index(name: str):
    method = getattr(list, name)

    def mutate(self, *args, **kwargs):
        self._by_sink = self._by_src = None
        return method(self, *args, **kwargs)

    mutate.__name__ = name
    mutate.__doc__ = method.__doc__
    return mutate


class EdgeList(list):
    """A list of edges with each node's in-edges and out-edges at hand (see module doc)."""

    __slots__ = ("_by_sink", "_by_src")

    def __init__(self, edges=()):
        super().__init__(edges)
        self._by_sink = self._by_src = None

    def append(self, edge) -> None:
        super().append(edge)
        if self._by_sink is not None:
            self._by_sink.setdefault(edge.sink, []).append(edge)
            self._by_src.setdefault(edge.src, []).append(edge)

    def into(self, node_id: int) -> list:
        """The edges whose sink is ``node_id``, in list order."""
        if self._by_sink is None:
            self._build()
        return list(self._by_sink.get(node_id, ()))

    def out_of(self, node_id: int) -> list:
        """The edges whose source is ``node_id``, in list order."""
        if self._by_src is None:
            self._build()
        return list(self._by_src.get(node_id, ()))

    def _build(self) -> None:
        by_sink, by_src = {}, {}
        for e in self:
            by_sink.setdefault(e.sink, []).append(e)
            by_src.setdefault(e.src, []).append(e)
        self._by_sink, self._by_src = by_sink, by_src

    def __reduce__(self):
        return EdgeList, (list(self),)


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "extend", "insert", "pop", "remove",
              "clear", "sort", "reverse"):
    setattr(EdgeList, _name, _dropping_index(_name))
