"""Tempo: compiled dynamic deep learning with recurrent tensors.

>>> import tempo as tpo
>>> ctx = tpo.Context()
>>> with ctx:
...     (t, T), = ctx.dims("t")
...     r = tpo.from_numpy([1.0, 2.0, 3.0], dims=(t,))
...     g = r[t:T].sum()
...     ctx.run(bounds={T: 3}, fetch=[g])[0].tolist()
[6.0, 5.0, 3.0]
"""
from tempo import nn, optim, rl
from tempo.api import random
from tempo.api.checkpoint import checkpoint, load_checkpoint
from tempo.api.context import Context
from tempo.api.data_parallel import data_parallel
from tempo.api.functional import (abs, argsort, cat, cos, eval_symbol, exp, from_numpy, full, log, ones,
                                  placeholder, relu, sigmoid, sin, sqrt, stop_gradient, take, tanh, udf, where,
                                  zeros)
from tempo.api.functional import maximum as max
from tempo.api.functional import minimum as min
from tempo.api.rt import RecurrentTensor
from tempo.api.sinks import end_when, sink, stop_when
from tempo.config import Config
from tempo.errors import (BoundError, DefinitionError, DomainError, ScheduleError, ShapeError,
                          TempoError)

__version__ = "0.1.0"

__all__ = ["BoundError", "Config", "Context", "checkpoint", "load_checkpoint", "DefinitionError", "DomainError", "data_parallel", "end_when", "RecurrentTensor", "ScheduleError",
           "ShapeError", "TempoError", "abs", "argsort", "cat", "cos", "eval_symbol", "exp", "from_numpy", "full", "log",
           "llm", "max", "min", "nn", "ones", "optim", "placeholder", "random", "relu", "rl", "sigmoid", "sin", "sink",
           "sqrt", "stop_gradient", "stop_when", "take", "tanh", "udf", "where", "zeros"]

from tempo.memplan import swap_plan as _memplan_swap_plan  # noqa: E402,F401  (registers the "memplan" swap plan)
from tempo.superopt import island_pass as _superopt_island_pass  # noqa: E402,F401  (registers the superopt pass's optimiser)


def __getattr__(name: str):
    """``tpo.llm``, imported at its first use: a program that does not decode pays none of its memory."""
    if name == "llm":
        import importlib

        return importlib.import_module("tempo.llm")
    raise AttributeError(f"module 'tempo' has no attribute {name!r}")
