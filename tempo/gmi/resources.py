"""Resource shares for instances: CPU core sets, CUDA MPS thread shares, MIG slices.

The backend follows the paper's rules (section 3): training uses MPS (cheaper
communication between instances), serving uses MIG (stronger isolation) where
the GPU has it (``sm_80`` and newer), GPUs of ``sm_70``-``sm_79`` have MPS only,
and a machine without an NVIDIA GPU splits its CPU cores. A share is plain data
applied in the instance process before torch loads.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from tempo.gmi.errors import GMIError
from tempo.gmi.layout import Layout

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class GPU:
    """One NVIDIA GPU as ``nvidia-smi`` reports it."""

    index: int
    compute_capability: int  # 80 for sm_80
    mig_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResourceShare:
    """What one instance may use: a core set, environment variables, a thread count."""

    gmi_id: int
    device: int
    backend: str
    cores: tuple[int, ...] = ()
    threads: int = 1
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """Variables to set before the instance's torch loads."""
        threads = {name: str(self.threads) for name in THREAD_ENV}
        return {**threads, **self.env}

    def apply(self) -> None:
        """Pin this process to the share (call first thing in the instance)."""
        if self.cores:
            os.sched_setaffinity(0, self.cores)
        os.environ.update(self.environment())

    def describe(self) -> str:
        if self.backend == "cpu":
            return f"cores {list(self.cores)}, {self.threads} thread(s)"
        return ", ".join(f"{k}={v}" for k, v in sorted(self.env.items()))


def probe_gpus() -> list[GPU]:
    """The NVIDIA GPUs of this machine (empty without ``nvidia-smi``)."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = subprocess.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False)
    if query.returncode != 0:
        return []
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    migs = _mig_uuids(listing)
    gpus = []
    for line in query.stdout.strip().splitlines():
        index, cap = (part.strip() for part in line.split(","))
        major, minor = cap.split(".")
        gpus.append(GPU(int(index), int(major) * 10 + int(minor), tuple(migs.get(int(index), ()))))
    return gpus


def _mig_uuids(listing: str) -> dict[int, list[str]]:
    """MIG device UUIDs per GPU index from ``nvidia-smi -L`` output."""
    found: dict[int, list[str]] = {}
    gpu = -1
    for line in listing.splitlines():
        line = line.strip()
        if line.startswith("GPU "):
            gpu = int(line.split()[1].rstrip(":"))
        elif line.startswith("MIG ") and "UUID: " in line:
            found.setdefault(gpu, []).append(line.split("UUID: ")[1].rstrip(")"))
    return found


def choose_backend(purpose: str, gpus: list[GPU], requested: str = "auto") -> str:
    """The paper's backend rule; a :class:`GMIError` says why a requested one is unavailable."""
    if purpose not in ("train", "serve"):
        raise GMIError(f"unknown purpose {purpose!r}: use 'train' or 'serve'")
    if requested not in ("auto", *BACKENDS):
        raise GMIError(f"unknown GMI backend {requested!r}: use auto, {', '.join(BACKENDS)}")
    if requested == "cpu" or (requested == "auto" and not gpus):
        return "cpu"
    if not gpus:
        raise GMIError(f"GMI backend {requested!r} is unavailable on this machine: no NVIDIA GPU "
                       f"found (nvidia-smi missing or failing); use --backend cpu or auto")
    oldest = min(gpu.compute_capability for gpu in gpus)
    if oldest < 70:
        raise GMIError(f"GPU sm_{oldest} has no MPS thread shares (needs sm_70+); use --backend cpu")
    has_mig = oldest >= 80 and all(gpu.mig_uuids for gpu in gpus)
    if requested == "mig" and not has_mig:
        raise GMIError("GMI backend 'mig' is unavailable: it needs sm_80+ GPUs with MIG instances "
                       "already created (nvidia-smi mig -cgi ...)")
    if requested != "auto":
        return requested
    return "mig" if purpose == "serve" and has_mig else "mps"


def _cpu_shares(layout: Layout, gpus: list[GPU]) -> list[ResourceShare]:
    cores = sorted(os.sched_getaffinity(0))
    shares = []
    for device, ids in enumerate(layout.mpl):
        pool = _split(cores, layout.num_devices, device)
        for local, gmi_id in enumerate(ids):
            own = _split(pool, len(ids), local)
            shares.append(ResourceShare(gmi_id, device, "cpu", tuple(own), len(own)))
    return shares


def _split(items: list[int], parts: int, index: int) -> list[int]:
    """The ``index``-th of ``parts`` contiguous chunks; parts beyond the items share them."""
    if parts >= len(items):
        return [items[index % len(items)]]
    size, extra = divmod(len(items), parts)
    start = index * size + min(index, extra)
    return items[start:start + size + (index < extra)]


def _mps_shares(layout: Layout, gpus: list[GPU]) -> list[ResourceShare]:
    _check_devices(layout, gpus)
    shares = []
    for device, ids in enumerate(layout.mpl):
        percent = str(max(1, 100 // len(ids)))
        env = {"CUDA_VISIBLE_DEVICES": str(gpus[device].index),
               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": percent}
        shares.extend(ResourceShare(gmi_id, device, "mps", env=env) for gmi_id in ids)
    return shares


def _mig_shares(layout: Layout, gpus: list[GPU]) -> list[ResourceShare]:
    _check_devices(layout, gpus)
    shares = []
    for device, ids in enumerate(layout.mpl):
        slices = gpus[device].mig_uuids
        if len(slices) < len(ids):
            raise GMIError(f"GPU {gpus[device].index} has {len(slices)} MIG instance(s) but the "
                           f"layout puts {len(ids)} instances on it")
        shares.extend(ResourceShare(gmi_id, device, "mig", env={"CUDA_VISIBLE_DEVICES": uuid})
                      for gmi_id, uuid in zip(ids, slices))
    return shares


def _check_devices(layout: Layout, gpus: list[GPU]) -> None:
    if layout.num_devices > len(gpus):
        raise GMIError(f"layout {layout} needs {layout.num_devices} GPUs, this machine has {len(gpus)}")


# backend -> function building one share per instance
BACKENDS = {"cpu": _cpu_shares, "mps": _mps_shares, "mig": _mig_shares}


def plan_shares(layout: Layout, backend: str, gpus: list[GPU]) -> list[ResourceShare]:
    """One :class:`ResourceShare` per instance of ``layout``, in instance order."""
    return BACKENDS[backend](layout, gpus)


def start_mps_daemon(pipe_dir: str) -> None:
    """Start the MPS control daemon, or explain why it cannot be started here."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise GMIError("CUDA MPS is unavailable: nvidia-cuda-mps-control is not on PATH")
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_dir, "CUDA_MPS_LOG_DIRECTORY": pipe_dir}
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, check=False)
    if started.returncode != 0:
        raise GMIError(f"could not start the CUDA MPS daemon (not permitted here?): "
                       f"{started.stderr.strip() or started.returncode}")
