"""One torch thread in every superopt test process, as ``optimize`` and the benchmarks run.

Under ``pytest -n 2`` two workers share the machine's two cores; with torch's
default of one thread per core, their intra-op threads wait on each other and
the inference tests, which time many small graphs, run 50-150 times slower
(minutes instead of seconds) unless a test in the worker has already called
``optimize`` (which sets one thread).
"""
import torch

torch.set_num_threads(1)
