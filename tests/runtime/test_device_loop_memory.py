"""Memory accounting of device loops: a launch's carry, its stacked inputs and the rows it returns count
in the ledger while the launch holds them; checked against the NumPy backend's host loops."""
from __future__ import annotations

import numpy as np
import pytest

import tempo as tpo
from tempo.errors import TempoError
from tests.runtime.test_whole_run import B_, reinforce

pytest.importorskip("jax")

N, T_ = 5000, 8  # a recurrent state of N float32, T steps


def recurrent(backend: str, budget: int | None = None):
    """``s[t + 1] = tanh(s[t] / 2) + 1``: on JAX the loop over t is one device launch, ``s[t]`` its carry."""
    with tpo.Context() as ctx:
        (t, T), = ctx.dims("t")
        s = tpo.placeholder((N,), "float32", dims=(t,))
        s[0] = tpo.from_numpy(np.ones(N, np.float32))
        s[t + 1] = (s[t] * 0.5).tanh() + 1.0
        program = ctx.compile([s[T - 1].sum()], backend=backend, memory={"device_budget": budget} if budget else {})
    program.values = program.run({T: T_})
    return program


def device_loop_bytes(holders: dict) -> int:
    return sum(nbytes for name, nbytes in holders.items() if name.startswith("device loop "))


def test_a_recurrent_loop_counts_its_carry_and_rows_beside_the_stores():
    device, host = recurrent("jax").ledger, recurrent("numpy").ledger
    carry, rows = N * 4, T_ * N * 4                       # s[t - 1] carried; s[0:T] returned, then written back
    assert device.peak_holders["device loop D0 carry"] == carry
    assert device.peak_holders["device loop D0 rows"] == rows
    assert device.peak["device"] >= rows + carry + rows   # the stores' s[0:T] and the launch's buffers at once
    assert device.peak["device"] - device_loop_bytes(device.peak_holders) <= host.peak["device"]
    assert not device_loop_bytes(device.by_store)        # all let go after the write-back
    assert device.live["device"] == host.live["device"]
    assert not any(name.startswith("device loop") for name in host.by_store)   # NumPy runs host loops


def test_a_device_loop_over_the_device_budget_runs_on_the_host_with_a_warning_naming_it():
    host, device = recurrent("numpy"), recurrent("jax")
    budget = (host.ledger.peak["device"] + device.ledger.peak["device"]) // 2  # the host loop fits, the launch not
    with pytest.warns(UserWarning, match=r"device loop D0 \(the loop over t\) would take the device tier to "
                                         rf"{device.ledger.peak['device']} bytes, over its budget of {budget}"):
        fallen = recurrent("jax", budget)
    assert fallen.values[0] == pytest.approx(host.values[0], rel=1e-6)
    assert fallen.ledger.peak["device"] <= budget
    assert not device_loop_bytes(fallen.ledger.by_store)                    # the launch let go of its buffers
    assert fallen.ledger.launches > device.ledger.launches                  # step by step on the host
    with pytest.raises(TempoError, match="device budget"), pytest.warns(UserWarning):  # below the host loop's
        recurrent("jax", host.ledger.peak["device"] // 2)


def test_the_whole_run_reports_its_parameters_and_optimizer_state_at_the_peak(tmp_path):
    program, _ = reinforce(tmp_path, "jax")
    host, _ = reinforce(tmp_path, "numpy")
    params = 48 * 8 + 8 + 8 * 4 + 4                       # the MLP's 3*4*4 -> 8 -> 4 actions, weights and biases
    expected = 4 * (3 * params + 1)                      # parameters, Adam's two moments, its step count
    acting = B_ * (3 * 4 * 4 * 4 + 1 + 8)               # acting's initial carry: observations, done flags, step counts
    report = program.memory_report()
    carries = {name: nbytes for name, nbytes in program.ledger.peak_holders.items() if name.endswith(" carry")}
    assert len(carries) == 1 and next(iter(carries.values())) == expected + acting
    assert f"  {next(iter(carries))}" in report
    assert program.ledger.peak["device"] >= expected + acting
    assert program.ledger.peak["device"] - device_loop_bytes(program.ledger.peak_holders) <= host.ledger.peak["device"]
    assert not device_loop_bytes(program.ledger.by_store)
