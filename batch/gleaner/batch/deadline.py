"""The deadline → throughput SLA rule (pure): what fraction of its own GPUs a batch needs.

Contract (docs/batch.md, "Deadlines"). A batch with a deadline needs, from now on,

    required = remaining tokens / (remaining seconds × standalone tokens per second)

of the throughput it would have on monopolized GPUs (the profile's
``standaloneTokensPerSecond``): exactly the quantity ``throughputSLA`` states. The SLA the
operator asks for is that times a ``headroom`` (placements deliver around their prediction,
not above it), rounded up to a ``step`` (so the SLA moves in a few visible steps, not every
tick), never below the job's own ``throughputSLA`` (the floor), and never lowered while the
batch runs (:func:`raise_only`): as the deadline nears with work left, the requirement
rises. When the requirement exceeds 1, not even the whole GPU would finish in time: the
deadline can no longer be met, and the verdict says so (the operator then keeps the SLA at
1 and sets a Condition).

Remaining tokens: :func:`estimate_remaining_tokens` from what the batch has done (mean
tokens per answered request) or, before the first answer, from the requests' own
``max_tokens`` (an upper bound). Tokens counted are prompt plus completion tokens, the
quantity the profile's throughput measures.

Pure: numbers in, a verdict out; no clock (``now`` is an argument where it matters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

DEFAULT_HEADROOM = 1.2
DEFAULT_STEP = 0.05
MIN_SLA = 0.01
MAX_SLA = 1.0


@dataclass(frozen=True)
class DeadlineVerdict:
    """What the deadline asks of the job now."""

    required_fraction: float
    """Remaining tokens over what monopolized GPUs would do in the remaining time (may be
    above 1, or infinite once the deadline has passed with work left)."""
    sla: float
    """The throughputSLA to ask for: in [MIN_SLA, MAX_SLA]."""
    feasible: bool
    """Whether the deadline can still be met (required_fraction ≤ 1)."""
    message: str


def required_fraction(
    remaining_tokens: float, remaining_seconds: float, standalone_tokens_per_second: float
) -> float:
    """Remaining tokens over remaining standalone capacity; 0 when nothing remains, infinite
    when the time is up with work left."""
    if standalone_tokens_per_second <= 0:
        raise ValueError("standalone_tokens_per_second must be positive")
    if remaining_tokens <= 0:
        return 0.0
    capacity = remaining_seconds * standalone_tokens_per_second
    if capacity <= 0:  # time is up (or so little is left that it rounds to none)
        return math.inf
    return remaining_tokens / capacity


def _round_up(value: float, step: float) -> float:
    # Subtract a hair first so 0.30000000000000004 does not become 0.35; the result stays
    # at or above value - 1e-9 * step, which the headroom (>= 1) more than covers.
    return math.ceil(value / step - 1e-9) * step


def deadline_sla(
    remaining_tokens: float,
    remaining_seconds: float,
    standalone_tokens_per_second: float,
    *,
    floor: float = MIN_SLA,
    headroom: float = DEFAULT_HEADROOM,
    step: float = DEFAULT_STEP,
) -> DeadlineVerdict:
    """The SLA a job with this much left needs to meet its deadline (see the module doc)."""
    if headroom < 1:
        raise ValueError("headroom must be at least 1")
    if not 0 < step <= 1:
        raise ValueError("step must be in (0, 1]")
    need = required_fraction(remaining_tokens, remaining_seconds, standalone_tokens_per_second)
    floor = min(MAX_SLA, max(MIN_SLA, floor))
    feasible = need <= 1.0
    asked = need * headroom
    stepped = 0.0 if asked <= 0 else MAX_SLA if asked >= MAX_SLA else _round_up(asked, step)
    # Rounded to 6 places for a tidy status; the ceil already kept it above the need.
    sla = min(MAX_SLA, max(floor, round(stepped, 6)))
    if not feasible:
        if math.isinf(need):
            message = f"deadline passed with {remaining_tokens:.0f} tokens left"
        else:
            message = (
                f"deadline cannot be met: {remaining_tokens:.0f} tokens left need "
                f"{need:.2f}x the standalone throughput"
            )
    else:
        message = f"deadline needs {need:.3f} of standalone throughput; asking {sla:.2f}"
    return DeadlineVerdict(required_fraction=need, sla=sla, feasible=feasible, message=message)


def raise_only(current: float | None, proposed: float) -> float:
    """The SLA never drops while a deadline batch runs: falling behind later would need
    more than the lowered SLA can promise, and every change of SLA re-judges placement."""
    return proposed if current is None else max(current, proposed)


def estimate_remaining_tokens(
    *,
    total_requests: int,
    done_requests: int,
    done_tokens: int,
    prior_tokens_per_request: float,
) -> float:
    """Tokens the unanswered requests will take: the mean so far once something is answered,
    else the prior (the requests' own bound)."""
    left = max(0, total_requests - done_requests)
    if left == 0:
        return 0.0
    per_request = done_tokens / done_requests if done_requests > 0 else prior_tokens_per_request
    return left * max(0.0, per_request)


OutlookState = Literal["on_track", "late", "passed", "finished", "unknown"]


@dataclass(frozen=True)
class DeadlineOutlook:
    """Where a batch stands against its deadline at the rate it is observed to run."""

    state: OutlookState
    """``on_track``: the projected finish is at or before the deadline; ``late``: after it;
    ``passed``: the deadline is behind us with requests left; ``finished``: every request is
    answered; ``unknown``: no deadline, or no projection yet (no rate observed)."""
    margin_seconds: float | None
    """Deadline minus projected finish: how much to spare (positive) or how late (negative);
    for ``passed``, minus the time since the deadline. None when there is nothing to compare."""


def deadline_outlook(
    *,
    deadline: datetime | None,
    projected_finish: datetime | None,
    requests_done: int,
    requests_total: int,
    now: datetime,
    succeeded: bool = False,
) -> DeadlineOutlook:
    """The batch's outlook (the dashboard's "on track" / "will miss by"): the projected
    finish (remaining tokens at the observed rate, ``gleaner.batch.tracking.track``) against
    the deadline; ``succeeded``: the job ended successfully (its runner exits 0 only once
    every request is answered, whatever the last progress read said). Pure: ``now`` is an
    argument."""
    if succeeded or (requests_total > 0 and requests_done >= requests_total):
        return DeadlineOutlook("finished", None)
    if deadline is None:
        return DeadlineOutlook("unknown", None)
    if now >= deadline:
        return DeadlineOutlook("passed", -(now - deadline).total_seconds())
    if projected_finish is None:
        return DeadlineOutlook("unknown", None)
    margin = (deadline - projected_finish).total_seconds()
    return DeadlineOutlook("on_track" if margin >= 0 else "late", margin)
