"""``tempo.memplan``: the memory-mapping game and its agents (MMap-MuZero).

Instances and solutions (:mod:`.problem`), the game dynamics (:mod:`.game`) and
its gymnasium environment (:mod:`.env`), an independent validator
(:mod:`.validate`), instances from JAX-compiled programs (:mod:`.extract`) and
the agents (:mod:`.agents`). See ``docs/memplan.md``.
"""
