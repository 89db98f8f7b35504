"""``tempo run --backend NAME FILE.py``: the backend of the program's runs that name none."""
from __future__ import annotations

import os

from tempo import cli

PROGRAM = """
import numpy as np
import tempo as tpo

with tpo.Context() as ctx:
    (t, T), = ctx.dims("t")
    x = tpo.from_numpy(np.arange(3.0), dims=(t,))
    program = ctx.compile(fetch=[x + 1.0])
    print("backend", program.backend.name, program.run({T: 3})[0].tolist())
"""


def test_run_backend_sets_the_default_backend_of_the_program(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TEMPO_BACKEND", raising=False)
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    assert cli.main(["run", "--backend", "torch", str(path)]) == 0
    assert "backend torch [1.0, 2.0, 3.0]" in capsys.readouterr().out
    assert "TEMPO_BACKEND" not in os.environ                          # restored after the run
    assert cli.main(["run", str(path)]) == 0
    assert "backend numpy" in capsys.readouterr().out


def test_run_with_an_unknown_backend_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    assert cli.main(["run", "--backend", "mxnet", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tempo: error: unknown backend 'mxnet'; available: numpy")
