"""Rollout training stopped at a checkpoint and resumed repeats the run that never stopped, bit for bit.

Each case runs an example (CLI flags through ``parse_args``) for 4 rollouts
with a checkpoint every 2, then resumes from the checkpoint written as the
third rollout starts: the resumed run's episodes, losses and final weights
must equal the uninterrupted run's from there on.
"""
from __future__ import annotations

import os
import runpy
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import tempo as tpo
import tempo.api.checkpoint
from tempo.api.checkpoint import Checkpoint
import tempo.rl
import tempo.rl.pool_state
from tempo.rl.gym_vector_env import _VectorHost
from tempo.rl.run_log import RunLog
from tempo.rl.training import parse_args

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS, CUT = 4, 2  # rollouts in the run; the checkpoint resumed from is written as rollout CUT starts


def run_example(script: str, folder: Path, flags: list[str]) -> tuple[dict, dict]:
    """``examples/<script>`` run with ``flags`` in ``folder``: its summary and its saved weights."""
    example = runpy.run_path(str(ROOT / "examples" / script), run_name=script)
    args = parse_args(example["Args"], argv=[*flags, "--save-model", "--no-track-tensorboard"])
    folder.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd()
    try:
        os.chdir(folder)
        summary = example["main"](args)
    finally:
        os.chdir(cwd)
    return summary, load_file(folder / summary["model_path"])


def interrupted_and_whole(script: str, tmp_path: Path, env_id: str, num_envs: int, num_steps: int,
                          extra: list[str] = ()) -> tuple:
    flags = ["--env-id", env_id, "--num-envs", str(num_envs), "--num-steps", str(num_steps),
             "--total-timesteps", str(ROLLOUTS * num_envs * num_steps), "--update-epochs", "2",
             "--num-minibatches", "2", "--seed", "3", *extra]
    ckpt = tmp_path / "ckpt.safetensors"
    whole = run_example(script, tmp_path / "whole", [*flags, "--checkpoint", str(ckpt), "--checkpoint-every",
                                                     str(CUT)])
    resumed = run_example(script, tmp_path / "resumed", [*flags, "--resume", str(ckpt)])
    return whole, resumed, CUT * num_envs * num_steps


def assert_same_from_the_cut(whole, resumed, cut_step: int, min_episodes: int) -> None:
    (summary, weights), (summary_r, weights_r) = whole, resumed
    assert weights.keys() == weights_r.keys()
    for name in weights:
        np.testing.assert_array_equal(weights[name], weights_r[name], err_msg=name)
    episodes = [e[:3] for e in summary["episodes"] if e[0] > cut_step]  # (global step, return, length)
    assert [e[:3] for e in summary_r["episodes"]] == episodes
    assert len(episodes) >= min_episodes
    drop = ("sps",)
    later = [{k: v for k, v in row.items() if k not in drop} for row in summary["losses"] if row["global_step"] > cut_step]
    assert [{k: v for k, v in row.items() if k not in drop} for row in summary_r["losses"]] == later
    assert summary_r["global_step"] == summary["global_step"]


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_cartpole_resumes_bit_for_bit(tmp_path, vector):
    whole, resumed, cut = interrupted_and_whole("ppo.py", tmp_path, "CartPole-v1", 2, 32, ["--vector", vector])
    assert_same_from_the_cut(whole, resumed, cut, min_episodes=3)


def test_a_run_stopped_by_ctrl_c_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    flags = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", str(4 * 32), "--update-epochs", "1",
             "--num-minibatches", "2", "--seed", "5"]
    whole = run_example("ppo.py", tmp_path / "whole", flags)
    log_episodes = RunLog._episodes

    def stop_in_the_fourth_rollout(self, tensors, point):
        if point["i"] >= 3 * 2:
            raise KeyboardInterrupt
        log_episodes(self, tensors, point)

    ckpt = tmp_path / "ckpt.safetensors"
    monkeypatch.setattr(RunLog, "_episodes", stop_in_the_fourth_rollout)
    with pytest.raises(KeyboardInterrupt):
        run_example("ppo.py", tmp_path / "stopped", [*flags, "--checkpoint", str(ckpt), "--checkpoint-every", "1"])
    monkeypatch.setattr(RunLog, "_episodes", log_episodes)
    assert tpo.load_checkpoint(str(ckpt)).point == {"i": 6}  # the last rollout's start
    resumed = run_example("ppo.py", tmp_path / "resumed", [*flags, "--resume", str(ckpt)])
    assert_same_from_the_cut(whole, resumed, 3 * 32, min_episodes=1)


def test_pendulum_resumes_bit_for_bit_with_its_normalisation(tmp_path):
    # 64 steps a rollout: the time limit (200 steps) ends every episode in the last rollout, 72 steps after the cut
    whole, resumed, cut = interrupted_and_whole("ppo_continuous.py", tmp_path, "Pendulum-v1", 2, 64)
    assert_same_from_the_cut(whole, resumed, cut, min_episodes=2)
    assert all(length == 200 for _, _, length in (e[:3] for e in resumed[0]["episodes"]))


def test_tensor_cartpole_resumes_bit_for_bit(tmp_path):
    whole, resumed, cut = interrupted_and_whole("ppo.py", tmp_path, "CartPole-v1", 2, 32, ["--impl", "tensor"])
    assert_same_from_the_cut(whole, resumed, cut, min_episodes=3)


@pytest.mark.slow
def test_halfcheetah_resumes_bit_for_bit(tmp_path):
    pytest.importorskip("mujoco")
    whole, resumed, cut = interrupted_and_whole("ppo_continuous.py", tmp_path, "HalfCheetah-v5", 2, 16)
    assert_same_from_the_cut(whole, resumed, cut, min_episodes=0)


