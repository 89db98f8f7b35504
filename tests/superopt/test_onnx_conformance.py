"""Greedy superopt over ONNX's own node tests: no crash, a valid model, the expected outputs.

The cases are generated from the installed onnx package's
``onnx.backend.test.case`` generators. The default suite runs a fixed sample
of about 100 (every 19th, plus cases that once went wrong); the full set and
the models shipped under onnx's backend test data are marked slow.
"""
from __future__ import annotations

import pytest

from tempo.superopt.onnx_conformance import check, data_cases, node_case_names, node_cases

# cases that named a cause of a wrong, invalid or crashing result, and cases of the ops
# imported only where the IR has their exact meaning (Clip, Pad, the Reduce ops)
NAMED = ["test_argmax_default_axis_example", "test_attention_3d", "test_clip_default_max",
         "test_celu_expanded", "test_maxpool_2d_dilations", "test_softmax_axis_1",
         "test_layer_normalization_2d_axis0_expanded", "test_gemm_default_single_elem_vector_bias",
         "test_split_equal_parts_1d_opset18", "test_slice_default_axes",
         "test_batchnorm_epsilon_training_mode", "test_bernoulli", "test_clip_default_inbounds",
         "test_clip_splitbounds", "test_constant_pad_axes", "test_reduce_max_empty_set",
         "test_reduce_mean_do_not_keepdims_example", "test_reduce_sum_empty_axes_input_noop"]
BUDGET_S = 2.0


def _sample() -> list[str]:
    names = node_case_names()
    return sorted(set(names[::19]) | (set(NAMED) & set(names)))


def _assert_good(verdict) -> None:
    assert verdict.status == "ok", f"{verdict.name}: {verdict.status}: {verdict.detail}"


@pytest.mark.parametrize("name", _sample())
def test_node_case_sample(name):
    (case,) = node_cases([name])
    _assert_good(check(case, "greedy", BUDGET_S))


def test_a_rewritten_node_case_is_spliced_and_computes_the_expected_outputs():
    (case,) = node_cases(["test_layer_normalization_2d_axis0_expanded"])
    verdict = check(case, "greedy", BUDGET_S)
    _assert_good(verdict)
    assert verdict.rewritten and verdict.speedup > 1.0


@pytest.mark.slow
def test_every_node_case():
    bad = [v for v in map(lambda c: check(c, "greedy", BUDGET_S), node_cases()) if v.status != "ok"]
    assert not bad, "\n".join(f"{v.name}: {v.status}: {v.detail}" for v in bad)


@pytest.mark.slow
def test_every_shipped_model():
    bad = [v for v in (check(c, "greedy", 10.0) for c in data_cases()) if v.status != "ok"]
    assert not bad, "\n".join(f"{v.name}: {v.status}: {v.detail}" for v in bad)
