"""``gleaner agent`` (placeholder until issue 6 (runtime agent) lands)."""

from gleaner.cli.common import not_built

command = not_built("agent", "issue 6 (runtime agent)")
