"""`tempo superopt`: the command end to end on small ONNX models."""
from __future__ import annotations

import time

import numpy as np
import torch
from onnx.reference import ReferenceEvaluator

from tempo.cli import main
from tempo.superopt.models import build
from tempo.superopt.onnx_export import export_model, save
from tempo.superopt.optimize import BUDGET_TOLERANCE_S, agent_function
from tempo.superopt.reference import random_feeds


def test_greedy_writes_an_equivalent_model(tmp_path, capsys):
    g = build("inception", scale="small")
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    save(export_model(g), str(src))
    assert main(["superopt", str(src), "--output", str(dst), "--agent", "greedy",
                 "--budget-seconds", "10"]) == 0
    assert "greedy:" in capsys.readouterr().out
    feeds = random_feeds(g)
    want = ReferenceEvaluator(str(src)).run(None, feeds)[0]
    got = ReferenceEvaluator(str(dst)).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bad_input_is_one_clean_error(tmp_path, capsys):
    assert main(["superopt", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tempo superopt: error: no such ONNX file") and "Traceback" not in err
    save(export_model(build("resnext", scale="small")), str(tmp_path / "m.onnx"))
    assert main(["superopt", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"),
                 "--budget-seconds", "0"]) == 1
    assert "--budget-seconds must be positive" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["superopt", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"),
                     "--backend", "torch-cuda"]) == 1
        assert "backend 'torch-cuda' needs a CUDA GPU" in capsys.readouterr().err


def test_rl_agent_trains_saves_and_loads(tmp_path, capsys):
    g = build("resnext", scale="small")
    src, agent = tmp_path / "in.onnx", tmp_path / "agent.pt"
    save(export_model(g), str(src))
    assert main(["superopt", str(src), "-o", str(tmp_path / "a.onnx"), "--agent", "rl",
                 "--budget-seconds", "6", "--save-agent", str(agent)]) == 0
    assert agent.exists()
    assert main(["superopt", str(src), "-o", str(tmp_path / "b.onnx"), "--agent", "rl",
                 "--budget-seconds", "3", "--load-agent", str(agent)]) == 0
    assert capsys.readouterr().out.count("rl:") == 2
    feeds = random_feeds(g)
    want = ReferenceEvaluator(str(src)).run(None, feeds)[0]
    for out in ("a.onnx", "b.onnx"):
        got = ReferenceEvaluator(str(tmp_path / out)).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert main(["superopt", str(src), "-o", str(tmp_path / "c.onnx"), "--agent", "rl",
                 "--load-agent", str(tmp_path / "nope.pt")]) == 1
    assert "no such agent file" in capsys.readouterr().err


def test_the_rl_agent_keeps_to_its_budget(tmp_path, capsys):
    """``--budget-seconds`` covers the command from reading the model to writing the result:
    training, rollouts, refinement, final choice, polishing and the never-slower check (the
    agent's libraries are imported before, as the command imports them before its clock)."""
    save(export_model(build("squeezenet", scale="small")), str(tmp_path / "in.onnx"))
    agent_function("rl")
    budget = 4.0
    start = time.perf_counter()
    assert main(["superopt", str(tmp_path / "in.onnx"), "-o", str(tmp_path / "out.onnx"),
                 "--agent", "rl", "--budget-seconds", str(budget)]) == 0
    took = time.perf_counter() - start
    assert took <= budget + BUDGET_TOLERANCE_S, f"{took:.2f} s for a budget of {budget} s"
    assert f"(budget {budget:g} s)" in capsys.readouterr().out
