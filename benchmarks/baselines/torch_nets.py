"""The torch baselines' network: ``tpo.nn.MLP`` written with torch.nn."""
from __future__ import annotations

import math

from torch import nn


def mlp(sizes: list[int], last_init_scale: float = 1.0) -> nn.Sequential:
    """tpo.nn.MLP: tanh between the layers, weights and biases U(-s/sqrt(in), s/sqrt(in))."""
    layers = []
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        linear = nn.Linear(n_in, n_out)
        bound = (last_init_scale if k == len(sizes) - 2 else 1.0) / math.sqrt(n_in)
        nn.init.uniform_(linear.weight, -bound, bound)
        nn.init.uniform_(linear.bias, -bound, bound)
        layers += [linear, nn.Tanh()]
    return nn.Sequential(*layers[:-1])
