"""The whole run as one device program: the loop over i, acting's loop over t nested in it, sinks and
checkpoints called after each launch in order; checked against the NumPy backend's host loops."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.api.checkpoint import load_checkpoint
from tempo.runtime.device_loops import DeviceLoop

pytest.importorskip("jax")

I_, B_, T_ = 5, 4, 6


def reinforce(tmp_path, backend: str, host_function: bool = False, iterations: int = I_):
    """Monte-Carlo REINFORCE on tensor environments with a sink and a checkpoint at every iteration."""
    reported = []
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tpo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), impl="tensor", obs_shape=(3, 4, 4),
                          episode_length=T_)
        policy = tpo.nn.MLP(env.obs_size, [8], env.num_actions, dims=(i,))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=policy(o.reshape(env.obs_size)))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        g = r[b, i, t:T].discounted_sum(0.99)
        (-(dist.log_prob(a) * g)[0:B, i, 0:T].mean()).backward()
        adam = tpo.optim.Adam(policy.parameters(), lr=1e-2)
        adam.step()
        total = r[0:B, i, 0:T].sum()
        if host_function:
            total = tpo.udf(lambda x: (x * 1.0,), [total], out_shapes=[()], out_dtypes=["float32"])
        tpo.sink(total, lambda value, point: reported.append((point["i"], float(value))))
        tpo.checkpoint(adam.state_dict(), str(tmp_path / f"{backend}_{{i}}.safetensors"))
        program = ctx.compile([], backend=backend)
    program.run({B: B_, I: iterations, T: T_})
    return program, reported


def test_the_whole_run_on_jax_reports_and_checkpoints_as_the_numpy_loops(tmp_path):
    device, on_device = reinforce(tmp_path, "jax")
    _, on_host = reinforce(tmp_path, "numpy")
    assert "over c0 as one device launch" in device.code                # the loop over i, whole
    assert [i for i, _ in on_device] == [i for i, _ in on_host] == list(range(I_))   # every point, in order
    np.testing.assert_allclose([v for _, v in on_device], [v for _, v in on_host], rtol=1e-5)
    for k in range(I_):
        jax_ck, np_ck = (load_checkpoint(str(tmp_path / f"{name}_{k}.safetensors")) for name in ("jax", "numpy"))
        assert jax_ck.point == np_ck.point == {"i": k} and set(jax_ck.tensors) == set(np_ck.tensors)
        for name, value in np_ck.tensors.items():
            np.testing.assert_allclose(jax_ck.tensors[name], value, rtol=1e-4, atol=1e-6)
    rows = device.profile({"B": B_, "I": I_, "T": T_}).per_iteration()
    assert set(rows) == {"device loop"} and rows["device loop"][0] == pytest.approx(1 / (I_ - 1))  # one launch


def test_chunks_of_iterations_hand_the_carry_on(tmp_path, monkeypatch):
    _, whole = reinforce(tmp_path, "jax")
    monkeypatch.setattr(DeviceLoop, "chunk", 2)                          # launches of 1, 2 and 2 iterations
    _, chunked = reinforce(tmp_path, "jax")
    assert [i for i, _ in chunked] == list(range(I_))
    np.testing.assert_allclose([v for _, v in chunked], [v for _, v in whole], rtol=1e-5)


def test_a_host_function_in_the_loop_keeps_the_host_loop_over_i(tmp_path):
    device, reported = reinforce(tmp_path, "jax", host_function=True)
    _, on_host = reinforce(tmp_path, "numpy", host_function=True)
    plan = device.plan_for()
    assert all(p.loop is not plan.main_loop for p in plan.loops) and plan.loops  # acting's loop stays compiled
    np.testing.assert_allclose([v for _, v in reported], [v for _, v in on_host], rtol=1e-5)


def test_a_launch_whose_only_iteration_does_not_learn_runs_on_the_device(tmp_path):
    """Two iterations: the first launch learns, the second runs the last iteration, whose update is dead."""
    device, on_device = reinforce(tmp_path, "jax", iterations=2)
    _, on_host = reinforce(tmp_path, "numpy", iterations=2)
    assert device.ledger.launches and [i for i, _ in on_device] == [0, 1]
    np.testing.assert_allclose([v for _, v in on_device], [v for _, v in on_host], rtol=1e-5)
    rows = device.profile({"B": B_, "I": 2, "T": T_}).per_iteration()
    assert set(rows) == {"device loop"}                                  # no iteration fell back to the host
