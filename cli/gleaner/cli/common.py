"""Conventions every ``gleaner`` subcommand shares: output formats and one-line errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from gleaner.runtime_agent.gatelib import GateLibraryError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """Bad input from the user: one line on stderr, exit 2."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def fail(message: str) -> NoReturn:
    """Abort the command with a one-line error and exit code 2."""
    raise BadInput(message.splitlines()[0] if message else "bad input")


def format_option(*choices: str, default: str = "table") -> Callable[[F], F]:
    """The ``--format`` option with the given choices (table and json at least)."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(list(choices or ("table", "json"))),
        default=default,
        show_default=True,
        help="Output format.",
    )


def parse_seconds(text: str, flag: str, *, allow_zero: bool = False) -> float:
    """A duration flag's seconds (``gleaner.api.units`` grammar; > 0, or >= 0 with
    ``allow_zero``); a one-line error naming ``flag`` otherwise."""
    from gleaner.api.units import parse_duration

    try:
        return parse_duration(text, allow_zero=allow_zero)
    except ValueError as exc:
        fail(f"{flag}: {exc}")


def risk_target_option(help_text: str) -> Callable[[F], F]:
    """The ``--risk-target`` option (a probability or 'off', read by
    :func:`parse_risk_target`), defaulting to the operator's."""
    from gleaner.perfmodel.admission import DEFAULT_RISK_TARGET

    return click.option(
        "--risk-target", default=str(DEFAULT_RISK_TARGET), show_default=True, help=help_text
    )


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def echo_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None
) -> None:
    """Print a table with rich (plain text when stdout is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for h in headers:
        table.add_column(h)
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    Console(file=sys.stdout, width=max(100, len(headers) * 14)).print(table)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    return str(value)


def not_built(name: str, issue: str) -> click.Command:
    """A placeholder for a subcommand that is not built yet: it says so and exits 2."""

    @click.command(
        name=name,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help=f"(not built yet: {issue})",
    )
    @click.pass_context
    def _cmd(ctx: click.Context) -> None:
        fail(f"'gleaner {name}' is not built yet ({issue})")

    return _cmd


def run_command(command: click.Command, argv: list[str] | None, prog_name: str) -> int:
    """Run a click command as our entry points do; return the exit code (0 ok, 1 failure,
    2 bad input). Bad input is one line, like every other error of ours; --help has the
    usage."""
    try:
        # Without standalone mode click *returns* the code of ctx.exit(n) instead of raising.
        rc = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else prog_name
        click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except GateLibraryError as exc:  # an install without the native compute gate
        click.echo(f"error: {exc}", err=True)
        return 1
    return rc if isinstance(rc, int) else 0


def parse_risk_target(text: str) -> float | None:
    """``--risk-target``: a probability in (0, 1), or ``off`` (None: the mean rule)."""
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        fail(f"--risk-target: expected a probability or 'off', got {text!r}")
    if not 0 < value < 1:
        fail("--risk-target must be between 0 and 1 (exclusive), or 'off'")
    return value
