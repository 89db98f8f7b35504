"""The schedule AST as generated Python source: the executor's compiled form (``print(program.code)``).

The AST is turned once into one Python function instead of nested
closures walked at run time. Loop counters and bounds are local variables;
each statement is specialised when the source is written: the point it runs
at and every input's index are expressions over those locals (the index
arithmetic of each dependence is substituted, not evaluated through an
environment), and each input and output names its tensor store directly.
A kernel failure is re-raised naming the user's line, as before.

Statements the generator writes inline are kernel launches and merges (an
``if``/``elif`` over the branches' conditions) whose inputs are all read
from point or block stores; a launch reading a window store (whose rows are
overwritten later, so its outputs may need copies) and a merge that
broadcasts a branch call the executor's launcher for their node instead. A
free drops a point from the point stores of its node; an evict or a load
calls its stores' ``evict`` or ``load`` with the index it moves. A loop
the backend runs as one device program (:mod:`tempo.runtime.device_loops`)
is preceded by a call of its compiled form ``D<k>`` with the bounds and the
enclosing counters; the loop itself runs only where that call answers False.
The source refers to names the executor binds: ``S<n>_<j>`` (stores),
``K<n>`` (kernels), ``L<n>`` (launchers), ``D<k>`` (device loops), ``fail``,
``evict``, ``ledger``. A profiled source (:mod:`tempo.runtime.profile`)
evaluates every condition through ``C`` and calls ``B`` before the main
loop and ``M`` after each of its iterations.
"""
from __future__ import annotations

from tempo.ir.ops import MergeOp
from tempo.ir.sdg import SDG
from tempo.schedule import ast
from tempo.symbolic.evaluate import to_python
from tempo.symbolic.expr import Expr, seq


def local(name: str) -> str:
    """The generated code's variable for a loop counter or bound."""
    return f"_{name}"


def py(e: Expr) -> str:
    return to_python(e, name=local)


