"""Malformed Tempo programs: each is rejected with a ``tpo.TempoError``.

Every test checks (a) that the message names the problem (a tolerant regex)
and (b) that it points at the user's own source line: the file name
``test_malformed.py`` and the text of the offending line.

Errors that can only be found once the whole program is known (out-of-range
temporal reads, gaps in branching definitions, cycles) must be raised by
``ctx.run`` (at compile time, before anything executes), not at
construction; there the line is the one that created the offending RT.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tempo as tpo

OUT_OF_RANGE = r"outside|out of range|out-of-range|out of bounds|beyond|exceed|range"
GAP = r"gap|undefined|not defined|no definition|missing|uncovered|not covered|never defined"


def assert_reports(err, phrase: str, *lines: str) -> str:
    """The error message matches `phrase` and names this file and each of `lines`."""
    msg = str(err.value)
    assert isinstance(err.value, tpo.TempoError)
    # the phrase must come from the message itself, not from the quoted code
    prose = msg
    for line in lines:
        prose = prose.replace(line, "")
    assert re.search(phrase, prose, re.IGNORECASE), f"no /{phrase}/ in:\n{msg}"
    assert "test_malformed.py" in msg, f"no file name in:\n{msg}"
    for line in lines:
        assert line in msg, f"no {line!r} in:\n{msg}"
    return msg


def vec(n: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


# --------------------------------------------------------------------------
# temporal reads outside the domain (found at compile time, by ctx.run)
# --------------------------------------------------------------------------
def test_unguarded_read_past_end():
    """x[t+1] with no min/condition guard reads x[T] at the last step."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x[t + 1] * 2
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, OUT_OF_RANGE, "y = x[t + 1] * 2")


def test_unguarded_read_before_start():
    """x[t-1] with no guard reads x[-1] at the first step."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x[t - 1] + x
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, OUT_OF_RANGE, "y = x[t - 1] + x")


def test_forward_window_without_min():
    """x[t:t+3] without min(., T) reads past the end near the last steps."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x[t:t + 3].sum()
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, OUT_OF_RANGE, "y = x[t:t + 3].sum()")


# --------------------------------------------------------------------------
# branching definitions that do not cover the domain
# --------------------------------------------------------------------------
def test_placeholder_gap_only_initial_step():
    """A placeholder with only s[0] defined leaves 1 <= t < T undefined."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        s[0] = x[0]
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[s], backend="numpy")
    assert_reports(err, GAP, 's = tpo.placeholder(shape=(), dtype="float64", dims=(t,))')


def test_placeholder_gap_at_step_one():
    """s[0] and s[t+2] defined: s[1] is a gap."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        gappy = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        gappy[0] = x[0]
        gappy[t + 2] = gappy[t] + x[t + 2]
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[gappy], backend="numpy")
    assert_reports(err, GAP, 'gappy = tpo.placeholder(shape=(), dtype="float64", dims=(t,))')


def test_placeholder_never_defined():
    """A placeholder used but never given any definition."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        never = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        y = never + x
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, GAP, 'never = tpo.placeholder(shape=(), dtype="float64", dims=(t,))')


@pytest.mark.parametrize("bound, says", [
    (5, "at t=1 when T=5)"),                                          # a point of this run, not isl's
    (1, "compiled for every bound, not only this run's T=1"),         # the gap is beyond this run
])
def test_placeholder_gap_quotes_the_runs_bounds(bound, says):
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        gappy = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
        gappy[0] = x[0]
        gappy[t + 2] = gappy[t] + x[t + 2]
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: bound}, fetch=[gappy], backend="numpy")
    msg = assert_reports(err, GAP, 'gappy = tpo.placeholder(shape=(), dtype="float64", dims=(t,))')
    assert says in msg


@pytest.mark.parametrize("iterations", [1, 3])
def test_module_over_i_without_an_optimizer_step(iterations):
    """A module built with dims=(i,) whose parameters no optimizer updates: the error names the
    missing step and the module's line, and quotes this run's I."""
    ctx = tpo.Context(seed=0)
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        layer = tpo.nn.Linear(3, 2, dims=(i,))
        x = tpo.random.normal((3,), dims=(i, t))
        loss = layer(x).sum()[i, 0:T].mean()
        loss.backward()
        with pytest.raises(tpo.DefinitionError) as err:
            ctx.run(bounds={I: iterations, T: 4})
    msg = assert_reports(err, r"no update defines parameter Linear\.weight after i = 0",
                         "layer = tpo.nn.Linear(3, 2, dims=(i,))")
    assert "optimizer's step()" in msg and "without dims=" in msg
    assert f"I={iterations}" in msg and "I=2" not in msg


def test_module_over_i_with_an_optimizer_step_runs():
    """The same program with the step is accepted (the check does not reject real training)."""
    ctx = tpo.Context(seed=0)
    with ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        layer = tpo.nn.Linear(3, 2, dims=(i,))
        x = tpo.random.normal((3,), dims=(i, t))
        loss = layer(x).sum()[i, 0:T].mean()
        loss.backward()
        tpo.optim.SGD(layer.parameters(), lr=0.1).step()
        (weights,) = ctx.run(bounds={I: 3, T: 4}, fetch=[layer.weight])
    assert weights.shape == (3, 3, 2) and not np.allclose(weights[0], weights[2])


# --------------------------------------------------------------------------
# shapes and dtypes
# --------------------------------------------------------------------------
def test_add_shape_mismatch():
    """Elementwise + of shapes (3,) and (4,)."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            a = tpo.from_numpy(np.zeros((5, 3)), dims=(t,))
            b = tpo.from_numpy(np.zeros((5, 4)), dims=(t,))
            z = a + b
            ctx.run(bounds={T: 5}, fetch=[z], backend="numpy")
    assert_reports(err, r"shape|broadcast", "z = a + b")


