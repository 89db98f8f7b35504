"""The executor: runs the schedule AST's generated source, which launches kernels.

The AST is turned once into one generated Python function
(:mod:`tempo.runtime.codegen`; ``print(program.code)``): loops over local
counters, and at each Execute the node's inputs read from their tensor
stores at indices computed inline, the backend kernel run, and the outputs
written back at that point. Merges, and launches that read window stores,
call the node's *launcher* (a closure that evaluates the input dependence
expressions at the point) instead.

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
from tempo.ir.ops import ConstOp, MergeOp, StopRun, UDFOp
from tempo.ir.sdg import SDG, Node
from tempo.plan import ExecutionPlan, build
from tempo.runtime import device_loops
from tempo.runtime.backends.base import Backend, StepFailed
from tempo.runtime.codegen import Generator
from tempo.runtime.ends import EndCheck
from tempo.runtime.memory import BudgetExceeded, Ledger
from tempo.runtime.profile import Profiler, kind_of
from tempo.runtime.stores import make_store
from tempo.schedule import ast
from tempo.symbolic.evaluate import compile_expr, shape_at
from tempo.symbolic.expr import bound_of


class Executor:
    """Runs one compiled program for one set of bounds.

    ``keep``: nodes whose values must survive the run (fetched); ``plan``: the program's
    :class:`~tempo.plan.ExecutionPlan` (None: made here, ``stores`` saying how: ``"auto"``
    chooses each tensor's store from its reads, ``"point"`` keeps every tensor in a point store);
    ``profiler``: a :class:`~tempo.runtime.profile.Profiler` that counts and times what the run does.
    """

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, bounds: dict[str, int],
                 keep: set[int] = frozenset(), stores: str = "auto", device_budget: int | None = None,
                 plan: ExecutionPlan | None = None, end_check_every: int | None = None,
                 profiler: Profiler | None = None):
        self.sdg, self.backend, self.bounds, self.profiler = sdg, backend, bounds, profiler
        self.plan = plan if plan is not None else build(sdg, program, keep, stores)
        self.ledger = Ledger(budget=device_budget)
        ending = set(ends(sdg))  # dims that end at run time: their block stores grow
        self.stores = {(n, j): make_store(self.plan.store((n, j)), f"{node.op.name}%{n}", backend,
                                          node.dtypes[j], _empty_shape(node.shapes[j], bounds),
                                          bounds[bound_of(node.domain[-1]).name] if node.domain else None,
                                          self.ledger, grows=bool(node.domain) and node.domain[-1] in ending)
                       for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
        self.end_check_every = end_check_every
        self.end_checks: dict[int, EndCheck] = {}  # tpo.end_when check node -> its exits, made by _compile
        # (store, axis, floors) per output of each eviction: an island's outputs may be read from different points
        self.evictions = [(self.stores[(e.node, j)], e.axis, tuple(per_output))
                          for e in self.plan.evictions for j, per_output in e.floors.items()]
        for key in self.plan.swapped:
            if self.stores[key].kind == "block":
                self.stores[key].tier = "host"
        self.body = self._compile(program)
        self.stopped_at: dict[str, int] | None = None  # where a StopRun ended the run

    def run(self) -> None:
        with self.backend.running():
            try:
                self.body(dict(self.bounds))
            except StopRun as stop:
                self.stopped_at = stop.point

    # ----- the AST as generated source -----
    def _compile(self, program: ast.Stmt) -> Callable[[dict], None]:
        """Generate the program's source (:mod:`tempo.runtime.codegen`) and bind its names; the loops the
        backend compiles whole (:mod:`tempo.runtime.device_loops`) are ``D<k>`` calls before their loops."""
        plan = self.plan
        loops = device_loops.bind(plan.loops, self.sdg, self.stores, self.backend, self.ledger)
        profiler = self.profiler
        generator = Generator(self.sdg, plan.kinds(self.sdg), plan.main_loop if plan.evictions else None,
                              sorted(self.bounds), {key: f"D{k}" for k, key in enumerate(loops)},
                              profiled=plan.main_loop if profiler is not None else None)
        self.source = generator.source(program)
        namespace = {"__builtins__": {"min": min, "max": max, "slice": slice, "Exception": Exception},
                     "evict": self._evict, "fail": self._fail, "ledger": self.ledger}
        namespace.update({f"D{k}": loop for k, loop in enumerate(loops.values())})
        self.end_checks = {n: EndCheck(self.sdg, n, self.backend, self.end_check_every,
                                       generator.host_steps.get(n, True)) for n in generator.checks}
        namespace.update({f"U{n}": check for n, check in self.end_checks.items()})
        donate = plan.donations if self.backend.donates else {}
        namespace.update({f"S{n}_{j}": store for (n, j), store in self.stores.items()})
        kinds = {}
        for n in {ex.node_id for ex in ast.statements(program)}:
            node = self.sdg.nodes[n]
            if n in generator.checks:
                continue
            kinds[n] = "store write" if isinstance(node.op, MergeOp) else kind_of(node.op)
            if n in generator.called:
                namespace[f"L{n}"] = self._launcher(node)
                continue
            if isinstance(node.op, MergeOp):  # written inline: no kernel
                continue
            if isinstance(node.op, ConstOp):
                _check_const_covers_bounds(node, self.bounds)
            namespace[f"K{n}"] = (self.backend.kernel(node.op, donate=donate[n]) if n in donate
                                  else self.backend.kernel(node.op))
        if profiler is not None:
            whole = next((f"D{k}" for k, key in enumerate(loops) if key == id(plan.main_loop)), None)
            _profiled(namespace, profiler, kinds, whole)
        exec(compile(self.source, "<tempo program>", "exec"), namespace)  # noqa: S102
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

    def _evict(self, iteration: int) -> None:
        """Free the points no later iteration reads (the plan's evictions)."""
        later = {self.plan.main_loop.var: iteration + 1}
        for store, axis, floors in self.evictions:
            if len(floors) == 1:
                store.free_below(axis, floors[0](later))
            else:
                store.free_below(axis, min((floor(later) for floor in floors), default=math.inf))

    # ----- launchers -----
    def _launcher(self, node: Node) -> Callable[[tuple], None]:
        names = [d.name for d in node.domain]
        edges = self.sdg.in_edges(node.id)
        reads = [(self.stores[(e.src, e.src_out)], compile_expr(e.index),
                  compile_expr(e.cond) if e.cond is not None else None) for e in edges]
        outs = [self.stores[(node.id, j)] for j in range(len(node.shapes))]
        bounds, backend = self.bounds, self.backend
        windows = [k for k, (store, _, _) in enumerate(reads) if store.kind == "window"]
        detach = [bool(windows) and store.kind == "point" for store in outs]
        if isinstance(node.op, MergeOp):
            full_shape = _empty_shape(node.shapes[0], bounds)
            spread = [k in node.op.broadcast for k in range(len(reads))]

            def launch_merge(point):
                env = dict(bounds, **dict(zip(names, point)))
                for (store, index, cond), widen in zip(reads, spread):
                    if cond is None or cond(env):
                        value = store.read(index(env))
                        out = backend.broadcast(value, full_shape()) if widen else value
                        outs[0].write(point, backend.detach(out, [value]) if detach[0] else out)
                        return
            return launch_merge
        if isinstance(node.op, ConstOp):
            _check_const_covers_bounds(node, bounds)
        kernel, fail = backend.kernel(node.op), self._fail
        copied = windows if isinstance(node.op, UDFOp) else []  # user code may keep its inputs

        def launch(point):
            env = dict(bounds, **dict(zip(names, point)))
            inputs = [store.read(index(env)) for store, index, _ in reads]
            for k in copied:
                inputs[k] = backend.detach(inputs[k], [inputs[k]])
            try:
                results = kernel(inputs, env, point)
            except Exception as err:
                fail(node.id, point, err)
            for store, value, copy in zip(outs, results, detach):
                store.write(point, backend.detach(value, [inputs[k] for k in windows]) if copy else value)

        return launch


def _profiled(namespace: dict, profiler: Profiler, kinds: dict[int, str], whole: str | None) -> None:
    """Bind ``profiler``'s wrappers in place of the generated code's names, and its own names
    (``whole``: the name of the device loop that runs the main loop, if any)."""
    for name, value in list(namespace.items()):
        if name[0] in "KL" and name[1:].isdigit():
            namespace[name] = profiler.call(kinds[int(name[1:])], value)
        elif name == whole:
            namespace[name] = profiler.whole_loop(value)
        elif name[0] == "D" and name[1:].isdigit():
            namespace[name] = profiler.device_loop(value)
        elif name[0] == "S" and name[1].isdigit():
            namespace[name] = profiler.store(value)
    namespace.update(evict=profiler.call("free", namespace["evict"]), C=profiler.condition, M=profiler.mark,
                     B=profiler.start)


def source(sdg: SDG, program: ast.Stmt, plan: ExecutionPlan, bound_names) -> str:
    """The generated source an executor of this program and plan runs (for any bounds of ``bound_names``)."""
    return Generator(sdg, plan.kinds(sdg), plan.main_loop if plan.evictions else None,
                     sorted(bound_names)).source(program)


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
