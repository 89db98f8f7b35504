"""The `tempo` command: --version, `run FILE.py [ARGS...]`, and error reporting."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tempo
from tempo import cli
from tempo.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


def run_module(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m tempo ARGS...` in a fresh interpreter, finding this checkout's tempo."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "tempo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tempo {tempo.__version__}\n"


def test_version_through_python_dash_m(tmp_path):
    proc = run_module("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"tempo {tempo.__version__}\n"


def test_console_script_version(tmp_path):
    script = Path(sys.executable).parent / "tempo"
    if not script.exists():
        pytest.skip("the `tempo` console script is not installed next to this python")
    proc = subprocess.run([str(script), "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"tempo {tempo.__version__}\n"


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "tempo: error:" in capsys.readouterr().err


def test_run_executes_file_as_main_with_argv(tmp_path, capsys):
    write(tmp_path / "helper_mod_for_cli_test.py", "VALUE = 41\n")
    prog = write(tmp_path / "prog.py", """\
        import sys
        import helper_mod_for_cli_test            # found through the file's own directory
        print("name", __name__)
        print("argv", sys.argv)
        print("value", helper_mod_for_cli_test.VALUE + 1)
    """)
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    try:
        assert main(["run", str(prog), "--steps", "5", "x"]) == 0
    finally:
        sys.modules.pop("helper_mod_for_cli_test", None)
    out = capsys.readouterr().out.splitlines()
    assert out == ["name __main__", f"argv {[str(prog), '--steps', '5', 'x']!r}", "value 42"]
    assert sys.argv == saved_argv and sys.path == saved_path


def test_run_through_python_dash_m(tmp_path):
    write(tmp_path / "hello.py", """\
        import sys
        print("hello", *sys.argv[1:])
    """)
    proc = run_module("run", "hello.py", "a", "--b", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello a --b\n"


def test_run_missing_file(tmp_path, capsys):
    missing = tmp_path / "nope.py"
    assert main(["run", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tempo: error:") and str(missing) in err
    assert err.count("\n") == 1


def test_run_missing_file_exit_code(tmp_path):
    proc = run_module("run", "nope.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("tempo: error:") and "nope.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_tempo_error_is_one_clean_message(tmp_path):
    write(tmp_path / "bad.py", """\
        from tempo.errors import TempoError
        print("before")
        raise TempoError("boom")
    """)
    proc = run_module("run", "bad.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == "before\n"
    assert proc.stderr == "tempo: error: boom\n"


def test_tempo_error_subclass_in_process(tmp_path, capsys):
    prog = write(tmp_path / "bad_shape.py", """\
        from tempo.errors import ShapeError
        raise ShapeError("shapes (2,) and (3,) do not fit")
    """)
    assert main(["run", str(prog)]) == 1
    err = capsys.readouterr().err
    assert err == "tempo: error: shapes (2,) and (3,) do not fit\n"


def test_other_exceptions_propagate(tmp_path):
    prog = write(tmp_path / "crash.py", "raise ValueError('not a tempo error')\n")
    with pytest.raises(ValueError, match="not a tempo error"):
        main(["run", str(prog)])


def test_other_exceptions_keep_their_traceback(tmp_path):
    write(tmp_path / "crash.py", "raise ValueError('plain crash')\n")
    proc = run_module("run", "crash.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: plain crash" in proc.stderr


def test_sys_exit_code_of_the_program_is_kept(tmp_path):
    write(tmp_path / "exits.py", "import sys\nsys.exit(3)\n")
    proc = run_module("run", "exits.py", cwd=tmp_path)
    assert proc.returncode == 3


def test_subsystem_commands_dispatch_to_their_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "fake_subsystem.py").write_text(
        "def main(argv):\n    print('got', argv)\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.SUBSYSTEMS, "fake", ("fake_subsystem", "a test command"))
    assert cli.main(["fake", "--help", "x"]) == 3
    assert capsys.readouterr().out == "got ['--help', 'x']\n"


BLAS_THREADS = """\
    import numpy
    from threadpoolctl import threadpool_info
    print("blas", sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}))
"""


@pytest.mark.parametrize("flags, expect", [([], "blas [1]"), (["--threads", "2"], "blas [2]")])
def test_run_caps_the_blas_threads(tmp_path, flags, expect):
    prog = write(tmp_path / "prog.py", BLAS_THREADS)
    out = run_module("run", *flags, str(prog), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expect


def test_threads_zero_keeps_the_library_default_and_the_cap_ends_with_the_run(tmp_path, capsys):
    from threadpoolctl import threadpool_info

    def blas():
        return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})

    before = blas()
    prog = write(tmp_path / "prog.py", BLAS_THREADS)
    assert main(["run", "--threads", "0", str(prog)]) == 0
    assert capsys.readouterr().out.strip() == f"blas {before}"
    assert main(["run", str(prog)]) == 0
    assert capsys.readouterr().out.strip() == "blas [1]" and blas() == before
    assert main(["run", "--threads", "-1", str(prog)]) == 2
    assert "--threads must be 0" in capsys.readouterr().err
