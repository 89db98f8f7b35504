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


class Executor:
    """Runs one compiled program for one set of bounds."""

    def __init__(self, sdg: SDG, program: ast.Stmt, backend: Backend, bounds: dict[str, int]):
        self.sdg, self.backend, self.bounds = sdg, backend, bounds
        self.stores = {(n, j): PointStore(f"{node.op.name}%{n}", backend, node.dtypes[j],
                                          _empty_shape(node.shapes[j], bounds))
                       for n, node in sdg.nodes.items() for j in range(len(node.shapes))}
        self.launchers: dict[int, Callable] = {}
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
