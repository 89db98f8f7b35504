"""Run whole ONNX models in their own context, make their inputs, and verify a written model.

Models run on onnxruntime (one thread) where it is installed and can load the
model, and on ONNX's reference evaluator otherwise; either way the model
runs as a whole, so every node sees the model's opset imports, functions and
domains. :func:`model_feeds` makes inputs that follow each input's element
type (the model's own test inputs where given) and that the model runs on;
:func:`verify` is the last check before a model is written.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tempo.errors import TempoError

Feeds = dict[str, np.ndarray]


class ModelRunError(TempoError):
    """Neither onnxruntime nor ONNX's reference evaluator ran the model."""


def _ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def runner(model: onnx.ModelProto, engine: str | None = None) -> tuple[str, Callable[[Feeds], list]]:
    """``(engine, run)`` for ``model``: with ``engine`` None, onnxruntime where it loads the
    model, else onnx.reference; ``"onnxruntime"`` or ``"reference"`` ask for that one only.
    ``run(feeds)`` returns the outputs in order."""
    if engine in (None, "onnxruntime"):
        try:
            ort = _ort_session(model)
            return "onnxruntime", lambda feeds: ort.run(None, dict(feeds))
        except Exception:  # not installed, or an op or opset it does not implement
            if engine:
                raise ModelRunError("onnxruntime cannot load the model") from None
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(model)
    except Exception as exc:  # the evaluator raises many types for models it cannot run
        raise ModelRunError(f"no engine loads the model ({type(exc).__name__}: {exc})") from None
    return "reference", lambda feeds: evaluator.run(None, dict(feeds))


def run_model(model: onnx.ModelProto, feeds: Feeds, engine: str | None = None
              ) -> tuple[str, list[np.ndarray]]:
    """The engine that ran ``model`` and its outputs for ``feeds`` (ModelRunError if none can)."""
    name, run = runner(model, engine)
    try:
        return name, [np.asarray(o) for o in run(feeds)]
    except Exception as exc:  # an engine's runtime failure on these inputs
        if engine is None and name == "onnxruntime":
            return run_model(model, feeds, "reference")
        raise ModelRunError(f"{name} failed to run the model ({type(exc).__name__}: {exc})") from None


def _elem(vi: onnx.ValueInfoProto) -> int:
    return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds (not those an initializer gives a default)."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _generated(vi: onnx.ValueInfoProto, rng: np.random.Generator, kind: str) -> np.ndarray:
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    dtype = helper.tensor_dtype_to_np_dtype(_elem(vi))
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 3, shape).astype(dtype) if kind != "ones" else np.ones(shape, dtype)
    if dtype.kind in "OSU":
        return np.full(shape, "a", dtype=object)
    value = {"normal": rng.standard_normal, "unit": rng.random, "ones": np.ones}[kind](shape)
    return value.astype(dtype)


def test_inputs(path: str | Path, model: onnx.ModelProto) -> Feeds | None:
    """The inputs of ``test_data_set_0`` beside ``path`` (ONNX's test layout), if there are any."""
    folder = Path(path).parent / "test_data_set_0"
    files = sorted(folder.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    names = [vi.name for vi in model_inputs(model)]
    if not files or len(files) != len(names):
        return None
    tensors = [onnx.load_tensor(str(f)) for f in files]
    return {name: numpy_helper.to_array(t) for name, t in zip(names, tensors)}


@dataclass
class ModelRun:
    """Inputs a model runs on, the values of the tensors asked for, and how long loading the
    model into its engine and one run took."""

    feeds: Feeds
    values: dict[str, np.ndarray]
    load_s: float
    run_s: float


def model_feeds(model: onnx.ModelProto, given: Feeds | None = None, names: list[str] = (),
                seed: int = 0, engine: str | None = None) -> ModelRun:
    """Inputs the model runs on (``given`` where it runs on them, else generated per element
    type: standard normal, then uniform in [0, 1), then ones, the first the model runs on
    without error or non-finite outputs) and the values the float32 tensors ``names`` take.
    ``engine`` as in :func:`runner`; onnx.reference takes over where onnxruntime fails."""
    probe = _with_outputs(model, names)
    start = time.perf_counter()
    engine, run = runner(probe, engine)
    load_s = time.perf_counter() - start
    attempts = [given] if given is not None else []
    rng = np.random.default_rng(seed)
    attempts += [{vi.name: _generated(vi, rng, kind) for vi in model_inputs(model)}
                 for kind in ("normal", "unit", "ones")]
    outputs = [o.name for o in probe.graph.output]
    for feeds in attempts:
        start = time.perf_counter()
        try:
            outs = [np.asarray(o) for o in run(feeds)]
        except Exception:  # an engine's failure on these inputs: try the next ones
            continue
        if feeds is given or all(_finite(o) for o in outs):
            found = dict(zip(outputs, outs))
            values = {n: feeds[n] if n in feeds else found[n] for n in names}
            return ModelRun(feeds, values, load_s, time.perf_counter() - start)
    if engine == "onnxruntime":
        return model_feeds(model, given, names, seed, "reference")
    raise ModelRunError(f"{engine} runs the model on none of its inputs tried")


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """``model`` with the float32 tensors ``names`` among its outputs."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {o.name for o in probe.graph.output} | {i.name for i in probe.graph.input}
    probe.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names if n not in declared)
    return probe


def _finite(value: np.ndarray) -> bool:
    return value.dtype.kind not in "fc" or bool(np.all(np.isfinite(value)))


def same_values(want: list[np.ndarray], got: list[np.ndarray], rtol: float = 1e-3,
                atol: float = 1e-4) -> bool:
    """Equal shapes, element types and values (floats to ``rtol`` and ``atol`` scaled by the
    largest magnitude, NaN where NaN)."""
    for a, b in zip(want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            scale = float(np.nanmax(np.abs(a[np.isfinite(a)]), initial=1.0))
            if not np.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True):
                return False
        elif not np.array_equal(a, b):
            return False
    return True


def verify(written: onnx.ModelProto, original: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
           ) -> str | None:
    """Why ``written`` must not replace ``original`` (None when it may): it fails
    ``onnx.checker``'s full check, or its outputs on ``feeds`` differ from the original's
    under the same engine."""
    try:
        onnx.checker.check_model(written, full_check=True)
    except Exception as exc:  # checker and shape-inference errors
        return f"onnx.checker rejects it ({type(exc).__name__}: {str(exc).splitlines()[0]})"
    try:
        engine, want = run_model(original, dict(feeds))
        _, got = run_model(written, dict(feeds), engine)
    except ModelRunError as exc:
        return f"its outputs cannot be checked: {exc}"
    if not same_values(want, got):
        return f"its outputs differ from the input model's ({engine})"
    return None
