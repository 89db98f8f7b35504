"""AST passes over the swap plan's evict and load statements (TEMPO §5.3).

- **Redundant moves.** In a sequence, the statements that follow a move up to
  the next statement that touches the same tensor (executes its node, reads
  it, frees it or moves it) do not touch it, so: an evict followed by a load
  of the same points under the same condition is removed with that load (the
  points stay on the device); an evict followed by an ``if`` whose body
  first loads the same points becomes that ``if`` without the load and with
  the evict as its ``else``; an evict followed by a free of the same point
  is removed (the free releases both tiers); a load followed by another load
  of the same points with only reads of them between, or a load right after
  the statement that produced the point loaded, is removed (the points are
  already on the device).
- **Promotion.** A loop whose body holds only moves, each over the loop's
  counter at a constant shift in one position, becomes one move per
  statement over the slice of points the loop covers (``for c < E: evict
  x[c]`` is ``evict x[0:E]``), unless it both evicts and loads one tensor.

Both keep the program's meaning: what is on the device when any statement
reads it is the same (``tests/schedule/test_swap_plan.py`` checks each on
hand-built ASTs and on random programs, whose reads fail if a point is not
loaded). Partial unrolling is not done: the executor runs generated code,
where a conditional costs one comparison.
"""
from __future__ import annotations

from collections import defaultdict

from tempo.ir.sdg import SDG
from tempo.schedule import ast
from tempo.symbolic.affine import offset, uses
from tempo.symbolic.expr import make_slice
from tempo.symbolic.simplify import simplify


def apply(sdg: SDG, program: ast.Stmt) -> ast.Stmt:
    """``program`` without redundant moves, its loops of moves promoted to moves of slices."""
    readers: dict[tuple[int, int], set[int]] = defaultdict(set)
    for e in sdg.edges:
        readers[(e.src, e.src_out)].add(e.sink)
    arity = {n: len(node.shapes) for n, node in sdg.nodes.items()}
    return _walk(program, readers, arity)


def _walk(stmt: ast.Stmt, readers, arity) -> ast.Stmt:
    if isinstance(stmt, ast.Sequence):
        body = [_walk(s, readers, arity) for s in stmt.body]
        return ast.Sequence(tuple(_without_redundant(body, readers, arity)))
    if isinstance(stmt, ast.Loop):
        loop = ast.Loop(stmt.var, stmt.start, stmt.cond, stmt.step, _walk(stmt.body, readers, arity))
        return promote(loop)
    if isinstance(stmt, ast.If):
        orelse = _walk(stmt.orelse, readers, arity) if stmt.orelse is not None else None
        return ast.If(stmt.cond, _walk(stmt.then, readers, arity), orelse)
    return stmt


def _move(stmt: ast.Stmt):
    """``(the Evict or Load, its condition or None)`` when ``stmt`` is a move, maybe under one ``if``."""
    if isinstance(stmt, ast.Evict):
        return stmt, None
    if isinstance(stmt, ast.If) and stmt.orelse is None and isinstance(stmt.then, ast.Evict):
        return stmt.then, stmt.cond
    return None


def _keys(move: ast.Evict, arity) -> set[tuple[int, int]]:
    return {(move.node_id, j) for j in move.moved(arity[move.node_id])}


