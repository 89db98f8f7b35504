"""Translate the tensor IR and the text rules into an egglog program.

Every op of :data:`~tempo.superopt.graph.OPS` becomes one egglog constructor
per arity, ``{op}_{arity}``, whose arguments are the sources followed by the
attributes in sorted key order (ints are ``i64``, strings ``String``, floats
``f64``, tuples ``IV`` = ``(Vec i64)``). Graph leaves (inputs, weights,
scalars, opaque ONNX nodes) are ``(Leaf i)``, an index into a Python table.

Shapes are an egglog function ``shp`` seeded from the graph and extended to
new nodes by per-op shape rules (:data:`SHAPE_RULES`); weight-only classes are
the relation ``cst``. A rule's shape templates, ``const`` variables and
``check`` conditions become conditions of its egglog rule, so a rule fires
only where the matcher of :mod:`tempo.superopt.rewrite` would accept it.

A rule is left out (:class:`Untranslatable`, with the reason) when it uses
what egglog cannot express here: a Python function in an attribute or check
(``compose``, ``is_identity``), or a variadic shape prefix shared by
templates with different numbers of trailing dimensions (a shared prefix is
checked by comparing the shapes with their trailing entries zeroed; Vec has
no slicing).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from tempo.superopt.graph import OPS
from tempo.superopt.rules import PVar, Pattern, Rule

MAX_VARIADIC = 8            # concat nodes with more inputs are kept as leaves


class Untranslatable(Exception):
    """A rule (or attribute value) egglog cannot express; the message says why."""


def arities(op: str) -> tuple[int, ...]:
    """The arities for which ``op`` has a constructor."""
    spec = OPS[op].arity
    return tuple(range(2, MAX_VARIADIC + 1)) if spec is None else spec


def ctor(op: str, arity: int) -> str:
    """The egglog constructor name of ``op`` with ``arity`` sources."""
    return f"{op}_{arity}"


def attr_keys(op: str) -> list[str]:
    """The attributes of ``op`` in constructor order."""
    return sorted(OPS[op].defaults)


_SORTS = {int: "i64", str: "String", float: "f64", tuple: "IV"}


def _sort(value) -> str:
    for kind, sort in _SORTS.items():
        if isinstance(value, kind) and not isinstance(value, bool):
            return sort
    raise Untranslatable(f"attribute value {value!r} has no egglog sort")


def literal(value) -> str:
    """An attribute value as an egglog literal."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, tuple)):
        raise Untranslatable(f"attribute value {value!r} has no egglog literal")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = np.format_float_positional(value, unique=True, trim="0")
        return text if "." in text else text + ".0"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if not value:
        return "(vec-empty)"
    return "(vec-of " + " ".join(literal(int(v)) for v in value) + ")"


ENCODED_OPS = [op for op in OPS if op not in ("input", "weight", "scalar", "opaque")]


def declarations() -> str:
    """The sorts, constructors, ``shp`` and ``cst`` of the program."""
    lines = ["(sort IV (Vec i64))", "(datatype T", "  (Leaf i64)"]
    for op in ENCODED_OPS:
        sorts = [_sort(OPS[op].defaults[k]) for k in attr_keys(op)]
        for n in arities(op):
            lines.append(f"  ({ctor(op, n)} {' '.join(['T'] * n + sorts)})")
    lines[-1] += ")"
    lines += ["(function shp (T) IV :merge old)", "(relation cst (T))"]
    return "\n".join(lines)


def _call(op: str, srcs: list[str], attrs: dict[str, str]) -> str:
    return f"({ctor(op, len(srcs))} {' '.join(srcs + [attrs[k] for k in attr_keys(op)])})"


def _vars(op: str) -> dict[str, str]:
    return {k: f"a_{k}" for k in attr_keys(op)}


def _shape_rule(op: str, n: int, body: list[str], shape: str) -> str:
    srcs = [f"x{i}" for i in range(n)]
    facts = [f"(= e {_call(op, srcs, _vars(op))})"] + [f"(= s{i} (shp x{i}))" for i in range(n)]
    # computed in the query: a primitive that fails there filters the match instead of panicking
    return f"(rule ({' '.join(facts + body)} (= out {shape})) ((set (shp e) out)))"


def _last(v: str, k: int) -> str:
    return f"(vec-get {v} (- (vec-length {v}) {k}))"


def _conv_dim(i: int) -> str:
    return (f"(+ (/ (- (+ (vec-get s0 {i}) (* 2 a_pad)) (vec-get s1 {i})) a_stride) 1)")


def shape_rules() -> str:
    """egglog rules that give new nodes their shape (for the ops rules create)."""
    out = []
    for op in ("relu", "sigmoid", "tanh", "gelu", "exp", "sqrt", "softmax", "layernorm",
               "batchnorm", "bn_scale", "bn_shift"):
        out.append(_shape_rule(op, OPS[op].arity[0], [], "s0"))
    for op in ("add", "sub", "mul", "div"):
        out.append(_shape_rule(op, 2, ["(= s0 s1)"], "s0"))
    out.append(_shape_rule("reshape", 1, [], "a_shape"))
    out.append(_shape_rule("slice", 1, [],
                           "(vec-set s0 (+ (vec-length s0) a_axis) (- a_end a_start))"))
    out.append(_shape_rule("concat", 2, [],
                           "(vec-set s0 (+ (vec-length s0) a_axis) "
                           "(+ (vec-get s0 (+ (vec-length s0) a_axis)) "
                           "(vec-get s1 (+ (vec-length s1) a_axis))))"))
    for n in (2, 3):
        out.append(_shape_rule("matmul", n, ["(= (vec-length s1) 2)"],
                               "(vec-set s0 (- (vec-length s0) 1) (vec-get s1 1))"))
        out.append(_shape_rule("conv2d", n, [], f"(vec-of (vec-get s0 0) (vec-get s1 0) "
                                                f"{_conv_dim(2)} {_conv_dim(3)})"))
    out.append(_shape_rule("enlarge", 1, [],
                           "(vec-of (vec-get s0 0) (vec-get s0 1) a_size a_size)"))
    return "\n".join(out)


