"""Algorithm 2 on a known throughput/memory curve, and the CLI's argument errors."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tempo.gmi import cli
from tempo.gmi.search import Point, algorithm2


def curve(instances: int, num_envs: int) -> Point:
    """Throughput saturates at 32 envs; more than 256 envs per device do not fit."""
    if instances * num_envs > 256:
        return Point(instances, num_envs, False, note="out of memory")
    return Point(instances, num_envs, True, min(num_envs, 32) * 100 / math.sqrt(instances),
                 100 + num_envs)


def test_algorithm2_skips_unrunnable_points_and_stops_at_saturation():
    best, points = algorithm2(curve, [4, 2, 1], [8, 32, 128], num_devices=2)
    assert (best.instances, best.num_envs) == (4, 32)
    assert best.projected == pytest.approx(1600 * 4 * 2)
    by_key = {(p.instances, p.num_envs): p for p in points}
    assert not by_key[(4, 128)].runnable
    assert by_key[(2, 128)].note == "saturated" and by_key[(2, 128)].sat == 0
    assert by_key[(2, 32)].sat == pytest.approx(3 / (24 / 108))
    assert [(p.instances, p.num_envs) for p in points][:3] == [(4, 8), (4, 32), (4, 128)]


def test_algorithm2_with_nothing_runnable():
    best, points = algorithm2(lambda i, e: Point(i, e, False), [2], [8], num_devices=1)
    assert best is None and len(points) == 1


@pytest.mark.parametrize("argv, message", [
    (["train", "--algo", "dqn", "--layout", "1x1"], "unknown algorithm 'dqn'"),
    (["train", "--algo", "a3c", "--layout", "1x1"], "a3c needs at least one agent"),
    (["train", "--layout", "3,2", "--strategy", "mrr"], "multi-ring reduction (mrr) needs"),
    (["train", "--seconds", "0"], "--seconds must be > 0"),
    (["train", "--layout", "1x1", "--num-envs", "0"], "num_envs must be >= 1, got 0"),
    (["search", "--envs", "8,x"], "--envs must be a comma list"),
    (["bench-reduce", "--layout", "2x2", "--strategy", "ring"], "unknown reduction strategy"),
])
def test_bad_arguments_are_reported_without_starting_instances(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tempo gmi: error:") and message in err


@pytest.mark.slow
def test_search_command_profiles_and_chooses():
    done = subprocess.run([sys.executable, "-m", "tempo", "gmi", "search", "--env", "CartPole-v1",
                           "--instances", "2,1", "--envs", "4,8", "--profile-seconds", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    profiled = [line for line in done.stdout.splitlines() if "profiled" in line]
    assert len(profiled) == 4 and profiled[0].lstrip().startswith("profiled 2 instance(s)")
    assert "choice:" in done.stdout
