"""``gleaner report`` (placeholder until issue 5 (operator reports) lands)."""

from gleaner.cli.common import not_built

command = not_built("report", "issue 5 (operator reports)")
