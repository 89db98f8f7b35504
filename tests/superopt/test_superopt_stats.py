"""Interleaved timing and the win / tie / loss rule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo.errors import TempoError
from tempo.superopt.execute import time_interleaved
from tempo.superopt.graph import GraphBuilder, node
from tempo.superopt.latency import Latency
from tempo.superopt.stats import (Verdict, compile_pair_medians, median_interval, paired_speedup,
                                  paired_verdict, ratio_verdict, round_medians, round_ratios,
                                  sign_test_p)


def _latency(medians: list[float], rng: np.random.Generator, spread: float = 0.05) -> Latency:
    """Ten samples per round around each round's median, stored round after round."""
    return Latency(tuple(float(m * (1 + spread * rng.standard_normal())) for m in medians
                         for _ in range(10)))


def test_verdict_follows_the_interval_of_paired_ratios():
    rng = np.random.default_rng(0)
    drift = 1.0 + 0.3 * rng.random(20)                  # load that changes from round to round
    reference = _latency(list(drift), rng)
    assert paired_verdict(reference, _latency(list(0.9 * drift), rng), 20).outcome == "win"
    assert paired_verdict(reference, _latency(list(1.1 * drift), rng), 20).outcome == "loss"
    same = paired_verdict(reference, _latency(list(drift), rng), 20)
    assert same.outcome == "tie" and same.low < 1.0 < same.high
    assert same.ratio == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("n, k", [(6, 1), (10, 2), (20, 6), (40, 14), (60, 22)])
def test_median_interval_is_the_sign_tests_order_statistics(n, k):
    """The k-th smallest and k-th largest of n values, k the largest index whose binomial tail
    P(Binomial(n, 1/2) < k) is at most 2.5% (tabulated values)."""
    values = np.random.default_rng(n).permutation(np.arange(1.0, n + 1))
    assert median_interval(values) == (k, n + 1 - k)


def test_median_interval_of_too_few_values_is_their_range():
    assert median_interval(np.array([3.0, 1.0, 2.0])) == (1.0, 3.0)


def test_median_interval_covers_the_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    samples = rng.lognormal(0.0, 0.5, size=(2000, 40))        # skewed; true median exactly 1
    covered = np.mean([lo <= 1.0 <= hi for lo, hi in map(median_interval, samples)])
    assert 0.94 <= covered <= 0.98                            # exact level 96.2% at n = 40


def test_round_medians_split_the_samples_round_by_round():
    lat = Latency((1.0, 2.0, 3.0, 10.0, 11.0, 30.0))
    np.testing.assert_allclose(round_medians(lat, 2), [2.0, 11.0])


@pytest.fixture
def one_thread():
    """Time on one torch thread, as the optimiser does (more spin on a shared machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_interleaved_timing_tells_a_big_matmul_from_a_small_one(one_thread):
    b = GraphBuilder(0)
    x = b.input("x", (256, 256))
    small = b.build([node("matmul", node("slice", x, axis=1, start=0, end=8), b.weight((8, 8)))])
    big = b.build([node("matmul", x, b.weight((256, 256)))])
    lat = time_interleaved({"small": small, "big": big}, rounds=4, repeats=5)
    assert all(len(v.samples_ms) == 20 for v in lat.values())
    assert paired_verdict(lat["small"], lat["big"], 4).outcome == "loss"


def test_a_verdict_records_its_ratio_interval_and_outcome():
    assert Verdict(1.02, 1.01, 1.03).record() == {"ratio": 1.02, "ci95": [1.01, 1.03], "verdict": "win"}
    assert Verdict(0.99, 0.98, 1.01).record()["verdict"] == "tie"


def test_compile_pair_medians_group_the_rounds_that_ran_one_pair():
    ratios = np.array([1.0, 2.0, 3.0, 1.2, 2.2, 3.2, 1.1])          # round r ran pair r % 3
    assert compile_pair_medians(ratios, 3).tolist() == pytest.approx([1.1, 2.1, 3.1])
    assert compile_pair_medians(ratios[:2], 3).tolist() == [1.0, 2.0]  # fewer rounds than compiles


def test_rounds_that_share_a_compile_pair_count_once():
    rng = np.random.default_rng(0)
    # three of the challenger's four compiles happen to lie 2% faster, the fourth 2% slower:
    # per round that is 30 rounds of 40 at 1.02, per compile pair 4 values, too few to tell
    placement = [0.98, 0.98, 0.98, 1.02]
    reference = _latency([1.0] * 40, rng, spread=0.001)
    challenger = _latency([placement[r % 4] for r in range(40)], rng, spread=0.001)
    assert paired_verdict(reference, challenger, 40).outcome == "win"
    by_pair = paired_verdict(reference, challenger, 40, compiles=4)
    assert by_pair.outcome == "tie" and by_pair.low < 1.0 < by_pair.high


def test_a_verdict_needs_at_least_one_compile():
    rng = np.random.default_rng(0)
    same = _latency([1.0] * 8, rng)
    with pytest.raises(TempoError, match="at least 1"):
        paired_verdict(same, same, 8, compiles=0)


def test_sign_test_p_is_the_two_sided_binomial_tail():
    assert sign_test_p(10, 10) == sign_test_p(0, 10) == pytest.approx(2 / 1024)
    assert sign_test_p(8, 10) == pytest.approx(2 * (45 + 10 + 1) / 1024)
    assert sign_test_p(5, 10) == 1.0 and sign_test_p(0, 0) == 1.0
    with pytest.raises(TempoError, match="11 of 10"):
        sign_test_p(11, 10)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 200), st.data())
def test_sign_test_p_is_symmetric_and_falls_away_from_the_middle(n, data):
    above = data.draw(st.integers(0, n))
    assert sign_test_p(above, n) == pytest.approx(sign_test_p(n - above, n))
    if above > n / 2 and above < n:
        assert sign_test_p(above + 1, n) <= sign_test_p(above, n)


def test_round_ratios_pair_the_samples_cycle_by_cycle():
    # the machine's speed doubles in the second cycle of each round: both sides see it
    reference = Latency((1.0, 2.0, 1.0, 3.0, 6.0, 3.0))
    challenger = Latency((0.5, 1.0, 0.5, 2.0, 4.0, 2.0))
    np.testing.assert_allclose(round_ratios(reference, challenger, 2), [2.0, 1.5])
    with pytest.raises(TempoError, match="differ in number"):
        round_ratios(reference, Latency((1.0,)), 1)


def test_a_verdict_from_ratios_groups_them_by_compile_pair():
    ratios = np.array([1.1, 0.9, 1.1, 0.9, 1.1, 0.9, 1.1, 0.9])
    assert ratio_verdict(ratios).ratio == pytest.approx(1.0)
    assert ratio_verdict(ratios, compiles=2).record() == {"ratio": pytest.approx(1.0),
                                                          "ci95": [0.9, 1.1], "verdict": "tie"}


def test_paired_speedup_is_the_median_of_the_round_ratios():
    reference = Latency((2.0, 2.0, 3.0, 3.0, 8.0, 8.0))
    challenger = Latency((1.0, 1.0, 3.0, 3.0, 2.0, 2.0))
    assert paired_speedup(reference, challenger, 3) == 2.0        # ratios 2, 1, 4
