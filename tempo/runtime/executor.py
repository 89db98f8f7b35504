"""The executor: runs the schedule AST's generated source, which launches kernels.

The AST is turned once per program into one generated Python function
(:mod:`tempo.runtime.codegen`; ``print(program.code)``) and its kernels are
bound once, in a :class:`Runnable`: loops over local counters, and at each
Execute the node's inputs read from their tensor stores at indices computed
inline, the backend kernel run, and the outputs written back at that point.
A run checks its bounds, allocates the stores, binds them to the generated
code's names and runs it.

The executor interprets an :class:`~tempo.plan.ExecutionPlan` made at compile
time: each tensor's store (point, block or window; :mod:`tempo.runtime.stores`)
is the one the plan chose. Block and window
stores hand kernels views of their buffers and take outputs by in-place
writes (TEMPO's kernel wrappers). A window store's rows are overwritten as
its dim advances, so a kernel output that may alias a window read is copied
before a point store keeps it, and user functions get copies of window reads.

The check of each ``tpo.end_when`` calls its :class:`~tempo.runtime.ends.EndCheck`,
which says where the loop over the dim it ends exits and keeps each length
(``program.lengths``); block stores along such a dim grow as it goes.

A Free statement (:mod:`tempo.schedule.memory`) drops a point from a point
store after its last reader; the points no later iteration reads are freed
after each iteration of the main loop (the plan's evictions). Evict and load
statements (a swap plan's, :mod:`tempo.plan.swap`) move points between the device and host
tiers of the stores they name; a block store that swaps keeps its buffers in
the host tier. Every store reports what it holds to the executor's
:class:`~tempo.runtime.memory.Ledger` (``program.memory_report()``).
"""
from __future__ import annotations

import math
from typing import Callable

from tempo.errors import BoundError, TempoError
from tempo.ir.ends import ends
from tempo.ir.ops import ConstOp, MergeOp, StopRun
from tempo.ir.sdg import SDG, Node
from tempo.plan import ExecutionPlan, build
from tempo.runtime.backends.base import Backend, StepFailed
from tempo.runtime.codegen import Generator
from tempo.runtime.device_loops import DeviceLoop
from tempo.runtime.launches import held
from tempo.runtime.ends import EndCheck
from tempo.runtime.memory import BudgetExceeded, Ledger
from tempo.runtime.profile import Profiler, kind_of
from tempo.runtime.stores import free_below, make_store
from tempo.schedule import ast
from tempo.symbolic.evaluate import shape_at
from tempo.symbolic.expr import bound_of


