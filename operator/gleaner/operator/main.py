"""All kopf registrations and settings of the Gleaner operator, in one place.

Contract: ``register(config)`` returns a fresh ``kopf.OperatorRegistry`` with every handler
of the operator (intervals come from ``config``); each handler is a few lines that unpack
kopf's kwargs and call one body in ``gleaner.operator.handlers``. ``run(config)`` runs kopf
with that registry (peering ``gleaner`` or standalone; cluster-wide or the given
namespaces) next to the HTTP server (``gleaner.operator.http``) and blocks until SIGINT /
SIGTERM; with ``--webhook-port`` the admission webhook (``gleaner.operator.webhook``) too,
on every replica; with ``--batch-api-port`` the Batch API (``gleaner.operator.batchapi``)
too. What is registered:

==========================================  ==============================================
``@on.startup``                             settings (below), the bias table (loaded from
                                            its ConfigMap), scheduling loop (which also
                                            wakes itself when a job's backoff passes),
                                            one SLA loop and one batch-progress loop
                                            over all Running jobs (``handlers.running``),
                                            readiness
``@on.login``                               in-cluster service account, else KUBECONFIG
``@on.cleanup``                             stop the loops, write the bias table if it
                                            changed, close the API client
``@on.event`` jobs                          ``handlers.jobs``: finalizer, deletion (Pods,
                                            then the finalizer), new spec to the pass or
                                            validated, Running jobs for the loops
``@on.event`` offline Pods                  ``handlers.pods``: Pod phase -> job phase
``@on.event`` NodeTraces                    ``handlers.requeue``: trace cache, kick (load changed)
``@on.event`` NodeHistories                 ``handlers.requeue``: hours-of-the-day cache
``@on.event`` Nodes                         ``handlers.nodes``: labels / cordon cache, kick
``@index`` jobs ``profile_refs``            (namespace, ConfigMap) -> jobs naming it in profileFrom
``@on.event`` ConfigMaps in the index       ``handlers.validate``: re-validate waiting users
==========================================  ==============================================

No kopf handler of OfflineJobs keeps state on the job: kopf adds no finalizer, progress or
diff-base and makes no patch of its own. Settings: kopf's own finalizer name is not
``gleaner.dev/finalizer`` (the operator manages that one, ``handlers.jobs``); kopf's
progress storage (unused by these handlers) would be annotations prefixed ``gleaner.dev``;
kopf keeps no diff-base (``NoDiffBase``: no handler reads one); kopf awaits the version of
its own patch for up to 30 s (not 5) before it handles a job on an older copy; kopf's own
Events only for warnings and errors (the operator posts its own: Scheduled,
FailedScheduling, InvalidSpec, SLAViolation...); watch requests time out server-side after
``--watch-timeout`` seconds (client 30 s later); peering priority from
``--peering-priority`` (random per process by default: kopf pauses every replica of a tie,
so replicas must differ; the highest live one is active).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kopf

from gleaner.api import GROUP, VERSION
from gleaner.api.contract import (
    KOPF_ANNOTATION_PREFIX,
    KOPF_FINALIZER,
    LABEL_ROLE,
    ROLE_OFFLINE,
)
from gleaner.clients.kube import Credentials, KubeClient, SyncKubeClient
from gleaner.clients.prometheus import PrometheusClient
from gleaner.operator.config import OperatorConfig
from gleaner.operator.context import OperatorContext
from gleaner.operator.handlers.batch import PROGRESS_INTERVAL, is_batch_job, track_batch
from gleaner.operator.handlers.bias import flush_bias, load_bias
from gleaner.operator.handlers.jobs import job_event
from gleaner.operator.handlers.move import move_loop
from gleaner.operator.handlers.nodes import node_changed
from gleaner.operator.handlers.pods import follow_pod
from gleaner.operator.handlers.requeue import nodehistory_event, nodetrace_event
from gleaner.operator.handlers.running import running_loop
from gleaner.operator.handlers.scheduling import scheduling_loop
from gleaner.operator.handlers.sla import monitor_sla
from gleaner.operator.handlers.validate import revalidate_profile_users
from gleaner.operator.http import Health, build_app, serve_in_thread
from gleaner.operator.metrics import OperatorMetrics
from gleaner.operator.validation import profile_configmap_name
from gleaner.operator.webhook import WebhookServer

if TYPE_CHECKING:
    from gleaner.operator.batchapi.server import BatchApiServer

logger = logging.getLogger("gleaner.operator")

JOBS = (GROUP, VERSION, "offlinejobs")
NODETRACES = (GROUP, VERSION, "nodetraces")
NODEHISTORIES = (GROUP, VERSION, "nodehistories")
KopfLogger = logging.Logger | logging.LoggerAdapter[Any]


def _always(_: dict[str, Any]) -> bool:
    return True


def _is_batch(body: dict[str, Any]) -> bool:
    return is_batch_job(body.get("spec"))


KOPF_CONSISTENCY_TIMEOUT = 30.0
"""Seconds kopf awaits the version of its own patch (kopf's default: 5)."""


class NoDiffBase(kopf.DiffBaseStorage):
    """A diff-base that is never kept. kopf builds one for every watch event of every
    object (a deep copy of the object) and reads it only for ``on.create`` / ``on.update``
    / ``on.delete`` / ``on.resume`` handlers and daemons, which this operator has none of
    (``changing_handlers`` says so, and a test holds ``register`` to it); its event handlers
    get the object itself."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def changing_handlers(registry: kopf.OperatorRegistry) -> int:
    """How many handlers of ``registry`` would read a diff-base (``NoDiffBase`` needs 0)."""
    return sum(
        len(list(reg.get_all_handlers())) for reg in (registry._changing, registry._spawning)
    )


def configure_settings(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    # kopf's finalizer is NOT ours: the operator adds and removes gleaner.dev/finalizer
    # itself (handlers.jobs), and kopf removes its own finalizer name from every object
    # no kopf handler needs it on, which is every object now.
    settings.persistence.finalizer = KOPF_FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    # No handler reads a diff-base: kopf's deep copy of every object on every event was an
    # eighth of the operator's CPU in a burst of jobs (docs/benchmarks.md).
    settings.persistence.diffbase_storage = NoDiffBase()
    # How long kopf waits for its own patch to come back through the watch before it runs
    # a job's handlers on the copy it has. kopf's 5 s ran out under load (a burst of jobs, a
    # busy API server), and kopf then ran the creation handler a second time on the copy
    # without its diff-base: a second validation and a second patch for every job.
    settings.persistence.consistency_timeout = KOPF_CONSISTENCY_TIMEOUT
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "gleaner-operator"
    # The API server parses timeoutSeconds as an integer: a float (300.0) gets every watch
    # refused with 400, which kmock never did (found on the real control plane).
    settings.watching.server_timeout = max(1, int(config.watch_timeout))
    settings.watching.client_timeout = config.watch_timeout + 30
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    if config.peering:
        settings.peering.name = config.peering
        settings.peering.mandatory = True
        settings.peering.lifetime = config.peering_lifetime
        settings.peering.priority = config.peering_priority
        settings.peering.clusterwide = config.clusterwide
    else:
        settings.peering.standalone = True


def connection_info(credentials: Credentials) -> kopf.ConnectionInfo:
    """kopf's login for ``credentials`` (kopf keeps its own connection for its watches)."""
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_path=credentials.ca_path,
        insecure=credentials.insecure,
        scheme="Bearer" if credentials.token else None,
        token=credentials.token,
        certificate_path=credentials.cert_path,
        private_key_path=credentials.key_path,
        default_namespace=credentials.namespace,
    )


