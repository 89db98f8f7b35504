"""tempo.superopt: RL-driven tensor graph superoptimisation (X-RLflow).

A tensor graph IR with shape inference (:mod:`.graph`), rewrite rules in a
text format (:mod:`.rules`), cost-model and equality-saturation baselines, a
gymnasium environment and a PPO agent with a graph-attention encoder.
"""
