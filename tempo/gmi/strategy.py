"""Choosing a gradient-reduction strategy (Algorithm 1) and its cost (Table 2).

No torch here: the CLI and the search use these before any instance starts.
A layout is given as the GMI-to-device mapping list ``mpl`` (instance ids per
device).
"""
from __future__ import annotations

from tempo.gmi.errors import GMIError

STRATEGY_NAMES = {"mpr": "multi-process reduction", "mrr": "multi-ring reduction",
                  "har": "hierarchical reduction"}


def select_strategy(mpl) -> str:
    """Algorithm 1: the strategy for a GMI-to-device mapping list."""
    if len(mpl) <= 1:
        return "mpr"
    per_device = {len(ids) for ids in mpl}
    if len(per_device) > 1:
        return "har"
    if per_device.pop() > len(mpl):
        return "har"
    return "mrr"


def check_strategy(name: str, mpl) -> None:
    """Raise a :class:`GMIError` when strategy ``name`` cannot run on layout ``mpl``."""
    if name not in STRATEGY_NAMES:
        raise GMIError(f"unknown reduction strategy {name!r}: use auto, {', '.join(STRATEGY_NAMES)}")
    if name != "mrr":
        return
    per_device = {len(ids) for ids in mpl}
    if len(per_device) > 1:
        raise GMIError("multi-ring reduction (mrr) needs the same number of instances on every "
                       f"device, got {[len(ids) for ids in mpl]}; use har or mpr")
    if per_device.pop() > len(mpl):
        raise GMIError(f"multi-ring reduction (mrr) needs at most as many instances per device as "
                       f"devices ({len(mpl)}), got {len(mpl[0])}; use har or mpr")


def resolve_strategy(name: str, mpl) -> str:
    """``auto`` becomes Algorithm 1's choice; other names are checked against the layout."""
    chosen = select_strategy(mpl) if name == "auto" else name
    check_strategy(chosen, mpl)
    return chosen


def strategy_groups(mpl) -> list[tuple[int, ...]]:
    """Every process group (of two or more instances) the strategies use on ``mpl``."""
    everyone = tuple(r for ids in mpl for r in ids)
    groups = [everyone, *(tuple(ids) for ids in mpl), tuple(ids[0] for ids in mpl)]
    if len({len(ids) for ids in mpl}) == 1 and len(mpl[0]) <= len(mpl):
        rings = [tuple(ids[local] for ids in mpl) for local in range(len(mpl[0]))]
        groups += [*rings, tuple(mpl[r][r] for r in range(len(mpl[0])))]
    unique = dict.fromkeys(group for group in groups if len(group) > 1)
    return list(unique)


def group_backend(ranks, mpl, share_backend: str) -> str:
    """The ``torch.distributed`` backend of the process group over ``ranks``.

    NCCL when the instances compute on whole GPUs through MPS and the group has
    one instance per GPU (MRR's rings, HAR's leaders). NCCL supports neither two
    ranks on one GPU nor MIG slices (no CUDA IPC or peer access between them),
    so every other group, and every group on CPU shares, runs gloo over host
    memory.
    """
    if share_backend != "mps":
        return "gloo"
    device_of = {gmi_id: device for device, ids in enumerate(mpl) for gmi_id in ids}
    devices = [device_of[gmi_id] for gmi_id in ranks]
    return "nccl" if len(set(devices)) == len(devices) else "gloo"


def table2_cost(name: str, g: int, t: int, size_bytes: float, b1: float, b2: float) -> float:
    """Table 2's time for reducing ``size_bytes`` with ``g`` devices of ``t`` instances.

    ``b1`` is the inter-instance (host shared memory) bandwidth, ``b2`` the
    collective-library bandwidth, both in bytes per second.
    """
    mp = size_bytes
    if name == "mpr":
        return 2 * (g * t - 1) * mp / (g * t * b1)
    if name == "mrr":
        return 2 * (g - 1) * (t + 1) * mp / (g * b2)
    if name == "har":
        return 2 * (g - 1) * mp / (g * b2) + 2 * (t - 1) * mp / (t * b1)
    raise GMIError(f"no Table 2 cost for strategy {name!r}")
