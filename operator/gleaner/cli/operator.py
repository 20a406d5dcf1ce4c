"""``gleaner operator`` (placeholder until issue 5 (operator) lands)."""

from gleaner.cli.common import not_built

command = not_built("operator", "issue 5 (operator)")
