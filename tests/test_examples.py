"""Smoke tests: every example runs to completion through the tempo CLI."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("script, args, expect", [
    ("examples/returns.py", ["--steps", "7"], "ok: returns and window means match"),
    ("examples/inspect_program.py", ["--steps", "5"], "== the Python source the executor runs"),
    ("examples/superopt_islands.py", ["--batch", "4", "--steps", "5", "--budget", "0.5"],
     "ok: the same values with and without the pass"),
    ("examples/reinforce.py", ["--iterations", "2", "--batch", "2", "--steps", "20", "--nstep", "8"],
     "mean_return_last5="),
    ("examples/reinforce.py", ["--iterations", "2", "--batch", "2", "--steps", "20", "--until"],
     "mean_return_last5="),
    ("examples/a2c.py", ["--iterations", "2", "--batch", "2", "--steps", "20"], "mean_return_last5="),
    ("examples/ppo_fixed_horizon.py", ["--iterations", "2", "--epochs", "2", "--batch", "2", "--steps", "20"],
     "iterations=2 "),
    ("examples/ppo.py", ["--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64"],
     "global_step=256 sps="),
    ("examples/ppo.py", ["--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64", "--impl", "tensor",
                         "--update-epochs", "2", "--num-minibatches", "2"], "global_step=256 sps="),
    ("examples/ppo_continuous.py", ["--env-id", "Pendulum-v1", "--total-timesteps", "256", "--num-steps", "128",
                                    "--num-minibatches", "2", "--update-epochs", "2"], "global_step=256 sps="),
])
def test_example_runs(script, args, expect, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tempo", "run", str(ROOT / script), *args],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300, env=ENV)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout


@pytest.mark.parametrize("script, flag", [
    ("examples/ppo_fixed_horizon.py", "--epochs"), ("examples/ppo.py", "--num-minibatches"),
    ("examples/ppo_continuous.py", "--update-epochs"), ("examples/reinforce.py", "--checkpoint-every"),
    ("examples/a2c.py", "--nstep"),
])
def test_a_zero_count_flag_is_reported_as_the_flag(script, flag, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tempo", "run", str(ROOT / script), flag, "0"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120, env=ENV)
    assert out.returncode == 2
    assert f"error: {flag} must be at least 1, got 0" in out.stderr and "ReturnReport" not in out.stderr


@pytest.mark.parametrize("script, flag, doc, default", [
    ("examples/reinforce.py", "--lr-decay FLOAT", "learning rate multiplier per iteration: lr * lr_decay ** i",
     "0.995"),
    ("examples/a2c.py", "--nstep INT", "bootstrap horizon n of the returns", "16"),
    ("examples/ppo_fixed_horizon.py", "--clip FLOAT", "PPO clip range: the ratio is clipped to [1 - clip, 1 + clip]", "0.2"),
    ("examples/ppo.py", "--num-minibatches INT", "the number of mini-batches", "4"),
    ("examples/ppo.py", "--target-kl FLOAT", "the target KL divergence threshold", "None"),
    ("examples/returns.py", "--window INT", "number of timesteps in the sliding-window mean", "4"),
    ("examples/inspect_program.py", "--dot STR", "write the SDG as Graphviz source to this path", '""'),
    ("examples/superopt_islands.py", "--agent STR", "optimiser: greedy, backtrack, eqsat or rl", "greedy"),
    ("examples/gmi_roles.py", "--layout STR", "instances per device", "2,1"),
])
def test_example_help_shows_each_fields_docstring_and_default(script, flag, doc, default, tmp_path):
    """``--help`` lists every Args field with its docstring as help and its default."""
    if script == "examples/gmi_roles.py":
        pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-m", "tempo", "run", str(ROOT / script), "--help"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300, env=ENV)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps long help lines
    assert f"{flag} {doc}" in text and f"(default: {default})" in text, out.stdout
    flags = [e for e in re.split(r"\n(?=  -)", out.stdout.split("options:", 1)[1]) if e.strip().startswith("--")]
    assert flags and all("(default: " in " ".join(e.split()) for e in flags), out.stdout  # every field


def test_ppo_collects_episodes_once_per_batch(monkeypatch):
    """Acting is written for every update but runs only where an update reads it: once per batch."""
    import runpy

    from tempo.rl import gym_env

    resets = []
    reset_one = gym_env._Episodes._reset_one
    monkeypatch.setattr(gym_env._Episodes, "_reset_one",
                        lambda self, key: resets.append(key) or reset_one(self, key))
    ppo = runpy.run_path(str(ROOT / "examples" / "ppo_fixed_horizon.py"), run_name="ppo")
    args = ppo["Args"](iterations=3, epochs=4, batch=2, steps=10)
    summary = ppo["main"](args)
    assert len(resets) == args.iterations * args.batch  # not iterations * epochs * batch
    assert sorted({key[1] for key in resets}) == [0, 4, 8]  # the first update of each batch
    assert len(summary["returns"]) == args.iterations


def test_reinforce_checkpoints_and_resumes(tmp_path):
    """A resumed run continues the saved weights, Adam moments and step count, and the
    iteration count that positions the lr schedule."""
    import runpy

    import numpy as np

    import tempo as tpo

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    first, second = str(tmp_path / "first.safetensors"), str(tmp_path / "second.safetensors")
    small = dict(batch=2, steps=20)
    reinforce["main"](reinforce["Args"](iterations=4, checkpoint=first, checkpoint_every=2, **small))
    saved = tpo.load_checkpoint(first)
    assert int(saved.tensors["iterations"]) == 4 and saved.point == {"i": 3}
    reinforce["main"](reinforce["Args"](iterations=1, resume=first, checkpoint=second,
                                        checkpoint_every=1, **small))
    after = tpo.load_checkpoint(second)
    assert int(after.tensors["iterations"]) == 5
    steps = [name for name in saved.tensors if name.endswith("/step")]
    assert steps and all(int(after.tensors[name]) == 5 for name in steps)  # Adam's count goes on
    weight = "0.Linear.weight"
    moved = np.abs(after.tensors[weight] - saved.tensors[weight]).max()
    assert 0 < moved < 0.1  # one Adam step from the saved weights, not from a fresh init


def test_reinforce_resumed_run_is_bit_identical(tmp_path):
    """Stopping after 3 iterations and resuming for 2 gives exactly the returns and weights of 5 in one go."""
    import runpy

    import numpy as np

    import tempo as tpo

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    run = lambda **kw: reinforce["main"](reinforce["Args"](batch=2, steps=20, **kw))  # noqa: E731
    whole, part, rest = (str(tmp_path / f"{n}.safetensors") for n in ("whole", "part", "rest"))
    straight = run(iterations=5, checkpoint=whole, checkpoint_every=5)
    first = run(iterations=3, checkpoint=part, checkpoint_every=3)
    second = run(iterations=2, resume=part, checkpoint=rest, checkpoint_every=2)
    assert first["returns"] + second["returns"] == straight["returns"]
    assert len(set(straight["returns"])) > 1  # the returns do change, so the check has teeth
    expected, got = tpo.load_checkpoint(whole).tensors, tpo.load_checkpoint(rest).tensors
    assert expected.keys() == got.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_superopt_example_writes_equivalent_models(tmp_path):
    """The ONNX example: every agent's written model computes the input's outputs (the example
    checks with onnx.reference), and the timing table lists each."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "superopt_onnx.py"), "--workload",
                          "resnext", "--agents", "greedy", "rl", "--budget-seconds", "8",
                          "--rounds", "2", "--dir", str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for agent in ("greedy", "rl"):
        written = tmp_path / "new" / f"resnext_{agent}.onnx"
        assert f"{agent}: {written} computes the input's outputs: True" in out.stdout
        assert f"| {agent} | " in out.stdout
    assert "training episodes" in out.stdout.split("rl: ", 1)[1]     # the CLI names the RL training,
    assert "training episodes" not in out.stdout.split("rl: ", 1)[0]  # ... only for it, whether or not it rewrote


