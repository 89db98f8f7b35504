"""Check ``tempo superopt`` on ONNX models with known outputs (ONNX's own backend tests).

:func:`check` optimises one model within a budget and sorts what happened
into one :class:`Verdict`: a crash, a written model that ``onnx.checker``
rejects, written outputs that differ from the expected ones, a budget
overrun, or a good result (rewritten or not). :func:`node_cases` generates
ONNX's node tests from the installed ``onnx`` package's case generators and
:func:`data_cases` reads the models shipped under its backend test data.
"""
from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from tempo.superopt.onnx_optimize import optimize_model, warm_up
from tempo.superopt.onnx_run import ModelRunError, model_inputs, run_model, same_values

# How far past its budget a check may end and still keep it (the promise: within 10%).
BUDGET_SLACK = 0.10


@dataclass
class Case:
    """A model, inputs for it and the outputs it must compute."""

    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    outputs: list[np.ndarray]
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class Verdict:
    """What one optimisation did: ``status`` is ``ok``, ``crash``, ``checker``, ``wrong`` or
    ``overrun``; ``rewritten`` says whether the written model differs from the input, and
    ``detail`` why it does not or what went wrong."""

    name: str
    status: str
    rewritten: bool = False
    speedup: float = 1.0
    seconds: float = 0.0
    detail: str = ""


@functools.cache
def _all_node_cases() -> tuple:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(None))


def node_cases(names: list[str] | None = None) -> Iterator[Case]:
    """ONNX's node tests (first data set each), all or those named."""
    for tc in _all_node_cases():
        if names is not None and tc.name not in names:
            continue
        inputs, outputs = tc.data_sets[0]
        feeds = dict(zip([vi.name for vi in model_inputs(tc.model)], inputs))
        yield Case(tc.name, tc.model, feeds, list(outputs), tc.rtol, tc.atol)


def node_case_names() -> list[str]:
    """The names of ONNX's node tests, in the generators' order."""
    return [tc.name for tc in _all_node_cases()]


def data_cases(root: str | Path | None = None) -> Iterator[Case]:
    """The models under ONNX's ``backend/test/data`` (``simple``, ``pytorch-*``: one folder per
    model with ``test_data_set_0``; ``light``: ``NAME.onnx`` beside ``NAME_output_0.pb``)."""
    root = Path(root or Path(onnx.__file__).parent / "backend" / "test" / "data")
    for folder in sorted(root.glob("*/*/model.onnx")):
        model = onnx.load(str(folder))
        data = folder.parent / "test_data_set_0"
        inputs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("input_*.pb"))]
        outputs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("output_*.pb"))]
        names = [vi.name for vi in model_inputs(model)]
        if len(inputs) == len(names):
            yield Case(f"{folder.parent.parent.name}/{folder.parent.name}", model,
                       dict(zip(names, inputs)), outputs)
    for path in sorted(root.glob("light/*.onnx")):
        yield _light_case(path)


def _light_case(path: Path) -> Case:
    """A light CNN: its weights are ConstantOfShape nodes; its input is ``arange(n) / n`` in
    its shape, the dummy input ONNX's test runner computed the expected output on."""
    model = onnx.load(str(path))
    outputs = [numpy_helper.to_array(onnx.load_tensor(str(p)))
               for p in sorted(path.parent.glob(f"{path.stem}_output_*.pb"))]
    inputs = {}
    for vi in model_inputs(model):
        shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        inputs[vi.name] = (np.arange(np.prod(shape)).reshape(shape) / np.prod(shape)).astype(np.float32)
    return Case(f"light/{path.stem}", model, inputs, outputs, 1e-3, 1e-5)


def check(case: Case, agent: str = "greedy", budget_s: float = 2.0, **options) -> Verdict:
    """Optimise ``case.model`` with ``agent`` and judge the model it would write (the
    libraries are imported first: the budget counts work, as the command's does)."""
    warm_up(agent)
    start = time.perf_counter()
    try:
        result = optimize_model(case.model, agent, budget_s, feeds=dict(case.inputs), **options)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a crash is what this check counts (Rust panics included)
        return Verdict(case.name, "crash", detail=traceback.format_exc(limit=-3))
    seconds = time.perf_counter() - start
    speedup = result.outcome.speedup if result.rewritten else 1.0
    verdict = Verdict(case.name, "ok", result.rewritten, speedup, seconds, result.reason)
    if not result.rewritten:
        return _timed(verdict, budget_s)
    try:
        onnx.checker.check_model(result.model, full_check=True)
    except Exception as exc:  # checker and shape-inference errors
        verdict.status, verdict.detail = "checker", str(exc).splitlines()[0]
        return verdict
    if not _expected(case, result.model):
        verdict.status, verdict.detail = "wrong", "outputs differ from the expected ones"
        return verdict
    return _timed(verdict, budget_s)


def _timed(verdict: Verdict, budget_s: float) -> Verdict:
    if verdict.seconds > budget_s * (1 + BUDGET_SLACK):
        verdict.status = "overrun"
        verdict.detail = f"{verdict.seconds:.2f} s on a {budget_s:g} s budget"
    return verdict


def _expected(case: Case, written: onnx.ModelProto) -> bool:
    """Whether ``written`` computes the case's outputs; where no engine reproduces them from
    the input model either, whether it computes what the input model computes."""
    try:
        engine, got = run_model(written, case.inputs)
        _, original = run_model(case.model, case.inputs, engine)
    except ModelRunError:
        return False
    if _close(original, case.outputs, case):
        return _close(got, case.outputs, case)
    return same_values(original, got)


def _close(got: list, want: list, case: Case) -> bool:
    try:
        return same_values([np.asarray(w) for w in want], [np.asarray(g) for g in got],
                           rtol=max(case.rtol, 1e-3), atol=max(case.atol, 1e-4))
    except ValueError:      # a different number of outputs
        return False
