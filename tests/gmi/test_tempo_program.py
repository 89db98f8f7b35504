"""``--algo tempo``: instances run one Tempo program as data-parallel replicas."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tempo.gmi.errors import GMIError
from tempo.gmi.layout import Layout
from tempo.gmi.train_run import TrainJob, train

# Linear regression on random inputs: each replica samples its own, the update averages gradients.
PROGRAM = textwrap.dedent('''
    from dataclasses import dataclass

    import numpy as np

    import tempo as tpo


    @dataclass
    class Args:
        seed: int = 0
        iterations: int = 5
        lr: float = 0.1


    def main(args):
        with tpo.Context(seed=args.seed) as ctx:
            (i, I), = ctx.dims("i")
            model = tpo.nn.Linear(3, 1, dims=(i,))
            x = tpo.random.normal((8, 3), dims=(i,))
            loss = ((model(x).squeeze(1) - x @ tpo.from_numpy(np.array([1.0, -2.0, 0.5], "float32"))) ** 2.0).mean()
            loss.backward()
            tpo.optim.SGD(model.parameters(), lr=args.lr).step()
            report = tpo.rl.training.ReturnReport(-loss, args.iterations, "regression", 1, 1)
            report.start()
            x, weight, bias = ctx.run({I: args.iterations}, fetch=[x, model.weight, model.bias])
        return {**report.finish(), "x": x, "weight": weight, "bias": bias}
''')


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "regression.py"
    path.write_text(PROGRAM)
    return str(path)


def summaries(run_dir, n):
    return [json.loads((run_dir / f"instance-{k}.json").read_text()) for k in range(n)]


def test_replicas_keep_identical_parameters_and_sample_their_own_data(program, tmp_path):
    run_dir = tmp_path / "run"
    job = TrainJob(Layout.parse("2,1"), "tempo", "auto", program=program,
                   program_args={"iterations": "4"}, run_dir=str(run_dir))
    result = train(job, echo=lambda line: None)
    assert result["strategy"] == "har" and result["steps"] == 3 * 4
    runs = summaries(run_dir, 3)
    weights = [np.array(r["weight"]) for r in runs]
    inputs = [np.array(r["x"]) for r in runs]
    for k in (1, 2):
        np.testing.assert_array_equal(weights[k], weights[0])
        assert not np.allclose(inputs[k], inputs[0])
    # the parameters moved, and by the mean of the three replicas' gradients
    w, b = weights[0][0].astype(np.float64), np.array(runs[0]["bias"][0], dtype=np.float64)
    for it in range(3):
        errors = [x[it] @ w + b - x[it] @ np.array([[1.0], [-2.0], [0.5]]) for x in inputs]
        w = w - 0.1 * np.mean([2.0 / 8 * x[it].T @ e for x, e in zip(inputs, errors)], axis=0)
        b = b - 0.1 * np.mean([2.0 / 8 * e.sum() for e in errors])
        np.testing.assert_allclose(weights[0][it + 1], w, rtol=1e-4, atol=1e-5)


def test_a_program_without_args_and_main_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(GMIError, match="must define a dataclass `Args` and a function `main"):
        train(TrainJob(Layout.parse("1x2"), "tempo", program=str(bad)), echo=lambda line: None)


def test_unknown_or_mistyped_program_arguments_are_named(program):
    with pytest.raises(GMIError, match="no argument batch_size"):
        train(TrainJob(Layout.parse("1x2"), "tempo", program=program,
                       program_args={"batch_size": "4"}), echo=lambda line: None)
    with pytest.raises(GMIError, match="program argument iterations='many' is not of type int"):
        train(TrainJob(Layout.parse("1x2"), "tempo", program=program,
                       program_args={"iterations": "many"}), echo=lambda line: None)


@pytest.mark.slow
@pytest.mark.parametrize("program, extra", [("examples/reinforce.py", []),
                                            ("examples/ppo_fixed_horizon.py", ["--program-arg", "epochs=2"])])
def test_rl_programs_on_tensor_cartpole_through_the_cli(program, extra, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tempo", "gmi", "train", "--algo", "tempo", "--layout", "1x2",
         "--program", program, "--program-arg", "impl=tensor", *extra,
         "--program-arg", "iterations=3", "--program-arg", "batch=4", "--program-arg", "steps=50",
         "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "strategy mpr" in done.stdout and "steps=    1200" in done.stdout
    runs = summaries(tmp_path, 2)
    assert runs[0]["returns"] != runs[1]["returns"]  # each replica runs its own episodes
