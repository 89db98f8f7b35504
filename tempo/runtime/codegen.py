"""The schedule AST as generated Python source: the executor's compiled form (``print(program.code)``).

The AST is turned once into one Python function instead of nested
closures walked at run time. Loop counters and bounds are local variables;
each statement is specialised when the source is written: the point it runs
at and every input's index are expressions over those locals (the index
arithmetic of each dependence is substituted, not evaluated through an
environment), and each input and output names its tensor store directly.
A kernel failure is re-raised naming the user's line.

Every launch is written inline, one way: its inputs read from their stores
into ``i``, the kernel ``K<n>`` (or the device loop ``D<k>``) called, its
outputs written back. A merge is
an ``if``/``elif`` over the branches' conditions that writes the first
branch that holds (broadcast to the merge's shape by ``F<n>`` where the
branch is narrower). A window store's rows are overwritten as its dim
advances, so a point store keeps a copy (``detach``) of an output that may
alias a window read, and user functions get copies of window reads. A
free drops a point from the point stores of its node; an evict or a load
calls its stores' ``evict`` or ``load`` with the index it moves. After each
iteration of the main loop, the plan's evictions
(:mod:`tempo.plan.evictions`) free each store below the lowest index its
readers read from the next iteration on, written as an expression of the
loop counter: one ``free_below(_f<k>, axis, floor)`` call for the stores
that share a floor (the tuple ``_f<k>`` made once, before the main loop),
``S<n>_<j>.free_below(axis, floor)`` for a store alone. A loop
the backend runs as one device program (:mod:`tempo.runtime.device_loops`)
is preceded by its launches, ``L<k> = D<k>.launches(...)`` with the bounds
and the enclosing counters, each launch ``l`` written as a kernel's (one
method writes both): its reads of the stores it lists (``held``: None where
a store holds none) into ``i``, the one call ``D<k>(l, i)``, the rows
written back and the points freed, and ``D<k>.done(l)``; the loop itself
runs only where ``L<k>.ran`` is False (where it is True for the loop over a
dim that ends at run time, the dim's bound becomes the length its end
check ``U<n>`` recorded).
The check of a ``tpo.end_when`` that ends dim ``t`` (its flag taken from the
outputs ``o`` of the launch just before it where that launch computed it) sets the local bound
``_T`` to what its :class:`~tempo.runtime.ends.EndCheck` ``U<n>`` answers
(called as ``E<n>``, its :meth:`~tempo.runtime.ends.EndCheck.stepper`),
so the loop over ``t`` exits where the flag first holds and what follows
sees ``T[i]``; the loop over its outer dim ``i`` starts each iteration
(and leaves) with ``_T`` at the run's cap, ``cap_T``. A read of a tensor
over ``t`` that its indices do not keep below ``T`` asks ``U<n>.within``
first, which raises naming the reader's line past the end.
The source refers to names the executor binds: ``S<n>_<j>`` (stores),
``K<n>`` (kernels), ``F<n>`` (merge shapes), ``D<k>`` (device loops), ``U<n>``
(end checks) and ``E<n>`` (their steps), ``fail``, ``detach``, ``broadcast``,
``held``, ``free_below``, ``ledger``, ``inf``. A
profiled source (:mod:`tempo.runtime.profile`) evaluates every condition
through ``C`` and calls ``B`` before the main loop and ``M`` after each of
its iterations.
"""
from __future__ import annotations

from tempo.errors import TempoError
from tempo.ir.ends import depends_on_length, ends
from tempo.ir.ops import MergeOp, UDFOp
from tempo.ir.sdg import SDG
from tempo.schedule import ast
from tempo.symbolic.affine import const_diff
from tempo.symbolic.evaluate import to_python
from tempo.symbolic.expr import Expr, bound_of, seq, symbol
from tempo.symbolic.simplify import simplify


