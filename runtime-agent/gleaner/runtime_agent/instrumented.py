"""The shell of the uninstrumented-process guard (docs/agent.md, "Uninstrumented processes").

Contract. :class:`InstrumentationWatch` owns the node's
:class:`~gleaner.runtime_agent.policy.Instrumentation` and keeps the gates of a
:class:`~gleaner.runtime_agent.core.NodeAgent` held while it answers ``held``:

- :meth:`InstrumentationWatch.poll` reads each GPU's processes (a ``running_pids`` callable,
  NVML's in the daemon; None or an unknown GPU: the list is unknown), names each pid's pod
  from ``/proc/<pid>/cgroup`` (the kubelet's cgroup path carries the pod UID; a
  ``pod_name`` callable turns it into ``namespace/name`` when it can; only with
  ``match="pids"``: a pid from another pid namespace would name the wrong process), reads
  which pods hold each GPU (a ``gpu_holders`` callable, the kubelet's PodResources API in
  the daemon: GPU index → pods, None: unknown), feeds the policy and applies the holds;
- :meth:`InstrumentationWatch.apply` applies the holds now (the shim server calls it after a
  connect or a disconnect, so a lost online shim closes the gate at once, not at the next
  poll);
- :meth:`InstrumentationWatch.report` is the per-GPU list for the NodeTrace and /metrics.

Pids are the driver's; they match the shims' HELLO pids only when the agent and the
workloads see the same pids (``match="pids"``, an agent with the host's pid namespace). The
chart runs the agent without it (``match="count"``): processes are counted per GPU and the
kubelet names the pods that hold each GPU (docs/agent.md, "Uninstrumented processes").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gleaner.runtime_agent.core import NodeAgent
from gleaner.runtime_agent.policy.instrumented import (
    GpuProcess,
    Instrumentation,
    InstrumentationConfig,
    Uninstrumented,
)

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD_UID = re.compile(rf"pod({_UID})")
"""The kubelet's pod cgroup: ``kubepods-besteffort-pod<uid>.slice`` (systemd driver, ``_``
for ``-``) or ``/kubepods/burstable/pod<uid>/`` (cgroupfs driver)."""


def pod_uid_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The UID of the pod whose cgroup holds ``pid`` (None: not a pod's, or unreadable)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    found = _POD_UID.search(text)
    return None if found is None else found.group(1).replace("_", "-")


class InstrumentationWatch:
    """See the module docstring."""

    def __init__(
        self,
        agent: NodeAgent,
        config: InstrumentationConfig,
        *,
        running_pids: Callable[[int], Sequence[int] | None] | None = None,
        pod_name: Callable[[str], str | None] | None = None,
        gpu_holders: Callable[[], Mapping[int, Sequence[str]] | None] | None = None,
        proc_root: Path = Path("/proc"),
    ) -> None:
        self.agent = agent
        self.policy = Instrumentation(agent.gpus, config)
        self.running_pids = running_pids
        self.pod_name = pod_name
        self.gpu_holders = gpu_holders
        self.proc_root = proc_root

    def poll(self, t: float) -> None:
        """Read the process lists, feed them to the policy, apply the holds."""
        holders = None if self.gpu_holders is None else self.gpu_holders()
        for gpu in self.agent.gpus:
            pids = None if self.running_pids is None else self.running_pids(gpu)
            procs = None if pids is None else [GpuProcess(pid, self._pod(pid)) for pid in pids]
            self.policy.set_processes(t, gpu, procs)
            self.policy.set_holders(t, gpu, None if holders is None else holders.get(gpu, ()))
        self.apply(t)

    def apply(self, t: float) -> None:
        """Hold every GPU the policy says must stay closed; let the others go."""
        for gpu in self.agent.gpus:
            self.agent.hold(t, gpu, self.policy.held(gpu, t))

    def report(self, t: float) -> dict[int, tuple[Uninstrumented, ...]]:
        """GPU → its uninstrumented processes now (GPUs without any left out)."""
        out: dict[int, tuple[Uninstrumented, ...]] = {}
        for gpu in self.agent.gpus:
            found = self.policy.uninstrumented(gpu, t)
            if found:
                out[gpu] = found
        return out

    def _pod(self, pid: int) -> str:
        if self.policy.config.match != "pids":
            return ""
        uid = pod_uid_of(pid, self.proc_root)
        if uid is None:
            return ""
        name = None if self.pod_name is None else self.pod_name(uid)
        return name or f"uid {uid}"
