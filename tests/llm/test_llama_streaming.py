"""Streaming greedy decoding: ``on_token`` is a sink of the decoding loop, so on JAX with masked
attention the loop over ``t`` stays one device program and the host gets the tokens after each
launch, chunk by chunk, in order; the tokens are NumPy's."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime import device_loops
from tempo.runtime.backends import base

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")

NEW = 20


def _streamed(backend: str, monkeypatch):
    """The ids of a run on ``backend``, the (position, column, launches done) of each ``on_token``
    call, and the program's launches."""
    config = tpo.llm.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                                 num_heads=4, num_kv_heads=2, head_dim=8, max_positions=64)
    model = tpo.llm.Llama.random(config, seed=3)
    launched = []
    done = device_loops.DeviceLoop.done

    def counted(self, launch):
        launched.append(len(launch.envs))
        return done(self, launch)

    monkeypatch.setattr(device_loops.DeviceLoop, "done", counted)
    calls = []
    ids = model.generate(np.array([[1, 2, 3], [7, 8, 9]]), NEW, attention="masked", backend=backend,
                         stop_at_eos=False, on_token=lambda column, at: calls.append((at, column.copy(), len(launched))))
    return ids, calls, model.last_program.ledger.launches


@pytest.mark.slow      # the JAX backend compiles every island of the program
def test_streamed_tokens_come_from_the_device_loop_chunk_by_chunk(monkeypatch):
    want, numpy_calls, numpy_launches = _streamed("numpy", monkeypatch)
    ids, calls, launches = _streamed("jax", monkeypatch)
    np.testing.assert_array_equal(ids, want)
    assert [at for at, _, _ in calls] == list(range(3, 3 + NEW))       # every new column, in order
    np.testing.assert_array_equal(np.stack([column for _, column, _ in calls], axis=1), ids[:, 3:])
    assert [at for at, _, _ in numpy_calls] == [at for at, _, _ in calls]
    assert launches < numpy_launches / 4                                # the loop over t ran on the device
    chunks = [k for _, _, k in calls]
    assert chunks[0] >= 1 and len(set(chunks)) > 1                      # reported after launches, not at the end