def local(name: str) -> str:
    """The generated code's variable for a loop counter or bound."""
    return f"_{name}"


def py(e: Expr) -> str:
    return to_python(e, name=local)


class Generator:
    """Writes the source of one program (see the module docstring)."""

    def __init__(self, sdg: SDG, kinds: dict[tuple[int, int], str], main_loop: ast.Loop | None,
                 bound_names: list[str], device_loops: dict[int, tuple] | None = None,
                 profiled: ast.Loop | None = None, evictions: tuple = ()):
        self.sdg, self.kinds, self.main_loop = sdg, kinds, main_loop
        self.evictions = evictions  # the plan's, run after each iteration of main_loop
        self.profiled = profiled  # the main loop of a profiled source
        self.bound_names = bound_names
        self.device_loops = device_loops or {}  # id(loop) -> (the name of its DeviceLoop, the DeviceLoop)
        self.counters: list[str] = []  # the enclosing loops' variables
        self.lines: list[str] = []
        self.checks = {n: t for t, n in ends(sdg).items()}  # tpo.end_when check -> the dim it ends
        self.resets: dict[int, str] = {}  # id(loop over an outer dim of a check) -> the bound it resets
        self.host_steps: dict[int, bool] = {}  # check -> whether its loop runs other host code
        self.iteration_loops: dict[int, ast.Loop] = {}  # check -> the loop over its innermost outer dim
        self.exits: dict[int, tuple[int, str]] = {}  # id(loop over a check's dim) -> (check, its outer point)
        self.held: tuple | None = None  # (node, point, depth) of the launch just written: ``o`` holds its outputs

    def source(self, program: ast.Stmt) -> str:
        self.lines = ["def program(env):"]
        for name in self.bound_names:
            self.lines.append(f"    {local(name)} = env[{name!r}]")
        self._find_exits(program)
        self._check_iterations(program)
        for t in self.checks.values():
            name = bound_of(t).name
            self.lines.append(f"    cap_{name} = {local(name)}")
        if self.main_loop is not None:
            for k, names in enumerate(self._eviction_groups(self.main_loop.var).values()):
                if len(names) > 1:
                    self.lines.append(f"    _f{k} = ({', '.join(name for name, _ in names)}, )")
        self._stmt(program, 1)
        self.lines.append("    return None")
        return "\n".join(self.lines) + "\n"

    def _emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def _cond(self, e: Expr) -> str:
        return f"C(lambda: {py(e)})" if self.profiled is not None else py(e)

    def _stmt(self, stmt: ast.Stmt, depth: int) -> None:
        if not isinstance(stmt, (ast.Sequence, ast.Free, ast.Execute)):  # o may not hold the last launch's outputs
            self.held = None
        if isinstance(stmt, ast.Sequence):
            if not stmt.body:
                self._emit(depth, "pass")
            for s in stmt.body:
                self._stmt(s, depth)
        elif isinstance(stmt, ast.Loop):
            name, device = self.device_loops.get(id(stmt), (None, None))
            if name is not None:
                self._device_loop(stmt, name, device, depth)
                self._emit(depth, f"if not L{name[1:]}.ran:  # the loop statement by statement")
                depth += 1
            self.counters.append(stmt.var)
            var = local(stmt.var)
            if stmt is self.profiled:
                self._emit(depth, "B()")
            self._emit(depth, f"{var} = {py(stmt.start)}")
            self._emit(depth, f"while {self._cond(stmt.cond)}:")
            reset = self.resets.get(id(stmt))
            if reset is not None:
                self._emit(depth + 1, f"{local(reset)} = cap_{reset}")
            self._stmt(stmt.body, depth + 1)
            self.held = None
            if stmt is self.main_loop:
                self._evict(stmt.var, depth + 1)
            if stmt is self.profiled:
                self._emit(depth + 1, f"M({var})")
            self._emit(depth + 1, f"{var} += {stmt.step}")
            if reset is not None:
                self._emit(depth, f"{local(reset)} = cap_{reset}")
            self.counters.pop()
            if name is not None and id(stmt) in self.exits:  # the device loop ended the dim
                check, outer = self.exits[id(stmt)]
                self._emit(depth - 1, "else:")
                bound = local(bound_of(self.checks[check]).name)
                self._emit(depth, f"{bound} = U{check}.lengths.get({outer}, {bound})")
        elif isinstance(stmt, ast.If):
            self._emit(depth, f"if {self._cond(stmt.cond)}:")
            self._block(stmt.then, depth + 1)
            if stmt.orelse is not None:
                self._emit(depth, "else:")
                self.held = None
                self._block(stmt.orelse, depth + 1)
            self.held = None
        elif isinstance(stmt, ast.Free):
            self._free(stmt, depth)
        elif isinstance(stmt, ast.Evict):
            self._move(stmt, depth)
        else:
            self._execute(stmt, depth)

    def _block(self, stmt: ast.Stmt, depth: int) -> None:
        """``stmt`` as the body of an ``if`` or ``else``: ``pass`` where it writes no line (a free of
        outputs held by no store of its kind)."""
        written = len(self.lines)
        self._stmt(stmt, depth)
        if len(self.lines) == written:
            self._emit(depth, "pass")

    def _free(self, stmt: ast.Free, depth: int) -> None:
        rows = bool(stmt.point) and stmt.point[-1].op == "slice"  # a tile's rows, of a block store
        outs = [j for j in stmt.freed(len(self.sdg.nodes[stmt.node_id].shapes))
                if self.kinds.get((stmt.node_id, j), "point") == ("block" if rows else "point")]
        point = py(seq(*stmt.point))
        for j in outs:
            method = "free_rows" if rows else "free_point"
            self._emit(depth, f"S{stmt.node_id}_{j}.{method}({point})  # free {stmt.label}")

    def _evict(self, var: str, depth: int) -> None:
        """Free, after an iteration of the loop over ``var``, each evicted tensor's points below the
        lowest index its readers read from the next iteration on (all of them where none reads): one
        ``free_below`` call per floor and axis, over the stores that share it (``_f<k>``, bound once
        before the main loop, see :meth:`_eviction_groups`)."""
        for k, ((axis, live), names) in enumerate(self._eviction_groups(var).items()):
            labels = list(dict.fromkeys(label for _, label in names))
            labels = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
            if len(names) == 1:
                call = f"{names[0][0]}.free_below({axis}, {live})"
            else:
                call = f"free_below(_f{k}, {axis}, {live})"
            self._emit(depth, f"{call}  # free {labels} no later iteration reads")

    def _eviction_groups(self, var: str) -> dict[tuple[int, str], list[tuple[str, str]]]:
        """The plan's evictions after an iteration of the loop over ``var``: (axis, the lowest index
        read from the next iteration on, as source) -> the stores freed below it, with their labels."""
        later = {symbol(var): symbol(var) + 1}
        groups: dict[tuple[int, str], list[tuple[str, str]]] = {}
        for e in self.evictions:
            for j, floors in e.floors.items():
                lows: list[Expr] = []  # of the readers that read to the end, the lowest of each const offset
                ending = []  # the others, as source
                for floor in floors:
                    low = simplify(floor.lowest.substitute(later))
                    if floor.last is not None:
                        reader = py(simplify(floor.reader.substitute(later)))
                        ending.append(f"({py(low)} if {reader} <= {floor.last} else inf)")
                        continue
                    above = next((k for k, kept in enumerate(lows) if const_diff(low, kept) is not None), None)
                    if above is None:
                        lows.append(low)
                    elif const_diff(low, lows[above]) < 0:
                        lows[above] = low
                live = list(dict.fromkeys([py(low) for low in lows] + ending))
                live = "inf" if not live else live[0] if len(live) == 1 else f"min({', '.join(live)})"
                label = f"{self.sdg.nodes[e.node].op.name}%{e.node}"
                groups.setdefault((e.axis, live), []).append((f"S{e.node}_{j}", label))
        return groups

    def _move(self, stmt: ast.Evict, depth: int) -> None:
        method = "load" if isinstance(stmt, ast.Load) else "evict"
        index = py(seq(*stmt.index))
        for j in stmt.moved(len(self.sdg.nodes[stmt.node_id].shapes)):
            self._emit(depth, f"S{stmt.node_id}_{j}.{method}({index})  # {method} {stmt.label}")

    def _merge(self, n: int, node, edges, at: dict, point: str, windows: bool, depth: int) -> None:
        """The first branch whose condition holds at the point is the merge's value there (broadcast to
        the merge's shape, ``F<n>()``, where the branch is narrower)."""
        for k, e in enumerate(edges):
            cond = "True" if e.cond is None else self._cond(e.cond.substitute(at))
            self._emit(depth, f"{'if' if k == 0 else 'elif'} {cond}:")
            read = f"S{e.src}_{e.src_out}.read({py(e.index.substitute(at))})"
            if not windows and k not in node.op.broadcast:
                self._emit(depth + 1, f"S{n}_0.write({point}, {read})")
            else:
                self._emit(depth + 1, f"v = {read}")
                value = f"broadcast(v, F{n}())" if k in node.op.broadcast else "v"
                self._emit(depth + 1, f"S{n}_0.write({point}, {self._kept(n, 0, value, '[v]', windows)})")
            if e.cond is None:
                break
        self._emit(depth, "ledger.launches += 1")

    def _find_exits(self, program: ast.Stmt) -> None:
        """The loop over the innermost outer dim of each end check, and whether the loop over its dim
        runs other host code."""
        for stmt, loops in _executes(program, ()):
            if stmt.node_id not in self.checks:
                continue

            def over(e: Expr) -> ast.Loop | None:
                names = {x.name for x in e.free_symbols()}
                return next((loop for loop in reversed(loops) if loop.var in names), None)

            inner = over(stmt.point[-1])
            outer = over(stmt.point[-2]) if len(stmt.point) > 1 else None
            if outer is not None:
                self.resets[id(outer)] = bound_of(self.checks[stmt.node_id]).name
                self.iteration_loops[stmt.node_id] = outer
            if inner is not None:
                self.exits[id(inner)] = (stmt.node_id, py(seq(*stmt.point[:-1])))
            body = inner.body if inner is not None else stmt
            self.host_steps[stmt.node_id] = any(
                isinstance(x, ast.Execute) and x.node_id != stmt.node_id
                and isinstance(self.sdg.nodes[x.node_id].op, UDFOp) for x in ast.leaves(body))

    def _check_iterations(self, program: ast.Stmt) -> None:
        """Every statement whose extent or value depends on a dim that ends at run time runs inside
        the loop over the check's innermost outer dim, at that loop's own iteration: the one whose
        ``T[i]`` the local bound holds then."""
        for stmt, loops in _executes(program, ()):
            node = self.sdg.nodes[stmt.node_id]
            for c, t in self.checks.items():
                outer = self.sdg.nodes[c].domain[:-1]
                if not outer or not all(any(x is d for x in node.domain) for d in outer):
                    continue
                if not (any(x is t for x in node.domain) or depends_on_length(self.sdg, stmt.node_id, t)):
                    continue
                loop = self.iteration_loops.get(c)
                at = stmt.point[next(k for k, x in enumerate(node.domain) if x is outer[-1])]
                if loop is None or not any(x is loop for x in loops) or not (at.op == "sym" and at.name == loop.var):
                    raise TempoError(f"the schedule runs {self.sdg.describe(stmt.node_id)} outside the iteration "
                                     f"of {outer[-1].name} whose length of {t.name} it depends on; a program with "
                                     f"tpo.end_when needs each iteration's steps and what reads {bound_of(t).name} "
                                     f"in that iteration", self.sdg.nodes[c].site)

    def _execute(self, stmt: ast.Execute, depth: int) -> None:
        n = stmt.node_id
        node = self.sdg.nodes[n]
        point = py(seq(*stmt.point))
        self._emit(depth, f"# {stmt.label}" + (f" at {node.site.filename}:{node.site.lineno}" if node.site else ""))
        edges = self.sdg.in_edges(n)
        at = dict(zip(node.domain, stmt.point))
        held, self.held = self.held, None
        if n in self.checks:
            self._check(n, edges[0], stmt, at, depth, held)
            return
        for e in edges:
            self._guard(n, node, e, at, depth)
        self._launch(stmt, node, edges, at, point, depth)

    def _check(self, n: int, flag, stmt: ast.Execute, at: dict, depth: int, held: tuple | None) -> None:
        """The end check: the bound of its dim becomes what ``U<n>`` answers. A flag the launch just
        written computed at that point (``held``, frees between them at most) is taken from its outputs
        ``o`` rather than read back from its store."""
        bound = local(bound_of(self.checks[n]).name)
        index = py(flag.index.substitute(at))
        read = (f"o[{flag.src_out}]" if held == (flag.src, index, depth) else
                f"S{flag.src}_{flag.src_out}.read({index})")
        self._emit(depth, f"{bound} = E{n}({read}, {py(stmt.point[-1])}, {bound}, {py(seq(*stmt.point[:-1]))})")
        self._emit(depth, "ledger.launches += 1")

    def _guard(self, n: int, node, e, at: dict, depth: int) -> None:
        """Before a read of a tensor over a dim that ends at run time whose indices do not keep it
        before the end, ask the dim's end check whether it reads past it."""
        src = self.sdg.nodes[e.src]
        for c, t in self.checks.items():
            outer = self.sdg.nodes[c].domain[:-1]
            if not any(d is t for d in src.domain) or not all(any(x is d for x in src.domain) for d in outer):
                continue
            items = dict(zip(src.domain, e.index.args))
            item = items[t]
            last = item.args[1] - 1 if item.op == "slice" else item
            same = all(items[d] == d and any(x is d for x in node.domain) for d in outer)
            symbols = last.free_symbols()
            relative = any(x is t for x in node.domain) and t in symbols and symbols <= {t, bound_of(t)}
            if same and (relative or _below(last - bound_of(t), 0) or _below(last, 1)):
                continue  # in range for every T: checked when the program was validated
            cond = "True" if e.cond is None else py(e.cond.substitute(at))
            where = py(seq(*(items[d] for d in outer)).substitute(at))
            self._emit(depth, f"if {cond}:")
            self._emit(depth + 1, f"U{c}.within({py(last.substitute(at))}, {where}, {n}, {e.src})")

    def _launch(self, stmt: ast.Execute, node, edges, at: dict, point: str, depth: int) -> None:
        """Read the inputs, run the kernel and write its outputs back, at the statement's point."""
        n = stmt.node_id
        windows = [k for k, e in enumerate(edges) if self.kinds.get((e.src, e.src_out)) == "window"]
        if isinstance(node.op, MergeOp):
            self._merge(n, node, edges, at, point, bool(windows), depth)
            return
        reads = ", ".join(f"S{e.src}_{e.src_out}.read({py(e.index.substitute(at))})" for e in edges)
        env = ", ".join([f"{name!r}: {local(name)}" for name in self.bound_names]  # kernels size by any bound
                        + [f"{d.name!r}: {py(p)}" for d, p in zip(node.domain, stmt.point)])
        self._emit(depth, f"p = {point}")
        call = []
        if isinstance(node.op, UDFOp):  # user code may keep its inputs, and a window's rows are overwritten
            call += [f"i[{k}] = detach(i[{k}], [i[{k}]])" for k in windows]
        call += ["try:", f"    o = K{n}(i, {{{env}}}, p)", "except Exception as err:", f"    fail({n}, p, err)"]
        read = f"[{', '.join(f'i[{k}]' for k in windows)}]"
        writes = [f"S{n}_{j}.write(p, {self._kept(n, j, f'o[{j}]', read, bool(windows))})"
                  for j in range(len(node.shapes))]
        self._call(depth, reads, call, writes)
        self.held = (n, point, depth)

    def _device_loop(self, loop: ast.Loop, name: str, device, depth: int) -> None:
        """The launches of a loop the backend runs whole, each written as a kernel's: what it reads
        from stores into ``i``, the one call of ``D<k>``, the rows it writes back and the points it
        frees (``L<k>.ran``: whether the device ran the whole loop)."""
        scope = ", ".join(f"{n!r}: {local(n)}" for n in self.bound_names + self.counters)
        launches = f"L{name[1:]}"
        self._emit(depth, f"{launches} = {name}.launches({{{scope}}})  # the loop over {loop.var} as one device launch")
        self._emit(depth, f"for l in {launches}:")
        reads = ", ".join(f"held(S{n}_{j}, l.reads[{k}])" for k, (n, j) in enumerate(device.reads))
        call = [f"o = {name}(l, i)", "if o is None:  # nothing changed: it reads again, or the host runs the loop",
                "    continue"]
        writes = []
        for k, (n, j) in enumerate(device.plan.written_back):
            if device.rows[(n, j)]:
                writes += [f"w = l.block({k})", "if w is not None:", f"    S{n}_{j}.write_rows(w[0], w[1], o[{k}])",
                           "else:", f"    for x, v in l.each({k}, o[{k}]):", f"        S{n}_{j}.write(x, v)"]
            else:
                writes += [f"for x, v in l.each({k}, o[{k}]):", f"    S{n}_{j}.write(x, v)"]
        if device.freed:
            writes.append("f = l.frees")
        for k, (n, j) in enumerate(device.freed):
            writes += [f"for x in f[{k}]:", f"    S{n}_{j}.free_point(x)  # free {self.sdg.nodes[n].op.name}%{n}"]
        self._call(depth + 1, reads, call, writes + [f"{name}.done(l)"])

    def _call(self, depth: int, reads: str, call: list[str], writes: list[str]) -> None:
        """One launch, written the same way for a kernel and a device loop: its inputs read from their
        stores into ``i``, the call (``call``: lines), its outputs written back (``writes``: lines)."""
        self._emit(depth, f"i = [{reads}]")
        for line in call + writes:
            self._emit(depth, line)
        self._emit(depth, "ledger.launches += 1")

    def _kept(self, n: int, j: int, value: str, read: str, windows: bool) -> str:
        """``value`` as output ``j`` of node ``n`` keeps it: a point store keeps a copy of a value that
        may alias a window store's rows (read), which are overwritten as its dim advances."""
        if windows and self.kinds.get((n, j), "point") == "point":
            return f"detach({value}, {read})"
        return value

def _executes(stmt: ast.Stmt, loops: tuple):
    """Each Execute statement of ``stmt`` with the loops around it, outermost first."""
    if isinstance(stmt, ast.Sequence):
        for s in stmt.body:
            yield from _executes(s, loops)
    elif isinstance(stmt, ast.Loop):
        yield from _executes(stmt.body, loops + (stmt,))
    elif isinstance(stmt, ast.If):
        yield from _executes(stmt.then, loops)
        if stmt.orelse is not None:
            yield from _executes(stmt.orelse, loops)
    elif isinstance(stmt, ast.Execute):
        yield stmt, loops


def _below(e: Expr, limit: int) -> bool:
    """Whether ``e`` is a constant below ``limit``."""
    e = simplify(e)
    return e.is_const and e.value < limit
