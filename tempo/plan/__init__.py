"""The ExecutionPlan, between the schedule and the runtime (see :mod:`tempo.plan.execution`)."""
from tempo.plan.execution import ExecutionPlan, build

__all__ = ["ExecutionPlan", "build"]
