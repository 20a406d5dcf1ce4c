"""The entry point's exit codes: 0 ok, 2 for bad input, the code of ctx.exit(n) kept."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from gleaner.cli import main as cli_main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli_main.SUBCOMMANDS:
        assert name in out


def test_unknown_subcommand_is_bad_input() -> None:
    assert cli_main.main(["no-such-command"]) == 2


def test_ctx_exit_code_is_propagated(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command()
    @click.pass_context
    def exits_three(ctx: click.Context) -> None:
        ctx.exit(3)

    cli_main.cli.add_command(exits_three, "exits-three")
    monkeypatch.setitem(cli_main.SUBCOMMANDS, "exits-three", (__name__, "test only"))
    monkeypatch.setattr(sys.modules[__name__], "command", exits_three, raising=False)
    assert cli_main.main(["exits-three"]) == 3


def test_console_script_exit_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gleaner.cli.main", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "no-such-command" in proc.stderr


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["simulate", "--seed", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: Invalid value for '--seed': 'abc' is not a valid integer.")
    assert "(see 'gleaner simulate --help')" in err