class Runnable:
    """A program's generated code with its kernels bound, made once per program, plan and set of
    bound names (the generated source names the bounds, never their values): what each run of an
    :class:`Executor` executes. ``profiled``: the source counts for a
    :class:`~tempo.runtime.profile.Profiler`."""

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, plan: ExecutionPlan,
                 bound_names, profiled: bool = False):
        self.sdg, self.program, self.backend, self.plan = sdg, program, backend, plan
        ending = set(ends(sdg))  # dims that end at run time: their block stores grow
        self.stores = {(n, j): (plan.store((n, j)), f"{node.op.name}%{n}", node.dtypes[j], node.shapes[j],
                                bound_of(node.domain[-1]).name if node.domain else None,
                                bool(node.domain) and node.domain[-1] in ending, (n, j) in plan.swapped)
                       for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
        kinds = plan.kinds(sdg)
        self.loops = [DeviceLoop(planned, compiled, sdg, backend, kinds) for planned in plan.loops
                      if (compiled := backend.device_loop(planned, sdg)) is not None]
        names = {id(loop.plan.loop): (f"D{k}", loop) for k, loop in enumerate(self.loops)}
        generator = Generator(sdg, kinds, plan.main_loop, sorted(bound_names), names,
                              profiled=plan.main_loop if profiled else None, evictions=plan.evictions)
        self.source = generator.source(program)
        self.code = compile(self.source, "<tempo program>", "exec")
        self.checks = {n: generator.host_steps.get(n, True) for n in generator.checks}  # -> whether host steps
        self.whole = next((f"D{k}" for k, loop in enumerate(self.loops)
                           if loop.plan.loop is plan.main_loop), None)  # the device loop of the main loop
        self.donate = plan.donations if backend.donates else {}
        self.kernels, self.kinds, self.merges, self.consts, self.per_run = {}, {}, {}, [], []
        for n in {ex.node_id for ex in ast.statements(program)} - set(self.checks):
            node = sdg.nodes[n]
            self.kinds[n] = "store write" if isinstance(node.op, MergeOp) else kind_of(node.op)
            if isinstance(node.op, MergeOp):  # written inline: no kernel
                if node.op.broadcast:
                    self.merges[n] = node.shapes[0]
                continue
            if isinstance(node.op, ConstOp):
                self.consts.append(node)
            if backend.copies_constants and _holds_constant(node.op):  # the constant as it is at each run
                self.per_run.append(n)
            else:
                self.kernels[n] = self.kernel(n)

    def kernel(self, n: int):
        """The backend's kernel of node ``n`` (donating what the plan says it may)."""
        op = self.sdg.nodes[n].op
        return self.backend.kernel(op, donate=self.donate[n]) if n in self.donate else self.backend.kernel(op)


class Executor:
    """Runs one compiled program for one set of bounds.

    ``runnable``: the program's :class:`Runnable` (None: made here from ``keep``, the nodes whose
    values must survive the run (fetched), and ``plan``, the program's
    :class:`~tempo.plan.ExecutionPlan` (None: made here, ``stores`` saying how: ``"auto"``
    chooses each tensor's store from its reads, ``"point"`` keeps every tensor in a point store));
    ``profiler``: a :class:`~tempo.runtime.profile.Profiler` that counts and times what the run does
    (its runnable made ``profiled``).
    """

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, bounds: dict[str, int],
                 keep: set[int] = frozenset(), stores: str = "auto", device_budget: int | None = None,
                 plan: ExecutionPlan | None = None, end_check_every: int | None = None,
                 profiler: Profiler | None = None, runnable: Runnable | None = None):
        if runnable is None:
            runnable = Runnable(sdg, program, backend, plan if plan is not None else build(sdg, program, keep, stores),
                                bounds, profiler is not None)
        self.sdg, self.backend, self.bounds, self.profiler = sdg, backend, bounds, profiler
        self.plan, self.source = runnable.plan, runnable.source
        self.ledger = Ledger(budget=device_budget)
        self.stores = {key: make_store(choice, name, backend, dtype, _empty_shape(shape, bounds),
                                       bounds[bound] if bound is not None else None, self.ledger, grows=grows)
                       for key, (choice, name, dtype, shape, bound, grows, _) in runnable.stores.items()}
        for key, spec in runnable.stores.items():
            if spec[-1] and self.stores[key].kind == "block":  # a block store that swaps stays in the host tier
                self.stores[key].tier = "host"
        for node in runnable.consts:
            _check_const_covers_bounds(node, bounds)
        self.end_checks = {n: EndCheck(sdg, n, backend, end_check_every, host) for n, host in runnable.checks.items()}
        self.body = self._bind(runnable)
        self.stopped_at: dict[str, int] | None = None  # where a StopRun ended the run

    def run(self) -> None:
        with self.backend.running():
            try:
                self.body(dict(self.bounds))
            except StopRun as stop:
                self.stopped_at = stop.point

    def _bind(self, runnable: Runnable) -> Callable[[dict], None]:
        """The generated program with its names bound to this run's stores, end checks and device
        loops (:mod:`tempo.runtime.device_loops`) and the runnable's kernels."""
        backend = self.backend
        namespace = {"__builtins__": {"min": min, "max": max, "slice": slice, "Exception": Exception},
                     "inf": math.inf, "fail": self._fail, "ledger": self.ledger, "held": held, "free_below": free_below,
                     "detach": backend.detach, "broadcast": backend.broadcast}
        lengths = {key: store.length for key, store in self.stores.items() if store.kind == "block"}
        namespace.update({f"D{k}": loop.bind(self.ledger, self.end_checks, lengths, f"D{k}")
                          for k, loop in enumerate(runnable.loops)})
        namespace.update({f"U{n}": check for n, check in self.end_checks.items()})
        namespace.update({f"E{n}": check.stepper() for n, check in self.end_checks.items()})
        namespace.update({f"S{n}_{j}": store for (n, j), store in self.stores.items()})
        namespace.update({f"K{n}": kernel for n, kernel in runnable.kernels.items()})
        namespace.update({f"K{n}": runnable.kernel(n) for n in runnable.per_run})
        namespace.update({f"F{n}": _empty_shape(shape, self.bounds) for n, shape in runnable.merges.items()})
        if self.profiler is not None:
            _profiled(namespace, self.profiler, runnable.kinds, runnable.whole)
        exec(runnable.code, namespace)  # noqa: S102
        return namespace["program"]

    def _fail(self, n: int, point: tuple, err: Exception):
        """Re-raise a kernel's failure naming the user's line (as torch.fx does) and the point."""
        if isinstance(err, (BudgetExceeded, StopRun)):
            raise err
        node = self.sdg.nodes[n]
        batched = [f"{d.name}=0..{self.bounds[bound_of(d).name] - 1}" for d in self.sdg.vectorized.get(n, ())]
        where = ", ".join([f"{d.name}={v}" for d, v in zip(node.domain, point)] + batched)
        name, site, cause = ((err.op_name, err.site, err.error) if isinstance(err, StepFailed)
                             else (node.op.name, node.site, err))
        raise TempoError(f"{name} failed at {where or 'its only point'}: {type(cause).__name__}: {cause}",
                         site) from cause


