"""The executor: walks the schedule AST and launches kernels.

The AST is turned once into nested Python closures (loops keep their counters
in one environment dict, next to the bound values). Each Execute calls the
node's *launcher*, which evaluates the node's input dependence expressions at
the current point, reads the inputs from their tensor stores, runs the
backend kernel and writes the outputs back at that point.
"""
from __future__ import annotations

from typing import Callable

from tempo.errors import BoundError, TempoError
from tempo.ir.ops import ConstOp, MergeOp
from tempo.ir.sdg import SDG, Node
from tempo.runtime.backends.base import Backend
from tempo.runtime.stores import PointStore
from tempo.schedule import ast
from tempo.symbolic.evaluate import compile_expr
from tempo.symbolic.expr import Expr, bound_of
from tempo.symbolic.simplify import simplify


class Executor:
    """Runs one compiled program for one set of bounds."""

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, bounds: dict[str, int],
                 keep: set[int] = frozenset()):
        self.sdg, self.backend, self.bounds = sdg, backend, bounds
        self.stores = {(n, j): PointStore(f"{node.op.name}%{n}", backend, node.dtypes[j],
                                          _empty_shape(node.shapes[j], bounds))
                       for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
        self.launchers: dict[int, Callable] = {}
        self.main_loop, self.evictions = _iteration_evictions(sdg, program, keep)
        self.body = self._build(program)

    def run(self) -> None:
        self.body(dict(self.bounds))

    # ----- AST to closures -----
    def _build(self, stmt: ast.Stmt) -> Callable[[dict], None]:
        if isinstance(stmt, ast.Sequence):
            parts = [self._build(s) for s in stmt.body]

            def run_sequence(env):
                for part in parts:
                    part(env)

            return run_sequence
        if isinstance(stmt, ast.Loop):
            start, cond, step, body, var = (compile_expr(stmt.start), compile_expr(stmt.cond), stmt.step,
                                            self._build(stmt.body), stmt.var)

            def run_loop(env):
                env[var] = start(env)
                while cond(env):
                    body(env)
                    env[var] += step

            if stmt is self.main_loop and self.evictions:
                evict = self._evict

                def run_main_loop(env):
                    env[var] = start(env)
                    while cond(env):
                        body(env)
                        evict(env[var])
                        env[var] += step

                return run_main_loop
            return run_loop
        if isinstance(stmt, ast.If):
            cond, then = compile_expr(stmt.cond), self._build(stmt.then)
            orelse = self._build(stmt.orelse) if stmt.orelse is not None else None

            def run_if(env):
                if cond(env):
                    then(env)
                elif orelse is not None:
                    orelse(env)

            return run_if
        point = compile_expr(Expr("seq", stmt.point))
        launch = self._launcher(self.sdg.nodes[stmt.node_id])
        return lambda env: launch(point(env))

    def _evict(self, iteration: int) -> None:
        """Free the points no later iteration reads (see :func:`_iteration_evictions`)."""
        for n, axis, lag in self.evictions:
            done = iteration - lag
            for j in range(len(self.sdg.nodes[n].shapes)):
                data = self.stores[(n, j)].data
                for point in [p for p in data if p[axis] <= done]:
                    del data[point]

    # ----- launchers -----
    def _launcher(self, node: Node) -> Callable[[tuple], None]:
        names = [d.name for d in node.domain]
        edges = self.sdg.in_edges(node.id)
        reads = [(self.stores[(e.src, e.src_out)], compile_expr(e.index),
                  compile_expr(e.cond) if e.cond is not None else None) for e in edges]
        outs = [self.stores[(node.id, j)] for j in range(len(node.shapes))]
        bounds = self.bounds
        if isinstance(node.op, MergeOp):
            full_shape = _empty_shape(node.shapes[0], bounds)
            spread = [k in node.op.broadcast for k in range(len(reads))]

            def launch_merge(point):
                env = dict(bounds, **dict(zip(names, point)))
                for (store, index, cond), widen in zip(reads, spread):
                    if cond is None or cond(env):
                        value = store.read(index(env))
                        outs[0].write(point, self.backend.broadcast(value, full_shape()) if widen else value)
                        return
            return launch_merge
        if isinstance(node.op, ConstOp):
            _check_const_covers_bounds(node, bounds)
        kernel, backend, dtypes = self.backend.kernel(node.op), self.backend, node.dtypes
        batched = [f"{d.name}=0..{bounds[bound_of(d).name] - 1}" for d in self.sdg.vectorized.get(node.id, ())]

        def launch(point):
            env = dict(bounds, **dict(zip(names, point)))
            inputs = [store.read(index(env)) for store, index, _ in reads]
            try:
                results = kernel(inputs, env, point)
            except Exception as err:  # re-raised naming the user's line, as torch.fx does
                where = ", ".join([f"{n}={v}" for n, v in zip(names, point)] + batched)
                raise TempoError(f"{node.op.name} failed at {where or 'its only point'}: "
                                 f"{type(err).__name__}: {err}", node.site) from err
            for store, value, dtype in zip(outs, results, dtypes):
                store.write(point, backend.cast(value, dtype))

        return launch


def _iteration_evictions(sdg: SDG, program: ast.Stmt, keep) -> tuple[ast.Loop | None, list]:
    """The outermost loop that runs most of the program, and what to free after each of its steps.

    A typical training program is one loop over the iteration dim ``i`` holding
    almost every statement. A tensor computed in that loop whose every reader
    is in the loop and reads it at ``i - c`` (``c >= 0``) is dead ``c``
    iterations later; its points are freed then, so memory stays flat over
    thousands of iterations. ``keep``: nodes whose values must survive (fetched).
    """
    top = program.body if isinstance(program, ast.Sequence) else (program,)
    loops = [s for s in top if isinstance(s, ast.Loop)]
    if not loops:
        return None, []
    loop = max(loops, key=lambda s: sum(1 for _ in ast.statements(s)))
    inside, dim = {}, None
    for ex in ast.statements(loop):
        node = sdg.nodes[ex.node_id]
        axes = [k for k, e in enumerate(ex.point) if e.op == "sym" and e.name == loop.var]
        if len(axes) != 1 or (dim is not None and node.domain[axes[0]] is not dim):
            return None, []
        dim = node.domain[axes[0]]
        inside[ex.node_id] = axes[0]
    for other in top:
        if other is not loop:
            for ex in ast.statements(other):  # also run outside the loop (a peeled piece): keep
                inside.pop(ex.node_id, None)
    evictions = []
    for n, axis in inside.items():
        if n in keep:
            continue
        lags = [_lag(e, axis, dim, inside) for e in sdg.edges if e.src == n]
        if lags and all(lag is not None for lag in lags):
            evictions.append((n, axis, max(lags)))
    return loop, evictions


def _lag(e, axis: int, dim: Expr, inside: dict) -> int | None:
    if e.sink not in inside:
        return None
    lag = simplify(dim - e.index.args[axis])
    return int(lag.value) if lag.is_const and lag.value >= 0 else None


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
