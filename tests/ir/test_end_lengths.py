"""Which nodes depend on the length of a dim that ends at run time (``tpo.end_when``)."""
from __future__ import annotations

import numpy as np

import tempo as tpo
from tempo.ir import ops
from tempo.ir.ends import depends_on_length, ends


def test_a_fused_island_with_a_step_over_the_length_depends_on_it():
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    stops = np.array([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], bool)
    with tpo.Context() as ctx:
        (i, I), (t, T) = ctx.dims("i", "t")
        r = tpo.from_numpy(x, dims=(i, t))
        tpo.end_when(tpo.from_numpy(stops, dims=(i, t)))
        program = ctx.compile([r[i, 0:T].sum()])  # r vectorized over t: its 0:T rows and the sum fuse
    sdg = program.sdg
    (t_dim,) = ends(sdg)
    fused = [n for n, node in sdg.nodes.items() if isinstance(node.op, ops.FusedOp)]
    assert fused and all(not node.shapes[0] for node in map(sdg.nodes.get, fused))  # T in no edge nor shape
    assert all(depends_on_length(sdg, n, t_dim) for n in fused)
    (total,) = program.run({I: 2, T: 5})
    np.testing.assert_array_equal(total, [x[0, :3].sum(), x[1].sum()])
