"""A placement whose Pod exists and whose status write is still to come.

Contract. ``OperatorContext.unrecorded`` maps a job to its :class:`Unrecorded` from the
moment its Pod is made until its status records the placement
(``gleaner.operator.handlers.binding`` writes it). It holds only what that write needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gleaner.api import OfflineJobStatus
from gleaner.operator.builders import PodPlacement

JudgeValid = Callable[[dict[str, Any], OfflineJobStatus, datetime], OfflineJobStatus | None]
"""The pass's validation of a new spec, written with the placement: the status judged
valid, or None when the spec changed since it was judged."""


@dataclass(frozen=True)
class Unrecorded:
    """A placement whose Pod exists and whose status write is still to come."""

    pod: str
    made: PodPlacement
    judged: JudgeValid | None
    known: dict[str, Any] | None
    """The pass's copy of the job (its resourceVersion, the write's precondition)."""
    not_before: float
    """``time.monotonic()`` before which the write is held back (``bind_delay``)."""
