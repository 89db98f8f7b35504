"""Policy-gradient losses written with recurrent tensors."""
from __future__ import annotations

from typing import NamedTuple

from tempo.api.functional import maximum, minimum
from tempo.api.rt import RecurrentTensor as RT


def masked_mean(x: RT, mask: RT) -> RT:
    """``sum(x * mask) / sum(mask)`` over every spatial element."""
    return (x * mask).sum() / mask.sum()


def ppo_clip_loss(logp: RT, logp_old: RT, advantage: RT, value: RT, target: RT, entropy: RT,
                  mask: RT, clip: float = 0.2, value_coef: float = 0.5,
                  entropy_coef: float = 0.0) -> RT:
    """PPO's loss (Schulman et al. 2017): the clipped surrogate, the value error and an entropy bonus.

    ``advantage`` is normalised to zero mean and unit deviation over the
    ``mask``-ed steps; ``ratio = exp(logp - logp_old)`` is clipped to
    ``[1 - clip, 1 + clip]``; the surrogate is ``max(-adv * ratio,
    -adv * clipped)``; the result is the masked mean of
    ``surrogate + value_coef * (value - target)**2 - entropy_coef * entropy``.
    ``logp_old``, ``advantage`` and ``target`` are constants (detach them).
    """
    mean = masked_mean(advantage, mask)
    spread = masked_mean((advantage - mean) ** 2.0, mask).sqrt() + 1e-8
    adv = (advantage - mean) / spread
    ratio = (logp - logp_old).exp()
    clipped = minimum(maximum(ratio, 1.0 - clip), 1.0 + clip)
    surrogate = maximum(-adv * ratio, -adv * clipped)
    per_step = surrogate + value_coef * (value - target) ** 2.0 - entropy_coef * entropy
    return masked_mean(per_step, mask)


class PPOLoss(NamedTuple):
    """CleanRL's PPO loss on one minibatch and the statistics it logs (all scalars)."""

    loss: RT
    policy_loss: RT
    value_loss: RT
    entropy: RT
    approx_kl: RT
    clipfrac: RT


def ppo_minibatch_loss(logp: RT, logp_old: RT, advantage: RT, value: RT, value_old: RT, returns: RT,
                       entropy: RT, clip_coef: float = 0.2, clip_vloss: bool = True, ent_coef: float = 0.01,
                       vf_coef: float = 0.5, norm_adv: bool = True) -> PPOLoss:
    """PPO's loss over a minibatch of samples (CleanRL ``ppo.py``): every argument is ``(S,)``.

    Advantages are normalised over the minibatch (mean 0, unbiased std 1);
    the surrogate is ``max(-adv * ratio, -adv * clip(ratio, 1 - c, 1 + c))``;
    the value loss is ``0.5 * (value - returns)**2``, or with ``clip_vloss``
    the larger of it and the loss of ``value_old + clip(value - value_old,
    -c, c)``; ``loss = policy_loss - ent_coef * entropy + vf_coef * value_loss``.
    ``approx_kl`` is ``mean((ratio - 1) - log ratio)`` and ``clipfrac`` the
    share of ratios outside the clip range (both without gradient).
    """
    if norm_adv:
        n = float(advantage.shape[0])
        mean = advantage.mean()
        std = (((advantage - mean) ** 2.0).sum() / max(n - 1.0, 1.0)).sqrt()
        advantage = (advantage - mean) / (std + 1e-8)
    log_ratio = logp - logp_old
    ratio = log_ratio.exp()
    clipped = minimum(maximum(ratio, 1.0 - clip_coef), 1.0 + clip_coef)
    policy_loss = maximum(-advantage * ratio, -advantage * clipped).mean()
    value_error = (value - returns) ** 2.0
    if clip_vloss:
        moved = value_old + minimum(maximum(value - value_old, -clip_coef), clip_coef)
        value_error = maximum(value_error, (moved - returns) ** 2.0)
    value_loss = 0.5 * value_error.mean()
    entropy = entropy.mean()
    loss = policy_loss - ent_coef * entropy + vf_coef * value_loss
    ratio_seen = ratio.detach()
    approx_kl = ((ratio_seen - 1.0) - log_ratio.detach()).mean()
    clipfrac = ((ratio_seen - 1.0).abs() > clip_coef).cast("float32").mean()
    return PPOLoss(loss, policy_loss, value_loss, entropy, approx_kl, clipfrac)