def test_superopt_example_on_the_jax_backend(tmp_path):
    """The ONNX example with ``--backend jax``: the search, the never-slower check and the
    timing run on XLA, and the written model still computes the input's outputs."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "superopt_onnx.py"), "--workload",
                          "resnext", "--agents", "greedy", "--budget-seconds", "3",
                          "--rounds", "2", "--backend", "jax", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"greedy: {tmp_path / 'resnext_greedy.onnx'} computes the input's outputs: True" in out.stdout
    assert "| greedy | " in out.stdout


@pytest.mark.parametrize("nstep", [0, 8])
def test_reinforce_until_learns_what_the_padded_program_learns_from_fewer_steps(nstep):
    """Ending each iteration at its longest episode (--until) gives the padded program's returns,
    iteration by iteration, computing the batch's steps up to that end only."""
    import runpy

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    args = dict(iterations=3, batch=4, steps=200, nstep=nstep)
    run = lambda **kw: reinforce["main"](reinforce["Args"](**args, **kw))  # noqa: E731
    padded, until = run(), run(until=True)
    assert until["returns"] == padded["returns"]
    assert until["env_steps"] == padded["env_steps"]
    assert padded["computed_steps"] == [4 * 200] * 3
    assert all(env <= computed < 4 * 200 for env, computed in zip(until["env_steps"], until["computed_steps"]))