def test_matmul_inner_dim_mismatch():
    """Matmul of (2, 3) by (4, 2)."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            a = tpo.from_numpy(np.zeros((5, 2, 3)), dims=(t,))
            b = tpo.from_numpy(np.zeros((4, 2)), dims=())
            z = a @ b
            ctx.run(bounds={T: 5}, fetch=[z], backend="numpy")
    assert_reports(err, r"shape|matmul|inner|contract|dimension|mismatch", "z = a @ b")


def test_placeholder_dtype_mismatch():
    """A float32 placeholder defined with an int64 RT."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            s = tpo.placeholder(shape=(), dtype="float32", dims=(t,))
            s[0] = tpo.eval_symbol(t)
            s[t + 1] = s[t] + 1.0
            ctx.run(bounds={T: 5}, fetch=[s], backend="numpy")
    assert_reports(err, r"dtype|int64|float32|type", "s[0] = tpo.eval_symbol(t)")


@pytest.mark.parametrize("dtype", ["float", "int", float])
def test_ambiguous_dtype(dtype):
    """``"float"`` would silently mean float64 to NumPy: Tempo asks which width."""
    with pytest.raises(tpo.ShapeError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            s = tpo.placeholder(shape=(), dtype=dtype, dims=(t,))
    msg = assert_reports(err, r"dtype .* is ambiguous: use '(float|int)32' or '(float|int)64'",
                         "s = tpo.placeholder(shape=(), dtype=dtype, dims=(t,))")
    assert "float32 (f32, fp32)" in msg and "bool" in msg


def test_unknown_dtype_in_each_constructor():
    """Every call taking a dtype rejects an unknown one with the accepted names, at the user's line."""
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        with pytest.raises(tpo.TempoError) as err:
            z = tpo.zeros((2,), "f3")
        assert_reports(err, r"unknown dtype 'f3'; accepted: bool, int8", 'z = tpo.zeros((2,), "f3")')
        with pytest.raises(tpo.TempoError) as err:
            y = x.cast("floaty")
        assert_reports(err, r"unknown dtype 'floaty'", 'y = x.cast("floaty")')
        with pytest.raises(tpo.TempoError) as err:
            u = tpo.random.uniform((), dims=(t,), dtype="complex64")
        assert_reports(err, r"unknown dtype 'complex64'", 'u = tpo.random.uniform((), dims=(t,), dtype="complex64")')
        with pytest.raises(tpo.TempoError) as err:
            v = tpo.udf(lambda a: (a,), [x], out_shapes=[()], out_dtypes=["double precision"])
        assert_reports(err, r"unknown dtype 'double precision'", "v = tpo.udf(lambda a: (a,), [x]")


def test_dtype_aliases_and_numpy_types():
    """Aliases and NumPy dtypes name the same dtypes as the full names."""
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        s = tpo.placeholder((), "f32", dims=(t,))
        s[0] = tpo.zeros((), np.float32)
        s[t + 1] = s[t] + tpo.ones((), "fp32")
        n = tpo.random.normal((), dims=(t,), dtype=np.dtype("float64"))
        k = s.cast("i64")
        out, noise, steps = ctx.run(bounds={T: 4}, fetch=[s, n, k])
    assert (s.dtype, n.dtype, k.dtype) == ("float32", "float64", "int64")
    assert out.dtype == np.float32 and noise.dtype == np.float64
    np.testing.assert_array_equal(steps, [0, 1, 2, 3])


def test_placeholder_shape_mismatch():
    """A scalar placeholder defined with a (3,) tensor."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
            s[0] = tpo.zeros((3,), dtype="float64")
            s[t + 1] = s[t] + 1.0
            ctx.run(bounds={T: 5}, fetch=[s], backend="numpy")
    assert_reports(err, r"shape", 's[0] = tpo.zeros((3,), dtype="float64")')


def test_reduction_axis_out_of_range():
    """sum(axis=2) on a (3,)-shaped RT."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            x = tpo.from_numpy(np.zeros((5, 3)), dims=(t,))
            y = x.sum(axis=2)
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, r"axis|out of range|dimension|bounds", "y = x.sum(axis=2)")


