"""The executor: runs the schedule AST's generated source, which launches kernels.

The AST is turned once into one generated Python function
(:mod:`tempo.runtime.codegen`; ``print(program.code)``): loops over local
counters, and at each Execute the node's inputs read from their tensor
stores at indices computed inline, the backend kernel run, and the outputs
written back at that point. Merges, and launches that read window stores,
call the node's *launcher* (a closure that evaluates the input dependence
expressions at the point) instead.

Each tensor's store (point, block or window; :mod:`tempo.runtime.stores`) is
chosen by :func:`tempo.runtime.store_choice.choose_stores`. Block and window
stores hand kernels views of their buffers and take outputs by in-place
writes (TEMPO's kernel wrappers). A window store's rows are overwritten as
its dim advances, so a kernel output that may alias a window read is copied
before a point store keeps it, and user functions get copies of window reads.

A Free statement (:mod:`tempo.schedule.memory`) drops a point from a point
store after its last reader; the points no later iteration reads are freed
after each iteration of the main loop. Evict and load statements (a swap
plan's, :mod:`tempo.schedule.swap`) move points between the device and host
tiers of the stores they name; a block store that swaps keeps its buffers in
the host tier. Every store reports what it holds to the executor's
:class:`~tempo.runtime.memory.Ledger` (``program.memory_report()``).
"""
from __future__ import annotations

import math
from typing import Callable

from tempo.errors import BoundError, TempoError
from tempo.ir.ops import ConstOp, MergeOp, StopRun, UDFOp
from tempo.ir.sdg import SDG, Node
from tempo.runtime import device_loops, donation
from tempo.runtime.backends.base import Backend, StepFailed
from tempo.runtime.codegen import Generator
from tempo.runtime.memory import BudgetExceeded, Ledger
from tempo.runtime.store_choice import POINT, choose_stores, last_true
from tempo.runtime.stores import make_store
from tempo.schedule import ast, swap
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr, bound_of, symbol
from tempo.symbolic.simplify import simplify


STORES = ("auto", "point")


