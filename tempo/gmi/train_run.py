"""Run a training job over a layout (the driver behind ``tempo gmi train``)."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import asdict, dataclass, field

from tempo.gmi.envs import make_envs
from tempo.gmi.errors import GMIError
from tempo.gmi.instance import Program, trainer_mpl
from tempo.gmi.launch import run_torchrun_instance, under_torchrun
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.ppo import PPOConfig
from tempo.gmi.progress import Progress
from tempo.gmi.strategy import resolve_strategy
from tempo.gmi.tempo_program import load_program, program_args

HOLISTIC = ("simulator", "agent", "trainer")


@dataclass
class TrainJob:
    """What to train, where, and for how long."""

    layout: Layout
    algo: str = "ppo"
    strategy: str = "auto"
    seconds: float = 10.0
    iterations: int = 0
    config: PPOConfig = field(default_factory=PPOConfig)
    backend: str = "auto"
    run_dir: str | None = None
    checkpoint_every: int = 0
    max_threads: int | None = None
    program: str | None = None  # algo "tempo": the Tempo program file every instance runs
    program_args: dict = field(default_factory=dict)  # its Args fields to override


def ppo_programs(job: TrainJob, strategy: str) -> list[Program]:
    """TCG_EX: every instance is a holistic training instance."""
    options = {"config": asdict(job.config), "strategy": strategy, "seconds": job.seconds,
               "iterations": job.iterations, "checkpoint_every": job.checkpoint_every}
    return [Program("ppo", HOLISTIC, options)] * job.layout.world_size


def a3c_split(layout: Layout) -> tuple[list[int], list[int]]:
    """TDG_EX: trainers take the last device (the last instance on a single device)."""
    if layout.world_size < 2:
        raise GMIError(f"a3c needs at least one agent and one trainer instance; layout {layout} "
                       f"has {layout.world_size}")
    trainers = list(layout.mpl[-1]) if layout.num_devices > 1 else [layout.world_size - 1]
    return [i for i in range(layout.world_size) if i not in trainers], trainers


def a3c_programs(job: TrainJob, strategy: str) -> list[Program]:
    """TDG_EX: agent instances (simulator + agent) feed trainer instances through channels."""
    agents, trainers = a3c_split(job.layout)
    options = {"config": asdict(job.config), "agents": agents, "trainers": trainers,
               "seconds": job.seconds, "checkpoint_every": job.checkpoint_every}
    return [Program("a3c-trainer", ("trainer",), options) if i in trainers
            else Program("a3c-agent", ("simulator", "agent"), options)
            for i in range(job.layout.world_size)]


def tempo_programs(job: TrainJob, strategy: str) -> list[Program]:
    """TCG_EX: every instance runs the same Tempo program as a data-parallel replica."""
    if job.program is None:
        raise GMIError("--algo tempo needs --program FILE (a Tempo program such as "
                       "examples/reinforce.py)")
    args_type, _ = load_program(job.program)
    fields = {f.name for f in dataclasses.fields(args_type)}
    passed = {"env": job.config.env_id, "seed": job.config.seed}
    overrides = {**{k: v for k, v in passed.items() if k in fields}, **job.program_args}
    program_args(args_type, overrides)  # bad arguments fail here, not in an instance
    options = {"path": os.path.abspath(job.program), "overrides": overrides, "strategy": strategy}
    return [Program("tempo", HOLISTIC, options)] * job.layout.world_size


# algorithm -> (builds one program per instance, the layout template, gradients reduced?)
ALGORITHMS = {"ppo": (ppo_programs, "TCG_EX", True), "a3c": (a3c_programs, "TDG_EX", False),
              "tempo": (tempo_programs, "TCG_EX", True)}


def train(job: TrainJob, echo=print) -> dict:
    """Train; print progress lines; return the summary (steps/s, mean return, run dir)."""
    if job.algo not in ALGORITHMS:
        raise GMIError(f"unknown algorithm {job.algo!r}: use {', '.join(ALGORITHMS)}")
    if job.algo != "tempo":  # a Tempo program makes its own environments
        make_envs(job.config.env_id, 1).close()  # a bad environment id fails here, not in an instance
    build, template, reduces = ALGORITHMS[job.algo]
    strategy = (resolve_strategy(job.strategy, trainer_mpl(job.layout, build(job, "mpr")))
                if reduces else "none (trainers update shared weights in host memory)")
    programs = build(job, strategy)
    if under_torchrun():
        return _train_torchrun(job, programs, strategy, template, echo)
    progress = Progress(echo=echo)
    manager = GMIManager(job.layout, programs, backend=job.backend, run_dir=job.run_dir,
                         on_report=progress, max_threads=job.max_threads)
    echo(f"layout {job.layout} ({template}, {job.layout.world_size} instances, "
         f"{manager.backend} backend), strategy {strategy}")
    for share in manager.shares:
        echo(f"  instance {share.gmi_id}: {'+'.join(programs[share.gmi_id].kinds)} on device "
             f"{share.device}, {share.describe()}")
    manager.run()
    echo(progress.line())
    outputs = "instance summaries" if job.algo == "tempo" else "checkpoint"
    echo(f"done: {progress.steps} steps, {progress.steps_per_second:.0f} steps/s, "
         f"{outputs} in {manager.run_dir}")
    return {**progress.summary(), "layout": str(job.layout), "strategy": strategy,
            "template": template, "backend": manager.backend, "run_dir": manager.run_dir}


def _train_torchrun(job: TrainJob, programs: list[Program], strategy: str, template: str,
                    echo) -> dict:
    """This worker's instance of a torchrun job; worker 0 prints its own progress."""
    first = os.environ["RANK"] == "0"
    shown = echo if first else (lambda line: None)
    progress = Progress(echo=lambda line: shown(f"instance 0: {line}"))
    run_dir = job.run_dir or tempfile.mkdtemp(prefix="tempo-gmi-")
    shown(f"layout {job.layout} ({template}, {job.layout.world_size} torchrun workers), "
          f"strategy {strategy}")
    run_torchrun_instance(job.layout, programs, run_dir, progress, job.backend,
                          max_threads=job.max_threads)
    shown(f"instance 0: {progress.line()}")
    shown(f"done: checkpoint in {run_dir}")
    return {**progress.summary(), "layout": str(job.layout), "strategy": strategy,
            "template": template, "backend": "torchrun", "run_dir": run_dir}