def test_reshape_element_count_mismatch():
    """reshape (3, 2) -> (4, 2) changes the number of elements."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            x = tpo.from_numpy(np.zeros((5, 3, 2)), dims=(t,))
            y = x.reshape(4, 2)
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, r"reshape|element|size|shape", "y = x.reshape(4, 2)")


def test_permute_wrong_axes():
    """permute with fewer axes than the tensor has."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            x = tpo.from_numpy(np.zeros((5, 2, 3)), dims=(t,))
            y = x.permute(0)
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, r"permut|axes|axis|dimension|rank", "y = x.permute(0)")


def test_cat_shape_mismatch():
    """cat along axis 0 of (2, 3) and (2, 4)."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            a = tpo.from_numpy(np.zeros((5, 2, 3)), dims=(t,))
            b = tpo.from_numpy(np.zeros((5, 2, 4)), dims=(t,))
            z = tpo.cat([a, b], axis=0)
            ctx.run(bounds={T: 5}, fetch=[z], backend="numpy")
    assert_reports(err, r"shape|cat|concat|dimension|mismatch", "z = tpo.cat([a, b], axis=0)")


def test_spatial_index_out_of_range():
    """x.spatial[5] on a (3,)-shaped RT."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            x = tpo.from_numpy(np.zeros((5, 3)), dims=(t,))
            y = x.spatial[5]
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, r"out of range|out of bounds|index|bounds|size", "y = x.spatial[5]")


# --------------------------------------------------------------------------
# domains, indices, keys
# --------------------------------------------------------------------------
def test_too_many_temporal_indices():
    """x[t, 0] on an RT whose domain has only t."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            x = tpo.from_numpy(vec(), dims=(t,))
            y = x[t, 0]
            ctx.run(bounds={T: 5}, fetch=[y], backend="numpy")
    assert_reports(err, r"too many|ind(ex|ices)|dimension|domain", "y = x[t, 0]")


def test_key_with_dim_not_in_domain():
    """Defining s (domain (t,)) with a key over i."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            (i, I), (t, T) = ctx.dims("i", "t")
            x = tpo.from_numpy(vec(), dims=(t,))
            s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
            s[i] = x
            ctx.run(bounds={I: 2, T: 5}, fetch=[s], backend="numpy")
    assert_reports(err, r"domain|not in|dimension|key", "s[i] = x")


