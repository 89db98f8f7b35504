"""benchmarks/partial_unrolling.py at tiny sizes: the settings agree and the unrolled runs test fewer conditions."""
import argparse

from benchmarks import partial_unrolling


def test_the_benchmark_measures_both_settings_on_its_programs():
    args = argparse.Namespace(steps=20, iterations=2, batch=2, episode=6, tokens=3, repeats=1)
    for name in ("recurrence", "reinforce"):
        row = partial_unrolling.measure(name, args)
        assert row["same_results"] and row["on_kept"]
        assert row["on_tested"] < row["off_tested"] and row["on_run_s"] > 0
