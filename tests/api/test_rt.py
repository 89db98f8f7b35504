"""Domain inference, dynamic shapes and the RT surface (TEMPO §3)."""
import numpy as np
import pytest

import tempo as tpo
from tempo.symbolic import simplify


@pytest.fixture
def ctx():
    with tpo.Context() as c:
        yield c


def test_constant_index_removes_dim_and_slice_adds_axis(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.zeros((5, 3)), dims=(t,))
    assert x.domain == (t,) and x.shape == (3,)
    assert x[4].domain == () and x[4].shape == (3,)
    assert x[0:T].domain == () and x[0:T].shape == (T, 3)
    assert x[t:T].domain == (t,) and simplify(x[t:T].shape[0]) is simplify(T - t)
    assert x[(t // 2) * 2:(t // 2) * 2 + 2].shape == (2, 3)


def test_domains_union_in_context_order(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    a = tpo.from_numpy(np.ones(4), dims=(t,))
    b = tpo.from_numpy(np.ones(3), dims=(i,))
    assert (a + b).domain == (i, t)
    assert (b * a).domain == (i, t)
    assert tpo.eval_symbol(t + i).domain == (i, t)


def test_from_numpy_dims_in_any_order(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    data = np.arange(12.0).reshape(4, 3)  # axes (t, i)
    x = tpo.from_numpy(data, dims=(t, i))
    assert x.domain == (i, t)
    out, = ctx.run(bounds={I: 3, T: 4}, fetch=[x])
    np.testing.assert_array_equal(out, data.T)


def test_from_numpy_shares_only_an_array_nobody_can_write(ctx):
    """A read-only array is held as it is; a writable one, or a read-only view of a writable one, is
    copied, so the owner's later writes do not reach the program."""
    (t, T), = ctx.dims("t")
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    owner = np.arange(4.0)
    view = owner.view()
    view.flags.writeable = False
    held = [tpo.from_numpy(a, dims=(t,)).node.op.value.array for a in (frozen, owner, view)]
    assert np.shares_memory(held[0], frozen) and not np.shares_memory(held[1], owner) and not np.shares_memory(held[2], owner)
    x = tpo.from_numpy(view, dims=(t,))
    owner[:] = -1.0
    out, = ctx.run(bounds={T: 4}, fetch=[x])
    np.testing.assert_array_equal(out, np.arange(4.0))


def test_spatial_index_with_symbol_adds_dim(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.arange(6.0))
    y = x.spatial[t]
    assert y.domain == (t,)
    out, = ctx.run(bounds={T: 6}, fetch=[y])
    np.testing.assert_array_equal(out, np.arange(6.0))


def test_composed_temporal_views(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.arange(8.0), dims=(t,))
    y = x[tpo.min(t + 1, T - 1)]
    z = y[0:T].sum()  # slice of a point view materialises it first
    out, = ctx.run(bounds={T: 8}, fetch=[z])
    assert out == sum(min(k + 1, 7) for k in range(8))


def test_udf_runs_per_point(ctx):
    (t, T), = ctx.dims("t")
    calls = []

    def double(v):
        calls.append(float(v))
        return (v * 2,)

    x = tpo.from_numpy(np.arange(4.0), dims=(t,))
    y = tpo.udf(double, [x], out_shapes=[()], out_dtypes=["float64"])
    out, = ctx.run(bounds={T: 4}, fetch=[y])
    np.testing.assert_array_equal(out, [0, 2, 4, 6])
    assert calls == [0.0, 1.0, 2.0, 3.0]


def test_run_is_parametric_in_bounds(ctx):
    (t, T), = ctx.dims("t")
    r = tpo.from_numpy(np.arange(10.0), dims=(t,))
    program = ctx.compile(fetch=[r[0:t + 1].sum()])
    for bound in (1, 4, 10):
        out, = program.run({T: bound})
        np.testing.assert_array_equal(out, np.cumsum(np.arange(bound)))


def test_rt_has_no_truth_value(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.arange(3.0), dims=(t,))
    with pytest.raises(tpo.TempoError, match="truth value"):
        bool(x > 1)


def test_kernel_failure_names_the_users_line(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.ones((4, 3)), dims=(t,))
    y = tpo.udf(lambda v: (v[5],), [x], out_shapes=[()], out_dtypes=["float64"])
    with pytest.raises(tpo.TempoError, match=r"UDFOp failed at t=0\.\.3: IndexError") as err:
        ctx.run(bounds={T: 4}, fetch=[y])
    assert "test_rt.py" in str(err.value) and "y = tpo.udf(" in str(err.value)


def test_fetching_each_output_of_a_multi_output_op():
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        a, b = tpo.udf(lambda v: (v, v * 10), [tpo.eval_symbol(t)], [(), ()], ["int64", "int64"])
        a_out, b_out = ctx.run({T: 3}, fetch=[a, b])
    assert a_out.tolist() == [0, 1, 2] and b_out.tolist() == [0, 10, 20]
