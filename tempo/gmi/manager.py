"""The GMI manager: start instances as processes, watch them, report failures.

Instances are started with ``torch.multiprocessing`` (spawn), each with its
resource share in its environment before its interpreter starts. The manager
forwards progress reports to a callback; when an instance dies it names the
instance, its roles and its exit cause, stops the others and raises
:class:`InstanceFailure`.
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import tempfile
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import wait

from tempo.gmi.atomic import write_json
from tempo.gmi.errors import GMIError, InstanceFailure
from tempo.gmi.instance import (ROUTINES, InstanceSpec, Program, error_path, instance_main,
                                routine_name, trainer_mpl)
from tempo.gmi.layout import Layout
from tempo.gmi.resources import choose_backend, plan_shares, probe_gpus, start_mps_daemon
from tempo.gmi.shm import remove_shared

INSTANCES = "instances.json"  # in the run directory: id, pid, roles and device of each instance
POLL_S = 0.05
STOP_GRACE_S = 5.0


class GMIManager:
    """Runs one program per instance of a layout and gathers their reports.

    ``max_threads`` caps each instance's torch/OpenMP threads below its core count.
    """

    def __init__(self, layout: Layout, programs: list[Program], *, backend: str = "auto",
                 purpose: str = "train", run_dir: str | None = None, timeout_s: float = 120.0,
                 on_report: Callable[[dict], None] | None = None, max_threads: int | None = None):
        for program in programs:
            if isinstance(program.routine, str) and program.routine not in ROUTINES:
                raise GMIError(f"unknown routine {program.routine!r}: use a Role subclass or "
                               f"one of {', '.join(ROUTINES)}")
        if len(programs) != layout.world_size:
            raise GMIError(f"layout {layout} has {layout.world_size} instances but "
                           f"{len(programs)} programs were given")
        self.layout = layout
        self.programs = programs
        gpus = probe_gpus()
        self.backend = choose_backend(purpose, gpus, backend)
        self.shares = plan_shares(layout, self.backend, gpus)
        if max_threads is not None:
            self.shares = [replace(share, threads=min(share.threads, max_threads))
                           for share in self.shares]
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="tempo-gmi-")
        os.makedirs(self.run_dir, exist_ok=True)
        self.run_id = uuid.uuid4().hex[:12]
        self.timeout_s = timeout_s
        self.on_report = on_report or (lambda event: None)
        self.reports: list[dict] = []

    def specs(self) -> list[InstanceSpec]:
        init = f"tcp://127.0.0.1:{_free_port()}"
        reduce_mpl = trainer_mpl(self.layout, self.programs)
        return [InstanceSpec(gmi_id, program, share, self.layout, self.run_dir, self.run_id,
                             init, self.timeout_s, reduce_mpl)
                for gmi_id, (program, share) in enumerate(zip(self.programs, self.shares))]

    def run(self) -> list[dict]:
        """Start every instance, wait for all, return every report; raise on a failure."""
        import torch.multiprocessing as mp

        extra_env = {}
        if self.backend == "mps":
            pipe = os.path.join(self.run_dir, "mps")
            start_mps_daemon(pipe)
            extra_env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
        context = mp.get_context("spawn")
        reports = context.Queue()
        specs = self.specs()
        processes = []
        try:
            for spec in specs:
                with _environment({**spec.share.environment(), **extra_env}):
                    process = context.Process(target=instance_main, args=(spec, reports),
                                              name=f"gmi-{spec.gmi_id}", daemon=True)
                    process.start()
                processes.append(process)
            write_json(os.path.join(self.run_dir, INSTANCES), [
                {"gmi_id": spec.gmi_id, "pid": process.pid, "roles": list(spec.program.kinds),
                 "routine": routine_name(spec.program.routine), "device": spec.share.device}
                for spec, process in zip(specs, processes)])
            self._watch(specs, processes, reports)
        finally:
            _stop(processes)
            self._drain(reports)
            remove_shared(self.run_id, self.run_dir)
        return self.reports

    def _watch(self, specs, processes, reports) -> None:
        while True:
            self._drain(reports)
            wait([p.sentinel for p in processes if p.exitcode is None], timeout=POLL_S)
            failed = [(spec, p.exitcode) for spec, p in zip(specs, processes)
                      if p.exitcode not in (None, 0)]
            if failed:
                self._drain(reports)
                raise InstanceFailure(self._failure_message(failed))
            if all(p.exitcode == 0 for p in processes):
                return

    def _failure_message(self, failed: list[tuple[InstanceSpec, int]]) -> str:
        """Name the instance that died first; peers it took down are listed after it.

        An instance killed by a signal wrote nothing, so it comes first; among
        those that raised, the oldest error file wins.
        """
        def order(item):
            path = error_path(self.run_dir, item[0].gmi_id)
            return os.path.getmtime(path) if os.path.exists(path) else float("-inf")

        first, *others = sorted(failed, key=order)
        message = f"{first[0].describe()} died: {self._cause(*first)}"
        for spec, exitcode in others:
            message += f"\n  then instance {spec.gmi_id} failed: {self._cause(spec, exitcode)}"
        return message

    def _drain(self, reports) -> None:
        while True:
            try:
                event = reports.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            self.reports.append(event)
            self.on_report(event)

    def _cause(self, spec: InstanceSpec, exitcode: int) -> str:
        path = error_path(self.run_dir, spec.gmi_id)
        if os.path.exists(path):
            with open(path) as handle:
                return handle.read()
        if exitcode < 0:
            return f"killed by {signal.Signals(-exitcode).name}"
        return f"exit code {exitcode}"


def _stop(processes) -> None:
    """Terminate the live instances, then kill those that ignore it."""
    for process in processes:
        if process.exitcode is None:
            process.terminate()
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.exitcode is None:
            process.kill()
            process.join()


@contextmanager
def _environment(values: dict[str, str]):
    """Set environment variables for the duration of a process start."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
