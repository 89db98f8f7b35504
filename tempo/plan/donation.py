"""Buffer donation (TEMPO §5.2): the kernel inputs a launch may hand over to its outputs.

A backend whose kernels donate (``Backend.donates``: JAX) may let a kernel
write its outputs into the buffer of an input that nothing reads after it.
An input qualifies when its receiver is the last user of the value at every
point the kernel runs:

- the value is one point of a point store, and the schedule frees that point
  (that output) right after the launch (a Free statement among those
  directly following it in its sequence);
- no other input of the launch reads the same tensor;
- the value is nobody else's: its writer is a kernel (not a merge, which
  stores its branch's value itself, nor a constant, whose kernel returns the
  same array every time), no merge reads the tensor, and the program does
  not fetch it.

A node's kernel donates the inputs that qualify at every Execute statement
of the node.
"""
from __future__ import annotations

from tempo.ir.ops import ConstOp, MergeOp, UDFOp
from tempo.ir.sdg import SDG
from tempo.schedule import ast
from tempo.symbolic.simplify import simplify


def donations(sdg: SDG, program: ast.Stmt, kinds: dict, keep) -> dict[int, frozenset[int]]:
    """node -> the positions of the inputs its kernel may donate (nodes with none are left out).

    ``kinds``: (node, output) -> store kind; ``keep``: fetched nodes."""
    merged = {e.src for e in sdg.edges if isinstance(sdg.nodes[e.sink].op, MergeOp)}
    per_node: dict[int, frozenset[int]] = {}
    for ex, frees in _executes(program):
        node = sdg.nodes[ex.node_id]
        if isinstance(node.op, MergeOp):
            continue
        at = dict(zip(node.domain, ex.point))
        edges = sdg.in_edges(node.id)
        sources = [e.src for e in edges]
        ok = set()
        for k, e in enumerate(edges):
            writer = sdg.nodes[e.src]
            if (isinstance(writer.op, (MergeOp, ConstOp, UDFOp)) or e.src in merged or e.src in keep
                    or sources.count(e.src) > 1 or kinds.get((e.src, e.src_out)) != "point"):
                continue
            index = e.index.substitute(at).args
            if any(_same_point(index, free.point) for free in frees
                   if free.node_id == e.src and e.src_out in free.freed(len(writer.shapes))):
                ok.add(k)
        per_node[node.id] = frozenset(ok) & per_node.get(node.id, frozenset(ok))
    return {n: inputs for n, inputs in per_node.items() if inputs}


def _executes(stmt: ast.Stmt):
    """Every Execute statement with the Free statements directly following it in its sequence."""
    if isinstance(stmt, ast.Sequence):
        body = stmt.body
        for k, s in enumerate(body):
            if isinstance(s, ast.Execute):
                frees = []
                for after in body[k + 1:]:
                    if not isinstance(after, ast.Free):
                        break
                    frees.append(after)
                yield s, frees
            else:
                yield from _executes(s)
    elif isinstance(stmt, ast.Loop):
        yield from _executes(stmt.body)
    elif isinstance(stmt, ast.If):
        yield from _executes(stmt.then)
        if stmt.orelse is not None:
            yield from _executes(stmt.orelse)
    elif isinstance(stmt, ast.Execute):
        yield stmt, []


def _same_point(index: tuple, point: tuple) -> bool:
    if len(index) != len(point):
        return False
    for a, b in zip(index, point):
        if a is b:
            continue
        if a.op == "slice" or b.op == "slice":
            return False
        diff = simplify(a - b)
        if not (diff.is_const and diff.value == 0):
            return False
    return True
