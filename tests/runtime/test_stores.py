"""Tensor stores: point stores stack, block and window stores read views of
pre-allocated buffers; all three read the same values."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempo.errors import TempoError
from tempo.runtime.backends import get_backend
from tempo.runtime.memory import Ledger
from tempo.runtime.stores import BlockStore, PointStore, WindowStore, free_below

NP = get_backend("numpy")


def _value(*point, width=2):
    """A distinct row per point."""
    return np.array([sum(p * 10 ** k for k, p in enumerate(point)) + c / 10 for c in range(width)])


def _store():
    store = PointStore("x", NP, "float64", lambda: (2,))
    for i in range(2):
        for t in range(4):
            store.write((i, t), np.array([i, t], dtype=np.float64))
    return store


# ----- point stores -----
def test_point_read():
    np.testing.assert_array_equal(_store().read((1, 2)), [1, 2])


def test_slice_reads_stack_in_index_order():
    store = _store()
    assert store.read((0, slice(1, 4))).shape == (3, 2)
    both = store.read((slice(0, 2), slice(0, 4)))
    assert both.shape == (2, 4, 2)
    np.testing.assert_array_equal(both[1, 3], [1, 3])


def test_empty_slice_has_the_spatial_shape():
    assert _store().read((0, slice(3, 3))).shape == (0, 2)


def test_read_before_write_is_an_internal_error():
    with pytest.raises(TempoError, match="before it was computed"):
        _store().read((5, 0))


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(TempoError, match="numpy"):
        get_backend("tensorflow")


# ----- block stores -----
def _block(length=8, outer=2, steps=8):
    store = BlockStore("x", NP, "float64", (2,), length)
    for i in range(outer):
        for t in range(steps):
            store.write((i, t), _value(i, t))
    return store


def test_causal_anticausal_and_whole_reads_are_views_of_one_buffer():
    store = _block()
    buffer = store.blocks[(1, 0)]
    for index, rows in [(slice(0, 4), range(0, 4)), (slice(5, 8), range(5, 8)), (slice(0, 8), range(8))]:
        got = store.read((1, index))
        assert np.shares_memory(got, buffer)
        np.testing.assert_array_equal(got, [_value(1, t) for t in rows])
    row = store.read((1, 3))
    assert row.shape == (2,) and np.shares_memory(row, buffer)
    np.testing.assert_array_equal(row, _value(1, 3))


def test_writes_go_into_the_preallocated_buffer_in_place():
    store = BlockStore("x", NP, "float32", (3,), 5)
    store.write((0,), np.ones(3))
    buffer = store.blocks[(0,)]
    store.write((4,), np.full(3, 2.0))
    assert store.blocks[(0,)] is buffer and buffer.dtype == np.float32 and buffer.shape == (5, 3)
    np.testing.assert_array_equal(buffer[4], [2, 2, 2])


def test_a_block_along_a_dim_that_ends_at_run_time_doubles_its_rows_as_it_is_written():
    store = BlockStore("x", NP, "float64", (2,), 100, grows=True)
    sizes = []
    for t in range(40):
        store.write((0, t), _value(0, t))
        sizes.append(store.blocks[(0, 0)].shape[0])
    assert sorted(set(sizes)) == [16, 32, 64]
    np.testing.assert_array_equal(store.read((0, slice(0, 40))), [_value(0, t) for t in range(40)])
    assert store.ledger.live["device"] == 64 * 2 * 8
    store.free_below(0, 1)
    assert store.ledger.live["device"] == 0 and not store.blocks


def test_a_growing_block_starts_with_the_rows_the_last_block_grew_to():
    store = BlockStore("x", NP, "float64", (2,), 100, grows=True)
    for t in range(40):
        store.write((0, t), _value(0, t))
    store.write((1, 0), _value(1, 0))
    assert store.blocks[(1, 0)].shape[0] == 64
    np.testing.assert_array_equal(store.read((0, slice(0, 40))), [_value(0, t) for t in range(40)])


def test_a_freed_block_is_not_read_or_written_through_the_last_write():
    store = BlockStore("x", NP, "float64", (2,), 8)
    store.write((0, 0), _value(0, 0))
    buffer = store.blocks[(0, 0)]
    store.free_below(0, 1)
    with pytest.raises(TempoError, match="before it was computed"):
        store.read((0, 0))
    store.write((0, 1), _value(0, 1))
    assert store.blocks[(0, 0)] is not buffer and store.ledger.live["device"] == 8 * 2 * 8
    np.testing.assert_array_equal(store.read((0, 1)), _value(0, 1))
    with pytest.raises(TempoError, match="before it was computed"):
        store.read((0, 0))


def test_one_free_below_call_frees_each_store_below_the_floor_and_counts_what_it_freed():
    ledger = Ledger()
    one, many, empty = (PointStore(name, NP, "float64", lambda: (2,), ledger) for name in "abc")
    block = BlockStore("d", NP, "float64", (2,), 4, ledger)
    one.write((0,), _value(0))
    for i in range(3):
        many.write((i,), _value(i))
        block.write((i, 0), _value(i, 0))
    shared = _value(9)  # held by two stores: counted once, freed with its last holder
    one.write((2,), shared)
    many.write((3,), shared)
    held = ledger.live["device"]
    free_below((one, many, empty, block), 0, 2)
    assert list(one.data) == [(2,)] and list(many.data) == [(2,), (3,)] and not empty.data
    assert sorted(block.blocks) == [(2, 0)]
    assert ledger.live["device"] == held - 3 * 16 - 2 * 4 * 16
    free_below((one, many), 0, 4)
    assert not one.data and not many.data and ledger.live["device"] == 4 * 16


def test_one_free_below_call_drops_from_each_stores_own_ledger():
    first, second = Ledger(), Ledger()
    a, b, c = (PointStore(name, NP, "float64", lambda: (2,), ledger)
               for name, ledger in (("a", first), ("b", second), ("c", first)))
    for k, store in enumerate((a, b, c)):
        store.write((0,), _value(k))
        store.write((1,), _value(k + 3))
    free_below((a, b, c), 0, 1)
    assert first.live["device"] == 2 * 16 and second.live["device"] == 16
    assert first.by_store == {"a": 16, "c": 16} and second.by_store == {"b": 16}


def test_a_free_below_call_counts_as_the_frees_of_each_point_one_by_one():
    """The ledger's bytes, peak and timeline are those of the same points freed by free_point, a
    block store among them freeing in its turn."""
    ledgers = []
    for batched in (True, False):
        ledger = Ledger()
        stores = [PointStore(f"s{k}", NP, "float64", lambda: (2,), ledger) for k in range(3)]
        stores.insert(1, BlockStore("b", NP, "float64", (3000,), 1, ledger))
        for step in range(40):
            ledger.launches += 1
            for k, store in enumerate(stores):
                size = 3000 if store.kind == "block" else 1000 * (k + 1) * (step % 5 + 1)
                store.write((step, 0) if store.kind == "block" else (step,), np.full(size, float(step)))
            if batched:
                free_below(tuple(stores), 0, step)
            else:
                for store in stores:
                    if store.kind == "block":
                        store.free_below(0, step)
                    for point in [p for p in getattr(store, "data", ()) if p[0] < step]:
                        store.free_point(point)
        ledgers.append(ledger)
    assert ledgers[0].live == ledgers[1].live and ledgers[0].peak == ledgers[1].peak
    assert ledgers[0].timeline == ledgers[1].timeline and ledgers[0].by_store == ledgers[1].by_store


def test_aligned_blocks_have_their_own_buffers_and_free_whole():
    store = _block(length=4)
    assert sorted(store.blocks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    got = store.read((0, slice(4, 8)))
    assert np.shares_memory(got, store.blocks[(0, 1)])
    np.testing.assert_array_equal(got, [_value(0, t) for t in range(4, 8)])
    store.free_below(1, 6)  # rows 0-3 are dead, row 4 of the second block is not
    assert sorted(store.blocks) == [(0, 1), (1, 1)]
    store.free_below(0, 1)  # outer point 0 is dead
    assert sorted(store.blocks) == [(1, 1)]
    assert [p for p, _ in store.items()] == [(1, 4), (1, 5), (1, 6), (1, 7)]


def test_slices_of_outer_dims_stack_block_views():
    got = _block().read((slice(0, 2), slice(2, 5)))
    np.testing.assert_array_equal(got, [[_value(i, t) for t in range(2, 5)] for i in range(2)])


def test_block_reads_of_unwritten_rows_are_internal_errors():
    store = BlockStore("x", NP, "float64", (2,), 8)
    store.write((0,), _value(0))
    store.write((2,), _value(2))
    for index in [(1,), (slice(0, 3),), (9,)]:
        with pytest.raises(TempoError, match="before it was computed"):
            store.read(index)
    assert [p for p, _ in store.items()] == [(0,), (2,)]


def test_a_value_of_another_shape_is_an_internal_error():
    with pytest.raises(TempoError, match=r"shape \(3,\).*rows of shape \(2,\)"):
        BlockStore("x", NP, "float64", (2,), 4).write((0,), np.zeros(3))


# ----- window stores -----
def test_window_writes_are_mirrored():
    store = WindowStore("x", NP, "float64", (2,), 3)
    for t in range(5):
        store.write((t,), _value(t))
    buffer = store.buffers[()]
    assert buffer.shape == (6, 2)
    for t in (2, 3, 4):
        np.testing.assert_array_equal(buffer[t % 3], _value(t))
        np.testing.assert_array_equal(buffer[t % 3 + 3], _value(t))


def test_every_window_read_is_one_contiguous_view():
    store, w = WindowStore("x", NP, "float64", (2,), 4), 4
    for t in range(20):
        store.write((t,), _value(t))
        for start in range(max(0, t - w + 1), t + 1):
            for stop in range(start + 1, t + 2):
                got = store.read((slice(start, stop),))
                assert np.shares_memory(got, store.buffers[()]) and got.flags.c_contiguous
                np.testing.assert_array_equal(got, [_value(u) for u in range(start, stop)])
        np.testing.assert_array_equal(store.read((t,)), _value(t))


def test_window_reads_of_points_it_no_longer_holds_are_internal_errors():
    store = WindowStore("x", NP, "float64", (2,), 3)
    for t in range(6):
        store.write((t,), _value(t))
    for index in [(2,), (slice(2, 6),), (slice(3, 7),), (6,)]:
        with pytest.raises(TempoError, match="does not hold"):
            store.read(index)
    with pytest.raises(TempoError, match="increasing writes"):
        store.write((4,), _value(4))


def test_window_memory_does_not_grow_with_the_bound():
    held = []
    for steps in (1_000, 100_000):
        store = WindowStore("x", NP, "float32", (16,), 8)
        row = np.ones(16, dtype=np.float32)
        for t in range(steps):
            store.write((t,), row)
        held.append(store.nbytes())
    assert held == [2 * 8 * 16 * 4] * 2


def test_window_store_frees_dead_outer_points_and_finished_windows():
    store = WindowStore("x", NP, "float64", (2,), 2)
    for i in range(3):
        for t in range(4):
            store.write((i, t), _value(i, t))
    store.free_below(0, 1)
    assert sorted(store.buffers) == [(1,), (2,)]
    assert [p for p, _ in store.items()] == [(1, 2), (1, 3), (2, 2), (2, 3)]
    store.free_below(1, 4)  # every point held lies below 4
    assert store.buffers == {} and store.nbytes() == 0


# ----- every store reads what a point store reads -----
@st.composite
def _patterns(draw):
    """A store of some kind and shape, and its writes interleaved with reads it must serve."""
    kind = draw(st.sampled_from(["block", "aligned", "growing", "window"]))
    outer = draw(st.integers(0, 2))  # 0: no outer dim
    steps, row = draw(st.integers(1, 24)), tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    size = draw(st.integers(1, 8))
    ops = []
    for i in range(max(outer, 1)):
        for t in range(steps):
            point = ((i,) if outer else ()) + (t,)
            ops.append(("write", point))
            for _ in range(draw(st.integers(0, 3))):
                low = {"window": max(0, t - size + 1), "aligned": (t // size) * size, "block": 0, "growing": 0}[kind]
                start = draw(st.integers(low, t + 1))
                last = draw(st.one_of(st.integers(start, t + 1).map(lambda stop, a=start: slice(a, stop)),
                                      st.integers(low, t)))
                where = point[:-1]
                if outer and kind != "window" and draw(st.booleans()):
                    where = (slice(0, i + 1),)  # every outer point so far: stacked
                ops.append(("read", where + (last,)))
    return kind, steps, row, size, ops


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_patterns())
def test_block_and_window_stores_read_what_a_point_store_reads(pattern):
    kind, steps, row, size, ops = pattern
    if kind == "window":
        store = WindowStore("x", NP, "float32", row, size)
    else:
        store = BlockStore("x", NP, "float32", row, size if kind == "aligned" else steps, grows=kind == "growing")
    reference = PointStore("x", NP, "float32", lambda: row)
    rng = np.random.default_rng(0)
    for op, index in ops:
        if op == "write":
            value = rng.standard_normal(row)
            store.write(index, value)
            reference.write(index, value)
        else:
            got, want = store.read(index), reference.read(index)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
