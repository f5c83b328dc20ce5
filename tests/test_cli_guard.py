"""What every `hetc` command does with an error it did not expect (`cli._guarded`)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from hetc.cli import EXIT_BROKEN_PIPE, EXIT_ENVIRONMENT, EXIT_INTERNAL, _guarded
from hetc.schema import EnvironmentProblem

runner = CliRunner()


def _app(error: BaseException) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @_guarded
    def fail() -> None:
        raise error

    @app.command()
    def unused() -> None:
        """A second command, so that typer keeps `fail` a subcommand."""

    return app


def test_a_closed_pipe_stops_quietly_with_sigpipes_code() -> None:
    """`hetc plan ... | head`: the reader went away; no traceback, no internal error."""
    result = runner.invoke(_app(BrokenPipeError()), ["fail"])
    assert result.exit_code == EXIT_BROKEN_PIPE == 141
    assert "internal error" not in result.output and "Traceback" not in result.output


def test_a_bug_is_one_line_and_a_saved_traceback() -> None:
    result = runner.invoke(_app(RuntimeError("boom")), ["fail"])
    assert result.exit_code == EXIT_INTERNAL
    (line, *_) = result.stderr.splitlines()
    assert line.startswith("hetc: internal error (RuntimeError: boom)")
    saved = next(w for w in result.stderr.split() if "hetc-crash-" in w).strip("()")
    assert "RuntimeError: boom" in Path(saved).read_text()
    assert "Traceback" not in result.stderr


def test_an_environment_problem_says_what_to_fix() -> None:
    result = runner.invoke(_app(EnvironmentProblem("cannot write x", "make x writable")), ["fail"])
    assert result.exit_code == EXIT_ENVIRONMENT
    assert result.stderr == "hetc: cannot write x\nTo fix: make x writable\n"
