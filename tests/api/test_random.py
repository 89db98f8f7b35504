"""tpo.random: counter-based random tensors are a pure function of (seed, stream, point)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime import counter_rng


def draw(seed: int, bounds: dict[str, int]):
    with tpo.Context(seed=seed) as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        u = tpo.random.uniform((3,), dims=(b, t), low=-1.0, high=2.0)
        z = tpo.random.normal((), dims=(t,))
        return ctx.run({B: bounds["B"], T: bounds["T"]}, fetch=[u, z])


def test_same_seed_same_numbers_and_points_do_not_depend_on_the_bounds():
    small, large = draw(7, {"B": 2, "T": 3}), draw(7, {"B": 4, "T": 9})
    np.testing.assert_array_equal(small[0], large[0][:2, :3])
    np.testing.assert_array_equal(small[1], large[1][:3])


def test_other_seed_other_numbers_and_points_differ():
    a, b = draw(7, {"B": 2, "T": 3}), draw(8, {"B": 2, "T": 3})
    assert not np.allclose(a[0], b[0])
    u = a[0].reshape(-1)
    assert len(np.unique(u)) == u.size


def test_range_and_moments():
    with tpo.Context(seed=1) as ctx:
        (t, T), = ctx.dims("t")
        u = tpo.random.uniform((20_000,), dims=(t,))
        z = tpo.random.normal((20_000,), dims=(t,), mean=1.0, std=2.0)
        u_out, z_out = ctx.run({T: 2}, fetch=[u, z])
    assert u_out.dtype == np.float32 and 0.0 <= u_out.min() and u_out.max() < 1.0
    assert abs(u_out.mean() - 0.5) < 0.01 and abs(u_out.var() - 1 / 12) < 0.005
    assert abs(z_out.mean() - 1.0) < 0.05 and abs(z_out.std() - 2.0) < 0.05


def test_array_coordinates_equal_the_loop_over_points():
    batched = counter_rng.uniform(5, (np.arange(4)[:, None], np.arange(3)[None, :]), (2,), "float32")
    looped = np.array([[counter_rng.uniform(5, (i, j), (2,), "float32") for j in range(3)] for i in range(4)])
    np.testing.assert_array_equal(batched, looped)


def test_integer_dtype_is_rejected():
    with tpo.Context(), pytest.raises(tpo.ShapeError, match="floating point"):
        tpo.random.uniform((2,), dtype="int32")


def draw_from(start: dict, bounds: dict[str, int], passes: dict):
    with tpo.Context(seed=3, start=start) as ctx:
        (b, B), (t, T) = ctx.dims("b", "t")
        u = tpo.random.uniform((2,), dims=(b, t))
        return ctx.run({B: bounds["B"], T: bounds["T"]}, fetch=[u], passes=passes)[0]


@pytest.mark.parametrize("passes", [{}, {"vectorize": False}])
def test_start_continues_the_numbers_of_a_run_from_zero(passes):
    whole = draw_from({}, {"B": 3, "T": 7}, passes)
    later = draw_from({"t": 4, "b": 1}, {"B": 2, "T": 3}, passes)
    np.testing.assert_array_equal(later, whole[1:, 4:])


def test_start_must_name_a_dimension_and_count_steps():
    with pytest.raises(tpo.TempoError, match="non-negative int"):
        tpo.Context(start={"t": -1})
    with tpo.Context(start={"s": 2}) as ctx:
        (t, T), = ctx.dims("t")
        u = tpo.random.uniform((), dims=(t,))
        with pytest.raises(tpo.TempoError, match="names s, not a dimension"):
            ctx.run({T: 2}, fetch=[u])


def splitmix_reference(stream: int, coords: tuple, n: int) -> int:
    """The ``n``-th number of a point, from SplitMix64 on Python ints, one coordinate at a time."""
    mask = (1 << 64) - 1

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    key = mix((stream + 0x9E3779B97F4A7C15) & mask)
    for c in coords:
        key = mix(key ^ ((c + 0x9E3779B97F4A7C15) & mask))
    return mix((key + (n + 1) * 0x9E3779B97F4A7C15) & mask)


@pytest.mark.parametrize("stream, coords, shape", [
    (5, (np.arange(4)[:, None], np.arange(3)[None, :]), (2,)), (123, (np.arange(4), 7, -13), ()),
    (1 << 62 | 9, (3, np.arange(5)), (2, 3)), (2**63 + 5, (), (4,))])
def test_bits_are_splitmix64_of_stream_coordinates_and_element(stream, coords, shape):
    got = counter_rng.random_bits(stream, coords, shape)
    arrays = np.broadcast_arrays(*(np.asarray(c) for c in coords)) if coords else []
    lead = arrays[0].shape if arrays else ()
    assert got.dtype == np.uint64 and got.shape == lead + shape
    for at in np.ndindex(*lead):
        point = tuple(int(a[at]) for a in arrays)
        want = [splitmix_reference(stream, point, n) for n in range(int(np.prod(shape)))]
        assert got[at].ravel().tolist() == want


LAYOUTS = [  # (axes: a leading axis or None for a point coordinate, offsets, point, lead)
    ((0, None, None), (0, 0, 0), (37, 5), (4,)), ((None, 0), (3, 0), (9,), (5,)),
    ((None, 1, None, 0), (0, 2, -4, 1), (2, 6), (3, 2)), ((None, None), (0, 7), (-1, 4), ()), ((), (), (), ()),
    ((1, 0), (0, 0), (), (2, 3))]


@pytest.mark.parametrize("small", [0, 64])  # the NumPy path and the Python-int path for small draws
@pytest.mark.parametrize("dist, dtype", [("uniform", "float32"), ("uniform", "float64"), ("uniform", "float16"),
                                         ("normal", "float32"), ("normal", "float64")])
@pytest.mark.parametrize("axes, offsets, point, lead", LAYOUTS)
@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_lattice_gives_the_numbers_of_its_coordinates(monkeypatch, small, dist, dtype, axes, offsets, point, lead,
                                                      shape):
    monkeypatch.setattr(counter_rng, "SMALL", small)
    lattice = counter_rng.Lattice(dist, 1 << 62 | 11, dtype, axes, offsets)
    rest, coords = iter(point), []
    for axis, offset in zip(axes, offsets):
        if axis is None:
            coords.append(next(rest) + offset)
        else:
            coords.append(offset + np.arange(lead[axis]).reshape([lead[axis] if k == axis else 1
                                                                  for k in range(len(lead))]))
    want = counter_rng.DISTRIBUTIONS[dist](1 << 62 | 11, coords, shape, dtype)
    for _ in range(2):  # the second call reads the cached grid
        got = lattice(point, lead, shape)
        assert got.dtype == np.dtype(dtype) and got.shape == lead + shape
        np.testing.assert_array_equal(got, want.reshape(lead + shape))


@pytest.mark.parametrize("axes, offsets, lead", [((0, None, None), (0, 0, 0), (4,)), ((None, 1, None, 0), (0, 2, -4, 1), (3, 2)),
                                                 ((None, None, None), (1, 2, 3), ())])
def test_lattice_numbers_do_not_depend_on_the_order_of_its_points(axes, offsets, lead):
    points = list(itertools.product(range(3), repeat=axes.count(None)))
    order = points + points[::-1] + [points[k] for k in np.random.default_rng(0).permutation(len(points))]
    lattice = counter_rng.Lattice("uniform", 5, "float32", axes, offsets)
    for point in order:  # a loop over the last coordinate, then back, then jumping between points
        rest = iter(point)
        coords = [next(rest) + offset if axis is None else
                  offset + np.arange(lead[axis]).reshape([lead[axis] if k == axis else 1 for k in range(len(lead))])
                  for axis, offset in zip(axes, offsets)]
        got = lattice(point, lead, (2,))
        assert got.shape == lead + (2,) and got.dtype == np.float32
        np.testing.assert_array_equal(got, counter_rng.uniform(5, coords, (2,), "float32"))
    assert lattice._run is not None  # the walks along the last coordinate read numbers drawn ahead


def test_a_walk_along_the_last_coordinate_reads_runs_drawn_ahead_with_the_same_numbers():
    lattice = counter_rng.Lattice("uniform", 9, "float32", (0, None, None), (0, 2, -3))
    for i in (0, 16):
        for t in range(3 * counter_rng.AHEAD + 5):
            want = counter_rng.uniform(9, [np.arange(4), i + 2, t - 3], (), "float32")
            np.testing.assert_array_equal(lattice((i, t), (4,), ()), want)
        assert lattice._run[2:4] == ((i,), 3 * counter_rng.AHEAD + 1)  # runs follow each other from t = 1
