"""Where each node executes, and the checks that need those sets (isl).

Three set analyses over the SDG, all parametric in the bound symbols:

* *defined*: the points where a node's value exists (a greatest fixpoint:
  conditional RTs and branching placeholders define only some points, and a
  node that reads an undefined point is undefined there);
* *needed*: the points some fetched node transitively reads (a least fixpoint
  from the fetched nodes, so ``s[t+1] = f(s[t], r[t+1])`` evaluates ``f`` only
  at ``t < T - 1``);
* *executed* = needed ∩ defined: the statement domains handed to the scheduler.

Then the validity checks: a read outside the source's box that no condition
guards, and a placeholder whose branches leave a gap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import islpy as isl

from tempo.errors import DefinitionError, DomainError, ScheduleError
from tempo.ir.components import cycles
from tempo.ir.ops import MergeOp
from tempo.ir.sdg import SDG, Edge
from tempo.schedule import isl_expr
from tempo.symbolic.expr import Expr, bound_of

_MAX_ROUNDS = 64
_CLOSE_AFTER = 8  # rounds before the cycles still growing are closed transitively


def statement(node_id: int) -> str:
    return f"S{node_id}"


@dataclass
class Domains:
    """Per-node isl sets plus the edge maps used to build them."""

    params: list[str]
    box: dict[int, isl.Set]
    active: dict[int, isl.Set]  # per edge index: sink points where the edge is read
    reads: dict[int, isl.Map]  # per edge index: sink point -> source points, not clipped to the box
    defined: dict[int, isl.Set]
    executed: dict[int, isl.Set]
    context: isl.Set


# (text of a set, text of its box), both unnamed -> the set tidied (see _tidy); values, not
# objects, are the key, so an entry holds for every set with that text
_TIDIED: dict[tuple[str, str], isl.Set] = {}
_TIDIED_MOST = 4096


def executed_reads(sdg: SDG, d: Domains, k: int, runs: dict[int, isl.Set] | None = None) -> isl.Map:
    """Edge ``k``'s reads where its sink runs and reads it: sink instance -> the source points it
    reads (``runs``: each node's instances, by default the executed ones)."""
    e = sdg.edges[k]
    runs = d.executed if runs is None else runs
    return d.reads[k].intersect_domain(runs[e.sink].intersect(d.active[k]))


def all_params(sdg: SDG) -> list[str]:
    exprs: list[Expr] = []
    for node in sdg.nodes.values():
        exprs += [bound_of(d) for d in node.domain]
        for shape in node.shapes:
            exprs += [s for s in shape if isinstance(s, Expr)]
    for e in sdg.edges:
        exprs.append(e.index)
        if e.cond is not None:
            exprs.append(e.cond)
    return isl_expr.params_of(exprs)


def analyse(sdg: SDG, roots: list[int]) -> Domains:
    """Compute box, defined and executed sets for every node (see module doc).

    Placeholder gaps are checked first: a gap makes definedness creep forever.
    """
    params = all_params(sdg)
    context = _positive(params, sdg.tiles)
    box = {n: _box(sdg, n, params, context) for n in sdg.nodes}
    reads, active = {}, {}
    for k, e in enumerate(sdg.edges):
        sink, src = sdg.nodes[e.sink], sdg.nodes[e.src]
        reads[k] = isl_expr.access_map(statement(e.sink), sink.domain, statement(e.src), src.domain,
                                       e.index, params=params, src_box=False).intersect_params(context)
    ins = _in_edges(sdg)
    for n in sdg.nodes:
        active.update(_active(sdg, n, ins[n], box[n], params))
    domains = Domains(params, box, active, reads, {}, {}, context)
    check_placeholders(sdg, domains, context)
    domains.defined = _defined(sdg, domains)
    domains.executed = _executed(sdg, domains, roots)
    return domains


def _positive(params: list[str], tiles: dict[str, tuple[str, int]] | None = None) -> isl.Set:
    """The parameter context: every bound is at least 1, and a tile dim's bound ``N`` of a dim
    ``T`` cut in tiles of ``Z`` is ``ceil(T / Z)`` (``SDG.tiles``)."""
    facts = [f"{p} >= 1" for p in params]
    for n, (whole, z) in (tiles or {}).items():
        if n in params and whole in params:
            facts.append(f"{z} * {n} >= {whole} and {z} * {n} <= {whole} + {z - 1}")
    return isl.Set.read_from_str(isl_expr.CTX, f"[{', '.join(params)}] -> {{ : {' and '.join(facts) or '1 = 1'} }}")


def _box(sdg: SDG, n: int, params: list[str], context: isl.Set) -> isl.Set:
    return isl_expr.domain_set(statement(n), sdg.nodes[n].domain, params=params).intersect_params(context)


def _active(sdg: SDG, n: int, edges: list[tuple[int, Edge]], box: isl.Set, params: list[str]) -> dict[int, isl.Set]:
    """Per in-edge of node ``n``: the points where it is read (a merge takes its first matching branch)."""
    node, active = sdg.nodes[n], {}
    earlier = box.empty(box.get_space())
    for k, e in edges:
        where = box
        if e.cond is not None:
            where = where.intersect(isl_expr.domain_set(statement(n), node.domain, e.cond, params))
        if isinstance(node.op, MergeOp):
            where, earlier = where.subtract(earlier), earlier.union(where)
        active[k] = where.coalesce()
    return active


def _in_edges(sdg: SDG) -> dict[int, list[tuple[int, Edge]]]:
    """Each node's in-edges with their positions in ``sdg.edges``, in input order."""
    ins: dict[int, list[tuple[int, Edge]]] = {n: [] for n in sdg.nodes}
    for k, e in enumerate(sdg.edges):
        ins[e.sink].append((k, e))
    for edges in ins.values():
        edges.sort(key=lambda ke: ke[1].sink_in)
    return ins


def _bad_points(d: Domains, k: int, e: Edge, defined: dict[int, isl.Set]) -> isl.Set:
    undefined = d.box[e.src].subtract(defined[e.src])
    return d.reads[k].intersect_range(undefined).domain()


def _defined(sdg: SDG, d: Domains) -> dict[int, isl.Set]:
    defined, ins = dict(d.box), _in_edges(sdg)
    for _ in range(_MAX_ROUNDS):
        changed = False
        for n, node in sdg.nodes.items():
            edges = ins[n]
            if isinstance(node.op, MergeOp):
                new = d.box[n].empty(d.box[n].get_space())
                for k, e in edges:
                    new = new.union(d.active[k].subtract(_bad_points(d, k, e, defined)))
            else:
                new = d.box[n]
                for k, e in edges:
                    new = new.subtract(_bad_points(d, k, e, defined))
            new = new.coalesce()
            if not new.is_equal(defined[n]):
                defined[n], changed = new, True
        if not changed:
            return defined
    raise ScheduleError("could not determine where the program's conditional tensors are defined "
                        "(the definedness analysis did not converge)")


def _executed(sdg: SDG, d: Domains, roots: list[int]) -> dict[int, isl.Set]:
    needed = {n: d.box[n].empty(d.box[n].get_space()) for n in sdg.nodes}
    for r in roots:
        needed[r] = d.defined[r]
    changed = set(roots)  # the nodes whose reads have points to pass on
    # edge -> the needed set of its sink whose reads it passed on: a needed set is replaced, never
    # changed in place, and what it passed on stays in its source's, so passing it on again adds nothing
    passed: dict[int, isl.Set] = {}
    for attempt in range(3):
        for _ in range(_CLOSE_AFTER if attempt == 0 else _MAX_ROUNDS):
            todo, changed, within = changed, set(), {}
            for k, e in enumerate(sdg.edges):
                if e.sink not in todo and e.sink not in changed:
                    continue
                held, runs = within.get(e.sink, (None, None))
                if held is not needed[e.sink]:
                    held, runs = within[e.sink] = needed[e.sink], needed[e.sink].intersect(d.defined[e.sink])
                if passed.get(k) is held:
                    continue
                passed[k] = held
                at = runs.intersect(d.active[k])
                if at.is_empty():
                    continue
                reads = d.reads[k].intersect_domain(at).range().intersect(d.box[e.src])
                if not reads.is_subset(needed[e.src]):  # what the union would add (a subset adds nothing)
                    needed[e.src] = needed[e.src].union(reads).coalesce()
                    changed.add(e.src)
            if not changed:
                return {n: _tidy(needed[n].intersect(d.defined[n]), d.box[n]) for n in sdg.nodes}
        # the nodes still growing follow a recurrence read one step at a time (a running sum
        # fetched at its last step): first close their reads transitively; if that is not
        # enough, they are needed wherever they are defined
        if attempt == 0:
            needed = _closed(sdg, d, needed, changed)
        else:
            needed = {n: (d.defined[n] if n in changed else s) for n, s in needed.items()}
        changed = set(sdg.nodes)
    raise ScheduleError("could not determine which points of the program are needed (no convergence)")


def _closed(sdg: SDG, d: Domains, needed: dict[int, isl.Set], growing: set[int]) -> dict[int, isl.Set]:
    """``needed`` with the points that the reads along the cycles among ``growing`` nodes reach,
    transitively (when isl's closure is exact; the rounds then carry them to the rest)."""
    succ = {n: set() for n in growing}
    for e in sdg.edges:
        if e.sink in growing and e.src in growing:
            succ[e.sink].add(e.src)
    growing = set().union(*cycles(succ))
    steps = None
    for k, e in enumerate(sdg.edges):
        if e.sink in growing and e.src in growing:
            at = d.defined[e.sink].intersect(d.active[k])
            step = isl.UnionMap.from_map(d.reads[k].intersect_domain(at).intersect_range(d.box[e.src]))
            steps = step if steps is None else steps.union(step)
    if steps is None:
        return needed
    seeds = None
    for n in growing:
        u = isl.UnionSet.from_set(needed[n])
        seeds = u if seeds is None else seeds.union(u)
    closure, exact = steps.transitive_closure()
    if not exact:
        return needed
    reached = closure.intersect_domain(seeds).range().union(seeds)
    out = dict(needed)
    for n in growing:
        part = reached.extract_set(needed[n].get_space())
        out[n] = needed[n].union(part.intersect(d.box[n])).coalesce()
    return out


def pinned(d: Domains, bounds: dict[str, int]) -> isl.Set:
    """The parameter context with every bound fixed to its value in ``bounds``."""
    return _pinned(d.params, bounds)


def _pinned(params: list[str], bounds: dict[str, int]) -> isl.Set:
    text = " and ".join(f"{p} = {bounds[p]}" for p in params) or "1 = 1"
    return isl.Set.read_from_str(isl_expr.CTX, f"[{', '.join(params)}] -> {{ : {text} }}")


def _tidy(points: isl.Set, box: isl.Set) -> isl.Set:
    """The same set, often with fewer disjuncts: isl rebuilds it from its complement.

    The sets of many statements differ only in the statement's name, so the set is tidied
    without that name, remembered by the text of both sets (:data:`_TIDIED`), and named on
    the way out.
    """
    points, box, name = points.reset_tuple_id(), box.reset_tuple_id(), points.get_tuple_name()
    key = (str(points), str(box))
    tidied = _TIDIED.get(key)
    if tidied is None:
        if len(_TIDIED) >= _TIDIED_MOST:
            _TIDIED.clear()
        tidied = _TIDIED[key] = box.subtract(box.subtract(points)).coalesce()
    return tidied.set_tuple_name(name) if name is not None else tidied


def check_reads(sdg: SDG, bounds: dict[str, int] | None, analysed: Callable[[], Domains]) -> None:
    """:func:`check_reads_in_range` for the bounds ``bounds`` (None: every bound), analysing the
    program (``analysed()``, its domains) only where some read may leave its source's box: a read
    whose index keeps it inside (:func:`_inside_by_its_index`), or that stays inside wherever its
    sink reads it at any point of the sink's box, stays inside at the points the sink executes."""
    params = all_params(sdg)
    context = _positive(params, sdg.tiles) if bounds is None else _pinned(params, bounds)
    suspects = [k for k, e in enumerate(sdg.edges) if not _inside_by_its_index(sdg, e)]
    if not suspects:
        return
    ins, boxes, active = _in_edges(sdg), {}, {}
    for k in suspects:
        e = sdg.edges[k]
        for n in (e.sink, e.src):
            if n not in boxes:
                boxes[n] = _box(sdg, n, params, context)
        if k not in active:
            active.update(_active(sdg, e.sink, ins[e.sink], boxes[e.sink], params))
        sink, src = sdg.nodes[e.sink], sdg.nodes[e.src]
        reads = isl_expr.access_map(statement(e.sink), sink.domain, statement(e.src), src.domain, e.index,
                                    params=params, src_box=False)
        if not _outside(reads, boxes[e.sink].intersect(active[k]), boxes[e.src], context).is_empty():
            check_reads_in_range(sdg, analysed(), context)
            return


def _outside(reads: isl.Map, at: isl.Set, box: isl.Set, context: isl.Set) -> isl.Map:
    """``reads`` from the points ``at`` that land outside ``box``, under ``context``."""
    return reads.intersect_domain(at).intersect_range(box.complement()).intersect_params(context)


def check_reads_in_range(sdg: SDG, d: Domains, context: isl.Set) -> None:
    """A read outside its source's box, at an executed point under ``context``, is an error."""
    for k, e in enumerate(sdg.edges):
        if _inside_by_its_index(sdg, e):
            continue
        at = d.executed[e.sink].intersect(d.active[k])
        if at.is_empty():
            continue
        outside = _outside(d.reads[k], at, d.box[e.src], context)
        if outside.is_empty():
            continue
        sink, src = sdg.nodes[e.sink], sdg.nodes[e.src]
        example = _example(outside.domain(), sink.domain)
        ranges = ", ".join(f"0 <= {x.name} < {bound_of(x).name}" for x in src.domain)
        raise DomainError(
            f"temporal read out of range: this tensor reads {_name(src)} at {e.index}, outside "
            f"its domain ({ranges}) {example}; guard the read with a condition or clamp the index "
            f"with tpo.min/tpo.max", sink.site)


def _inside_by_its_index(sdg: SDG, e: Edge) -> bool:
    """Whether edge ``e`` reads inside its source's box at every point of its sink's box, as its index
    says: along each source dim, the dim itself where the sink has it, or the whole dim (``0:T``)."""
    sink, src = sdg.nodes[e.sink].domain, sdg.nodes[e.src].domain
    if len(e.index.args) != len(src):
        return False
    for item, dim in zip(e.index.args, src):
        if item is dim and any(x is dim for x in sink):
            continue
        if item.op == "slice" and item.args[1] is bound_of(dim) and item.args[0].is_const and item.args[0].value == 0:
            continue
        return False
    return True


def check_placeholders(sdg: SDG, d: Domains, context: isl.Set) -> None:
    """Every placeholder's branches must cover its whole domain under ``context``."""
    ins = _in_edges(sdg)
    for n, node in sdg.nodes.items():
        if isinstance(node.op, MergeOp) and node.op.placeholder:
            _check_placeholder(node, ins[n], d.box[n], d.active, context, d.params)


def check_definitions(sdg: SDG, bounds: dict[str, int] | None = None,
                      parameters: frozenset[int] = frozenset()) -> None:
    """Every placeholder of a user's program defines its whole domain, for every bound.

    Run on the program as the user wrote it, before any pass: an error names
    a parameter (``parameters``: the ids of ``tpo.nn.parameter`` nodes) whose
    optimizer step is missing, and quotes this run's ``bounds`` when known.
    The program is compiled for every bound, so a gap is an error even where
    this run's bounds do not reach it.
    """
    params = all_params(sdg)
    context = _positive(params)
    ins = _in_edges(sdg)
    for n, node in sdg.nodes.items():
        if isinstance(node.op, MergeOp) and node.op.placeholder:
            box = _box(sdg, n, params, context)
            active = _active(sdg, n, ins[n], box, params)
            _check_placeholder(node, ins[n], box, active, context, params, bounds, n in parameters)


def _check_placeholder(node, edges: list[tuple[int, Edge]], box: isl.Set, active: dict[int, isl.Set],
                       context: isl.Set, params: list[str], bounds: dict[str, int] | None = None,
                       parameter: bool = False) -> None:
    if not edges:
        raise DefinitionError("placeholder is never defined (assign it with x[...] = value)", node.site)
    covered = box.empty(box.get_space())
    for k, _ in edges:
        covered = covered.union(active[k])
    gap = box.subtract(covered).intersect_params(context)
    if gap.is_empty():
        return
    if parameter and len(edges) == 1 and len(node.domain) == 1:
        raise DefinitionError(_no_update(node, bounds), node.site)
    raise DefinitionError(f"gap in the definition of this placeholder: no branch defines it "
                          f"{_gap_example(gap, node.domain, params, bounds)}", node.site)


def _no_update(node, bounds: dict[str, int] | None) -> str:
    """A parameter over ``i`` with only its initial value: the optimizer step is missing."""
    step = node.domain[0]
    bound = bound_of(step).name
    name = f"parameter {node.label}" if node.label else "this parameter"
    if bounds is None or bound not in bounds:
        scope = f"the program is compiled for every {bound}"
    elif bounds[bound] == 1:
        scope = f"the program is compiled for every {bound}, not only this run's {bound}=1"
    else:
        scope = f"this run has {bound}={bounds[bound]}, so {step.name} = 1..{bounds[bound] - 1} have no value"
    return (f"no update defines {name} after {step.name} = 0 ({scope}): call an optimizer's step() on it "
            f"(tpo.optim.Adam(module.parameters(), lr=...).step()), or build the module without dims= "
            f"to keep it constant")


def _gap_example(gap: isl.Set, dims, params: list[str], bounds: dict[str, int] | None) -> str:
    """A point of ``gap``: at this run's bounds where it has one, else any, saying this run is not it."""
    if bounds is None or any(p not in bounds for p in params):
        return _example(gap, dims)
    at_run = gap.intersect_params(_pinned(params, bounds))
    if not at_run.is_empty():
        return _example(at_run, dims)
    run = ", ".join(f"{p}={bounds[p]}" for p in params)
    return f"{_example(gap, dims)}; the program is compiled for every bound, not only this run's {run}"


def _name(node) -> str:
    if node.site is None:
        return f"{node.op.name} %{node.id}"
    return f"the tensor of line {node.site.lineno} ({node.site.code})"


def _example(points: isl.Set, dims) -> str:
    """A sample point of ``points``, spelled with the program's symbols."""
    sample = points.sample_point()
    names = [points.get_dim_name(isl.dim_type.param, i) for i in range(points.dim(isl.dim_type.param))]
    params = {n: sample.get_coordinate_val(isl.dim_type.param, i).to_python() for i, n in enumerate(names)}
    coords = {x.name: sample.get_coordinate_val(isl.dim_type.set, i).to_python() for i, x in enumerate(dims)}
    at = ", ".join(f"{k}={v}" for k, v in coords.items())
    with_bounds = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"(for example at {at or 'the point'} when {with_bounds})" if with_bounds else f"(at {at})"