def register(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry holding every handler of the operator (see the module docstring)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure_settings(settings, config)
        ctx: OperatorContext = memo.ctx
        if config.peering:
            logger.info("peering %r with priority %d", config.peering, config.peering_priority)
        await load_bias(ctx)
        ctx.loop_task = asyncio.create_task(scheduling_loop(ctx), name="gleaner-scheduling")
        ctx.side_tasks = [
            asyncio.create_task(
                running_loop(ctx, config.sla.window_seconds, _always, monitor_sla, "SLA"),
                name="gleaner-sla",
            ),
            asyncio.create_task(
                running_loop(ctx, PROGRESS_INTERVAL, _is_batch, track_batch, "batch progress"),
                name="gleaner-batch",
            ),
        ]
        if config.move_check_interval > 0:
            ctx.side_tasks.append(asyncio.create_task(move_loop(ctx), name="gleaner-move"))
        ctx.health.started = True

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        # kopf connects with what our own client loads (one loader, read again on each
        # re-login, so rotated service-account tokens are picked up).
        return connection_info(Credentials.load())

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        ctx: OperatorContext = memo.ctx
        for task in [*([ctx.loop_task] if ctx.loop_task else []), *ctx.side_tasks]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await flush_bias(ctx, final=True)
        await ctx.client.close()

    # One handler for every event of a job (no kopf state machine: no progress or diff-base
    # stored, no kopf patch); see handlers.jobs.
    @kopf.on.event(*JOBS, id="job", registry=registry)
    async def job_event_handler(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, logger: KopfLogger, **_: Any
    ) -> None:
        kind = event.get("type")
        outcome = await job_event(memo.ctx, kind, dict(body))
        if kind is None:  # kopf's initial listing: a (re)started operator found the job
            logger.info("resumed: %s", outcome)
        elif outcome not in ("unchanged", "queued for validation"):
            logger.info("%s", outcome)

    @kopf.on.event("v1", "pods", id="follow", labels={LABEL_ROLE: ROLE_OFFLINE}, registry=registry)
    async def pod_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await follow_pod(memo.ctx, event.get("type"), dict(body))

    @kopf.on.event(*NODETRACES, id="nodetrace", registry=registry)
    async def nodetrace_event_handler(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        nodetrace_event(memo.ctx, event.get("type"), dict(body))

    @kopf.on.event(*NODEHISTORIES, id="nodehistory", registry=registry)
    async def nodehistory_event_handler(
        event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        nodehistory_event(memo.ctx, event.get("type"), dict(body))

    @kopf.index(*JOBS, id="profile_refs", registry=registry)
    async def profile_refs(body: kopf.Body, **_: Any) -> dict[tuple[str, str], str] | None:
        # (namespace, ConfigMap name) -> the jobs whose spec.profileFrom names it. Async: kopf
        # runs a plain function on a worker thread, for every event of every job.
        cm_name = profile_configmap_name(dict(body))
        if cm_name is None:
            return None
        return {(body.metadata.namespace or "default", cm_name): body.metadata.name or ""}

    # kopf passes each index as a keyword argument named by its id.
    def _is_profile(name: str, namespace: str | None, **kwargs: Any) -> bool:
        # A dict lookup per ConfigMap event: only ConfigMaps some job names get a handler.
        refs: kopf.Index[tuple[str, str], str] = kwargs["profile_refs"]
        return (namespace or "default", name) in refs

    @kopf.on.event("v1", "configmaps", id="profiles", when=_is_profile, registry=registry)
    async def profile_event(
        name: str, namespace: str | None, memo: kopf.Memo, logger: KopfLogger, **kwargs: Any
    ) -> None:
        ns = namespace or "default"
        refs: kopf.Index[tuple[str, str], str] = kwargs["profile_refs"]
        users = list(refs.get((ns, name), []))
        outcomes = await revalidate_profile_users(memo.ctx, ns, name, users)
        if outcomes:
            logger.info("profile ConfigMap %s/%s changed: %s", ns, name, outcomes)

    @kopf.on.event("v1", "nodes", id="nodes", registry=registry)
    async def node_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        node_changed(memo.ctx, event.get("type"), dict(body))

    return registry


def start_webhook(config: OperatorConfig) -> WebhookServer | None:
    """The admission webhook's TLS server, started, when ``config`` enables it."""
    if not config.webhook_port:
        return None
    cert_dir = Path(config.webhook_cert_dir)
    return WebhookServer(
        str(cert_dir / "tls.crt"),
        str(cert_dir / "tls.key"),
        config.webhook_host,
        config.webhook_port,
    ).start()


def start_batch_api(config: OperatorConfig, client: KubeClient) -> BatchApiServer | None:
    """The Batch API's server (gleaner.operator.batchapi), started, when ``config`` enables
    it: over HTTPS with ``batch_api_cert_dir``, with its expiry timer; on every replica,
    like the webhook (docs/batch.md: one replica serves its files)."""
    if not config.batch_api_port:
        return None
    from gleaner.operator.batchapi.files import FileStore
    from gleaner.operator.batchapi.server import BatchApiServer

    store = FileStore(Path(config.batch_api_dir), config.batch_api_max_file_bytes)
    kube = SyncKubeClient.sharing(client, asyncio.get_running_loop())
    return BatchApiServer(
        store,
        kube,
        config.batch_api_url,
        config.batch_api_host,
        config.batch_api_port,
        cert_dir=config.batch_api_cert_dir,
        expiry_interval_s=config.batch_api_expiry_interval,
    ).start()


async def run_async(config: OperatorConfig, stop: asyncio.Event | None = None) -> None:
    """Run the operator until ``stop`` is set or kopf exits (signals stop kopf)."""
    metrics = OperatorMetrics()
    health = Health()
    credentials = await asyncio.to_thread(Credentials.load)
    ctx = OperatorContext(
        config=config,
        client=KubeClient(credentials),
        metrics=metrics,
        health=health,
        prometheus=PrometheusClient(config.prometheus_url, timeout_seconds=10.0)
        if config.prometheus_url
        else None,
    )
    # Started before kopf logs in, served by every replica (peering only pauses kopf).
    webhook = start_webhook(config)
    server = None
    if config.http_port:
        from gleaner.operator.http import extra_routers

        # The dashboard reads the cluster through the operator's own client (one pool).
        kube = SyncKubeClient.sharing(ctx.client, asyncio.get_running_loop())
        routers = extra_routers(
            kube,
            config.sla,
            config.state_namespace,
            config.risk_target,
            lambda: ctx.judged,
            config.trace_stale_after,
        )
        app = build_app(health, metrics.registry, routers)
        server = serve_in_thread(app, config.http_host, config.http_port)
    batch_api = start_batch_api(config, ctx.client)
    try:
        await kopf.operator(
            registry=register(config),
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            standalone=config.peering is None,
            peering_name=config.peering,
            priority=config.peering_priority if config.peering else None,
            memo=kopf.Memo(ctx=ctx),
            stop_flag=stop,
        )
    finally:
        if server is not None:
            server.stop()
        if webhook is not None:
            webhook.stop()
        if batch_api is not None:
            batch_api.stop()


class QuietRoutine(logging.Filter):
    """Drops kopf's success lines of the handlers that run for every object, all the time.

    ``job`` runs for every OfflineJob change (each status write comes back as one),
    ``nodetrace`` for every agent report, ``follow`` and ``nodes`` for every Pod and Node
    change: at INFO their successes would be most of the log. Their failures and retries,
    and every other line, stay; ``--verbose`` shows everything.
    """

    ROUTINE = frozenset(
        f"Handler {name!r} succeeded." for name in ("job", "nodetrace", "follow", "nodes")
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.ROUTINE


def run(config: OperatorConfig) -> None:
    kopf.configure(verbose=config.verbose, debug=config.verbose)
    if not config.verbose:
        logging.getLogger("kopf.objects").addFilter(QuietRoutine())
    asyncio.run(run_async(config))