def test_reinforce_one_episode_per_iteration_computes_exactly_the_environment_steps():
    """With --batch 1 --until, T[i] is iteration i's episode: the learner's rows are its steps, as
    many as its return (CartPole pays 1 a step), and the returns are the padded program's."""
    import runpy

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    args = dict(iterations=6, batch=1, steps=200, baseline="episode", impl="tensor", lr=0.005, lr_decay=1.0)
    run = lambda **kw: reinforce["main"](reinforce["Args"](**args, **kw))  # noqa: E731
    padded, until = run(), run(until=True)
    assert until["returns"] == padded["returns"]
    assert until["computed_steps"] == until["env_steps"] == [int(r) for r in until["returns"]]
    assert padded["computed_steps"] == [200] * 6
    with pytest.raises(reinforce["tpo"].TempoError, match="--baseline episode"):
        reinforce["Args"](batch=1)


@pytest.mark.slow
def test_reinforce_until_resumed_run_is_bit_identical(tmp_path):
    """With --until, stopping after 2 iterations and resuming for 2 gives the returns and weights of 4 in one go."""
    import runpy

    import numpy as np

    import tempo as tpo

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    run = lambda **kw: reinforce["main"](reinforce["Args"](batch=2, steps=50, until=True, **kw))  # noqa: E731
    whole, part, rest = (str(tmp_path / f"{n}.safetensors") for n in ("whole", "part", "rest"))
    straight = run(iterations=4, checkpoint=whole, checkpoint_every=4)
    first = run(iterations=2, checkpoint=part, checkpoint_every=2)
    second = run(iterations=2, resume=part, checkpoint=rest, checkpoint_every=2)
    assert first["returns"] + second["returns"] == straight["returns"]
    assert first["computed_steps"] + second["computed_steps"] == straight["computed_steps"]
    expected, got = tpo.load_checkpoint(whole).tensors, tpo.load_checkpoint(rest).tensors
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


@pytest.mark.parametrize("impl,batch", [("tensor", 1), ("gymnasium", 3)])
def test_reinforce_ended_and_padded_give_the_same_returns_and_weights(tmp_path, impl, batch):
    """``--until`` (each iteration's episodes ended at run time) and the padded program (run to
    ``--steps``, the steps past each episode's end masked) train bit-identically: every sum over
    the steps adds them in step order (``tempo/transforms/step_order.py``)."""
    import runpy

    import numpy as np

    import tempo as tpo

    reinforce = runpy.run_path(str(ROOT / "examples" / "reinforce.py"), run_name="reinforce")
    runs, weights = {}, {}
    for until in (False, True):
        path = str(tmp_path / f"{until}.safetensors")
        runs[until] = reinforce["main"](reinforce["Args"](
            impl=impl, batch=batch, iterations=8, until=until, baseline="episode", lr=0.005, lr_decay=1.0,
            checkpoint=path, checkpoint_every=8))
        weights[until] = tpo.load_checkpoint(path).tensors
    assert runs[True]["returns"] == runs[False]["returns"]
    assert sum(runs[True]["computed_steps"]) < sum(runs[False]["computed_steps"])  # the padding is gone
    assert weights[True].keys() == weights[False].keys()
    for name in weights[True]:
        np.testing.assert_array_equal(weights[True][name], weights[False][name], err_msg=name)
