"""Domain reduction: a node whose inputs do not vary over a dim loses it; the program computes the same."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tempo as tpo
from tempo.api.rt import RecurrentTensor
from tempo.ir import ops
from tempo.ir.sdg import Edge
from tempo.symbolic.expr import seq
from tests.transforms.simplification import compiled, same_results, stat

W = np.random.default_rng(0).standard_normal((4, 3))
XS = np.random.default_rng(1).standard_normal((4, 5, 3))
ON = {"vectorize": False, "fuse": False}  # the structure as the simplification passes leave it
OFF = {**ON, "domain_reduction": False}


def both(build, bounds={"I": 4, "T": 5}):
    (fast, got), (slow, want) = compiled(build, ON, bounds), compiled(build, OFF, bounds)
    same_results(got, want)
    return fast, slow, got


def over(rt: RecurrentTensor, op: ops.Op, domain) -> RecurrentTensor:
    """``op`` of ``rt`` (read at its own point) as a node over ``domain``, a superset of ``rt``'s dims:
    the shape autodiff gives a gradient it spreads over a reader's dims."""
    ctx = rt.ctx
    node = ctx.sdg.add_node(op, domain, (rt.shape,), (rt.dtype,))
    ctx.sdg.add_edge(Edge(node.id, 0, rt.node.id, rt.out, rt.index_expr()))
    return RecurrentTensor(ctx, node)


def dims(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    return i, t, tpo.from_numpy(W, dims=(i,)), tpo.from_numpy(XS, dims=(i, t))


def domain_of(program, rt) -> tuple[str, ...]:
    return tuple(d.name for d in program.sdg.nodes[rt.node.id].domain)


def test_a_node_its_inputs_do_not_vary_over_t_runs_once_per_i():
    made = {}

    def build(ctx):
        i, t, w, x = dims(ctx)
        made["z"] = z = over(w, ops.ElementwiseOp("exp"), (i, t))
        made["y"] = y = z * 2.0                      # follows on the next round
        return [y * x]

    fast, slow, (got,) = both(build)
    np.testing.assert_allclose(got, np.exp(W)[:, None, :] * 2.0 * XS, rtol=1e-12)
    assert domain_of(fast, made["z"]) == ("i",) and domain_of(fast, made["y"]) == ("i",)
    assert domain_of(slow, made["z"]) == ("i", "t")
    reads = [e.index for e in fast.sdg.edges if e.src == made["y"].node.id]
    assert [str(index) for index in reads] == ["[i]"]


def test_a_product_by_ones_over_t_leaves_a_loop_invariant_reader():
    made = {}

    def build(ctx):
        i, t, w, x = dims(ctx)
        ones = tpo.from_numpy(np.ones(5), dims=(t,))
        made["z"] = z = (w * ones.unsqueeze(0)).exp()   # simplify drops the product, w[i] is left
        return [z * x]

    fast, _, (got,) = both(build)
    np.testing.assert_allclose(got, np.exp(W)[:, None, :] * XS, rtol=1e-12)
    assert domain_of(fast, made["z"]) == ("i",)
    assert stat(fast, "domain_reduction").nodes_after == stat(fast, "domain_reduction").nodes_before


def test_what_must_keep_its_dims_keeps_them():
    made = {}

    def build(ctx):
        i, t, w, x = dims(ctx)
        made["fetched"] = fetched = over(w, ops.ElementwiseOp("tanh"), (i, t))
        made["stacked"] = stacked = over(w, ops.ElementwiseOp("sin"), (i, t))
        window = stacked[i, 0:tpo.symbolic.bound_of(t)].sum(axis=0)  # one copy per t, summed
        made["udf"] = called = over(w, ops.UDFOp(lambda a: (a * 3.0,), ((3,),), ("float64",)), (i, t))
        return [fetched, window * x, called * x]

    fast, _, (fetched, window, called) = both(build)
    np.testing.assert_allclose(window, 5.0 * np.sin(W)[:, None, :] * XS, rtol=1e-12)
    np.testing.assert_allclose(called, 3.0 * W[:, None, :] * XS, rtol=1e-12)
    for name in ("fetched", "stacked", "udf"):
        assert domain_of(fast, made[name]) == ("i", "t"), name


def test_loop_invariant_code_over_one_of_several_dims():
    made = {}

    def build(ctx):
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        w = tpo.from_numpy(W, dims=(i,))
        x = tpo.from_numpy(np.broadcast_to(XS, (2, 4, 5, 3)).copy(), dims=(b, i, t))
        made["z"] = z = over(w, ops.ElementwiseOp("exp"), (b, i, t))
        return [z * x]

    fast, _, (got,) = both(build, {"B": 2, "I": 4, "T": 5})
    np.testing.assert_allclose(got, np.exp(W)[None, :, None, :] * np.broadcast_to(XS, (2, 4, 5, 3)), rtol=1e-12)
    assert domain_of(fast, made["z"]) == ("i",)


# ----- random programs -----
@st.composite
def programs(draw):
    """Steps over dims (i, t): elementwise ops of earlier values, some spread over more dims than
    their inputs vary with (as autodiff spreads a gradient), read at the point or one step back."""
    return draw(st.lists(st.tuples(st.sampled_from(["spread", "exp", "add", "mul", "lag", "sum"]),
                                   st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=8))


def random_program(spec):
    def build(ctx):
        i, t, w, x = dims(ctx)
        values = [w, x, tpo.from_numpy(XS[0], dims=(t,))]
        for kind, a, b in spec:
            u, v = values[a % len(values)], values[b % len(values)]
            if kind == "spread":
                u = over(u, ops.ElementwiseOp("tanh"), (i, t))
            elif kind == "exp":
                u = (u * 0.5).exp()
            elif kind == "add":
                u = u + v
            elif kind == "mul":
                u = u * v * 0.5
            elif kind == "lag" and t in u.domain:
                u = u[tuple(tpo.max(d - 1, 0) if d is t else d for d in u.domain)] * 1.5
            elif kind == "sum" and t in u.domain:
                u = u[tuple(tpo.symbolic.make_slice(0, d + 1) if d is t else d for d in u.domain)].sum(axis=0)
            values.append(u)
        return [v * x for v in values[3:]]  # not a spread value itself: roots keep their dims

    return build


@settings(max_examples=25, deadline=None)
@given(programs())
def test_random_programs_compute_the_same_reduced(spec):
    fast, slow, _ = both(random_program(spec))
    dims_left = sum(len(n.domain) for n in fast.sdg.nodes.values())
    assert dims_left <= sum(len(n.domain) for n in slow.sdg.nodes.values())
    invariant = spec[0][0] == "spread" and spec[0][1] % 3 == 0  # w spread over (i, t): the same at every t
    if invariant and not any(kind == "sum" for kind, _, _ in spec):  # (no window stacks it over t)
        assert dims_left < sum(len(n.domain) for n in slow.sdg.nodes.values())
