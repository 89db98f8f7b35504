"""The examples' shared helpers: the command line built from an ``Args`` dataclass, and the summary line."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import tempo as tpo
from tempo.rl.training import ReturnReport, field_docs, parse_args, require_positive, steady_seconds


@dataclass
class Base:
    seed: int = 0
    """seeds everything"""


@dataclass
class Args(Base):
    rate: float = 1
    """step size, in % of the last"""
    name: str = ""
    undocumented: int = 3
    fast: bool = False
    """skip the slow checks"""
    sizes: list = field(default_factory=list)


def test_field_docs_reads_each_fields_docstring_including_inherited_ones():
    assert field_docs(Args) == {"seed": "seeds everything", "rate": "step size, in % of the last",
                                "fast": "skip the slow checks"}


def test_flags_take_the_annotated_types():
    args = parse_args(Args, argv=["--rate", "0.5", "--seed", "7", "--name", "x", "--fast"])
    assert (args.rate, args.seed, args.name, args.fast, args.undocumented) == (0.5, 7, "x", True, 3)
    assert parse_args(Args, argv=["--no-fast"]).fast is False
    assert parse_args(Args, argv=[]) == Args()


def test_help_shows_each_fields_docstring_and_default(capsys):
    with pytest.raises(SystemExit):
        parse_args(Args, "what it does", argv=["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "what it does" in text
    assert "--seed INT seeds everything (default: 0)" in text
    assert "--rate FLOAT step size, in % of the last (default: 1)" in text
    assert '--name STR (default: "")' in text
    assert "--undocumented INT (default: 3)" in text
    assert "--fast, --no-fast skip the slow checks (default: False)" in text


def test_a_bad_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(Args, argv=["--seed", "one"])
    assert exit_.value.code == 2
    assert "argument --seed: invalid int value: 'one'" in capsys.readouterr().err


def test_the_summary_line_names_the_mean_of_the_last_five_iterations(capsys):
    """Iterations return 0, 1, ..., 6: the bar ends at 6, the summary is the mean of 2..6."""
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        report = ReturnReport(tpo.eval_symbol(i).cast("float32"), 7, "test")
        report.start()
        ctx.run(bounds={I: 7})
    summary = report.finish()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("mean_return_last5=4.0 iterations=7 seconds=")
    assert summary["mean_return"] == 4.0 and summary["returns"][-1] == 6.0


def test_the_bar_redraws_once_per_iteration_with_that_iterations_return():
    with tpo.Context() as ctx:
        (i, I), = ctx.dims("i")
        report = ReturnReport(tpo.eval_symbol(i).cast("float32") * 10.0, 4, "test")
        bar = report.bar
        bar.mininterval, bar.miniters, bar.dynamic_miniters = 0, 1, False
        drawn = []
        display = bar.display
        bar.display = lambda *a, **k: drawn.append((bar.n, bar.format_dict["postfix"])) or display(*a, **k)
        report.start()
        ctx.run(bounds={I: 4})
    assert drawn == [(k + 1, f"mean_return={10.0 * k:.1f}") for k in range(4)]
    report.finish()


def test_steady_seconds_per_iteration_counts_reports_that_arrive_in_bursts():
    """A whole-run device program reports its iterations after each launch: the gaps inside a
    burst are zero, so a median gap would say an iteration takes no time."""
    first, bursts = [0.0], [1.0] * 4 + [2.0] * 4
    assert steady_seconds(first + bursts) == pytest.approx(2.0 / 8)
    assert steady_seconds([5.0, 5.5, 6.0, 6.5]) == pytest.approx(0.5)


def test_require_positive_names_the_flag(capsys):
    @dataclass
    class Counts:
        num_envs: int = 4
        """environments"""

        def __post_init__(self) -> None:
            require_positive(self, "num_envs")

    assert parse_args(Counts, argv=["--num-envs", "2"]).num_envs == 2
    with pytest.raises(SystemExit) as exit_:
        parse_args(Counts, argv=["--num-envs", "0"])
    assert exit_.value.code == 2
    assert "error: --num-envs must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(tpo.TempoError, match="--num-envs must be at least 1, got -1"):
        Counts(num_envs=-1)
