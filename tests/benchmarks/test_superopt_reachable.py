"""benchmarks/superopt/reachable.py: the graphs a few rewrites from a result, and rule chains."""
from __future__ import annotations

import importlib.util
import pathlib

from tempo.superopt.models import build
from tempo.superopt.optimize import same_outputs
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import load_rules

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("superopt_reachable", ROOT / "benchmarks" / "superopt" / "reachable.py")
reachable = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reachable)
RULES = load_rules()


def test_the_neighbourhood_holds_every_single_rewrite_and_merge_chains_only_beyond():
    g = build("resnext", scale="small")
    near = reachable.neighbourhood(g, RULES)
    one = {c.graph.key() for c in candidates(g, RULES)}
    assert one <= set(near) and g.key() not in near
    family = {r.name: r.family for r in RULES}
    for key, (graph, applied) in near.items():
        assert graph.key() == key and 1 <= len(applied) <= 3
        if len(applied) > 1:                       # a chain starts with a merge, then merges/concats
            assert family[applied[0]] == "merge"
            assert all(family[a] in reachable.CHAIN_FAMILIES for a in applied[1:])


def test_a_chain_applies_wherever_it_fits_and_keeps_the_outputs():
    by_name = {r.name: r for r in RULES}
    g = build("squeezenet", scale="small")
    first, n_first = reachable.exhaust(g, [by_name["convb_relu"]])
    chain = [by_name[n] for n in ("enlarge_1x1b", "merge_convb", "concat_slices_c")]
    chained, times = reachable.apply_chain(first, chain)
    assert n_first > 0 and times > 0
    assert same_outputs(g, chained)
    assert reachable.apply_chain(chained, chain)[1] == 0       # nowhere left to fit
