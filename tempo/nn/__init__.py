"""``tpo.nn``: parameters, layers, activations and distributions written with recurrent tensors."""
from tempo.nn.distributions import Categorical, DiagGaussianHead, Normal
from tempo.nn.functional import gelu, log_softmax, one_hot, relu, sigmoid, silu, softmax, tanh
from tempo.nn.layers import MLP, Embedding, LayerNorm, Linear, RMSNorm
from tempo.nn.module import Module, parameter

__all__ = ["Categorical", "DiagGaussianHead", "Embedding", "LayerNorm", "Linear", "MLP", "Module", "Normal", "RMSNorm", "gelu",
           "log_softmax", "one_hot", "parameter", "relu", "sigmoid", "silu", "softmax", "tanh"]
