"""Units every component shares: bytes per GiB and the one duration grammar.

Contract. ``GIB`` is 2**30 bytes; Gleaner's memory sizes are GiB (``memoryGiB`` fields) and
its byte counters bytes. ``parse_duration`` is the only reader of human durations (command
line flags such as ``--window``, ``--since``, ``--report-interval``, ``--sla-window``). Its
grammar accepts every form the command line ever accepted, so no flag value that worked
stops working:

- a bare number: seconds (``30``, ``0.5``, ``1e3``);
- or one or more terms ``<number><unit>``, which add up (``90s``, ``15m``, ``1h30m``,
  ``1d 12h``), with units ``ms``, ``s``, ``m`` (minutes), ``h``, ``d``, ``w`` in any case
  (``24H``);
- a number is decimal, optionally with a fraction, an exponent and ``_`` between digits
  (``1.5``, ``.5``, ``2.``, ``1e3``, ``1_000``), optionally preceded by ``+``; spaces
  may surround numbers and units.

Negative, infinite and NaN durations are not durations. The result must be positive
unless the caller allows zero (a delay that may be off).
"""

from __future__ import annotations

import math
import re
from typing import Final

GIB: Final = 1 << 30
"""Bytes per GiB."""

_NUMBER = r"\+?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d+)?"
_UNIT = r"ms|s|m|h|d|w"
_BARE = re.compile(rf"\s*({_NUMBER})\s*")
_TERMS = re.compile(rf"(?:\s*(?:{_NUMBER})\s*(?:{_UNIT}))+\s*", re.IGNORECASE)
_TERM = re.compile(rf"({_NUMBER})\s*({_UNIT})", re.IGNORECASE)
_UNIT_SECONDS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
DURATION_EXAMPLES: Final = "90s, 15m, 1h30m, 1d"


def parse_duration(text: str, *, allow_zero: bool = False) -> float:
    """Seconds in ``text`` (grammar: the module docstring). ValueError, one line, if it
    is not a duration or is zero (unless ``allow_zero``)."""
    bare = _BARE.fullmatch(text)
    if bare is not None:
        seconds = float(bare.group(1))
    elif _TERMS.fullmatch(text) is not None:
        seconds = sum(
            float(number) * _UNIT_SECONDS[unit.lower()] for number, unit in _TERM.findall(text)
        )
    else:
        seconds = math.nan
    if not math.isfinite(seconds):  # also 1e999s, which float() reads as infinity
        raise ValueError(f"not a duration: {text!r} (use e.g. {DURATION_EXAMPLES})")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"duration must be positive: {text!r}")
    return seconds