def test_from_numpy_fewer_axes_than_dims():
    """from_numpy of a 1-d array bound to two dims."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            (i, I), (t, T) = ctx.dims("i", "t")
            x = tpo.from_numpy(np.zeros(3), dims=(i, t))
            ctx.run(bounds={I: 3, T: 3}, fetch=[x], backend="numpy")
    assert_reports(
        err, r"axes|axis|dims|dimension|ndim|rank", "x = tpo.from_numpy(np.zeros(3), dims=(i, t))"
    )


# --------------------------------------------------------------------------
# schedules and runs
# --------------------------------------------------------------------------
def test_cycle_between_two_placeholders():
    """a[t] = b[t] + 1 and b[t] = a[t] * 2: no schedule can satisfy the cycle."""
    lines = ["a[t] = b[t] + 1", "b[t] = a[t] * 2"]
    creations = [
        'a = tpo.placeholder(shape=(), dtype="float64", dims=(t,))',
        'b = tpo.placeholder(shape=(), dtype="float64", dims=(t,))',
    ]
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            a = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
            b = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
            a[t] = b[t] + 1
            b[t] = a[t] * 2
            ctx.run(bounds={T: 4}, fetch=[a, b], backend="numpy")
    msg = assert_reports(err, r".")
    assert re.search(r"cycl|circular", msg, re.IGNORECASE) or all(l in msg for l in lines), msg
    assert any(l in msg for l in lines + creations), msg


def test_self_cycle_same_step():
    """s[t] = s[t] + 1: an RT that depends on itself at the same step."""
    with pytest.raises(tpo.TempoError) as err:
        with tpo.Context() as ctx:
            ((t, T),) = ctx.dims("t")
            s = tpo.placeholder(shape=(), dtype="float64", dims=(t,))
            s[t] = s[t] + 1.0
            ctx.run(bounds={T: 4}, fetch=[s], backend="numpy")
    msg = assert_reports(err, r"cycl|circular|itself|schedul")
    assert "s[t] = s[t] + 1.0" in msg or (
        's = tpo.placeholder(shape=(), dtype="float64", dims=(t,))' in msg
    ), msg


def test_missing_bound_at_run():
    """ctx.run without a value for T."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x * 2.0
        with pytest.raises(tpo.TempoError) as err:
            out = ctx.run(bounds={}, fetch=[y], backend="numpy")
    line = 'out = ctx.run(bounds={}, fetch=[y], backend="numpy")'
    msg = assert_reports(err, r"bound|missing|no value|not given", line)
    assert re.search(r"\bT\b", msg.replace(line, "")), f"symbol T not named in:\n{msg}"


def test_invalid_bound_value():
    """ctx.run with a negative bound."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x * 2.0
        with pytest.raises(tpo.TempoError) as err:
            out = ctx.run(bounds={T: -2}, fetch=[y], backend="numpy")
    assert_reports(
        err,
        r"bound|negative|invalid|positive|non-negative",
        'out = ctx.run(bounds={T: -2}, fetch=[y], backend="numpy")',
    )


def test_fetching_a_tensor_of_another_context():
    """The error names the foreign tensor's own line and the run that fetched it, and the fix."""
    with tpo.Context() as other:
        ((t, T),) = other.dims("t")
        foreign = tpo.zeros((2,))
    with tpo.Context() as ctx:
        ((t, T),) = ctx.dims("t")
        mine = tpo.zeros((2,))
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 2}, fetch=[mine, foreign])
    msg = assert_reports(err, r"belongs to another context .*: build it inside this context's `with ctx:` "
                              r"block, or fetch it with its own context's run",
                         "foreign = tpo.zeros((2,))", "ctx.run(bounds={T: 2}, fetch=[mine, foreign])")
    assert msg.index("fetch=[mine, foreign]") < msg.index("defined at")  # the run is named in the message
    assert msg.split("defined at", 1)[1].strip().endswith("foreign = tpo.zeros((2,))")


def test_unknown_backend():
    """ctx.run with a backend name that does not exist."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        x = tpo.from_numpy(vec(), dims=(t,))
        y = x * 2.0
        with pytest.raises(tpo.TempoError) as err:
            out = ctx.run(bounds={T: 5}, fetch=[y], backend="fortran")
    assert_reports(
        err, r"backend|fortran", 'out = ctx.run(bounds={T: 5}, fetch=[y], backend="fortran")'
    )


def test_an_unknown_pass_name_is_named():
    """A misspelt pass would otherwise be ignored silently, leaving the pass on."""
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        y = tpo.from_numpy(vec(), dims=(t,)) * 2.0
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], passes={"fusion": False})
    msg = assert_reports(err, r"'fusion', not a pass", 'ctx.run(bounds={T: 5}, fetch=[y], passes={"fusion": False})')
    from tempo.transforms import PIPELINE

    assert "the passes are " + ", ".join(name for name, _ in PIPELINE) in msg


def test_a_pass_config_of_the_wrong_kind_is_named():
    ctx = tpo.Context()
    with ctx:
        ((t, T),) = ctx.dims("t")
        y = tpo.from_numpy(vec(), dims=(t,)) * 2.0
        with pytest.raises(tpo.TempoError) as err:
            ctx.run(bounds={T: 5}, fetch=[y], passes={"vectorize": True})
    assert_reports(err, r"passes\['vectorize'\] takes False .* or a tempo.transforms.vectorize.Config, got True",
                   'ctx.run(bounds={T: 5}, fetch=[y], passes={"vectorize": True})')
