"""Check a rewrite rule on random shapes and inputs.

:func:`sample_instance` draws the rule's shape symbols and ``try`` values,
builds the source pattern as a small graph (pattern variables become inputs,
or weights for ``const`` variables), and retries until the source is
well-shaped. :func:`check_rule` then finds the location with the matcher,
applies the rule, and compares source and target with the NumPy evaluator.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tempo.superopt.graph import Graph, GraphBuilder, ShapeError
from tempo.superopt.reference import evaluate
from tempo.superopt.rewrite import apply, instantiate, matches
from tempo.superopt.rules import Rule, RuleError, evaluate_expr


@dataclass(frozen=True)
class Instance:
    """A rule's source, built on sampled shapes, and the inputs to run it on."""

    graph: Graph
    feeds: dict[str, np.ndarray]
    env: dict


def _symbols(rule: Rule, rng: np.random.Generator) -> dict:
    env: dict = {}
    for template in rule.shapes.values():
        if template.prefix and template.prefix not in env:
            env[template.prefix] = tuple(int(d) for d in rng.integers(1, 4, rng.integers(0, 3)))
        for d in template.dims:
            if isinstance(d, str) and d not in env:
                env[d] = int(rng.integers(1, 7))
    for key, options in rule.trials.items():
        env[key] = evaluate_expr(options[rng.integers(len(options))], env)
    return env


def sample_instance(rule: Rule, rng: np.random.Generator, attempts: int = 500) -> Instance:
    """A well-shaped random instance of ``rule``'s source (RuleError if none is found)."""
    missing = [v for v in rule.variables() if v not in rule.shapes]
    if missing:
        raise RuleError(f"rule {rule.name}: no shape template for {', '.join(missing)}")
    for _ in range(attempts):
        env = _symbols(rule, rng)
        builder = GraphBuilder(int(rng.integers(1 << 30)))
        for var in rule.variables():
            t = rule.shapes[var]
            shape = (*(env[t.prefix] if t.prefix else ()),
                     *(env[d] if isinstance(d, str) else d for d in t.dims))
            if var in rule.const:
                env[var] = builder.weight(shape, value=rng.uniform(0.2, 1.5, shape))
            else:
                env[var] = builder.input(var, shape)
        try:
            roots = [instantiate(p, env) for p in rule.source]
        except ShapeError:
            continue
        except KeyError as exc:
            raise RuleError(f"rule {rule.name}: no 'try' values for '{exc.args[0]}'") from None
        if all(evaluate_expr(c, env) for c in rule.checks):
            graph = builder.build(roots)
            feeds = {n.attr("name"): rng.standard_normal(n.shape) for n in graph.inputs}
            return Instance(graph, feeds, env)
    raise RuleError(f"rule {rule.name}: no well-shaped instance in {attempts} samples")


def check_rule(rule: Rule, rng: np.random.Generator) -> float:
    """Largest relative difference between source and target on one random instance.

    Raises RuleError when the matcher does not find the instance's own
    location or the rule cannot be applied there.
    """
    inst = sample_instance(rule, rng)
    roots = inst.graph.outputs
    found = [m for m in matches(rule, inst.graph) if m.roots == roots]
    if not found:
        raise RuleError(f"rule {rule.name}: the matcher misses its own source on "
                        f"shapes {[list(r.shape) for r in roots]}")
    rewritten = apply(found[0], inst.graph)
    if rewritten is None:
        raise RuleError(f"rule {rule.name}: its target is ill-shaped on "
                        f"shapes {[list(r.shape) for r in roots]}")
    before, after = evaluate(inst.graph, inst.feeds), evaluate(rewritten, inst.feeds)
    return max(float(np.max(np.abs(a - b), initial=0.0)) / (1.0 + float(np.max(np.abs(b), initial=0.0)))
               for a, b in zip(after, before))
