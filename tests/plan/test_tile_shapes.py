"""Which counter-dependent shapes a device loop admits as a tile's (:func:`tempo.plan.device_loops._tile_size`):
a size that is one value at every tile wherever the tile divides its dim, checked here against the size
evaluated at every tile of runs of every length."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tempo.plan.device_loops import _tile_shaped, _tile_size
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import min_, step_and_bound

t, T = step_and_bound("t")
u, U = step_and_bound("t_tile")


def sizes(z: int, n: int) -> list:
    """Each tile's rows ``min(T, z*u + z) - z*u`` in a run of ``n`` steps."""
    fn = compile_expr(min_(T, u * z + z) - u * z)
    return [fn({"T": n, "t_tile": k}) for k in range(-(-n // z))]


@given(st.integers(1, 16), st.integers(1, 40), st.integers(0, 15))
def test_a_tile_s_rows_are_one_size_exactly_where_the_tile_divides_the_steps(z, tiles, short):
    """``z`` rows at every tile of ``z * tiles`` steps; a partial last tile where the steps are fewer."""
    tiled = {"T_TILE": ("T", z)}
    assert _tile_size(min_(T, u * z + z) - u * z, tiled) == z
    assert set(sizes(z, z * tiles)) == {z}
    if short % z:
        assert len(set(sizes(z, z * tiles + short % z))) == 2


@given(st.integers(1, 16), st.integers(2, 8))
def test_windows_and_shrinking_rows_are_no_tile(z, n):
    """n-step returns' window ``min(t + n, T) - t`` (a counter that is no tile dim), the rows left
    ``T - z*t_tile`` and a window over tiles ``min(T, z*t_tile + n*z) - z*t_tile`` (its last tiles
    shorter however the tile divides the steps) are no tile's shape; a size of bounds only is static."""
    tiled = {"T_TILE": ("T", z)}
    assert _tile_size(min_(t + n, T) - t, tiled) is None
    assert _tile_size(T - u * z, tiled) is None
    assert _tile_size(min_(T, u * z + n * z) - u * z, tiled) is None
    assert _tile_size(T * 2, tiled) is None and _tile_shaped((T * 2, min_(T, u * z + z) - u * z), tiled)
