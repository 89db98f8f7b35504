"""Model builders: full-size shapes and the small variants."""
from __future__ import annotations

import numpy as np
import pytest

from tempo.errors import TempoError
from tempo.superopt.models import SCALES, WORKLOADS, build
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
    g = build(name, scale="small")
    assert len(candidates(g, load_rules())) >= 3
    for shape in WORKLOADS[name].shapes["small"]:
        other = build(name, scale="small", **shape)
        assert other.outputs[0].shape != g.outputs[0].shape or name == "squeezenet"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_scales_grow_and_the_other_shapes_differ_from_the_trained_one(name):
    inputs = {scale: build(name, scale=scale).inputs[0].shape for scale in SCALES}
    sizes = [int(np.prod(inputs[scale])) for scale in SCALES]
    assert sizes == sorted(sizes) and len(set(sizes)) == 3
    for scale in SCALES:
        others = {build(name, scale=scale, **shape).inputs[0].shape
                  for shape in WORKLOADS[name].shapes[scale]}
        assert len(others) == 3 and inputs[scale] not in others


def test_an_unknown_scale_is_named():
    with pytest.raises(TempoError, match="unknown scale 'huge'"):
        build("bert", scale="huge")
