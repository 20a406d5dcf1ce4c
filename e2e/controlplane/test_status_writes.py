"""Status writes judged on a held copy of a job, against the real API server.

``gleaner.operator.jobs.update_status(known=body)`` writes without reading the job first
and sends the copy's ``metadata.resourceVersion`` as a precondition of its merge patch. Only
a real API server says what that precondition does on the ``status`` subresource (kmock
refuses nothing): a current copy is written as it is, a stale one is refused with 409 and
the change is judged again on the job as it is now, and a "nothing to do" found on a stale
copy is never trusted.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gleaner.api import OfflineJobStatus, Phase
from gleaner.clients.kube import Credentials, KubeClient, offlinejobs_path
from gleaner.operator import status as st
from gleaner.operator.config import OperatorConfig
from gleaner.operator.context import OperatorContext
from gleaner.operator.http import Health
from gleaner.operator.jobs import update_status
from gleaner.operator.metrics import OperatorMetrics
from gleaner.testing.controlplane import ControlPlane
from gleaner.testing.kube import offlinejob_manifest

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]


class CountingClient(KubeClient):
    """The real client, remembering the method and path of each request it sends, and the
    status of each refusal."""

    def __init__(self, credentials: Credentials) -> None:
        super().__init__(credentials)
        self.calls: list[tuple[str, str]] = []
        self.refused: list[int] = []

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        try:
            return await super()._request(method, path, **kwargs)
        except Exception as exc:
            self.refused.append(int(getattr(exc, "status", -1)))
            raise


def _valid(cur: OfflineJobStatus) -> OfflineJobStatus:
    return st.valid(cur, datetime.now(UTC), 1)


async def _scenario(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    client = CountingClient(Credentials.load(str(plane.admin_kubeconfig)))
    ctx = OperatorContext(
        config=OperatorConfig(), client=client, metrics=OperatorMetrics(), health=Health()
    )
    path = offlinejobs_path(namespace, "copy")
    out: dict[str, Any] = {}
    try:
        await client.create(
            offlinejobs_path(namespace), offlinejob_manifest("copy", namespace=namespace)
        )
        created = await client.get(path)
        assert created is not None
        written: list[dict[str, Any]] = []

        # 1. A current copy: one request, the patch, and the object it returned.
        client.calls.clear()
        new = await update_status(
            ctx,
            namespace,
            "copy",
            lambda _, cur: _valid(cur),
            known=created,
            on_written=written.append,
        )
        out["current"] = (new, list(client.calls), list(written))

        # 2. The copy goes stale (someone else writes the job), then a change judged on it.
        await client.patch(path, {"metadata": {"annotations": {"example.com/touched": "yes"}}})
        seen: list[Phase] = []

        def to_unschedulable(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus:
            seen.append(cur.phase)
            return st.unschedulable(cur, ["no node"], datetime.now(UTC), None)

        client.calls.clear()
        client.refused.clear()
        stale = written[-1]
        new = await update_status(ctx, namespace, "copy", to_unschedulable, known=stale)
        out["stale"] = (new, list(client.calls), list(client.refused), list(seen))

        # 3. "Nothing to do" on a stale copy (it still says Pending) is read again: the job
        # is Unschedulable now, which this change moves back to Pending.
        def back_to_pending(_: dict[str, Any], cur: OfflineJobStatus) -> OfflineJobStatus | None:
            if cur.phase is not Phase.UNSCHEDULABLE:
                return None
            return st.transition(cur, Phase.PENDING, "waiting for a placement")

        client.calls.clear()
        new = await update_status(ctx, namespace, "copy", back_to_pending, known=stale)
        out["noop"] = (new, list(client.calls))
        out["final"] = await client.get(path)
    finally:
        await client.close()
    return out


def test_a_held_copy_saves_the_read_and_a_stale_one_is_never_written(
    control_plane: ControlPlane, gleaner_crds: list[str], namespace: str
) -> None:
    out = asyncio.run(_scenario(control_plane, namespace))
    status_path = offlinejobs_path(namespace, "copy") + "/status"
    job_path = offlinejobs_path(namespace, "copy")

    new, calls, written = out["current"]
    assert new is not None and new.phase is Phase.PENDING
    assert calls == [("PATCH", status_path)]  # no GET
    assert written and written[0]["status"]["phase"] == "Pending"

    new, calls, refused, seen = out["stale"]
    # The API server refused the stale copy's version; the change ran again on a fresh read.
    assert refused == [409]
    assert calls == [("PATCH", status_path), ("GET", job_path), ("PATCH", status_path)]
    assert seen == [Phase.PENDING, Phase.PENDING]
    assert new is not None and new.phase is Phase.UNSCHEDULABLE

    new, calls = out["noop"]
    assert calls == [("GET", job_path), ("PATCH", status_path)]
    assert new is not None and new.phase is Phase.PENDING

    final = out["final"]
    assert final["status"]["phase"] == "Pending"
    assert final["metadata"]["annotations"]["example.com/touched"] == "yes"
    print(json.dumps(final["status"], indent=1)[:2000])
