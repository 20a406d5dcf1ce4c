"""``gleaner simulate`` (placeholder until issue 8 (simulator) lands)."""

from gleaner.cli.common import not_built

command = not_built("simulate", "issue 8 (simulator)")
