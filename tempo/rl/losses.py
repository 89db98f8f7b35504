"""Policy-gradient losses written with recurrent tensors."""
from __future__ import annotations

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
