"""Tempo's schedule AST: sequence, loop, if, execute, free, evict and load statements.

It is the imperative program the executor walks. Expressions are symbolic
(over loop counters and bound symbols) and are compiled to Python functions
once, when the executor is built. ``print(program.ast)`` shows it as C-like
pseudocode.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Union

from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr


class _Printable:
    def __str__(self) -> str:
        return to_text(self)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Sequence(_Printable):
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class Loop(_Printable):
    var: str
    start: Expr
    cond: Expr
    step: int
    body: "Stmt"


@dataclass(frozen=True)
class If(_Printable):
    cond: Expr
    then: "Stmt"
    orelse: "Stmt | None" = None


@dataclass(frozen=True)
class Execute(_Printable):
    """Execute node ``node_id`` at ``point`` (one expression per dim of its domain)."""

    node_id: int
    point: tuple[Expr, ...]
    label: str = ""


@dataclass(frozen=True)
class Free(_Printable):
    """Deallocate node ``node_id``'s ``outputs`` (empty: all of them) at ``point``: no later
    statement reads them (TEMPO §5.2)."""

    node_id: int
    point: tuple[Expr, ...]
    label: str = ""
    outputs: tuple[int, ...] = ()

    def freed(self, num_outputs: int) -> tuple[int, ...]:
        """The outputs this statement frees, of a node with ``num_outputs``."""
        return self.outputs or tuple(range(num_outputs))


@dataclass(frozen=True)
class Evict(_Printable):
    """Move node ``node_id``'s ``outputs`` (empty: all of them) at ``index`` from the device to
    the host tier (TEMPO §5.2). ``index``: one expression per dim of the node's domain, each a
    point or a slice (``slice(a, b)``: the points ``a`` to ``b - 1``, moved at once)."""

    node_id: int
    index: tuple[Expr, ...]
    label: str = ""
    outputs: tuple[int, ...] = ()

    def moved(self, num_outputs: int) -> tuple[int, ...]:
        """The outputs this statement moves, of a node with ``num_outputs``."""
        return self.outputs or tuple(range(num_outputs))


@dataclass(frozen=True)
class Load(Evict):
    """Copy node ``node_id``'s ``outputs`` at ``index`` from the host tier back to the device,
    for the statements after it that read them (its host copy stays)."""


Stmt = Union[Sequence, Loop, If, Execute, Free, Evict, Load]


def to_text(stmt: Stmt, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(stmt, Sequence):
        return "\n".join(to_text(s, indent) for s in stmt.body)
    if isinstance(stmt, Loop):
        head = f"{pad}for {stmt.var} = {stmt.start}; {stmt.cond}; {stmt.var} += {stmt.step}:"
        return f"{head}\n{to_text(stmt.body, indent + 1)}"
    if isinstance(stmt, If):
        text = f"{pad}if {stmt.cond}:\n{to_text(stmt.then, indent + 1)}"
        if stmt.orelse is not None:
            text += f"\n{pad}else:\n{to_text(stmt.orelse, indent + 1)}"
        return text
    point = ", ".join(_item(p) for p in (stmt.index if isinstance(stmt, Evict) else stmt.point))
    verb = {Free: "free ", Evict: "evict ", Load: "load "}.get(type(stmt), "")
    outputs = "".join(f".{j}" for j in stmt.outputs) if verb else ""
    return f"{pad}{verb}{stmt.label or 'S' + str(stmt.node_id)}{outputs}[{point}]"


def _item(e: Expr) -> str:
    """A point expression, or a slice as ``a:b``."""
    return f"{e.args[0]}:{e.args[1]}" if e.op == "slice" else str(e)


def leaves(stmt: Stmt):
    """Every Execute, Free, Evict and Load statement in program order."""
    if isinstance(stmt, Sequence):
        for s in stmt.body:
            yield from leaves(s)
    elif isinstance(stmt, Loop):
        yield from leaves(stmt.body)
    elif isinstance(stmt, If):
        yield from leaves(stmt.then)
        if stmt.orelse is not None:
            yield from leaves(stmt.orelse)
    else:
        yield stmt


def statements(stmt: Stmt):
    """Every Execute statement in program order."""
    return (s for s in leaves(stmt) if isinstance(s, Execute))


def all_loops(stmt: Stmt):
    """Every loop of ``stmt``, outer ones first."""
    if isinstance(stmt, Loop):
        yield stmt
        yield from all_loops(stmt.body)
    elif isinstance(stmt, Sequence):
        for s in stmt.body:
            yield from all_loops(s)
    elif isinstance(stmt, If):
        yield from all_loops(stmt.then)
        if stmt.orelse is not None:
            yield from all_loops(stmt.orelse)


def own_leaves(stmt: Stmt) -> list:
    """The leaf statements of ``stmt`` outside the loops nested in it (a loop body's own, under
    its conditions too)."""
    if isinstance(stmt, Sequence):
        return [x for s in stmt.body for x in own_leaves(s)]
    if isinstance(stmt, If):
        return own_leaves(stmt.then) + (own_leaves(stmt.orelse) if stmt.orelse is not None else [])
    return [] if isinstance(stmt, Loop) else [stmt]


def if_nodes(stmt: Stmt) -> int:
    """How many ``if`` statements ``stmt`` holds."""
    if isinstance(stmt, Sequence):
        return sum(if_nodes(s) for s in stmt.body)
    if isinstance(stmt, Loop):
        return if_nodes(stmt.body)
    if isinstance(stmt, If):
        return 1 + if_nodes(stmt.then) + (if_nodes(stmt.orelse) if stmt.orelse is not None else 0)
    return 0


def conditions_tested(stmt: Stmt, bounds: dict[str, int]) -> int:
    """How many ``if`` conditions a run of ``stmt`` for ``bounds`` tests (its loops walked,
    nothing executed)."""
    compiled = functools.cache(compile_expr)

    def walk(s: Stmt, env: dict) -> int:
        if isinstance(s, Sequence):
            return sum(walk(x, env) for x in s.body)
        if isinstance(s, Loop):
            count, cond, env = 0, compiled(s.cond), {**env, s.var: compiled(s.start)(env)}
            while cond(env):
                count += walk(s.body, env)
                env = {**env, s.var: env[s.var] + s.step}
            return count
        if isinstance(s, If):
            taken = s.then if compiled(s.cond)(env) else s.orelse
            return 1 + (walk(taken, env) if taken is not None else 0)
        return 0

    return walk(stmt, dict(bounds))
