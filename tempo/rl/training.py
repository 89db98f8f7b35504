"""Small helpers shared by the examples: a CLI from a dataclass, and a training progress report."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import time
import typing
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from tempo.api.rt import RecurrentTensor
from tempo.api.sinks import sink
from tempo.errors import TempoError

_PLAIN = (int, float, str)


def field_docs(cls) -> dict[str, str]:
    """Each dataclass field's docstring: the string literal right after the field in the class body."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, doc in zip(body, body[1:]):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                docs[field.target.id] = " ".join(inspect.cleandoc(doc.value.value).split())
    return docs


def _type_hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):
        return {}


def _optional_of(hint):
    """``X`` for a hint ``X | None`` (the flag takes an ``X`` and defaults to None), else the hint."""
    args = typing.get_args(hint)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None))
    return hint


def parse_args(args_type, description: str = "", argv: Sequence[str] | None = None):
    """An instance of the dataclass ``args_type`` from ``--field-name value`` flags.

    Each field is one flag; its docstring (the string right after the field)
    is the flag's help, followed by its default. A ``bool`` field is a
    ``--name``/``--no-name`` switch. ``argv`` defaults to ``sys.argv[1:]``.
    A TempoError from the dataclass's ``__post_init__`` (see
    :func:`require_positive`) is a usage error: printed with the usage line,
    exit status 2, as argparse reports a malformed flag.
    """
    parser = argparse.ArgumentParser(description=description)
    docs, hints = field_docs(args_type), _type_hints(args_type)
    for f in dataclasses.fields(args_type):
        default = (f.default if f.default is not dataclasses.MISSING
                   else f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        optional = _optional_of(hints.get(f.name)) is not hints.get(f.name)
        kind = _optional_of(hints.get(f.name))
        kind = kind if kind in (*_PLAIN, bool) else type(default) if isinstance(default, _PLAIN) else str
        shown = '""' if default == "" else default
        text = docs.get(f.name, "").replace("%", "%%")
        help_text = f"{text} (default: {shown})" if default is not None or optional else text or None
        options = dict(default=default, help=help_text)
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = kind
            options["metavar"] = kind.__name__.upper()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            options.update(required=True, default=None)
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, **options)
    try:
        return args_type(**vars(parser.parse_args(argv)))
    except TempoError as err:
        parser.error(err.problem)


def require_positive(args, *names: str) -> None:
    """Raise a TempoError naming the flag (``--epochs``) of each field in ``names`` that is below 1.

    Call it from an ``Args`` dataclass's ``__post_init__``, so that a bad
    value is reported as the flag the user typed, before anything runs.
    """
    for name in names:
        value = getattr(args, name)
        if value < 1:
            raise TempoError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def steady_seconds(times: list[float]) -> float:
    """Seconds per iteration in the steady state, from the times its reports arrived: the mean gap
    after the first report (compilation and the first iteration left out). A mean, not a median,
    since a run whose iterations launch as one device program reports them in bursts."""
    return (times[-1] - times[0]) / (len(times) - 1)


class ReturnReport:
    """A progress bar of the mean episode return per iteration, and the closing summary line.

    With ``every=k`` only the points of ``mean_return``'s dim that are
    multiples of ``k`` count as iterations (e.g. PPO's batches of k updates).
    """

    def __init__(self, mean_return: RecurrentTensor, iterations: int, desc: str, batch: int = 0,
                 steps: int = 0, every: int = 1) -> None:
        self.returns: list[float] = []
        self.times: list[float] = []  # when each iteration's return arrived
        self.batch, self.steps = batch, steps  # episodes per iteration, steps per episode
        if every < 1:
            raise TempoError(f"ReturnReport(every=...) must be >= 1, got {every}")
        self.every = every
        self.bar = tqdm(total=iterations, desc=desc, unit="it")
        sink(mean_return, self._update)

    def _update(self, value, point) -> None:
        if any(step % self.every for step in point.values()):
            return
        self.returns.append(float(value))
        self.times.append(time.perf_counter())
        self.bar.set_postfix(mean_return=f"{float(value):.1f}", refresh=False)
        self.bar.update(1)  # one redraw, showing this iteration's return

    def start(self) -> None:
        self.started = time.perf_counter()

    def finish(self) -> dict:
        """Close the bar, print ``mean_return_last5=<m> iterations=<n> seconds=<s>``, return them.

        ``m`` is the mean of the last 5 iterations' mean returns (of all of
        them when fewer ran), not the progress bar's last value. The summary
        holds it as ``mean_return``, with every iteration's mean return, the
        episodes run (``batch`` per iteration), the environment steps
        (``steps`` each) and ``seconds_per_iteration`` (:func:`steady_seconds`).
        """
        seconds = time.perf_counter() - self.started
        self.bar.close()
        final = float(np.mean(self.returns[-5:]))
        print(f"mean_return_last5={final:.1f} iterations={len(self.returns)} seconds={seconds:.1f}")
        return {"mean_return": final, "iterations": len(self.returns), "seconds": seconds, "returns": self.returns,
                "seconds_per_iteration": steady_seconds(self.times) if len(self.times) > 1 else seconds,
                "episodes": self.batch * len(self.returns),
                "steps": self.batch * self.steps * len(self.returns)}
