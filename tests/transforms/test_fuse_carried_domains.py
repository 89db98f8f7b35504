"""The fuse pass hands the scheduler the isl domains of the fused SDG, worked out from the analysis that
found its islands: the same sets as an analysis of the fused SDG, and the same compiled program."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.api import stages
from tempo.ir.ops import FusedOp
from tempo.schedule import isl_domains

XS = np.random.default_rng(1).standard_normal((6, 3))
W = np.random.default_rng(0).standard_normal((3, 3)) * 0.5


def rnn(ctx):
    (t, T), = ctx.dims("t")
    x, w = tpo.from_numpy(XS, dims=(t,)), tpo.from_numpy(W)
    h = tpo.placeholder((3,), "float64", dims=(t,))
    h[0] = x[0].tanh()
    h[t + 1] = ((w @ h[t]) + x[t + 1]).tanh()
    return [h, (h * 2.0).sum()], {T: 6}


def returns_and_conditions(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    r = tpo.from_numpy(np.arange(24.0).reshape(4, 6) / 10.0, dims=(i, t))
    g = r[i, t:T].discounted_sum(0.9)
    odd = (g * 3.0 + 1.0)[(t % 2) == 1]
    s = tpo.placeholder((), "float64", dims=(i, t))
    s[i, 0] = r[i, 0] * 2.0
    s[i, t + 1] = (s[i, t] + r[i, t + 1]).exp().log()
    return [g, odd, s[i, 0:T].sum()], {I: 4, T: 6}


def learner(ctx):
    (i, I), (t, T) = ctx.dims("i", "t")
    x = tpo.from_numpy(np.linspace(-1.0, 1.0, 40).reshape(4, 10), dims=(i, t))
    net = tpo.nn.MLP(1, [4], 1, dims=(i,))
    loss = ((net(x.reshape(1)) - x.reshape(1)) ** 2.0)[i, 0:T].mean()
    loss.backward()
    tpo.optim.Adam(net.parameters(), lr=0.01).step()
    return [loss], {I: 4, T: 10}


@pytest.mark.parametrize("build", [rnn, returns_and_conditions, learner])
def test_the_carried_domains_are_those_of_an_analysis_of_the_fused_sdg(build, monkeypatch):
    carried = []
    analyse = stages.analyse

    def kept(lowered):
        out = analyse(lowered)
        carried.append((lowered.sdg, out))
        return out

    monkeypatch.setattr(stages, "analyse", kept)
    with tpo.Context(seed=0) as ctx:
        fetch, bounds = build(ctx)
        program = ctx.compile(fetch)
    sdg, domains = carried[0]
    assert any(isinstance(node.op, FusedOp) for node in sdg.nodes.values())
    fresh = isl_domains.analyse(sdg, list(sdg.roots))
    assert fresh is not domains  # analysed anew: the carried domains serve one analysis
    assert domains.params == fresh.params and domains.context.is_equal(fresh.context)
    for name in ("box", "defined", "executed", "active", "reads"):
        mine, theirs = getattr(domains, name), getattr(fresh, name)
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert mine[key].is_equal(theirs[key]), (name, key)
    program.run(bounds)


@pytest.mark.parametrize("build", [rnn, returns_and_conditions, learner])
def test_a_program_compiles_to_the_same_code_with_the_carried_domains(build, monkeypatch):
    codes, outputs = [], []
    for carry in (True, False):
        if not carry:
            monkeypatch.setattr(isl_domains, "carry", lambda sdg, roots, domains: None)
        with tpo.Context(seed=0) as ctx:
            fetch, bounds = build(ctx)
            program = ctx.compile(fetch)
            codes.append(program.code)
            outputs.append(program.run(bounds))
    assert codes[0] == codes[1]
    for a, b in zip(*outputs):
        np.testing.assert_array_equal(a, b)


def test_a_carried_analysis_serves_only_its_own_sdg_and_roots():
    with tpo.Context() as ctx:
        fetch, _ = rnn(ctx)
        program = ctx.compile(fetch)
    sdg = program.sdg
    stale = isl_domains.analyse(sdg, list(sdg.roots))
    isl_domains.carry(sdg, list(sdg.roots)[:-1], stale)
    assert isl_domains.analyse(sdg, list(sdg.roots)) is not stale  # other roots: analysed
    isl_domains.carry(sdg, list(sdg.roots), stale)
    assert isl_domains.analyse(sdg, list(sdg.roots)) is stale
    assert isl_domains.analyse(sdg, list(sdg.roots)) is not stale  # once