def const_rules() -> str:
    """``cst`` holds for every node whose sources are all weight-only."""
    out = []
    for op in ENCODED_OPS:
        for n in arities(op):
            srcs = [f"x{i}" for i in range(n)]
            facts = [f"(= e {_call(op, srcs, _vars(op))})"] + [f"(cst {s})" for s in srcs]
            out.append(f"(rule ({' '.join(facts)}) ((cst e)))")
    return "\n".join(out)


# ---------------------------------------------------------------- rules
_OPS2 = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/"}
_CMP = {ast.Eq: "=", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<="}


@dataclass
class _Query:
    facts: list[str]
    fresh: int = 0

    def temp(self) -> str:
        self.fresh += 1
        return f"t{self.fresh}"


def _expr(e: ast.expr) -> str:
    if isinstance(e, ast.Constant):
        return literal(e.value)
    if isinstance(e, ast.Name):
        return f"v_{e.id}"
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant):
        return literal(-e.operand.value)
    if isinstance(e, ast.BinOp) and type(e.op) in _OPS2:
        return f"({_OPS2[type(e.op)]} {_expr(e.left)} {_expr(e.right)})"
    if isinstance(e, (ast.Tuple, ast.List)) and not any(isinstance(x, ast.Starred) for x in e.elts):
        return "(vec-of " + " ".join(_expr(x) for x in e.elts) + ")" if e.elts else "(vec-empty)"
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _CMP:
        return f"({_CMP[type(e.ops[0])]} {_expr(e.left)} {_expr(e.comparators[0])})"
    raise Untranslatable(f"uses '{ast.unparse(e)}', which egglog cannot compute here")


def _written(p: Pattern, q: _Query, direct) -> str:
    """``p`` as an egglog term; an attribute expression for which ``direct`` is false
    is bound to a fresh variable by a fact of ``q``."""
    if isinstance(p, PVar):
        return f"v_{p.name}"
    given = dict(p.attrs)
    attrs = {}
    for k in attr_keys(p.op):
        if k not in given:
            attrs[k] = literal(OPS[p.op].defaults[k])
        elif direct(given[k]):
            attrs[k] = _expr(given[k])
        else:
            attrs[k] = q.temp()
            q.facts.append(f"(= {attrs[k]} {_expr(given[k])})")
    return _call(p.op, [_written(a, q, direct) for a in p.args], attrs)


def _source(p: Pattern, q: _Query) -> str:
    """A rule's source pattern, as a query term: only names and literals inline."""
    return _written(p, q, lambda e: isinstance(e, (ast.Name, ast.Constant)))


def _plain(e: ast.expr) -> bool:
    """A literal or a name: safe to write directly in an action."""
    return isinstance(e, (ast.Name, ast.Constant)) or (
        isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _target(p: Pattern, q: _Query) -> str:
    """A rule's target pattern, as an action term."""
    return _written(p, q, _plain)


def _masked(s: str, k: int) -> str:
    """``s`` with its last ``k`` entries zeroed: equal for two shapes iff their prefixes are."""
    for j in range(1, k + 1):
        s = f"(vec-set {s} (- (vec-length {s}) {j}) 0)"
    return s


def _templates(rule: Rule, facts: list[str]) -> None:
    prefixes: dict[str, set[int]] = {}
    for t in rule.shapes.values():
        if t.prefix:
            prefixes.setdefault(t.prefix, set()).add(len(t.dims))
    for var, t in rule.shapes.items():
        s = f"sh_{var}"
        facts.append(f"(= {s} (shp v_{var}))")
        if t.prefix is None:
            facts.append(f"(= (vec-length {s}) {len(t.dims)})")
        elif not t.dims:
            facts.append(f"(= v_{t.prefix} {s})")
        elif len(prefixes[t.prefix]) > 1:
            raise Untranslatable(f"shares the variadic shape prefix *{t.prefix} between templates "
                                 "with different numbers of trailing dimensions (egglog vectors "
                                 "cannot be sliced)")
        else:
            facts.append(f"(>= (vec-length {s}) {len(t.dims)})")
            facts.append(f"(= p_{t.prefix} {_masked(s, len(t.dims))})")
        for i, d in enumerate(t.dims):
            dim = f"(vec-get {s} {i})" if t.prefix is None else _last(s, len(t.dims) - i)
            facts.append(f"(= {d if isinstance(d, int) else 'v_' + d} {dim})")


def translate(rule: Rule) -> str:
    """The egglog rule of ``rule``; raises Untranslatable with the reason."""
    q = _Query([])
    roots = [f"(= r{i} {_source(p, q)})" for i, p in enumerate(rule.source)]
    facts = roots + q.facts
    _templates(rule, facts)
    facts += [f"(cst v_{v})" for v in sorted(rule.const)]
    facts += [_expr(c) for c in rule.checks]
    # target attributes are computed in the query, where a failing primitive only filters
    q.facts = []
    actions = [f"(union r{i} {_target(t, q)})" for i, t in enumerate(rule.target)]
    facts += q.facts
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}) :name \"{rule.name}\")"


def translate_all(rules: list[Rule]) -> tuple[list[str], dict[str, str]]:
    """The egglog text of every translatable rule, and the reason for each one left out."""
    done, left_out = [], {}
    for r in rules:
        try:
            done.append(translate(r))
        except Untranslatable as exc:
            left_out[r.name] = str(exc)
    return done, left_out