def _profiled(namespace: dict, profiler: Profiler, kinds: dict[int, str], whole: str | None) -> None:
    """Bind ``profiler``'s wrappers in place of the generated code's names, and its own names
    (``whole``: the name of the device loop that runs the main loop, if any)."""
    for name, value in list(namespace.items()):
        if name[0] == "K" and name[1:].isdigit():
            namespace[name] = profiler.call(kinds[int(name[1:])], value)
        elif name == whole:
            namespace[name] = profiler.whole_loop(value)
        elif name[0] == "D" and name[1:].isdigit():
            namespace[name] = profiler.device_loop(value)
        elif name[0] == "S" and name[1].isdigit():
            namespace[name] = profiler.store(value)
    namespace.update(C=profiler.condition, M=profiler.mark, B=profiler.start)


def source(sdg: SDG, program: ast.Stmt, plan: ExecutionPlan, bound_names) -> str:
    """The generated source an executor of this program and plan runs (for any bounds of ``bound_names``)."""
    return Generator(sdg, plan.kinds(sdg), plan.main_loop, sorted(bound_names),
                     evictions=plan.evictions).source(program)


def _holds_constant(op) -> bool:
    """Whether ``op`` is a constant or a fused op with a constant step."""
    return isinstance(op, ConstOp) or any(isinstance(step.op, ConstOp) for step in getattr(op, "steps", ()))


def _empty_shape(shape: tuple, bounds: dict[str, int]) -> Callable[[], tuple]:
    def sizes() -> tuple:
        try:
            return shape_at(shape, bounds)
        except BoundError:
            raise TempoError(f"cannot stack an empty slice of tensors of dynamic shape {shape}") from None

    return sizes


def _check_const_covers_bounds(node: Node, bounds: dict[str, int]) -> None:
    array = node.op.value.array
    for axis, d in enumerate(node.domain):
        need = bounds[bound_of(d).name]
        if array.shape[axis] < need:
            raise BoundError(f"from_numpy array has {array.shape[axis]} entries along {d.name}, "
                             f"but {bound_of(d).name} = {need}", node.site)