def _touches(stmt: ast.Stmt, keys: set, readers, arity, reads: bool = True) -> bool:
    """Whether any statement in ``stmt`` executes, frees or moves one of ``keys``, or (``reads``)
    reads one."""
    nodes = {n for n, _ in keys}
    for leaf in ast.leaves(stmt):
        if isinstance(leaf, ast.Execute):
            if leaf.node_id in nodes or (reads and any(leaf.node_id in readers[k] for k in keys)):
                return True
        elif leaf.node_id in nodes and (
                isinstance(leaf, ast.Free) or _keys(leaf, arity) & keys):
            return True
    return False


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _without_redundant(body: list[ast.Stmt], readers, arity) -> list[ast.Stmt]:
    """``body`` without the redundant moves of the module docstring, to a fixpoint."""
    body = list(body)
    changed = True
    while changed:
        changed = False
        for k, stmt in enumerate(body):
            found = _move(stmt)
            if found is None:
                if isinstance(stmt, ast.Execute):
                    drop = _load_after_production(body, k, stmt, readers, arity)
                    if drop is not None:
                        del body[drop]
                        changed = True
                        break
                continue
            move, cond = found
            keys = _keys(move, arity)
            reads = type(move) is ast.Evict  # after a load, reads leave the points on the device
            nxt = next((m for m in range(k + 1, len(body)) if _touches(body[m], keys, readers, arity, reads)), None)
            if nxt is None:
                continue
            other = _move(body[nxt])
            same = other is not None and other[1] is cond and other[0].node_id == move.node_id \
                and _keys(other[0], arity) == keys and _same(other[0].index, move.index)
            if same and type(move) is ast.Evict and type(other[0]) is ast.Load:
                del body[nxt], body[k]
            elif type(move) is ast.Evict and cond is None and _loads_first(body[nxt], move, keys, readers, arity):
                then = body[nxt].then.body
                first = next(m for m, s in enumerate(then) if _touches(s, keys, readers, arity))
                body[nxt] = ast.If(body[nxt].cond, ast.Sequence(then[:first] + then[first + 1:]), move)
                del body[k]
            elif same and type(move) is ast.Load and type(other[0]) is ast.Load:
                del body[nxt]
            elif type(move) is ast.Evict and cond is None and isinstance(body[nxt], ast.Free) \
                    and body[nxt].node_id == move.node_id and _same(body[nxt].point, move.index) \
                    and keys <= {(move.node_id, j) for j in body[nxt].freed(arity[move.node_id])}:
                del body[k]
            else:
                continue
            changed = True
            break
    return body


def _loads_first(stmt: ast.Stmt, move: ast.Evict, keys: set, readers, arity) -> bool:
    """Whether ``stmt`` is an ``if`` without ``else`` whose body first touches ``keys`` with an
    unconditional load of the points ``move`` evicts (``evict x; if c: load x; ...`` is
    ``if c: ... else: evict x``)."""
    if not (isinstance(stmt, ast.If) and stmt.orelse is None and isinstance(stmt.then, ast.Sequence)):
        return False
    first = next((s for s in stmt.then.body if _touches(s, keys, readers, arity)), None)
    return type(first) is ast.Load and _keys(first, arity) == keys and _same(first.index, move.index)


def _load_after_production(body: list, k: int, stmt: ast.Execute, readers, arity) -> int | None:
    """The position of an unconditional load of the point ``stmt`` just produced, when nothing
    between them touches that tensor."""
    for m in range(k + 1, len(body)):
        found = _move(body[m])
        if found is not None and type(found[0]) is ast.Load and found[1] is None \
                and found[0].node_id == stmt.node_id and _same(found[0].index, tuple(simplify(p) for p in stmt.point)):
            return m
        if _touches(body[m], {(stmt.node_id, j) for j in range(arity[stmt.node_id])}, readers, arity):
            return None
    return None


def promote(loop: ast.Loop) -> ast.Stmt:
    """``loop`` as moves of slices when its body is moves only (see the module docstring), else ``loop``."""
    body = loop.body.body if isinstance(loop.body, ast.Sequence) else (loop.body,)
    stop = _stop(loop)
    if loop.step != 1 or stop is None or not body or not all(isinstance(s, ast.Evict) for s in body):
        return loop
    kinds: dict[int, set[type]] = defaultdict(set)
    for s in body:
        kinds[s.node_id].add(type(s))
    if any(len(k) > 1 for k in kinds.values()):
        return loop
    promoted = []
    for s in body:
        index = _sliced(s.index, loop.var, loop.start, stop)
        if index is None:
            return loop
        promoted.append(type(s)(s.node_id, index, s.label, s.outputs))
    return promoted[0] if len(promoted) == 1 else ast.Sequence(tuple(promoted))


def _stop(loop: ast.Loop):
    """``E`` when the loop's condition is ``var < E`` or ``var <= E - 1`` with ``E`` free of ``var``."""
    cond = loop.cond
    if cond.op not in ("lt", "le") or not (cond.args[0].is_symbol and cond.args[0].name == loop.var):
        return None
    bound = cond.args[1] if cond.op == "lt" else simplify(cond.args[1] + 1)
    if any(s.name == loop.var for s in bound.free_symbols()):
        return None
    return bound


def _sliced(index: tuple, var: str, start, stop) -> tuple | None:
    """``index`` with its one item ``var + c`` made the slice ``start + c:stop + c``; None when the
    counter is not in exactly one item at a constant shift."""
    out, found = [], False
    for item in index:
        if not uses(item, var):
            out.append(item)
            continue
        shift = offset(item, var)
        if found or item.op == "slice" or shift is None:
            return None
        found = True
        out.append(make_slice(simplify(start + shift), simplify(stop + shift)))
    return tuple(out) if found else None
