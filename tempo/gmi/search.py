"""Workload-aware GMI selection (Algorithm 2): profile, stop at saturation, pick the best.

For each number of instances per device (most first) the search profiles
growing numbers of environments per instance. A point that fails is skipped;
once throughput gains per unit of extra memory (``Sat``) fall below ``alpha``
the instance count is saturated and the search moves on. Each runnable point's
whole-system throughput is projected and the best is returned.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tempo.gmi.errors import GMIError, InstanceFailure
from tempo.gmi.layout import Layout
from tempo.gmi.ppo import PPOConfig
from tempo.gmi.train_run import TrainJob, train


@dataclass(frozen=True)
class Point:
    """One profiled configuration: per-instance throughput and memory."""

    instances: int          # GMIs per device
    num_envs: int           # environments per instance
    runnable: bool
    top: float = 0.0        # environment steps per second of one instance
    mem_mb: float = 0.0     # peak memory of one instance
    sat: float | None = None
    projected: float | None = None
    note: str = ""


Profile = Callable[[int, int], Point]


def algorithm2(profile: Profile, instance_counts: Sequence[int], env_counts: Sequence[int],
               num_devices: int, alpha: float = 0.05) -> tuple[Point | None, list[Point]]:
    """The paper's Algorithm 2 over ``profile(instances, num_envs)``; returns (best, all points)."""
    best, max_top, points = None, float("-inf"), []
    for instances in sorted(instance_counts, reverse=True):
        pre_top = pre_mem = 0.0
        for num_envs in sorted(env_counts):
            point = profile(instances, num_envs)
            if not point.runnable:
                points.append(point)
                continue
            if pre_top == pre_mem == 0:
                pre_top, pre_mem = point.top, point.mem_mb
                point = _project(point, instances, num_devices, None)
            else:
                r_top = (point.top - pre_top) / pre_top
                r_mem = (point.mem_mb - pre_mem) / pre_mem
                sat = r_top / r_mem if r_mem > 0 else float("inf")
                pre_top, pre_mem = point.top, point.mem_mb
                if sat < alpha:
                    points.append(Point(**{**point.__dict__, "sat": sat, "note": "saturated"}))
                    break
                point = _project(point, instances, num_devices, sat)
            points.append(point)
            if point.projected > max_top:
                best, max_top = point, point.projected
    return best, points


def _project(point: Point, instances: int, num_devices: int, sat: float | None) -> Point:
    """estimate(): every device runs ``instances`` instances like the profiled one."""
    return Point(**{**point.__dict__, "sat": sat, "projected": point.top * instances * num_devices})


def measured_profile(env_id: str, seconds: float, mem_budget_mb: float | None = None,
                     seed: int = 0) -> Profile:
    """Profile by training: run ``instances`` PPO instances on one device for ``seconds``."""
    def profile(instances: int, num_envs: int) -> Point:
        job = TrainJob(Layout((instances,)), "ppo", "auto", seconds,
                       config=PPOConfig(env_id=env_id, num_envs=num_envs, seed=seed))
        try:
            summary = train(job, echo=lambda line: None)
        except InstanceFailure as exc:
            return Point(instances, num_envs, False, note=str(exc))
        mem = summary["max_rss_mb"]
        if mem_budget_mb is not None and mem * instances > mem_budget_mb:
            return Point(instances, num_envs, False, mem_mb=mem,
                         note=f"{mem * instances:.0f} MB over the {mem_budget_mb:.0f} MB budget")
        return Point(instances, num_envs, True, summary["steps_per_second"] / instances, mem)
    return profile


def check_candidates(instance_counts: Sequence[int], env_counts: Sequence[int]) -> None:
    if not instance_counts or not env_counts or min(*instance_counts, *env_counts) < 1:
        raise GMIError(f"search needs positive instance and environment counts, got "
                       f"{list(instance_counts)} and {list(env_counts)}")
