"""One algorithm, several spellings, one memory class.

An n-step REINFORCE learner whose tiles run while acting goes on frees the
observations it learned from, so its stores hold a few tiles whatever ``T``
is. That must not hang on incidental details of how the program is written:
a sink reporting every iteration or none, a checkpoint keeping the last
update alive or none (the last iteration's learning is then dead, and its
observations are read by acting alone), a ``.mean()`` loss or a
``.sum() / n`` one. Each spelling is checked against Monte-Carlo returns,
which hold an iteration's observations until its end, and the two loss
spellings launch the same kernels. With no tiles given,
a run's bounds let the compiler tile the n-step learner itself (TEMPO §4.3's
incrementalisation, ``tempo.transforms.tile.early_tiles``), and leave the
Monte-Carlo learner whole.
"""
from __future__ import annotations

import itertools

import pytest

import tempo as tpo
from tempo.api.compile import compile_program
from tempo.transforms import tile

B_, I_, T_, OBS = 4, 2, 120, (3, 32, 32)
OBSERVATIONS = B_ * T_ * 4 * 3 * 32 * 32  # bytes of one iteration's observations


def peak(tmp_path, nstep: int, sink: bool, checkpoint: bool, loss: str, tiles: bool = True) -> int:
    """The peak bytes held in stores by one spelling of REINFORCE; ``tiles``: in tiles of 10 steps
    (else as the compiler chooses for the run's bounds)."""
    program = compiled(tmp_path, nstep, sink, checkpoint, loss, tiles)
    program.run({"B": B_, "I": I_, "T": T_})
    return program.ledger.peak["device"]


def compiled(tmp_path, nstep: int, sink: bool, checkpoint: bool, loss: str, tiles: bool):
    with tpo.Context(seed=0) as ctx:
        (b, B), (i, I), (t, T) = ctx.dims("b", "i", "t")
        env = tpo.rl.make("tempo/Synthetic-v0", dims=(b, i, t), impl="tensor", obs_shape=OBS, episode_length=T_)
        policy = tpo.nn.MLP(env.obs_size, [16], env.num_actions, dims=(i,))
        o = tpo.placeholder(env.obs_shape, env.obs_dtype, dims=(b, i, t))
        o[b, i, 0] = env.reset()
        dist = tpo.nn.Categorical(logits=policy(o.reshape(env.obs_size)))
        a = dist.sample()
        o[b, i, t + 1], r, d = env.step(a)
        g = r[b, i, t:(T if nstep == 0 else tpo.min(t + nstep, T))].discounted_sum(0.99)
        terms = (dist.log_prob(a) * g)[0:B, i, 0:T]
        objective = terms.mean() if loss == "mean" else terms.sum() / float(B_ * T_)
        (-objective).backward()
        adam = tpo.optim.Adam(policy.parameters(), lr=1e-3)
        adam.step()
        if checkpoint:
            tpo.checkpoint(adam.state_dict(), str(tmp_path / "ck_{i}.npz"))
        if sink:
            tpo.sink(r[0:B, i, 0:T].sum(), lambda point, value: None)
        passes = {"tile": tile.Config(tiles={"t": 10})} if tiles else None
        return compile_program(ctx, [], passes=passes, bounds={B: B_, I: I_, T: T_})


SPELLINGS = list(itertools.product([False, True], [False, True], ["mean", "sum"]))


@pytest.fixture(scope="module")
def monte_carlo(tmp_path_factory) -> int:
    return peak(tmp_path_factory.mktemp("mc"), 0, sink=True, checkpoint=False, loss="mean")


@pytest.mark.parametrize("sink, checkpoint, loss", SPELLINGS)
def test_nstep_learning_while_acting_holds_a_few_tiles_in_every_spelling(tmp_path, monte_carlo, sink, checkpoint,
                                                                         loss):
    assert monte_carlo >= OBSERVATIONS  # Monte-Carlo holds an iteration's observations
    got = peak(tmp_path, 8, sink, checkpoint, loss)
    assert got <= 0.4 * monte_carlo, f"{got / 2**20:.1f} MiB against Monte-Carlo's {monte_carlo / 2**20:.1f} MiB"


@pytest.fixture
def small_early_budget(monkeypatch):
    """The incrementalisation policy at a scale these small programs reach."""
    monkeypatch.setattr(tile, "EARLY_BUDGET", 2 * 2**20)


@pytest.mark.parametrize("sink, checkpoint", [(True, False), (False, True)])
def test_nstep_learning_is_tiled_without_a_flag(tmp_path, monte_carlo, small_early_budget, sink, checkpoint):
    program = compiled(tmp_path, 8, sink, checkpoint, "mean", tiles=False)
    assert program.sdg.tiles, "the n-step learner was not tiled"
    program.run({"B": B_, "I": I_, "T": T_})
    assert program.ledger.peak["device"] <= 0.4 * monte_carlo


def test_monte_carlo_learning_stays_whole_without_a_flag(tmp_path, small_early_budget):
    program = compiled(tmp_path, 0, True, False, "mean", tiles=False)
    assert not program.sdg.tiles


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_mean_loss_and_a_sum_over_n_loss_launch_alike(tmp_path, checkpoint):
    launches = {}
    for loss in ("mean", "sum"):
        program = compiled(tmp_path, 8, True, checkpoint, loss, tiles=True)
        program.run({"B": B_, "I": I_, "T": T_})
        launches[loss] = program.ledger.launches
    assert launches["mean"] == launches["sum"], launches


def device_loops(program) -> list[tuple[bool, int]]:
    """The loops the plan runs as device programs: (whether it is the main loop, its nested loops)."""
    plan = program.plan_for()
    return sorted((p.loop is plan.main_loop, len(p.nested)) for p in plan.loops)


@pytest.mark.parametrize("nstep", [0, 8])
def test_every_spelling_gets_the_same_device_loops(tmp_path, nstep):
    """A sink or none, a checkpoint (the last update used) or none (dead), .mean() or .sum() / n: one plan
    of device loops. Monte-Carlo's whole loop over i is one device program (acting's scan nested in it)."""
    loops = {spelling: device_loops(compiled(tmp_path, nstep, *spelling, tiles=False)) for spelling in SPELLINGS}
    assert len(set(map(tuple, loops.values()))) == 1, loops
    assert ((True, 1) in next(iter(loops.values()))) == (nstep == 0)


@pytest.mark.slow
@pytest.mark.parametrize("nstep", [0, 8])
def test_every_tiled_spelling_gets_the_same_device_loops(tmp_path, nstep):
    """Tiles of 10 steps given (they divide the 120 steps), every spelling: n-step tiles free the
    observations while acting (shift fusion: acting's loop holds them and runs on the host, no device
    loop); Monte-Carlo's wait for the episode's end (the nested loops): the whole loop over i is one
    device program for every spelling. How many loops it holds differs with the spelling (a sink of the
    rewards adds loops over tiles of its own), not where they run."""
    loops = {spelling: device_loops(compiled(tmp_path, nstep, *spelling, tiles=True)) for spelling in SPELLINGS}
    whole_run = {spelling: any(main for main, _ in found) for spelling, found in loops.items()}
    assert set(whole_run.values()) == {nstep == 0}, loops
    if nstep:
        assert all(found == [] for found in loops.values()), loops
