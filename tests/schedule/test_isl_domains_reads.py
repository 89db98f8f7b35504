"""The check of reads in range: a read whose index keeps it inside its source's domain needs no isl,
and a program is analysed only where a read may leave its source's domain, with the verdict of the
analysis of every read.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tempo as tpo
from tempo.ir.ops import EvalSymbolOp
from tempo.ir.sdg import SDG, Edge
from tempo.schedule import isl_domains, isl_expr
from tempo.symbolic.expr import const, make_slice, seq, step_and_bound

(t, T), (i, I) = step_and_bound("t"), step_and_bound("i")
ITEMS = {"t": [t, t - 1, t + 1, 0, T - 1, make_slice(0, T), make_slice(t, T), make_slice(0, t + 1),
               make_slice(1, T), make_slice(0, T + 1)],
         "i": [i, i - 1, 0, make_slice(0, I), make_slice(0, i + 1)]}


def _edge_between(sink_dims: tuple, src_dims: tuple, items: tuple) -> tuple[SDG, Edge]:
    sdg = SDG()
    op = EvalSymbolOp(const(0))
    src = sdg.add_node(op, src_dims, [()], ["float32"])
    sink = sdg.add_node(op, sink_dims, [()], ["float32"])
    edge = Edge(sink.id, 0, src.id, 0, seq(*items), None)
    sdg.add_edge(edge)
    return sdg, edge


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([(t,), (i,), (i, t)]), st.sampled_from([(t,), (i, t), ()]), st.data())
def test_a_read_kept_inside_by_its_index_reads_inside_at_every_point(sink_dims, src_dims, data):
    items = tuple(data.draw(st.sampled_from(ITEMS[d.name])) for d in src_dims)
    sdg, edge = _edge_between(sink_dims, src_dims, items)
    if not isl_domains._inside_by_its_index(sdg, edge):
        return
    params = isl_domains.all_params(sdg)
    context = isl_domains._positive(params)
    reads = isl_expr.access_map("S1", sink_dims, "S0", src_dims, edge.index, params=params, src_box=False)
    box = isl_domains._box(sdg, 1, params, context)
    assert isl_domains._outside(reads, box, isl_domains._box(sdg, 0, params, context), context).is_empty()


def _compiled(read: str):
    """s[t + 1] = s[t] + x[...] and y[t] = x[...]: ``read`` says which x each reads."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(np.arange(5.0), dims=(t,))
        s = tpo.placeholder((), "float64", dims=(t,))
        s[0] = x[0]
        s[t + 1] = s[t] + (x[t + 1] if read == "next in the recurrence" else x[t])
        y = x[t + 1] if read == "next everywhere" else x[tpo.min(t + 1, T - 1)]
        program = ctx.compile(fetch=[s, y])
    return program, T


def test_a_program_whose_reads_stay_inside_by_their_indices_is_not_analysed_as_written():
    program, T = _compiled("guarded")
    out = program.run({T: 5})
    assert program.written_domains is None
    assert out[0].tolist() == [0.0, 0.0, 1.0, 3.0, 6.0] and out[1].tolist() == [1.0, 2.0, 3.0, 4.0, 4.0]


def test_a_read_past_the_end_where_its_reader_never_runs_is_judged_by_the_analysis():
    program, T = _compiled("next in the recurrence")  # x[t + 1] is read at t < T - 1 only: s[T] is not
    out = program.run({T: 5})
    assert program.written_domains is not None
    assert out[0].tolist() == [0.0, 1.0, 3.0, 6.0, 10.0]


def test_a_read_past_the_end_is_an_error():
    program, T = _compiled("next everywhere")
    with pytest.raises(tpo.TempoError, match="out of range"):
        program.run({T: 5})
    assert program.written_domains is not None
