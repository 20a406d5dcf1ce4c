"""Agent policies: pure, typed state machines (no I/O, no clocks: times are arguments).

The same classes run in the agent daemon, in the simulator and in tests
(docs/agent.md, "Policies"):

- :class:`ComputeGate` (per GPU): disable offline channels at once when online turns busy,
  re-enable after ``T_cool = 2·G_max`` of idleness, at most one preemption per online request.
- :class:`MemoryReservation` (per GPU): MIAD online headroom in handles, MIAD release interval;
  :func:`memory_command` turns its Grow/Release into a reclamation, a restore or nothing (the
  agent and the simulator share it).
- :func:`select_handles_greedy` (Algorithm 1) / :func:`select_handles_fifo` and
  :func:`plan_reclamation` → :class:`ReclaimPlan` (compute off, quarantine, release, report).
- :class:`Accounting` (per node): offline-enabled and online-busy seconds, pairwise busy
  overlap/union, the joint harvestable-memory sketch (perfmodel's ``MemoryHistogram``),
  preemptions per request, reclamations; :func:`window_between` cuts a window,
  :func:`window_summary` makes it perfmodel's ``NodeSummary`` and :func:`to_nodetrace_status`
  writes its NodeTrace status through perfmodel.
- :class:`ReclaimSequence` (per node): the nvidia backend's reclamation and restore
  sequences — gate acks, RECLAIM_ACK and RESTORE_ACK, disconnects and timeouts in; RECLAIM
  and RESTORE frames, completions and abandons out (:func:`reclaim_targets` picks who
  releases which page).
- :class:`Instrumentation` (per node): which processes on each GPU no connected shim
  accounts for (the driver's process list against the shims' pids, silent and disconnected
  online shims); such a GPU's gate is held closed.
"""

from gleaner.runtime_agent.policy.accounting import (
    HARVESTABLE_BUCKETS_GIB,
    Accounting,
    GpuTotals,
    PairTotals,
    Totals,
    to_nodetrace_status,
    window_between,
    window_summary,
)
from gleaner.runtime_agent.policy.gate import ComputeGate, Disable, Enable, GateAction, GateConfig
from gleaner.runtime_agent.policy.instrumented import (
    GpuProcess,
    Instrumentation,
    InstrumentationConfig,
    Uninstrumented,
)
from gleaner.runtime_agent.policy.memory import (
    Grow,
    MemoryAction,
    MemoryConfig,
    MemoryReservation,
    Release,
)
from gleaner.runtime_agent.policy.memory_sequence import (
    MemoryCommand,
    MemoryView,
    ReclaimHandles,
    RestoreDeferred,
    RestorePage,
    memory_command,
)
from gleaner.runtime_agent.policy.reclaim import (
    HandleMap,
    KvSpan,
    ReclaimPlan,
    ReclaimStep,
    StepKind,
    plan_reclamation,
    reclaim_cost,
    select_handles_fifo,
    select_handles_greedy,
)
from gleaner.runtime_agent.policy.reclaim_sequence import (
    Abandon,
    HoldEnded,
    ReclaimAbandoned,
    ReclaimCommand,
    ReclaimCompleted,
    ReclaimSequence,
    RestoreEnd,
    RestoreFinished,
    SendReclaim,
    SendRestore,
    reclaim_targets,
)

__all__ = [
    "HARVESTABLE_BUCKETS_GIB",
    "Abandon",
    "Accounting",
    "ComputeGate",
    "Disable",
    "Enable",
    "GateAction",
    "GateConfig",
    "GpuProcess",
    "GpuTotals",
    "Grow",
    "HandleMap",
    "HoldEnded",
    "Instrumentation",
    "InstrumentationConfig",
    "KvSpan",
    "MemoryAction",
    "MemoryCommand",
    "MemoryConfig",
    "MemoryReservation",
    "MemoryView",
    "PairTotals",
    "ReclaimAbandoned",
    "ReclaimCommand",
    "ReclaimCompleted",
    "ReclaimHandles",
    "ReclaimPlan",
    "ReclaimSequence",
    "ReclaimStep",
    "Release",
    "RestoreDeferred",
    "RestoreEnd",
    "RestoreFinished",
    "RestorePage",
    "SendReclaim",
    "SendRestore",
    "StepKind",
    "Totals",
    "Uninstrumented",
    "memory_command",
    "plan_reclamation",
    "reclaim_cost",
    "reclaim_targets",
    "select_handles_fifo",
    "select_handles_greedy",
    "to_nodetrace_status",
    "window_between",
    "window_summary",
]
