"""Rewrite rules in a readable text format, and their parser.

A rule file is a sequence of blocks::

    rule merge_matmul (merge)
      from   (matmul(x, w1), matmul(x, w2))
      to     (slice(matmul(x, concat(w1, w2, axis=-1)), axis=-1, start=0, end=n1),
              slice(matmul(x, concat(w1, w2, axis=-1)), axis=-1, start=n1, end=n1+n2))
      shapes x[*b, m, k]  w1[k, n1]  w2[k, n2]
      const  w1 w2
      try    a="none", "relu"

``from`` and ``to`` are expressions in Python syntax: a call is an op, its
positional arguments are sub-patterns or pattern variables and its keyword
arguments are attributes; a tuple gives several roots. An attribute left out
of a source pattern must have the op's default value; in a target it gets the
default. Attribute values are literals, names (bound on first use, compared
after) or expressions over bound names (``n1+n2``, ``compose(p, q)``).

``shapes`` gives shape templates that a match must fit (shared symbols must
agree; ``*b`` stands for any number of leading dimensions); ``const`` names
variables that must depend on no graph input; ``check`` adds a condition over
bound names; ``try`` gives, for tests, the values to sample for attribute
names the shapes do not fix (``name=v1, v2; other=...``, each value an
expression over the shape symbols). Continuation lines are indented more than
the keyword lines.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from importlib import resources
from typing import Any

from tempo.errors import TempoError
from tempo.superopt.graph import OPS


class RuleError(TempoError):
    """A rule file that does not parse or does not make sense."""


# ---------------------------------------------------------------- patterns
@dataclass(frozen=True)
class PVar:
    """A pattern variable: matches any node (the same node at every use)."""

    name: str


@dataclass(frozen=True)
class POp:
    """An op pattern: op name, argument patterns and attribute expressions."""

    op: str
    args: tuple[PVar | POp, ...]
    attrs: tuple[tuple[str, ast.expr], ...]


Pattern = PVar | POp


@dataclass(frozen=True)
class Template:
    """A shape template: optional variadic prefix symbol, then one entry per dimension."""

    prefix: str | None
    dims: tuple[str | int, ...]


@dataclass(frozen=True)
class Rule:
    """A rewrite rule: source and target roots plus constraints."""

    name: str
    family: str
    source: tuple[Pattern, ...]
    target: tuple[Pattern, ...]
    shapes: dict[str, Template]
    const: frozenset[str]
    checks: tuple[ast.expr, ...]
    trials: dict[str, tuple[ast.expr, ...]]
    text: str

    def variables(self) -> list[str]:
        """The pattern variables of the source, in first-use order."""
        seen: list[str] = []

        def walk(p: Pattern) -> None:
            if isinstance(p, PVar):
                if p.name not in seen:
                    seen.append(p.name)
            else:
                for a in p.args:
                    walk(a)
        for root in self.source:
            walk(root)
        return seen


# ---------------------------------------------------------------- attribute expressions
def _compose(p, q):
    """transpose(transpose(x, p), q) == transpose(x, compose(p, q))."""
    return tuple(p[i] for i in q)


def _is_identity(p):
    return tuple(p) == tuple(range(len(p)))


FUNCTIONS = {"compose": _compose, "is_identity": _is_identity, "len": len, "tuple": tuple}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b}
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
            ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b}


def evaluate_expr(expr: ast.expr, env: dict[str, Any]) -> Any:
    """Evaluate an attribute expression over bound names (a small, safe subset of Python)."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        if expr.id not in env:
            raise KeyError(expr.id)
        return env[expr.id]
    if isinstance(expr, (ast.List, ast.Tuple)):
        out: list = []
        for e in expr.elts:
            if isinstance(e, ast.Starred):
                out.extend(evaluate_expr(e.value, env))
            else:
                out.append(evaluate_expr(e, env))
        return tuple(out)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return -evaluate_expr(expr.operand, env)
    if isinstance(expr, ast.BinOp) and type(expr.op) in _BINOPS:
        return _BINOPS[type(expr.op)](evaluate_expr(expr.left, env), evaluate_expr(expr.right, env))
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in _COMPARE:
        return _COMPARE[type(expr.ops[0])](evaluate_expr(expr.left, env),
                                           evaluate_expr(expr.comparators[0], env))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in FUNCTIONS:
        return FUNCTIONS[expr.func.id](*(evaluate_expr(a, env) for a in expr.args))
    raise RuleError(f"unsupported attribute expression: {ast.unparse(expr)}")


