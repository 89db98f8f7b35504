"""n-step REINFORCE on JAX with the loop over iterations on the host, against NumPy.

A max over an iteration's ``0:T`` rows keeps the loop over ``i`` on the host
(:mod:`tempo.plan.device_loops`): each iteration launches a device loop over
``t`` that ends at run time, and the learner that follows, reading the
returns ``r[t:min(t + 8, T)]``, runs launch by launch. Its training is
NumPy's: the same episode lengths and returns at every iteration, and
parameters equal to float rounding (the batch of 32 makes the first steps'
8-step returns equal across episodes, where a standardization by the batch's
spread at each step would divide the rounding of their mean by its epsilon,
so the advantage here is standardized over the iteration's steps).
"""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.runtime.backends import base
from tests.rl.tensor_cartpole import acting

pytestmark = pytest.mark.skipif("jax" not in base.available_backends(), reason="jax is not installed")


def train(backend: str):
    """Four iterations of 8-step REINFORCE on CartPole as tensor ops: the program, the per-iteration
    returns, longest steps and first-layer weights a sink reported."""
    reported = []
    with tpo.Context(seed=0) as ctx:
        ((b, B), (i, I), (t, T)), policy, dist, a, r, d = acting(ctx, 16, last_init_scale=0.01)
        g = r[b, i, t:tpo.min(t + 8, T)].discounted_sum(0.99)
        alive = tpo.rl.alive(d)
        lived = alive[0:B, i, 0:T].sum()
        baseline = (g * alive)[0:B, i, 0:T].sum() / lived
        spread = ((((g - baseline) ** 2.0) * alive)[0:B, i, 0:T].sum() / lived).sqrt() + 1e-6
        (-(dist.log_prob(a) * (g - baseline) / spread * alive)[0:B, i, 0:T].mean()).backward()
        tpo.optim.Adam(policy.parameters(), lr=0.01).step()
        weight = policy.parameters()[0]
        tpo.sink(tpo.cat([r[0:B, i, 0:T].sum().reshape(1), r[0:B, i, 0:T].max().reshape(1),
                          weight.reshape(-1)]), lambda value, point: reported.append(np.asarray(value)))
        program = ctx.compile([], backend=backend)
    program.run({B: 32, I: 4, T: 60})
    return program, np.stack(reported)


@pytest.mark.slow
def test_the_host_loop_over_iterations_trains_numpys_returns():
    program, got = train("jax")
    reference, want = train("numpy")
    assert "over c0 as one device launch" not in program.code  # the loop over i runs on the host ...
    assert any(p.end is not None for p in program.plan.loops)  # ... around a device loop over t
    np.testing.assert_array_equal(program.lengths["T"], reference.lengths["T"])
    np.testing.assert_array_equal(got[:, :2], want[:, :2])  # every iteration's return and its max
    np.testing.assert_allclose(got[:, 2:], want[:, 2:], rtol=1e-5, atol=1e-6)
