"""GMI-DRL: many RL instances per device with layout-aware gradient reduction.

Instances are processes with a resource share (CPU core sets, CUDA MPS thread
percentages or MIG slices), started and watched by :class:`GMIManager`.
Synchronous training reduces gradients with multi-process, multi-ring or
hierarchical reduction (Algorithm 1 picks one from the layout); asynchronous
training moves experience through channels. ``tempo gmi --help`` lists the
commands.
"""
from tempo.gmi.errors import GMIError, InstanceFailure
from tempo.gmi.layout import Layout
from tempo.gmi.strategy import select_strategy

__all__ = ["GMIError", "InstanceFailure", "Layout", "select_strategy"]
