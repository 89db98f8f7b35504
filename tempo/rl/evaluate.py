"""Evaluate a saved policy: ``tpo.rl.evaluate`` and ``tempo rl evaluate``.

A policy file is what ``examples/ppo.py --save-model`` writes: a
safetensors file with the actor MLP's layers (``actor.layers.<k>.weight``
of shape (in, out) and ``actor.layers.<k>.bias``, tanh between them), the
critic's, and for Box actions ``actor_logstd``. The actor runs on the host
in NumPy against gymnasium environments, one episode after another.

    tempo rl evaluate runs/CartPole-v1__ppo__1__1700000000/ppo.safetensors --env-id CartPole-v1 --episodes 10
"""
from __future__ import annotations

import argparse
import re
from typing import Sequence

import numpy as np

from tempo.api.checkpoint import load_checkpoint
from tempo.errors import TempoError, user_site


def actor_layers(tensors: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """The actor's ``(weight, bias)`` pairs in order, or a TempoError when the file holds no actor."""
    found = sorted({int(m.group(1)) for name in tensors if (m := re.fullmatch(r"actor\.layers\.(\d+)\.weight", name))})
    if not found or found != list(range(len(found))):
        raise TempoError("the file holds no actor (actor.layers.<k>.weight): save it with examples/ppo.py "
                         "--save-model", user_site())
    return [(np.asarray(tensors[f"actor.layers.{k}.weight"]), np.asarray(tensors[f"actor.layers.{k}.bias"]))
            for k in found]


def act(layers, obs: np.ndarray, log_std: np.ndarray | None, sample: bool, rng: np.random.Generator,
        action_space) -> np.ndarray | int:
    """The actor's action for one observation: the mode, or a sample with ``sample``."""
    import gymnasium  # only where a gymnasium environment is evaluated

    x = np.asarray(obs, dtype=np.float32).reshape(-1)
    for k, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        x = np.tanh(x) if k < len(layers) - 1 else x
    if isinstance(action_space, gymnasium.spaces.Discrete):
        if not sample:
            return int(np.argmax(x))
        p = np.exp(x - x.max())
        return int(rng.choice(len(p), p=p / p.sum()))
    mean = x.reshape(action_space.shape)
    action = mean + np.exp(log_std).reshape(mean.shape) * rng.standard_normal(mean.shape) if sample else mean
    return np.clip(action, action_space.low, action_space.high).astype(action_space.dtype)


def evaluate(path: str, env_id: str, episodes: int = 10, deterministic: bool = True, seed: int = 0) -> list[float]:
    """Run the policy saved at ``path`` for ``episodes`` episodes of ``env_id``; returns their returns.

    ``deterministic``: the mode of the action distribution (argmax, or the
    mean for Box actions); else actions are sampled (Box actions clipped to
    the bounds). Episode ``k`` is reset with seed ``seed + k``.
    """
    if not isinstance(episodes, int) or episodes < 1:
        raise TempoError(f"episodes must be a positive int, got {episodes!r}", user_site())
    import gymnasium  # only where a gymnasium environment is evaluated

    tensors = load_checkpoint(path).tensors
    layers, log_std = actor_layers(tensors), tensors.get("actor_logstd")
    env, rng = gymnasium.make(env_id), np.random.default_rng(seed)
    if isinstance(env.action_space, gymnasium.spaces.Box) and log_std is None and not deterministic:
        raise TempoError(f"{path} holds no actor_logstd, so it cannot sample Box actions", user_site())
    n_in = int(np.prod(env.observation_space.shape))
    if layers[0][0].shape[0] != n_in:
        raise TempoError(f"the policy takes {layers[0][0].shape[0]} observation values, {env_id} gives {n_in}",
                         user_site())
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(layers, obs, log_std, not deterministic, rng,
                                                                 env.action_space))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return returns


def main(argv: Sequence[str] | None = None) -> int:
    """``tempo rl evaluate FILE --env-id ID [--episodes N] [--sample] [--seed S]``: print the mean return."""
    parser = argparse.ArgumentParser(prog="tempo rl", description="Reinforcement-learning tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    ev = commands.add_parser("evaluate", help="run a saved policy for N episodes and print the mean return")
    ev.add_argument("path", help="a policy file written by examples/ppo.py --save-model")
    ev.add_argument("--env-id", required=True, help="the gymnasium environment id")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to run (default: 10)")
    ev.add_argument("--sample", action="store_true", help="sample actions instead of taking the mode")
    ev.add_argument("--seed", type=int, default=0, help="episode k resets with seed + k (default: 0)")
    ns = parser.parse_args(argv)
    try:
        returns = evaluate(ns.path, ns.env_id, ns.episodes, not ns.sample, ns.seed)
    except TempoError as exc:
        print(f"tempo rl: error: {exc}")
        return 1
    print(f"mean_return={np.mean(returns):.2f} episodes={len(returns)} std={np.std(returns):.2f}")
    return 0
