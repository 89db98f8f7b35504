"""Stores' buffers on huge-page slabs (tempo.runtime.backends.huge_pages)."""
import gc
import weakref

import numpy as np
import pytest

from tempo.runtime.backends import huge_pages
from tempo.runtime.backends.numpy import NumPyBackend

needs_madvise = pytest.mark.skipif(not huge_pages.available(), reason="no MADV_HUGEPAGE on this platform")


def _huge_kb(address: int) -> int | None:
    """AnonHugePages (kB) of the mapping holding ``address`` in /proc/self/smaps, None if not found."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return None


@needs_madvise
def test_buffers_of_a_few_megabytes_share_an_aligned_slab_without_overlap():
    slabs = huge_pages.Slabs()
    a = slabs.empty((1024, 3, 64), np.float32)  # 768 KB
    b = slabs.empty((700, 33), np.float64)  # 180 KB: below SMALLEST, NumPy's own
    c = slabs.empty((3, 1024, 64), np.float32)
    big = slabs.empty((5 << 20,), np.uint8)  # 5 MB: NumPy's own (it asks for huge pages itself)
    assert a.ctypes.data % huge_pages.HUGE_PAGE == 0
    assert c.ctypes.data == a.ctypes.data + a.nbytes and c.ctypes.data % huge_pages.ALIGN == 0
    assert a.base is not None and c.base is not None and b.base is None and big.base is None
    a[...], c[...] = 1.0, 2.0
    assert a.flags.c_contiguous and a.flags.writeable and not np.shares_memory(a, c)
    assert (a == 1.0).all() and (c == 2.0).all()


@needs_madvise
def test_a_full_slab_starts_another_and_is_unmapped_when_its_buffers_are_freed():
    slabs = huge_pages.Slabs()
    first = slabs.empty((3 << 20,), np.uint8)
    held = [slabs.empty((3 << 20,), np.uint8) for _ in range(huge_pages.SLAB_BYTES // (3 << 20))]
    assert not np.shares_memory(held[-1], first)  # the 11th does not fit the first slab's 32 MB
    slab = weakref.ref(first.base)
    del first, held
    gc.collect()
    assert slab() is None


@needs_madvise
def test_numpy_backend_rows_of_a_few_megabytes_are_on_huge_pages():
    enabled = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    if "[never]" in enabled:
        pytest.skip("transparent huge pages are off on this machine")
    rows = NumPyBackend().empty_rows(1024, (4, 3, 64), "float32", axis=2)  # a layer's keys: 3 MB
    assert rows.shape == (1024, 4, 3, 64) and rows.dtype == np.float32
    rows[...] = 1.0
    assert _huge_kb(rows.ctypes.data) > 0


def test_without_madvise_the_buffers_are_numpy_arrays(monkeypatch):
    monkeypatch.setattr(huge_pages, "available", lambda: False)
    out = huge_pages.Slabs().empty((1024, 192), np.float32)
    assert out.base is None and out.shape == (1024, 192)


@needs_madvise
def test_tracemalloc_sees_a_buffer_while_it_lives():
    import tracemalloc
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rows = huge_pages.Slabs().empty((1024, 256), np.float32)  # 1 MB
        assert tracemalloc.get_traced_memory()[0] - before >= rows.nbytes
        del rows
        gc.collect()
        assert tracemalloc.get_traced_memory()[0] - before < 64 << 10
    finally:
        tracemalloc.stop()
