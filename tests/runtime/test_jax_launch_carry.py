"""A device loop's carry between launches on JAX: the rows a nested loop keeps apart (the layers' K/V
buffers of a decoder) leave a launch as separate arrays and enter the next launch's program as they
are, donated: no launch stacks them into one array at its end or splits them again at its start."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tempo.runtime.backends import base
from tests.runtime.test_carried_buffers import BUFFER, CAPACITY, LAYERS, WIDTH, decoder

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

STACKED = f"f32[{LAYERS},{CAPACITY},{WIDTH}]"  # every layer's buffer as one array


def test_the_buffers_cross_launches_as_separate_arrays(monkeypatch):
    from tempo.runtime.backends import jax_loops

    steps = 40                                   # the first step alone, then launches of 16 steps
    want = decoder("numpy").run({"L": LAYERS, "T": steps})[0]
    program = decoder("jax")
    carries = []
    call = jax_loops.LoopProgram.__call__

    def kept(self, key, trips, closed, xs, ring0, owned=False):
        out = call(self, key, trips, closed, xs, ring0, owned)
        carries.append(out[0])
        return out

    monkeypatch.setattr(jax_loops.LoopProgram, "__call__", kept)
    got = program.run({"L": LAYERS, "T": steps})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(carries) >= 3
    for carry in carries:                        # every launch returns the layers' buffers apart
        rows = [v for value in carry.values() for v in value if isinstance(v, jax_loops.Rows)]
        assert rows and all(len(r.rows) == LAYERS and r.nbytes == LAYERS * CAPACITY * WIDTH * 4 for r in rows)
    compiled = [c for _, c in program.backend.loops.values() if c is not None and c.fns]
    texts = [fn.as_text() for c in compiled for (key, form), fn in c.fns.items() if hasattr(fn, "as_text")
             and "Rows" in str(form)]
    assert texts                                 # a program compiled for a carry of rows apart
    for text in texts:
        assert STACKED not in text                                   # nothing stacks or splits them
        entry = re.search(r"\nENTRY .*?\n}\n", text, flags=re.S).group(0)
        assert entry.count(f"{BUFFER}") >= LAYERS                    # each layer's buffer a parameter
