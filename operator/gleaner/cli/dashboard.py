"""``gleaner dashboard`` (placeholder until issue 10 (dashboard) lands)."""

from gleaner.cli.common import not_built

command = not_built("dashboard", "issue 10 (dashboard)")