def test_the_environments_are_saved_only_where_a_checkpoint_is_written(tmp_path, monkeypatch):
    snapshots, carried_over = [], []
    snapshot, carry_over = tempo.rl.pool_state.snapshot, _VectorHost.carry_over
    monkeypatch.setattr(tempo.rl.pool_state, "snapshot", lambda *a: snapshots.append(1) or snapshot(*a))
    monkeypatch.setattr(_VectorHost, "carry_over", lambda self, *a: carried_over.append(1) or carry_over(self, *a))
    ckpt = tmp_path / "ckpt.safetensors"
    run_example("ppo.py", tmp_path, ["--num-envs", "2", "--num-steps", "8", "--total-timesteps", str(5 * 16),
                                     "--update-epochs", "1", "--num-minibatches", "2", "--checkpoint", str(ckpt),
                                     "--checkpoint-every", "2"])
    assert len(carried_over) == 4  # once between two rollouts
    assert len(snapshots) == 2  # as rollouts 2 and 4 start
    assert tpo.load_checkpoint(str(ckpt)).point == {"i": 8}


def cartpole_checkpoint(tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt.safetensors"
    run_example("ppo.py", tmp_path / "first", ["--num-envs", "2", "--num-steps", "8", "--total-timesteps",
                                               str(3 * 16), "--update-epochs", "1", "--num-minibatches", "2",
                                               "--checkpoint", str(ckpt), "--checkpoint-every", "1"])
    return ckpt


def test_a_resume_with_another_number_of_environments_names_both(tmp_path):
    ckpt = cartpole_checkpoint(tmp_path)
    with pytest.raises(tpo.TempoError, match="holds 2 environments .* this run has 3"):
        run_example("ppo.py", tmp_path / "again", ["--num-envs", "3", "--num-steps", "8", "--total-timesteps",
                                                   str(3 * 24), "--update-epochs", "1", "--num-minibatches", "2",
                                                   "--resume", str(ckpt)])


def test_a_resume_with_another_environment_names_both(tmp_path):
    ckpt = cartpole_checkpoint(tmp_path)
    with pytest.raises(tpo.TempoError, match="holds 'CartPole-v1' environments, not 'Acrobot-v1'"):
        run_example("ppo.py", tmp_path / "again", ["--env-id", "Acrobot-v1", "--num-envs", "2", "--num-steps",
                                                   "8", "--total-timesteps", str(3 * 16), "--update-epochs", "1",
                                                   "--num-minibatches", "2", "--resume", str(ckpt)])


def pole_program(every: int = 2):
    """A rollout program over CartPole's gymnasium environments with a fixed policy."""
    ctx = tpo.Context(seed=1, start={"i": every})
    with ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), autoreset=True, rollout_every=every)
        o = tpo.placeholder(env.obs_shape, "float32", dims=(b, i, t))
        o[b, i, 0] = env.reset()
        step = env.step((o.spatial[2] > 0).cast("int64"))
        o[b, i, t + 1] = step.obs
    return ctx, env, (B, I, T)


def test_the_environments_check_their_count_when_they_restart(tmp_path):
    ckpt = tpo.load_checkpoint(str(cartpole_checkpoint(tmp_path)))
    ctx, env, (B, I, T) = pole_program()
    env.resume(ckpt)
    with pytest.raises(tpo.TempoError, match="holds 2 environments and this run has 3"):
        ctx.run({B: 3, I: 2, T: 4})


def test_a_checkpoint_without_the_environments_does_not_resume_them(tmp_path):
    path = tmp_path / "plain.safetensors"
    tempo.api.checkpoint.write_atomic(str(path), {"x": np.zeros(1)}, {"point.i": "2"})
    _, env, _ = pole_program()
    with pytest.raises(tpo.TempoError, match="holds no environment state"):
        env.resume(tpo.load_checkpoint(str(path)))


def test_a_checkpoint_between_rollouts_is_no_place_to_resume():
    ckpt = Checkpoint({}, {"i": 6})
    with pytest.raises(tpo.TempoError, match="update 6, not at a rollout's start .* multiple of 4"):
        tempo.rl.rollout_start(ckpt, 4, 40)


def test_a_checkpoint_after_the_last_update_is_no_place_to_resume():
    assert tempo.rl.rollout_start(None, 4, 40) == 0
    with pytest.raises(tpo.TempoError, match="after update 40: the run of 40 updates is over"):
        tempo.rl.rollout_start(Checkpoint({}, {"i": 40}), 4, 40)


def test_the_environments_are_saved_where_a_condition_on_i_alone_holds(tmp_path):
    ctx, env, (B, I, T) = pole_program()
    with ctx, pytest.raises(tpo.TempoError, match="a condition on i alone .* names T"):
        tpo.checkpoint({"x": tpo.eval_symbol(ctx.dim_order[1])}, str(tmp_path / "c.safetensors"),
                       when=ctx.dim_order[1] < T, hosts=[env])


def test_envpool_environments_do_not_resume(tmp_path):
    pytest.importorskip("envpool")
    with tpo.Context(start={"i": 3}) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        with pytest.raises(tpo.TempoError, match="envpool environments cannot save or restore their state"):
            tempo.rl.make("CartPole-v1", dims=(b, i, t), impl="envpool")
    with tpo.Context() as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tempo.rl.make("CartPole-v1", dims=(b, i, t), impl="envpool")
        with pytest.raises(tpo.TempoError, match="envpool environments cannot save"):
            env.resume(Checkpoint({}, {"i": 2}))
        with pytest.raises(tpo.TempoError, match="envpool environments cannot save"):
            tpo.checkpoint({"i": tpo.eval_symbol(i)}, str(tmp_path / "c.safetensors"), hosts=[env])
