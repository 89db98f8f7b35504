"""A holistic instance whose simulator, agent and trainer are one Tempo program.

The program is a file in the shape of ``examples/reinforce.py``: a dataclass
``Args`` and ``main(args) -> dict`` that builds a ``tpo.Context``, trains
with a ``tpo.optim`` optimizer and returns a ``ReturnReport`` summary. Every
instance runs it as one replica of a data-parallel job (``tpo.data_parallel``):
the same initial parameters, its own episodes (random tensors and
environments are keyed by the instance id), and each iteration's gradients
averaged over the instances with the layout's reduction strategy, inside the
compiled program (a UDF), so every instance's parameters stay identical.

Instance 0 shows the program's own progress bar; the others write their
output to ``instance-<id>.log`` in the run directory. At the end each
instance reports its steps and the mean returns of its last five iterations,
and writes the program's summary to ``instance-<id>.json``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import runpy
import time

import numpy as np
import torch

from tempo.gmi.atomic import write_json
from tempo.gmi.comm import GMIContext
from tempo.gmi.errors import GMIError
from tempo.gmi.reduce import Reducer
from tempo.gmi.roles import Role, peak_memory_mb


def load_program(path: str) -> tuple[type, object]:
    """The ``Args`` dataclass and ``main`` function of a Tempo program file."""
    if not os.path.isfile(path):
        raise GMIError(f"no Tempo program file {path!r}")
    namespace = runpy.run_path(path, run_name="tempo_gmi_program")
    args_type, main = namespace.get("Args"), namespace.get("main")
    if not (dataclasses.is_dataclass(args_type) and callable(main)):
        raise GMIError(f"{path} must define a dataclass `Args` and a function `main(args)`, "
                       f"as examples/reinforce.py does")
    return args_type, main


def program_args(args_type: type, overrides: dict) -> object:
    """``Args`` with ``overrides`` (field name -> value, converted to the field's type)."""
    fields = {f.name: f for f in dataclasses.fields(args_type)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise GMIError(f"the program has no argument {', '.join(unknown)}; it takes "
                       f"{', '.join(fields)}")
    values = {}
    for name, value in overrides.items():
        kind = type(fields[name].default)
        try:
            values[name] = kind(value)
        except ValueError:
            raise GMIError(f"program argument {name}={value!r} is not of type {kind.__name__}") from None
    return args_type(**values)


class TempoProgram(Role):
    """Run a Tempo program file as this instance's replica of a data-parallel job."""

    def __init__(self, ctx: GMIContext, path: str, overrides: dict, strategy: str):
        super().__init__(ctx)
        self.path, self.overrides, self.strategy = path, overrides, strategy
        self.mpl = ctx.spec.reduce_mpl
        self.world = sum(len(ids) for ids in self.mpl)

    def run(self) -> None:
        args_type, main = load_program(self.path)
        args = program_args(args_type, self.overrides)
        reducer = Reducer(self.strategy, self.ctx, self.mpl)

        def all_reduce(flat: np.ndarray) -> np.ndarray:
            return reducer(torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))).numpy()

        import tempo as tpo

        started = time.time()
        with self._output(), tpo.data_parallel(self.gmi_id, self.world, all_reduce):
            summary = main(args)
        write_json(os.path.join(self.ctx.spec.run_dir, f"instance-{self.gmi_id}.json"),
                   json.loads(json.dumps(summary, default=_plain)))
        self.ctx.report(kind="progress", started=started, steps=summary.get("steps", 0),
                        seconds=summary["seconds"], returns=summary["returns"][-5:],
                        episodes=summary.get("episodes", 0), comm_seconds=reducer.seconds)
        self.ctx.report(kind="done", max_rss_mb=peak_memory_mb())

    def _output(self):
        """Instance 0 prints; the others write their output to a log in the run directory."""
        if self.gmi_id == 0:
            return contextlib.nullcontext()
        log = open(os.path.join(self.ctx.spec.run_dir, f"instance-{self.gmi_id}.log"), "w")
        stack = contextlib.ExitStack()
        stack.enter_context(log)
        stack.enter_context(contextlib.redirect_stdout(log))
        stack.enter_context(contextlib.redirect_stderr(log))
        return stack


def _plain(value):
    """NumPy values in a summary, as JSON numbers and lists."""
    return np.asarray(value).tolist()
