"""The baselines' settings: one dataclass per algorithm, each field documented (the CLI's help)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PPOArgs:
    """PPO's settings, shared by the torch and JAX baselines (same defaults as ``examples/ppo_fixed_horizon.py``)."""

    seed: int = 0
    """seeds the network initialisation, the action sampling and the initial states"""
    iterations: int = 5
    """batches of episodes (each trained on for `epochs` updates)"""
    epochs: int = 1
    """full-batch updates per batch of episodes"""
    envs: int = 512
    """environments (episodes per batch)"""
    steps: int = 250
    """timesteps per episode (the episode length)"""
    obs_shape: str = "3,4,4"
    """observation shape, comma-separated"""
    num_actions: int = 4
    """discrete actions (and hidden states) of the environment"""
    hidden: int = 64
    """width of the hidden layers"""
    layers: int = 2
    """hidden layers of the actor and of the critic"""
    gamma: float = 0.99
    """discount factor"""
    lam: float = 0.95
    """GAE lambda"""
    clip: float = 0.2
    """PPO clip range: the ratio is clipped to [1 - clip, 1 + clip]"""
    lr: float = 0.003
    """Adam learning rate, annealed linearly to 0 over the updates"""
    value_coef: float = 0.5
    """weight of the critic's squared error"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus"""
    max_grad_norm: float = 0.5
    """the gradients' global norm is clipped to this"""


@dataclass
class ReinforceArgs:
    """REINFORCE's settings, shared by the torch and JAX baselines (same defaults as ``examples/reinforce.py``)."""

    seed: int = 0
    """seeds the network initialisation, the action sampling and the initial states"""
    iterations: int = 5
    """training iterations (one batch of episodes each)"""
    envs: int = 512
    """environments (episodes per batch)"""
    steps: int = 250
    """timesteps per episode (the episode length)"""
    obs_shape: str = "3,4,4"
    """observation shape, comma-separated"""
    num_actions: int = 4
    """discrete actions (and hidden states) of the environment"""
    hidden: int = 64
    """width of the hidden layers"""
    layers: int = 2
    """hidden layers of the policy"""
    gamma: float = 0.99
    """discount factor"""
    lr: float = 0.01
    """Adam learning rate"""
    lr_decay: float = 0.995
    """learning rate multiplier per iteration: lr * lr_decay ** i"""
