"""The ``tempo`` command.

``tempo --version`` prints the version; ``tempo run [--backend NAME] [--threads N] FILE.py [ARGS...]``
runs a user program as ``__main__`` (like ``python FILE.py ARGS...``; ``--backend``
is the backend of its runs that name none; ``--threads`` caps the native thread
pools of NumPy's BLAS and OpenMP, 1 by default), reporting a
:class:`~tempo.errors.TempoError` as one clean ``tempo: error: ...`` message
instead of a traceback.

The RL-for-systems parts bring their own command groups (``tempo superopt``,
``tempo memplan``, ``tempo gmi``), and so does LLM decoding (``tempo generate``): each is a module with a
``main(argv) -> int``, imported only when its command runs, so ``tempo run``
never pays for torch or JAX.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Sequence

from threadpoolctl import threadpool_limits

from tempo import __version__
from tempo.errors import TempoError

PROG = "tempo"

# command -> (module with main(argv) -> int, one-line help)
SUBSYSTEMS = {
    "superopt": ("tempo.superopt.cli", "RL-driven tensor graph superoptimisation (X-RLflow)"),
    "memplan": ("tempo.memplan.cli", "the memory-mapping game and its agents (MMap-MuZero)"),
    "gmi": ("tempo.gmi.cli", "many RL instances per device (GMI-DRL)"),
    "generate": ("tempo.llm.cli", "generate text with a Llama/Mistral checkpoint, printed as produced"),
    "rl": ("tempo.rl.evaluate", "evaluate a saved policy (tempo rl evaluate FILE --env-id ID)"),
}


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Tempo: compiled dynamic deep learning with recurrent tensors.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a Python program that uses tempo",
        description="Run FILE.py as __main__, with sys.argv = [FILE.py, *ARGS].",
    )
    run.add_argument("--backend", default=None,
                     help="the backend of the program's runs that name none: numpy, torch or jax, "
                          "optionally with a device (torch:cuda); sets $TEMPO_BACKEND")
    run.add_argument("--threads", type=int, default=1, metavar="N",
                     help="threads of NumPy's BLAS (and other native pools threadpoolctl knows) while the program "
                          "runs; Tempo's kernels are small, and one thread per process avoids oversubscribing "
                          "a shared machine; 0 keeps the libraries' own defaults (default: 1)")
    run.add_argument("file", metavar="FILE.py", help="the program to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to the program")
    for name, (module, summary) in SUBSYSTEMS.items():
        if _available(module):
            sub = commands.add_parser(name, help=summary, add_help=False)
            sub.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def run_file(path: str, args: Sequence[str] = ()) -> int:
    """Run ``path`` as ``__main__`` with ``sys.argv = [path, *args]``.

    The file's directory goes first on ``sys.path`` (as with ``python FILE``);
    ``sys.argv`` and ``sys.path`` are restored afterwards. A TempoError from the
    program is reported on stderr and gives 1; other exceptions propagate.
    """
    if not os.path.exists(path):
        _error(f"can't open file '{path}': no such file")
        return 2
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    except TempoError as exc:
        _error(str(exc))
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tempo`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBSYSTEMS and _available(SUBSYSTEMS[argv[0]][0]):
        return importlib.import_module(SUBSYSTEMS[argv[0]][0]).main(argv[1:])
    parser = _parser()
    ns = parser.parse_args(argv)
    if ns.version:
        print(f"{PROG} {__version__}")
        return 0
    if ns.command == "run":
        if ns.threads < 0:
            _error(f"--threads must be 0 (the libraries' defaults) or a positive count, got {ns.threads}")
            return 2
        with threadpool_limits(limits=ns.threads or None):
            return _run_command(ns)
    parser.print_usage(sys.stderr)
    _error("a command is required (try 'tempo run FILE.py' or 'tempo --help')")
    return 2


def _run_command(ns: argparse.Namespace) -> int:
    """``tempo run``: the program, under ``--backend`` when one is given."""
    if ns.backend:
        from tempo.runtime.backends.base import DEFAULT_ENV, get_backend

        try:
            get_backend(ns.backend)
        except TempoError as exc:
            _error(str(exc))
            return 2
        saved = os.environ.get(DEFAULT_ENV)
        os.environ[DEFAULT_ENV] = ns.backend
        try:
            return run_file(ns.file, ns.args)
        finally:
            if saved is None:
                del os.environ[DEFAULT_ENV]
            else:
                os.environ[DEFAULT_ENV] = saved
    return run_file(ns.file, ns.args)
