"""Layout parsing, Algorithm 1, Table 2 and the resource-share rules (no processes)."""
from __future__ import annotations

import os

import pytest
import torch

from tempo.gmi.comm import torch_device
from tempo.gmi.errors import GMIError
from tempo.gmi.layout import Layout
from tempo.gmi.resources import GPU, choose_backend, plan_shares
from tempo.gmi.strategy import (group_backend, resolve_strategy, select_strategy, strategy_groups,
                                table2_cost)


@pytest.mark.parametrize("text, per_device", [("2x3", (3, 3)), ("1x1", (1,)), ("3,2,2", (3, 2, 2)),
                                              (" 4 ", (4,)), ("2X2", (2, 2))])
def test_parse(text, per_device):
    assert Layout.parse(text).per_device == per_device


@pytest.mark.parametrize("text", ["", "2x", "x2", "0x3", "2x0", "3,0,1", "a,b", "2*2", "1,,2"])
def test_parse_rejects_and_names_the_input(text):
    with pytest.raises(GMIError, match="layout"):
        Layout.parse(text)


def test_mapping_list_numbers_instances_device_by_device():
    layout = Layout.parse("3,2,2")
    assert layout.mpl == ((0, 1, 2), (3, 4), (5, 6))
    assert [layout.device_of(i) for i in range(7)] == [0, 0, 0, 1, 1, 2, 2]
    assert layout.local_index(4) == 1 and str(layout) == "3,2,2" and str(Layout.parse("2x2")) == "2x2"


@pytest.mark.parametrize("text, strategy", [("1x4", "mpr"), ("3,2,2", "har"), ("2x3", "har"),
                                            ("3x3", "mrr"), ("4x2", "mrr"), ("2x1", "mrr")])
def test_algorithm1(text, strategy):
    assert select_strategy(Layout.parse(text).mpl) == strategy


def test_forcing_mrr_on_a_layout_it_cannot_run_says_why():
    with pytest.raises(GMIError, match="same number of instances"):
        resolve_strategy("mrr", Layout.parse("3,2,2").mpl)
    with pytest.raises(GMIError, match="at most as many instances per device"):
        resolve_strategy("mrr", Layout.parse("2x3").mpl)
    with pytest.raises(GMIError, match="unknown reduction strategy 'ring'"):
        resolve_strategy("ring", Layout.parse("2x2").mpl)


def test_rings_are_disjoint_and_cover_every_instance():
    mpl = Layout.parse("3x2").mpl
    groups = strategy_groups(mpl)
    rings = [g for g in groups if len(g) == 3 and len({Layout.parse("3x2").device_of(i) for i in g}) == 3]
    assert sorted(i for ring in rings[:2] for i in ring) == list(range(6))


def test_table2_hierarchical_beats_flat_multiprocess_with_a_faster_collective():
    args = dict(g=4, t=4, size_bytes=1e6, b1=1e9, b2=1e10)
    assert table2_cost("har", **args) < table2_cost("mpr", **args)
    assert table2_cost("mpr", g=1, t=1, size_bytes=1e6, b1=1e9, b2=1e9) == 0.0


def test_backend_rules_follow_the_paper():
    a100 = [GPU(0, 80, ("MIG-a", "MIG-b"))]
    assert choose_backend("train", a100) == "mps"
    assert choose_backend("serve", a100) == "mig"
    assert choose_backend("serve", [GPU(0, 70)]) == "mps"
    assert choose_backend("train", []) == "cpu"
    with pytest.raises(GMIError, match="'mps' is unavailable on this machine"):
        choose_backend("train", [], "mps")
    with pytest.raises(GMIError, match="'mig' is unavailable"):
        choose_backend("serve", [GPU(0, 70)], "mig")


def test_cpu_shares_split_this_process_cores():
    cores = sorted(os.sched_getaffinity(0))
    shares = plan_shares(Layout.parse("2x2"), "cpu", [])
    assert [s.device for s in shares] == [0, 0, 1, 1]
    assert all(set(s.cores) <= set(cores) and s.threads == len(s.cores) >= 1 for s in shares)
    if len(cores) >= 4:
        assert len({c for s in shares for c in s.cores}) == 4
    assert shares[0].environment()["OMP_NUM_THREADS"] == str(shares[0].threads)


def test_mps_and_mig_shares():
    gpus = [GPU(0, 80, ("MIG-x", "MIG-y")), GPU(1, 80, ("MIG-z",))]
    mps = plan_shares(Layout.parse("2,1"), "mps", gpus)
    assert [s.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for s in mps] == ["50", "50", "100"]
    mig = plan_shares(Layout.parse("2,1"), "mig", gpus)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in mig] == ["MIG-x", "MIG-y", "MIG-z"]
    with pytest.raises(GMIError, match="1 MIG instance"):
        plan_shares(Layout.parse("1,2"), "mig", gpus)


def test_nccl_only_for_mps_groups_with_one_instance_per_gpu():
    mpl = Layout.parse("2x2").mpl  # devices: (0, 1), (2, 3)
    backends = {ranks: group_backend(ranks, mpl, "mps") for ranks in strategy_groups(mpl)}
    assert backends[(0, 2)] == backends[(1, 3)] == "nccl"  # MRR rings and HAR leaders
    assert backends[(0, 1)] == backends[(0, 1, 2, 3)] == "gloo"  # two ranks share a GPU
    assert {group_backend(ranks, mpl, "mig") for ranks in backends} == {"gloo"}
    assert {group_backend(ranks, mpl, "cpu") for ranks in backends} == {"gloo"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a CPU-only torch")
def test_a_gpu_share_without_cuda_says_so():
    share = plan_shares(Layout.parse("1x2"), "mps", [GPU(0, 80)])[1]
    assert torch_device(plan_shares(Layout.parse("1x1"), "cpu", [])[0]).type == "cpu"
    with pytest.raises(GMIError, match="instance 1 has a GPU share .*sees no CUDA device"):
        torch_device(share)
