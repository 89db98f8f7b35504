"""The pass pipeline: its order, switching passes off, and what each pass did."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.transforms import PIPELINE, SIMPLIFICATION, cse
from tests.transforms.simplification import NONE, compiled, same_results
from tests.transforms.test_vectorize import rl_like

XS = np.random.default_rng(0).standard_normal((6, 3))


def small(ctx):
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(XS, dims=(t,))
    a, b = x * 2.0, x * 2.0  # the same value twice
    unused = x.sin()  # noqa: F841 -- never fetched
    return [(a + b * 1.0).ident().tanh()]


def test_the_simplification_passes_run_first_and_each_can_be_switched_off():
    assert [name for name, _ in PIPELINE] == ["cse", "simplify", "domain_reduction", "lift", "cache_activations",
                                              "dce", "vectorize", "contract", "tile", "pack_weights", "masked_reads",
                                              "step_order",
                                              "fuse",
                                              "superopt"]
    for name in SIMPLIFICATION:
        program, got = compiled(small, {name: False}, {"T": 6})
        assert name not in [s.name for s in program.pass_stats]
        np.testing.assert_allclose(got[0], np.tanh(XS * 4.0), rtol=1e-12)


def test_each_pass_records_its_node_counts_and_seconds():
    program, _ = compiled(small, {}, {"T": 6})
    counts = {s.name: (s.nodes_before, s.nodes_after) for s in program.pass_stats}
    assert counts["cse"][1] < counts["cse"][0]
    assert counts["simplify"][1] < counts["simplify"][0]
    assert counts["dce"][1] < counts["dce"][0]
    for a, b in zip(program.pass_stats, program.pass_stats[1:]):
        assert a.nodes_after == b.nodes_before
    assert all(program.timings[s.name] == s.seconds for s in program.pass_stats)
    lines = program.passes_report().splitlines()
    assert lines[0].split() == ["pass", "nodes", "before", "nodes", "after", "seconds"]
    assert [line.split()[0] for line in lines[1:]] == [name for name, _ in PIPELINE]
    assert lines[1].split()[1:3] == [str(n) for n in counts["cse"]]


def test_the_environment_switches_passes_off_unless_a_compile_configures_them(monkeypatch):
    monkeypatch.setenv("TEMPO_PASSES_OFF", "cse,dce")
    program, _ = compiled(small, {}, {"T": 6})
    assert {s.name for s in program.pass_stats}.isdisjoint({"cse", "dce"})
    program, _ = compiled(small, {"cse": cse.Config()}, {"T": 6})
    assert "cse" in {s.name for s in program.pass_stats} and "dce" not in {s.name for s in program.pass_stats}


def test_an_rl_program_has_fewer_nodes_and_the_same_values():
    bounds = {"B": 3, "I": 3, "T": 5}
    fast, got = compiled(lambda ctx: rl_like(ctx)[0], {}, bounds, seed=5)
    slow, want = compiled(lambda ctx: rl_like(ctx)[0], NONE, bounds, seed=5)
    same_results(got, want, exact=False)
    assert len(fast.sdg.nodes) < len(slow.sdg.nodes)
    first = fast.pass_stats[0].nodes_before
    simplified = next(s for s in fast.pass_stats if s.name == "dce").nodes_after
    assert simplified < 0.75 * first


def test_a_misspelt_pass_in_tempo_passes_off_is_an_error(monkeypatch):
    monkeypatch.setenv("TEMPO_PASSES_OFF", "lfit")
    with pytest.raises(tpo.TempoError, match="TEMPO_PASSES_OFF names 'lfit'.*the passes are cse, "):
        compiled(small, {}, {"T": 6})
