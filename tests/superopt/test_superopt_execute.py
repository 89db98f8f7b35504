"""Executors: torch and JAX agree with the NumPy reference; constant folding; latency."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from superopt_graphs import every_op_graph
from tempo.errors import TempoError
from tempo.superopt.execute import (BACKENDS, default_backend, measure_latency, run,
                                    set_default_backend)
from tempo.superopt.fold import fold_constants
from tempo.superopt.graph import OPS, GraphBuilder, node
from tempo.superopt.reference import KERNELS, evaluate, random_feeds


def test_every_op_has_a_kernel_on_every_backend():
    """Opaque nodes (a Tempo island's steps the IR does not model) run on the island's backend only."""
    assert set(KERNELS) == set(OPS) - {"input", "weight", "scalar", "opaque"}
    for module, _ in BACKENDS.values():
        assert set(importlib.import_module(module).KERNELS) == set(KERNELS)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_backends_agree_with_the_reference(backend):
    if backend == "torch-cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    g = every_op_graph(seed=3)
    feeds = random_feeds(g, seed=1)
    want = evaluate(g, feeds)
    got = run(g, feeds, backend)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_constant_folding_removes_weight_only_ops_and_keeps_values():
    b = GraphBuilder(1)
    x = b.input("x", (3, 4))
    w = node("concat", b.weight((4, 2)), node("mul", b.weight((4, 2)), node("scalar", value=3.0)),
             axis=1)
    g = b.build([node("matmul", x, w)])
    folded = fold_constants(g)
    assert folded.op_counts() == {"input": 1, "weight": 1, "matmul": 1}
    feeds = random_feeds(g)
    np.testing.assert_allclose(evaluate(folded, feeds)[0], evaluate(g, feeds)[0], rtol=1e-6)


def test_latency_is_measured_with_repeats():
    lat = measure_latency(every_op_graph(), "torch", warmup=1, repeats=5)
    assert len(lat.samples_ms) == 5
    assert all(s > 0 for s in lat.samples_ms)
    assert min(lat.samples_ms) <= lat.median_ms <= max(lat.samples_ms)


def test_heavier_graphs_measure_slower():
    b = GraphBuilder()
    x = b.input("x", (256, 256))
    light = b.build([node("relu", x)])
    heavy = b.build([node("matmul", node("matmul", x, b.weight((256, 256))), b.weight((256, 256)))])
    assert measure_latency(heavy, repeats=9).median_ms > measure_latency(light, repeats=9).median_ms


def test_unknown_backend_is_an_error():
    with pytest.raises(TempoError, match="unknown backend 'tpu'"):
        run(every_op_graph(), {}, "tpu")
    with pytest.raises(TempoError, match="unknown backend 'tpu'"):
        set_default_backend("tpu")


def test_the_default_backend_is_used_where_none_is_named():
    g = every_op_graph(seed=2)
    feeds = random_feeds(g, seed=0)
    try:
        set_default_backend("jax")
        assert default_backend() == "jax"
        got = run(g, feeds)
    finally:
        set_default_backend("torch")
    for a, b in zip(got, evaluate(g, feeds)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_the_jax_runner_compiles_a_structure_once_and_takes_each_graphs_weights():
    jax_backend = importlib.import_module("tempo.superopt.jax_backend")
    first, other_weights = every_op_graph(seed=4), every_op_graph(seed=5)
    assert first.key() == other_weights.key()
    assert any(not np.array_equal(w, other_weights.weights[k]) for k, w in first.weights.items())
    feeds = random_feeds(first, seed=0)
    runs = [jax_backend.compile_graph(fold_constants(g)) for g in (first, other_weights, first)]
    assert jax_backend._jitted(fold_constants(first)) is jax_backend._jitted(fold_constants(other_weights))
    assert jax_backend._jitted(fold_constants(first)) is not jax_backend._jitted(fold_constants(
        GraphBuilder(0).build([node("relu", GraphBuilder(0).input("x", (3,)))])))
    for fn, g in zip(runs, (first, other_weights, first)):
        for a, b in zip(fn(feeds), evaluate(g, feeds)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=2e-4, atol=2e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_the_gpu_backend_without_a_gpu_is_an_error():
    with pytest.raises(TempoError, match="needs a CUDA GPU"):
        set_default_backend("torch-cuda")
    assert default_backend() == "torch"


def test_the_torch_runner_uses_its_own_copies_of_weights_and_inputs():
    """Weights and inputs are copied into torch's (64-byte aligned) memory, so where the caller's
    arrays lie cannot change a kernel's speed; the copies show as outputs that do not follow
    later writes to those arrays."""
    from tempo.superopt.torch_backend import compile_graph

    b = GraphBuilder(0)
    x = b.input("x", (4, 8))
    g = b.build([node("matmul", x, b.weight((8, 3))), node("reshape", x, shape=(8, 4))])
    feeds = random_feeds(g, 0)
    fn = compile_graph(g)
    product, reshaped = (o.clone() for o in fn(feeds))
    aliased = fn(feeds)[1]                       # a view of the input as the runner holds it
    feeds["x"][...] = 0.0
    for w in g.weights.values():
        w[...] = 0.0
    assert torch.equal(aliased, reshaped) and reshaped.abs().sum() > 0
    assert torch.equal(fn(random_feeds(g, 0))[0], product) and product.abs().sum() > 0


def test_time_calls_times_every_call_in_every_round():
    import time

    from tempo.superopt.execute import time_calls

    lat = time_calls({"sleeps": [lambda: time.sleep(0.002)], "returns": [lambda: None]}, rounds=3,
                     repeats=4)
    assert len(lat["sleeps"].samples_ms) == len(lat["returns"].samples_ms) == 12
    assert lat["sleeps"].median_ms >= 2.0 > lat["returns"].median_ms


def test_time_calls_takes_equivalent_calls_in_turn_round_by_round():
    from tempo.superopt.execute import time_calls

    used = []
    calls = [lambda i=i: used.append(i) for i in range(3)]
    time_calls({"g": calls}, rounds=4, repeats=2)
    assert used == [0] * 3 + [1] * 3 + [2] * 3 + [0] * 3       # one warm-up and two runs a round


def test_several_compiles_of_a_graph_are_timed_in_turn_each_graph_folded_once(monkeypatch):
    from tempo.superopt import execute, torch_backend

    compiled, folded = [], []
    real_compile, real_fold = torch_backend.compile_graph, execute.fold_constants
    monkeypatch.setattr(torch_backend, "compile_graph",
                        lambda g, **options: compiled.append(g) or real_compile(g, **options))
    monkeypatch.setattr(execute, "fold_constants", lambda g: folded.append(g) or real_fold(g))
    b = GraphBuilder(0)
    g = b.build([node("relu", b.input("x", (2, 3)))])
    lat = execute.time_interleaved({"a": g, "b": g}, rounds=3, repeats=2, compiles=3)
    assert len(compiled) == 6 and len(folded) == 2 and len(lat["a"].samples_ms) == 6
    compiled.clear()
    execute.time_interleaved({"a": g, "b": g}, rounds=2, repeats=2, compiles=8)
    assert len(compiled) == 4                     # compiles beyond the rounds would not be timed


def test_compiles_are_made_in_batches_one_of_every_graph_each_in_a_fresh_order(monkeypatch):
    from tempo.superopt import execute, torch_backend

    made = []
    real_compile = torch_backend.compile_graph
    monkeypatch.setattr(torch_backend, "compile_graph",
                        lambda g, **options: made.append(g.outputs[0].op) or real_compile(g, **options))
    b = GraphBuilder(0)
    x = b.input("x", (2, 3))
    graphs = {op: b.build([node(op, x)]) for op in ("relu", "sigmoid", "tanh")}
    execute.time_interleaved(graphs, rounds=6, repeats=1, compiles=6)
    batches = [tuple(made[i:i + 3]) for i in range(0, len(made), 3)]
    assert len(batches) == 6 and all(sorted(batch) == sorted(graphs) for batch in batches)
    assert len(set(batches)) > 1                  # the order changes from batch to batch
    assert {batch[-1] for batch in batches} != {"tanh"}   # the last key is not always made last


def test_time_interleaved_refuses_fewer_than_one_compile():
    from tempo.superopt import execute

    b = GraphBuilder(0)
    g = b.build([node("relu", b.input("x", (2, 3)))])
    with pytest.raises(TempoError, match="compiles must be at least 1, not 0"):
        execute.time_interleaved({"a": g}, rounds=2, compiles=0)


def test_time_calls_runs_every_key_once_a_cycle_in_a_fresh_order():
    from tempo.superopt.execute import time_calls

    order = []
    calls = {k: [lambda k=k: order.append(k)] for k in "abc"}
    lat = time_calls(calls, rounds=2, repeats=4)
    rounds = [order[i:i + 15] for i in (0, 15)]            # 3 warm-up calls, then 4 cycles of 3
    cycles = [tuple(r[i:i + 3]) for r in rounds for i in range(3, 15, 3)]
    assert len(order) == 30 and all(sorted(c) == ["a", "b", "c"] for c in cycles)
    assert len(set(cycles)) > 1
    assert all(len(v.samples_ms) == 8 for v in lat.values())
    warmups = [tuple(r[:3]) for r in rounds]
    assert all(sorted(w) == ["a", "b", "c"] for w in warmups)


def test_time_calls_warms_the_keys_up_in_a_fresh_order_each_round():
    """In the keys' order, the last key warmed up would run its first timed call with the
    freshest cache and come out faster than the others more often than not."""
    from tempo.superopt.execute import time_calls

    order = []
    time_calls({k: [lambda k=k: order.append(k)] for k in "abcd"}, rounds=12, repeats=0)
    warmups = [tuple(order[i:i + 4]) for i in range(0, 48, 4)]
    assert all(sorted(w) == list("abcd") for w in warmups)
    assert len({w[-1] for w in warmups}) > 1               # not always the same key last


def test_time_calls_starts_no_round_that_would_end_past_its_deadline():
    import time

    from tempo.superopt.execute import time_calls, timed_rounds

    sleep = {"a": [lambda: time.sleep(0.001)]}               # a round: 4 calls, about 4 ms
    start = time.perf_counter()
    lat = time_calls(sleep, rounds=1000, repeats=3, deadline=start + 0.2)
    took = time.perf_counter() - start
    assert 1 <= timed_rounds(lat["a"], 3) < 1000 and took < 0.2 + 0.1
    late = time_calls(sleep, rounds=5, repeats=3, deadline=time.perf_counter() - 1.0)
    assert timed_rounds(late["a"], 3) == 1                   # past it already: the first round only
