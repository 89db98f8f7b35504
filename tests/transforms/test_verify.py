"""The SDG verifier: each broken invariant is named, with the node or edge and the pass."""
from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import tempo as tpo
from tempo.ir import ops
from tempo.ir.sdg import Edge
from tempo.ir.verify import VerifyError, verify
from tempo.symbolic.expr import make_slice, seq, step_and_bound
from tempo.transforms import PIPELINE, run_pipeline

XS = np.random.default_rng(0).standard_normal((5, 3))


def program():
    """A small valid program: its SDG, declared dims, and the ids of a few nodes."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        s = tpo.placeholder((3,), "float64", dims=(t,))
        s[0] = x[0]
        s[t + 1] = s[t] * 0.5 + x[t + 1]
        g = s[t:T].sum(axis=0)
        node = {"x": x.node.id, "s": s.node.id, "g": g.node.id}
        return ctx.sdg, tuple(ctx.dim_order), node, (t, T)


def test_a_valid_program_passes_before_and_after_every_pass():
    sdg, dims, _, _ = program()
    verify(sdg, dims)
    out, stats = run_pipeline(replace(sdg, roots=tuple(sdg.nodes)), verify=True, dims=dims)
    assert [s.name for s in stats] == [name for name, _ in PIPELINE]
    verify(out, dims)


def test_the_suite_runs_with_the_verifier_on():
    assert os.environ.get("TEMPO_VERIFY") == "1"


def edges_into(sdg, n):
    return [k for k, e in enumerate(sdg.edges) if e.sink == n]


def broken(sdg, **changes):
    return replace(sdg, nodes=dict(sdg.nodes), edges=list(sdg.edges), **changes)


def test_an_edge_from_a_missing_node():
    sdg, dims, node, _ = program()
    bad = broken(sdg)
    del bad.nodes[node["x"]]
    with pytest.raises(VerifyError, match=r"names node %\d+, which is not in the SDG"):
        verify(bad, dims)


def test_input_ports_must_be_contiguous():
    sdg, dims, node, _ = program()
    bad = broken(sdg)
    first = edges_into(bad, node["s"])[0]
    bad.edges[first] = replace(bad.edges[first], sink_in=7)
    with pytest.raises(VerifyError, match=r"has input ports \[1, 7\], not 0..1"):
        verify(bad, dims)


def test_an_index_has_one_item_per_source_dim():
    sdg, dims, node, (t, _) = program()
    bad = broken(sdg)
    k = edges_into(bad, node["s"])[0]
    bad.edges[k] = replace(bad.edges[k], index=seq(0, 0))
    with pytest.raises(VerifyError, match=r"an index of 2 items for a source over 1 dims \(t\)"):
        verify(bad, dims)


def test_an_index_uses_only_the_readers_dims():
    sdg, dims, node, _ = program()
    i, _ = step_and_bound("i")
    bad = broken(sdg)
    k = edges_into(bad, node["s"])[0]
    bad.edges[k] = replace(bad.edges[k], index=seq(i))
    with pytest.raises(VerifyError, match=r"uses i, not a dim of the reading node \(t\) nor a bound"):
        verify(bad, dims)


def test_a_read_outside_the_source_at_every_point():
    sdg, dims, node, (t, T) = program()
    bad = broken(sdg)
    k = edges_into(bad, node["s"])[0]
    bad.edges[k] = replace(bad.edges[k], index=seq(T + t))
    with pytest.raises(VerifyError, match=r"reads t at T \+ t, outside 0..T-1 at every point"):
        verify(bad, dims)
    bad.edges[k] = replace(bad.edges[k], index=seq(make_slice(t + 1, t)))
    with pytest.raises(VerifyError, match=r"slices t by t \+ 1:t, empty at every point"):
        verify(bad, dims)


def test_recorded_shapes_and_dtypes_are_inferred_again():
    sdg, dims, node, _ = program()
    bad = broken(sdg)
    bad.nodes[node["g"]] = replace(bad.nodes[node["g"]], shapes=((4,),))
    with pytest.raises(VerifyError, match=r"output 0 is recorded as \(4,\), but its inputs give \(3,\)"):
        verify(bad, dims)
    bad.nodes[node["g"]] = replace(sdg.nodes[node["g"]], dtypes=("float32",))
    with pytest.raises(VerifyError, match=r"dtypes recorded as \('float32',\), but its inputs give \('float64',\)"):
        verify(bad, dims)


def test_a_merge_reads_its_own_shape():
    sdg, dims, node, _ = program()
    bad = broken(sdg)
    bad.nodes[node["s"]] = replace(bad.nodes[node["s"]], shapes=((2,),))
    with pytest.raises(VerifyError, match=r"a merge of \(2,\):float64 reads \(3,\):float64"):
        verify(bad, dims)


def test_domains_use_declared_dims_in_order():
    sdg, dims, node, (t, _) = program()
    i, _ = step_and_bound("i")
    bad = broken(sdg)
    bad.nodes[node["x"]] = replace(bad.nodes[node["x"]], domain=(i,))
    with pytest.raises(VerifyError, match=r"varies over i, not a declared dim"):
        verify(bad, dims)
    with pytest.raises(VerifyError, match=r"out of the declared order"):
        verify(replace(sdg, nodes={**sdg.nodes, node["g"]: replace(sdg.nodes[node["g"]], domain=(t, i))}),
               (i, t))


def test_roots_and_moved_values_name_nodes():
    sdg, dims, _, _ = program()
    with pytest.raises(VerifyError, match=r"root %99 is not in the SDG"):
        verify(replace(sdg, roots=(99,)), dims)
    with pytest.raises(VerifyError, match=r"recorded as moved to %98.0, which does not exist"):
        verify(replace(sdg, moved={(0, 0): (98, 0)}), dims)


def test_a_fused_island_is_checked_step_by_step():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        y = (tpo.from_numpy(XS, dims=(t,)) * 2.0).exp()
        program = ctx.compile([y])
    sdg = program.sdg
    n, island = next((n, x) for n, x in sdg.nodes.items() if isinstance(x.op, ops.FusedOp))
    steps = list(island.op.steps)
    steps[-1] = replace(steps[-1], shapes=((5,),))
    bad = replace(sdg, nodes={**sdg.nodes, n: replace(island, op=replace(island.op, steps=tuple(steps)))})
    with pytest.raises(VerifyError, match=rf"step {len(steps) - 1} \(ElementwiseOp\): output 0 is recorded as \(5,\)"):
        verify(bad, program.dim_order, after="fuse")


def test_the_pass_that_broke_the_sdg_is_named():
    sdg, dims, node, _ = program()

    def drop_an_input(sdg, cfg):
        return replace(sdg, edges=[e for e in sdg.edges if e.sink != node["g"]])

    careless = SimpleNamespace(Config=lambda: None, apply=drop_an_input)
    with pytest.raises(VerifyError, match=r"the SDG after the 'careless' pass is invalid: .*do not fit ReduceOp"):
        run_pipeline(sdg, verify=True, dims=dims, pipeline=(("dce", tpo.transforms.dce), ("careless", careless)))
    extra = Edge(node["g"], 1, node["x"], 0, seq(0))
    with pytest.raises(VerifyError, match=r"the SDG as built is invalid"):
        run_pipeline(replace(sdg, edges=sdg.edges + [extra]), verify=True, dims=dims)
