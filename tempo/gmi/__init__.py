"""GMI-DRL: many RL instances per device with layout-aware gradient reduction.

Instances are processes with a resource share (CPU core sets, CUDA MPS thread
percentages or MIG slices), started and watched by :class:`GMIManager`, each
running a :class:`Program` (a routine and the DRL roles it holds).
Synchronous training reduces gradients with multi-process, multi-ring or
hierarchical reduction (Algorithm 1, :func:`select_strategy`, picks one from
the layout); asynchronous training moves experience through channels.
``tempo gmi --help`` lists the commands; nothing here imports torch until an
instance runs.
"""
from tempo.gmi.errors import GMIError, InstanceFailure
from tempo.gmi.instance import Program
from tempo.gmi.layout import Layout
from tempo.gmi.manager import GMIManager
from tempo.gmi.strategy import select_strategy

__all__ = ["GMIError", "GMIManager", "InstanceFailure", "Layout", "Program", "select_strategy"]
