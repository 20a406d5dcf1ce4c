"""Every option of ``gleaner agent`` and ``gleaner report evictions`` says what it does."""

from __future__ import annotations

import click
import pytest

from gleaner.cli.main import cli


@pytest.mark.parametrize("path", [("agent",), ("report", "evictions")])
def test_every_option_has_help(path: tuple[str, ...]) -> None:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found
    missing = [
        p.opts[0] for p in command.params if isinstance(p, click.Option) and not (p.help or "")
    ]
    assert missing == []
