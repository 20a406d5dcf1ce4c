"""``gleaner place`` (placeholder until issue 4 (scheduler) lands)."""

from gleaner.cli.common import not_built

command = not_built("place", "issue 4 (scheduler)")
