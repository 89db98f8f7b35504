"""The ExecutionPlan: every decision about how a schedule runs, made once at compile time.

Built from the SDG and the schedule AST by :func:`build`, read by the
runtime (:class:`tempo.runtime.executor.Executor`), by ``tempo.memplan`` and
by tests; ``print(program.plan)`` shows it. It holds:

- each tensor's store (:mod:`tempo.plan.store_choice`; a point store where
  none is named);
- the main loop and what is freed after each of its iterations
  (:mod:`tempo.plan.evictions`);
- the loops a backend may run whole as one device program
  (:mod:`tempo.plan.device_loops`);
- the kernel inputs a donating backend may hand to its outputs
  (:mod:`tempo.plan.donation`);
- the tensors a swap plan keeps in the host tier and the evict and load
  statements that move them (:mod:`tempo.plan.swap`).

Two plans are equal when they keep every tensor in the same store and free
the same tensors as the main loop goes: the memory a run holds, which
partial unrolling must not change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from tempo.errors import TempoError
from tempo.ir.sdg import SDG
from tempo.plan import device_loops, donation, swap
from tempo.plan.loop_plan import LoopPlan
from tempo.plan.evictions import Eviction, iteration_evictions
from tempo.plan.store_choice import POINT, StoreChoice, choose_stores
from tempo.schedule import ast

STORES = ("auto", "point")


@dataclass(frozen=True, eq=True)
class ExecutionPlan:
    """How one schedule AST runs (see the module docstring). ``stores``: ``"auto"`` (each tensor in
    the store its reads call for) or ``"point"`` (every tensor in a point store)."""

    mode: str
    choices: Mapping[tuple[int, int], StoreChoice]
    evictions: tuple[Eviction, ...]
    main_loop: ast.Loop | None = field(compare=False, repr=False)
    loops: tuple[LoopPlan, ...] = field(compare=False, repr=False)
    donations: Mapping[int, frozenset[int]] = field(compare=False, repr=False)
    swapped: frozenset[tuple[int, int]] = field(compare=False)
    moves: tuple[ast.Evict, ...] = field(compare=False, repr=False)
    names: Mapping[int, str] = field(compare=False, repr=False)

    def store(self, key: tuple[int, int]) -> StoreChoice:
        """The store of tensor ``(node, output)``."""
        return self.choices.get(key, POINT)

    def kinds(self, sdg: SDG) -> dict[tuple[int, int], str]:
        """``(node, output) -> store kind`` for every tensor of ``sdg``."""
        return {(n, j): self.store((n, j)).kind for n, node in sdg.nodes.items() for j in range(len(node.shapes))}

    def __str__(self) -> str:
        lines = [f"ExecutionPlan (stores={self.mode!r})", "stores (the others: point):"]
        lines += [f"  {self._name(n, j)}: {_choice(c)}" for (n, j), c in sorted(self.choices.items())
                  if c.kind != "point"]
        if self.evictions:
            lines.append(f"freed after each iteration of the loop over {self.main_loop.var}:")
            lines += [f"  {self.names[e.node]} below the lowest index read, along axis {e.axis}"
                      for e in self.evictions]
        lines.append(f"device loops: {len(self.loops)}")
        lines += [f"  over {p.loop.var}: {len(p.steps)} steps"
                  + "".join(f", the loop over {n.plan.loop.var} nested"
                            + (f" (ends at run time; {len(p.padded)} steps after it read its rows padded past"
                               " the end)" if k == p.ending else "") for k, n in enumerate(p.nested))
                  + (", the main loop: the whole run" if p.loop is self.main_loop else "")
                  + f", carrying {', '.join(self._name(*k) for k in sorted(p.carried)) or 'nothing'}"
                  for p in self.loops]
        lines.append("donations:" + ("" if self.donations else " none"))
        lines += [f"  {self.names[n]} hands over input {', '.join(map(str, sorted(ins)))}"
                  for n, ins in sorted(self.donations.items())]
        lines.append(f"swapped: {', '.join(self._name(*k) for k in sorted(self.swapped)) or 'nothing'}")
        loads = sum(isinstance(m, ast.Load) for m in self.moves)
        lines.append(f"moves: {len(self.moves) - loads} evicts, {loads} loads")
        return "\n".join(lines)

    def _name(self, n: int, j: int) -> str:
        return f"{self.names[n]}.{j}"


def build(sdg: SDG, program: ast.Stmt, keep, stores: str = "auto") -> ExecutionPlan:
    """The plan of ``program``; ``keep``: the nodes whose values must survive the run (fetched)."""
    if stores not in STORES:
        raise TempoError(f"stores={stores!r} is not a store choice; use one of {', '.join(map(repr, STORES))}")
    main_loop, evictions = iteration_evictions(sdg, program, keep)
    choices = choose_stores(sdg, program, keep, {e.node: e.axis for e in evictions}) if stores == "auto" else {}
    kinds = {(n, j): choices.get((n, j), POINT).kind for n, node in sdg.nodes.items()
             for j in range(len(node.shapes))}
    swapped = swap.swapped(sdg, program)
    loops = tuple(p for p in (device_loops.plan(sdg, loop, program, kinds, keep, swapped)
                              for loop in device_loops.loops(program)) if p is not None)
    return ExecutionPlan(stores, MappingProxyType(dict(choices)), evictions, main_loop, loops,
                         MappingProxyType(donation.donations(sdg, program, kinds, keep)), swapped,
                         tuple(s for s in ast.leaves(program) if isinstance(s, ast.Evict)),
                         MappingProxyType({n: f"{node.op.name}%{n}" for n, node in sdg.nodes.items()}))


def _choice(c: StoreChoice) -> str:
    if c.kind == "window":
        return f"window of {c.size} points"
    rows = "the whole dim" if c.size is None else f"{c.size} rows"
    return f"block of {rows}" + (f", rows at axis {c.axis}" if c.axis else "")