class Generator:
    """Writes the source of one program (see the module docstring)."""

    def __init__(self, sdg: SDG, kinds: dict[tuple[int, int], str], main_loop: ast.Loop | None,
                 bound_names: list[str], device_loops: dict[int, str] | None = None,
                 profiled: ast.Loop | None = None):
        self.sdg, self.kinds, self.main_loop = sdg, kinds, main_loop
        self.profiled = profiled  # the main loop of a profiled source
        self.bound_names = bound_names
        self.device_loops = device_loops or {}  # id(loop) -> the name of its compiled form
        self.counters: list[str] = []  # the enclosing loops' variables
        self.lines: list[str] = []
        self.called: set[int] = set()  # nodes whose launches go through their launcher

    def source(self, program: ast.Stmt) -> str:
        self.lines = ["def program(env):"]
        for name in self.bound_names:
            self.lines.append(f"    {local(name)} = env[{name!r}]")
        self._stmt(program, 1)
        self.lines.append("    return None")
        return "\n".join(self.lines) + "\n"

    def _emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def _cond(self, e: Expr) -> str:
        return f"C(lambda: {py(e)})" if self.profiled is not None else py(e)

    def _stmt(self, stmt: ast.Stmt, depth: int) -> None:
        if isinstance(stmt, ast.Sequence):
            if not stmt.body:
                self._emit(depth, "pass")
            for s in stmt.body:
                self._stmt(s, depth)
        elif isinstance(stmt, ast.Loop):
            name = self.device_loops.get(id(stmt))
            if name is not None:
                scope = ", ".join(f"{n!r}: {local(n)}" for n in self.bound_names + self.counters)
                self._emit(depth, f"if not {name}({{{scope}}}):  # the loop over {stmt.var} as one device launch")
                depth += 1
            self.counters.append(stmt.var)
            var = local(stmt.var)
            if stmt is self.profiled:
                self._emit(depth, "B()")
            self._emit(depth, f"{var} = {py(stmt.start)}")
            self._emit(depth, f"while {self._cond(stmt.cond)}:")
            self._stmt(stmt.body, depth + 1)
            if stmt is self.main_loop:
                self._emit(depth + 1, f"evict({var})")
            if stmt is self.profiled:
                self._emit(depth + 1, f"M({var})")
            self._emit(depth + 1, f"{var} += {stmt.step}")
            self.counters.pop()
        elif isinstance(stmt, ast.If):
            self._emit(depth, f"if {self._cond(stmt.cond)}:")
            self._stmt(stmt.then, depth + 1)
            if stmt.orelse is not None:
                self._emit(depth, "else:")
                self._stmt(stmt.orelse, depth + 1)
        elif isinstance(stmt, ast.Free):
            self._free(stmt, depth)
        elif isinstance(stmt, ast.Evict):
            self._move(stmt, depth)
        else:
            self._execute(stmt, depth)

    def _free(self, stmt: ast.Free, depth: int) -> None:
        rows = bool(stmt.point) and stmt.point[-1].op == "slice"  # a tile's rows, of a block store
        outs = [j for j in stmt.freed(len(self.sdg.nodes[stmt.node_id].shapes))
                if self.kinds.get((stmt.node_id, j), "point") == ("block" if rows else "point")]
        point = py(seq(*stmt.point))
        for j in outs:
            method = "free_rows" if rows else "free_point"
            self._emit(depth, f"S{stmt.node_id}_{j}.{method}({point})  # free {stmt.label}")

    def _move(self, stmt: ast.Evict, depth: int) -> None:
        method = "load" if isinstance(stmt, ast.Load) else "evict"
        index = py(seq(*stmt.index))
        for j in stmt.moved(len(self.sdg.nodes[stmt.node_id].shapes)):
            self._emit(depth, f"S{stmt.node_id}_{j}.{method}({index})  # {method} {stmt.label}")

    def _merge(self, n: int, edges, at: dict, point: str, depth: int) -> None:
        """The first branch whose condition holds at the point is the merge's value there."""
        for k, e in enumerate(edges):
            cond = "True" if e.cond is None else self._cond(e.cond.substitute(at))
            self._emit(depth, f"{'if' if k == 0 else 'elif'} {cond}:")
            self._emit(depth + 1, f"S{n}_0.write({point}, S{e.src}_{e.src_out}.read({py(e.index.substitute(at))}))")
            if e.cond is None:
                break
        self._emit(depth, "ledger.launches += 1")

    def _execute(self, stmt: ast.Execute, depth: int) -> None:
        n = stmt.node_id
        node = self.sdg.nodes[n]
        point = py(seq(*stmt.point))
        self._emit(depth, f"# {stmt.label}" + (f" at {node.site.filename}:{node.site.lineno}" if node.site else ""))
        edges = self.sdg.in_edges(n)
        at = dict(zip(node.domain, stmt.point))
        self._launch(stmt, node, edges, at, point, depth)

    def _launch(self, stmt: ast.Execute, node, edges, at: dict, point: str, depth: int) -> None:
        n = stmt.node_id
        if any(self.kinds.get((e.src, e.src_out)) == "window" for e in edges) or \
                (isinstance(node.op, MergeOp) and node.op.broadcast):
            self.called.add(n)
            self._emit(depth, f"L{n}({point})")
            self._emit(depth, "ledger.launches += 1")
            return
        if isinstance(node.op, MergeOp):
            self._merge(n, edges, at, point, depth)
            return
        reads = ", ".join(f"S{e.src}_{e.src_out}.read({py(e.index.substitute(at))})" for e in edges)
        env = ", ".join([f"{name!r}: {local(name)}" for name in self.bound_names]  # kernels size by any bound
                        + [f"{d.name!r}: {py(p)}" for d, p in zip(node.domain, stmt.point)])
        self._emit(depth, f"p = {point}")
        self._emit(depth, "try:")
        self._emit(depth + 1, f"o = K{n}([{reads}], {{{env}}}, p)")
        self._emit(depth, "except Exception as err:")
        self._emit(depth + 1, f"fail({n}, p, err)")
        for j in range(len(node.shapes)):
            self._emit(depth, f"S{n}_{j}.write(p, o[{j}])")
        self._emit(depth, "ledger.launches += 1")
