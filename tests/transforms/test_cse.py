"""Duplicate-code elimination: identical pure nodes become one; the program computes the same."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.api.rt import apply
from tempo.ir import ops
from tempo.transforms import cse
from tempo.transforms.editing import Graph
from tests.transforms.simplification import compiled, ops_of, same_results, stat

XS = np.random.default_rng(0).standard_normal((6, 3))
ON = {"vectorize": False, "fuse": False}  # the structure left as the simplification passes leave it
OFF = {**ON, "cse": False}


def both(build, bounds):
    return compiled(build, ON, bounds), compiled(build, OFF, bounds)


def exps(program) -> int:
    return sum(1 for n in ops_of(program, ops.ElementwiseOp) if n.op.fn == "exp")


def twice(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS, dims=(t,))
    a = (x * 2.0).exp()  # each constant 2.0 is its own array: merged by content
    b = (x * 2.0).exp()
    return [a + b, a, b]


def test_the_same_expression_twice_is_computed_once():
    (fast, got), (slow, want) = both(twice, {"T": 6})
    same_results(got, want)
    np.testing.assert_allclose(got[0], 2.0 * np.exp(2.0 * XS), rtol=1e-12)
    assert exps(fast) == 1 and exps(slow) == 2
    s = stat(fast, "cse")
    assert s.nodes_after == s.nodes_before - 3  # the second constant, product and exp
    a, b = fast.fetch[1:]
    assert a == b  # both fetches read the one node left


def test_constants_with_other_values_stay_apart():
    def build(ctx):
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        return [(x * 2.0).exp() + (x * 3.0).exp()]

    (fast, got), (_, want) = both(build, {"T": 6})
    same_results(got, want)
    assert exps(fast) == 2


def test_large_constants_compare_by_identity_and_are_not_read():
    """Past DIGEST_BYTES constants compare by their arrays' identity: two equal ones stay apart
    (their bytes are not hashed), where small equal ones merge."""
    big = np.random.default_rng(1).standard_normal((cse.DIGEST_BYTES // 8 + 1,))
    with tpo.Context() as ctx:
        program = ctx.compile([tpo.from_numpy(big).exp() + tpo.from_numpy(big.copy()).exp()], passes={"fuse": False})
    assert len([n for n in program.sdg.nodes.values() if isinstance(n.op, ops.ConstOp)]) == 2
    np.testing.assert_allclose(program.run({})[0], 2 * np.exp(big))


def test_reads_at_other_points_stay_apart():
    def build(ctx):
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        return [x[t].exp() + x[tpo.max(t - 1, 0)].exp()]

    (fast, got), (_, want) = both(build, {"T": 6})
    same_results(got, want)
    assert exps(fast) == 2


def test_identical_recurrences_merge_with_what_they_compute():
    def build(ctx):
        (i, I), = ctx.dims("i")
        counters = []
        for _ in range(3):  # three step counters, as an optimizer keeps one per parameter
            c = tpo.placeholder((), "float32", dims=(i,))
            c[0] = tpo.zeros(())
            c[i + 1] = c[i] + 1.0
            counters.append((0.9 ** c).exp())
        return counters

    (fast, got), (slow, want) = both(build, {"I": 4})
    same_results(got, want)
    np.testing.assert_allclose(got[0], np.exp(0.9 ** np.arange(4.0)), rtol=1e-6)
    assert len(ops_of(fast, ops.MergeOp)) == 1 and len(ops_of(slow, ops.MergeOp)) == 3
    assert len({n for n, _ in fast.fetch}) == 1


def test_random_draws_and_udfs_never_merge():
    calls = []

    def count(x):
        calls.append(1)
        return (x * 2.0,)

    def build(ctx):
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        stream = ctx.new_stream()
        draws = [apply(ops.RandomOp((3,), "float64", "normal", stream, (t,)), [], ctx=ctx) for _ in range(2)]
        outs = [tpo.udf(count, [x], [(3,)], ["float64"]) for _ in range(2)]
        return [draws[0] + draws[1], outs[0] + outs[1]]

    (fast, got), (_, want) = both(build, {"T": 6})
    same_results(got, want)
    assert len(ops_of(fast, ops.RandomOp)) == 2 and len(ops_of(fast, ops.UDFOp)) == 2
    assert len(calls) == 4 * 6  # two UDFs at six points, in each of the two programs
    np.testing.assert_allclose(got[1], 4.0 * XS, rtol=1e-12)


def test_classes_span_a_chain_whose_sources_merge_first():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        x = tpo.from_numpy(XS, dims=(t,))
        chains = [((x + 1.0) * 3.0).tanh().sum() for _ in range(3)]
        sdg = ctx.sdg
    found = sorted(sorted(members) for members in cse.classes(Graph(sdg)))
    assert len(found) == 6  # the two constants, the add, the product, the tanh and the sum
    assert all(len(members) == 3 for members in found)
    assert sorted(found[-1]) == sorted(c.node.id for c in chains)