# ---------------------------------------------------------------- parsing
def _pattern(expr: ast.expr, rule: str) -> Pattern:
    if isinstance(expr, ast.Name):
        return PVar(expr.id)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        op = expr.func.id
        if op not in OPS:
            raise RuleError(f"rule {rule}: unknown op '{op}'")
        unknown = {k.arg for k in expr.keywords} - set(OPS[op].defaults)
        if unknown:
            raise RuleError(f"rule {rule}: {op} has no attribute {', '.join(sorted(unknown))}")
        return POp(op, tuple(_pattern(a, rule) for a in expr.args),
                   tuple((k.arg, k.value) for k in expr.keywords))
    raise RuleError(f"rule {rule}: cannot read pattern '{ast.unparse(expr)}'")


def _roots(text: str, rule: str) -> tuple[Pattern, ...]:
    try:
        expr = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise RuleError(f"rule {rule}: bad pattern '{text.strip()}': {exc.msg}") from None
    items = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return tuple(_pattern(e, rule) for e in items)


def _templates(text: str, rule: str) -> dict[str, Template]:
    out = {}
    for entry in text.replace("] ", "];").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        try:
            sub = ast.parse(entry, mode="eval").body
            assert isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name)
        except (SyntaxError, AssertionError):
            raise RuleError(f"rule {rule}: bad shape template '{entry}'") from None
        dims = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
        prefix = dims[0].value.id if dims and isinstance(dims[0], ast.Starred) else None
        rest = dims[1:] if prefix else dims
        out[sub.value.id] = Template(prefix, tuple(
            d.id if isinstance(d, ast.Name) else d.value for d in rest))
    return out


_KEYS = ("from", "to", "shapes", "const", "check", "try")


def parse_rules(text: str, origin: str = "<rules>") -> list[Rule]:
    """Parse a rule file's text into rules (RuleError names the bad rule)."""
    blocks: list[tuple[str, str, dict[str, str], str]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        head = line.split(None, 1)
        if head[0] == "rule":
            words = head[1].split() if len(head) > 1 else []
            if not words:
                raise RuleError(f"{origin}:{lineno}: a rule needs a name")
            family = words[1].strip("()") if len(words) > 1 else "misc"
            blocks.append((words[0], family, {}, ""))
            key = None
        elif not blocks:
            raise RuleError(f"{origin}:{lineno}: text before the first rule")
        elif head[0] in _KEYS and raw[:1].isspace() and len(raw) - len(raw.lstrip()) <= 2:
            key = head[0]
            blocks[-1][2][key] = blocks[-1][2].get(key, "") + " " + (head[1] if len(head) > 1 else "")
        elif key is not None:
            blocks[-1][2][key] += " " + line.strip()
        else:
            raise RuleError(f"{origin}:{lineno}: expected one of {', '.join(_KEYS)}")
        blocks[-1] = (*blocks[-1][:3], blocks[-1][3] + raw + "\n")
    return [_rule(name, family, fields, source) for name, family, fields, source in blocks]


def _rule(name: str, family: str, f: dict[str, str], source: str) -> Rule:
    if "from" not in f or "to" not in f:
        raise RuleError(f"rule {name}: needs both 'from' and 'to'")
    src, dst = _roots(f["from"], name), _roots(f["to"], name)
    if len(src) != len(dst):
        raise RuleError(f"rule {name}: {len(src)} source roots but {len(dst)} target roots")
    checks = []
    if "check" in f:
        checks = [ast.parse(c.strip(), mode="eval").body for c in f["check"].split(";") if c.strip()]
    trials: dict[str, tuple[ast.expr, ...]] = {}
    if "try" in f:
        for part in f["try"].split(";"):
            if part.strip():
                key, _, values = part.partition("=")
                trials[key.strip()] = tuple(
                    ast.parse(v.strip(), mode="eval").body for v in _split_top(values))
    return Rule(name, family, src, dst, _templates(f.get("shapes", ""), name),
                frozenset(f.get("const", "").split()), tuple(checks), trials, source)


def _split_top(text: str) -> list[str]:
    """Split ``text`` on the commas that are not inside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p.strip()]


def load_rules(path: str | None = None) -> list[Rule]:
    """The rules of ``path``, or the package's own ``taso.rules`` by default."""
    if path is None:
        text = resources.files("tempo.superopt").joinpath("taso.rules").read_text()
        return parse_rules(text, "taso.rules")
    try:
        with open(path) as fh:
            return parse_rules(fh.read(), path)
    except OSError as exc:
        raise RuleError(f"cannot read rule file '{path}': {exc.strerror}") from None