class Executor:
    """Runs one compiled program for one set of bounds.

    ``keep``: nodes whose values must survive the run (fetched); ``stores``:
    ``"auto"`` chooses each tensor's store from its reads, ``"point"`` keeps
    every tensor in a point store.
    """

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, bounds: dict[str, int],
                 keep: set[int] = frozenset(), stores: str = "auto", device_budget: int | None = None):
        if stores not in STORES:
            raise TempoError(f"stores={stores!r} is not a store choice; use one of {', '.join(map(repr, STORES))}")
        self.sdg, self.backend, self.bounds = sdg, backend, bounds
        self.ledger = Ledger(budget=device_budget)
        self.main_loop, self.evictions, choices = _plan(sdg, program, keep, stores)
        self.stores = {(n, j): make_store(choices.get((n, j), POINT), f"{node.op.name}%{n}", backend,
                                          node.dtypes[j], _empty_shape(node.shapes[j], bounds),
                                          bounds[bound_of(node.domain[-1]).name] if node.domain else None,
                                          self.ledger)
                       for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
        self.host = swap.swapped(sdg, program)
        for key in self.host:
            if self.stores[key].kind == "block":
                self.stores[key].tier = "host"
        self.body = self._compile(program, keep)
        self.stopped_at: dict[str, int] | None = None  # where a StopRun ended the run

    def run(self) -> None:
        with self.backend.running():
            try:
                self.body(dict(self.bounds))
            except StopRun as stop:
                self.stopped_at = stop.point

    # ----- the AST as generated source -----
    def _compile(self, program: ast.Stmt, keep) -> Callable[[dict], None]:
        """Generate the program's source (:mod:`tempo.runtime.codegen`) and bind its names; the loops the
        backend compiles whole (:mod:`tempo.runtime.device_loops`) are ``D<k>`` calls before their loops."""
        kinds = {key: store.kind for key, store in self.stores.items()}
        loops = device_loops.bind(self.sdg, program, self.stores, self.backend, keep, self.host, self.ledger)
        generator = Generator(self.sdg, kinds, self.main_loop if self.evictions else None, sorted(self.bounds),
                              {key: f"D{k}" for k, key in enumerate(loops)})
        self.source = generator.source(program)
        namespace = {"__builtins__": {"min": min, "max": max, "slice": slice, "Exception": Exception},
                     "evict": self._evict, "fail": self._fail, "ledger": self.ledger}
        namespace.update({f"D{k}": loop for k, loop in enumerate(loops.values())})
        donate = donation.donations(self.sdg, program, kinds, keep) if self.backend.donates else {}
        namespace.update({f"S{n}_{j}": store for (n, j), store in self.stores.items()})
        for n in {ex.node_id for ex in ast.statements(program)}:
            node = self.sdg.nodes[n]
            if n in generator.called:
                namespace[f"L{n}"] = self._launcher(node)
                continue
            if isinstance(node.op, MergeOp):  # written inline: no kernel
                continue
            if isinstance(node.op, ConstOp):
                _check_const_covers_bounds(node, self.bounds)
            namespace[f"K{n}"] = (self.backend.kernel(node.op, donate=donate[n]) if n in donate
                                  else self.backend.kernel(node.op))
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
        """Free the points no later iteration reads (see :func:`_iteration_evictions`)."""
        later = {self.main_loop.var: iteration + 1}
        for n, axis, floors in self.evictions:
            for j, per_output in floors.items():  # an island's outputs may be read from different points
                self.stores[(n, j)].free_below(axis, min((floor(later) for floor in per_output), default=math.inf))

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


def store_choices(sdg: SDG, program: ast.Stmt, keep) -> dict:
    """Each tensor's store choice (``(node, output) -> StoreChoice``; missing: a point store), as an
    executor of ``program`` with ``stores="auto"`` makes it."""
    return _plan(sdg, program, keep, "auto")[2]


def _plan(sdg: SDG, program: ast.Stmt, keep, stores: str):
    """The main loop, what to free after each of its steps, and each tensor's store choice."""
    main_loop, evictions = _iteration_evictions(sdg, program, keep)
    choices = choose_stores(sdg, program, keep, {n: axis for n, axis, _ in evictions}) if stores == "auto" else {}
    return main_loop, evictions, choices


def runtime_plan(sdg: SDG, program: ast.Stmt, keep) -> tuple[dict, dict]:
    """What an executor of ``program`` plans beside the AST: node -> the axis along which it frees
    the node's points as the main loop runs, and each tensor's store choice."""
    _, evictions, choices = _plan(sdg, program, keep, "auto")
    return {n: axis for n, axis, _ in evictions}, choices


def source(sdg: SDG, program: ast.Stmt, keep, bound_names, stores: str = "auto") -> str:
    """The generated source an executor of this program runs (for any bounds of ``bound_names``)."""
    main_loop, evictions, choices = _plan(sdg, program, keep, stores)
    kinds = {(n, j): choices.get((n, j), POINT).kind for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
    return Generator(sdg, kinds, main_loop if evictions else None, sorted(bound_names)).source(program)


def _iteration_evictions(sdg: SDG, program: ast.Stmt, keep) -> tuple[ast.Loop | None, list]:
    """The outermost loop that runs most of the program, and what to free after each of its steps.

    A typical training program is one loop over the iteration dim ``i`` holding
    almost every statement. A tensor computed in that loop whose every reader
    is in the loop and reads it along ``i`` at an index that never decreases
    as ``i`` grows (``i - c``, ``(i // K) * K``, a slice ``max(0, i - W):i + 1``)
    is dead below the lowest index the next iteration reads; its points are
    freed after each iteration, so memory stays flat over thousands of
    iterations. ``keep``: nodes whose values must survive (fetched).

    Returns the loop and ``(node, axis, floors)`` triples: ``floors`` holds, per output of
    the node, one function per reader mapping ``{loop counter: next iteration}`` to the
    lowest index that reader can read from then on (an output nobody reads has none: all
    of it is freed).
    """
    top = program.body if isinstance(program, ast.Sequence) else (program,)
    loops = [s for s in top if isinstance(s, ast.Loop)]
    if not loops:
        return None, []
    loop = max(loops, key=lambda s: sum(1 for _ in ast.statements(s)))
    inside, dim = {}, None  # node -> (axis of dim, shift: the node runs dim = counter + shift)
    for ex in ast.statements(loop):
        node = sdg.nodes[ex.node_id]
        axes = [(k, _shift(e, loop.var)) for k, e in enumerate(ex.point) if loop.var in _names(e)]
        if len(axes) != 1 or axes[0][1] is None or (dim is not None and node.domain[axes[0][0]] is not dim):
            return None, []
        dim = node.domain[axes[0][0]]
        if inside.setdefault(ex.node_id, axes[0]) != axes[0]:
            return None, []
    after = False
    for other in top:
        after = after or other is loop
        if other is not loop:
            for ex in ast.statements(other):  # also run outside the loop: keep, unless at a peeled iteration
                if ex.node_id in inside and not _peeled(ex, loop, after, inside[ex.node_id]):
                    inside.pop(ex.node_id)
    executed = {ex.node_id for ex in ast.statements(program)}  # the others never read anything
    evictions = []
    for n, (axis, _) in inside.items():
        if n in keep:
            continue
        floors: dict[int, list] = {j: [] for j in range(len(sdg.nodes[n].shapes))}
        for e in sdg.edges:
            if e.src == n and e.sink in executed:
                floors[e.src_out].append(_read_floor(e, axis, dim, loop.var, inside))
        found = [floor for per_output in floors.values() for floor in per_output]
        if found and all(floor is not None for floor in found):
            evictions.append((n, axis, floors))
    return loop, evictions


def _peeled(ex: ast.Execute, loop: ast.Loop, after: bool, at: tuple[int, int]) -> bool:
    """Whether ``ex``, a statement ``after`` ``loop`` or before it, runs at the loop's next counter
    value after its last iteration or before its first (``at``: the axis of the loop's dim in its
    point, and the shift its node runs at in the loop): an iteration partial unrolling peeled,
    which reads no lower points than the loop's next or first iteration would."""
    axis, shift = at
    cond = loop.cond
    if not after:
        edge = loop.start - 1
    elif cond.op in ("lt", "le") and cond.args[0].op == "sym" and cond.args[0].name == loop.var:
        edge = cond.args[1] + (1 if cond.op == "le" else 0)
    else:
        return False
    gap = simplify(ex.point[axis] - (edge + shift))
    return gap.is_const and gap.value == 0


def _names(e: Expr) -> set[str]:
    return {s.name for s in e.free_symbols()}


def _shift(e: Expr, var: str) -> int | None:
    """``k`` when the point expression ``e`` is ``var + k``."""
    counter = next(s for s in e.free_symbols() if s.name == var)
    k = simplify(e - counter)
    return int(k.value) if k.is_const else None


def _read_floor(e, axis: int, dim: Expr, var: str, inside: dict) -> Callable | None:
    """``{var: counter} -> the lowest index along axis`` that edge ``e`` reads from that
    loop counter on (``inf`` once its condition never holds again), when the index
    never decreases as ``dim`` grows; None when it might, or the reader is outside
    the loop."""
    if e.sink not in inside:
        return None
    index = simplify(e.index.args[axis])
    low = index.args[0] if index.op == "slice" else index
    if not _nondecreasing_in(low, dim):
        return None
    at = symbol(var) + inside[e.sink][1]  # the reader's dim at a loop counter
    lowest = compile_expr(low.substitute({dim: at}))
    last = last_true(e.cond, dim) if e.cond is not None else None
    if last is None:
        return lowest
    first = compile_expr(at)
    return lambda env: lowest(env) if first(env) <= last else math.inf


def _nondecreasing_in(expr: Expr, dim: Expr) -> bool:
    """Whether ``expr`` depends on no symbol but ``dim`` and never decreases as it grows."""
    if expr.op == "const":
        return True
    if expr.op == "sym":
        return expr is dim
    if expr.op in ("add", "min", "max"):
        return all(_nondecreasing_in(a, dim) for a in expr.args)
    if expr.op == "mul":
        scale = [a for a in expr.args if a.is_const]
        varying = [a for a in expr.args if not a.is_const]
        product = 1
        for a in scale:
            product *= a.value
        return len(varying) <= 1 and product >= 0 and all(_nondecreasing_in(a, dim) for a in varying)
    if expr.op == "floordiv":
        divisor = expr.args[1]
        return divisor.is_const and divisor.value > 0 and _nondecreasing_in(expr.args[0], dim)
    return False


def _empty_shape(shape: tuple, bounds: dict[str, int]) -> Callable[[], tuple]:
    def sizes() -> tuple:
        try:
            return tuple(s if isinstance(s, int) else int(compile_expr(s)(bounds)) for s in shape)
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
