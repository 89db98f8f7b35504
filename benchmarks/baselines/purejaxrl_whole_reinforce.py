"""PureJaxRL-style REINFORCE with the whole run compiled as one program (``lax.scan`` over the iterations).

The iteration of ``purejaxrl_reinforce.py`` under :func:`purejaxrl_whole.train`.

    .venv/bin/python benchmarks/baselines/purejaxrl_whole_reinforce.py --iterations 5 --envs 512 --steps 250
"""
from __future__ import annotations

import purejaxrl_reinforce
import purejaxrl_whole
from args import ReinforceArgs as Args


def main(args: Args) -> dict:
    """Train; returns the mean episode return and the loss of every batch, and the timings."""
    params, adam, key = purejaxrl_reinforce.initial_state(args)
    return purejaxrl_whole.train(purejaxrl_reinforce.make_iteration(args), args.iterations, params, adam, key)


if __name__ == "__main__":
    import tempo.rl.training

    out = main(tempo.rl.training.parse_args(Args, __doc__.splitlines()[0]))
    seconds = out["ends"][-1] - out["start"]
    print(f"mean_return={out['returns'][-1]:.1f} loss={out['losses'][-1]:.4f} seconds={seconds:.2f}")
