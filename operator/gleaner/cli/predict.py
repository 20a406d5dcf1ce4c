"""``gleaner predict`` (placeholder until issue 3 (perfmodel) lands)."""

from gleaner.cli.common import not_built

command = not_built("predict", "issue 3 (perfmodel)")
