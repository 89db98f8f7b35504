"""Model builders: full-size shapes and the small variants."""
from __future__ import annotations

import pytest

from tempo.superopt.models import WORKLOADS, build
from tempo.superopt.rewrite import candidates
from tempo.superopt.rules import load_rules


def test_full_size_shapes_are_the_published_ones():
    assert build("bert").outputs[0].shape == (128, 768)
    assert build("vit").outputs[0].shape == (197, 768)
    assert build("decoder").outputs[0].shape == (64, 512)
    assert build("resnext").outputs[0].shape == (1, 256, 56, 56)
    assert build("squeezenet").outputs[0].shape == (1, 100)
    assert build("inception").outputs[0].shape == (1, 256, 35, 35)
    assert build("resnext").op_counts()["conv2d"] == 6


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_offers_rewrites_and_other_shapes_build(name):
    g = build(name, small=True)
    assert len(candidates(g, load_rules())) >= 3
    for shape in WORKLOADS[name].shapes:
        other = build(name, small=True, **shape)
        assert other.outputs[0].shape != g.outputs[0].shape or name == "squeezenet"
