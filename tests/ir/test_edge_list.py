"""The SDG's edge index agrees with a scan of its edges after any mutation of the list."""
import copy
import pickle

from hypothesis import given, settings, strategies as st

from tempo.ir.edge_list import EdgeList
from tempo.ir.sdg import SDG, Edge
from tempo.symbolic.expr import seq

NODES = range(5)
edges = st.builds(lambda sink, sink_in, src: Edge(sink, sink_in, src, 0, seq()),
                  st.sampled_from(NODES), st.integers(0, 2), st.sampled_from(NODES))
mutations = st.one_of(
    st.tuples(st.just("append"), edges),
    st.tuples(st.just("add_edge"), edges),
    st.tuples(st.just("setitem"), st.integers(0, 20), edges),
    st.tuples(st.just("delitem"), st.integers(0, 20)),
    st.tuples(st.just("del_slice"), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("insert"), st.integers(-5, 20), edges),
    st.tuples(st.just("pop"), st.integers(0, 20)),
    st.tuples(st.just("remove"), st.integers(0, 20)),
    st.tuples(st.just("extend"), st.lists(edges, max_size=3)),
    st.tuples(st.just("iadd"), st.lists(edges, max_size=3)),
    st.tuples(st.just("imul"), st.integers(0, 2)),
    st.tuples(st.just("set_slice"), st.integers(0, 20), st.lists(edges, max_size=3)),
    st.tuples(st.just("sort"),), st.tuples(st.just("reverse"),), st.tuples(st.just("clear"),),
    st.tuples(st.just("replace_list"), st.lists(edges, max_size=4)),
    st.tuples(st.just("copy"),), st.tuples(st.just("pickle"),),
)


def _mutate(sdg: SDG, m) -> SDG:
    kind, *args = m
    es = sdg.edges
    if kind == "append":
        es.append(args[0])
    elif kind == "add_edge":
        sdg.add_edge(args[0])
    elif kind == "setitem" and es:
        es[args[0] % len(es)] = args[1]
    elif kind == "delitem" and es:
        del es[args[0] % len(es)]
    elif kind == "del_slice":
        del es[args[0]:args[1]]
    elif kind == "insert":
        es.insert(args[0], args[1])
    elif kind == "pop" and es:
        es.pop(args[0] % len(es))
    elif kind == "remove" and es:
        es.remove(es[args[0] % len(es)])
    elif kind == "extend":
        es.extend(args[0])
    elif kind == "iadd":
        sdg.edges += args[0]
    elif kind == "imul":
        sdg.edges *= args[0]
    elif kind == "set_slice":
        es[args[0]:args[0] + 1] = args[1]
    elif kind == "sort":
        es.sort(key=lambda e: (e.src, e.sink_in))
    elif kind == "reverse":
        es.reverse()
    elif kind == "clear":
        es.clear()
    elif kind == "replace_list":
        sdg.edges = list(args[0])
    elif kind == "copy":
        return copy.deepcopy(sdg)
    elif kind == "pickle":
        return pickle.loads(pickle.dumps(sdg))
    return sdg


@settings(max_examples=200, deadline=None)
@given(st.lists(edges, max_size=6), st.lists(st.tuples(mutations, st.booleans()), max_size=12))
def test_index_agrees_with_a_scan_after_random_mutations(start, steps):
    sdg = SDG(edges=list(start))
    for mutation, look in steps:
        sdg = _mutate(sdg, mutation)
        if look:  # reading the index between mutations builds it, so appends then extend it
            sdg.in_edges(0)
        assert isinstance(sdg.edges, EdgeList)
        for n in NODES:
            assert sdg.in_edges(n) == sorted((e for e in sdg.edges if e.sink == n), key=lambda e: e.sink_in)
            assert sdg.out_edges(n) == [e for e in sdg.edges if e.src == n]


def test_looked_up_edges_are_copies():
    sdg = SDG(edges=[Edge(1, 0, 0, 0, seq())])
    sdg.in_edges(1).clear()
    sdg.out_edges(0).clear()
    assert len(sdg.in_edges(1)) == len(sdg.out_edges(0)) == 1
