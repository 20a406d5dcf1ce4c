"""One scheduling cycle: place a queue of jobs on free GPUs with SLA guarantees (pure).

Contract. ``schedule(jobs, cluster, config, now)`` considers jobs in queue order
(``gleaner.scheduler.job.queue_order``: most GPUs first, then hardest SLA, priority,
arrival) and gives each the best feasible GPU set, updating occupancy as it goes, so
later jobs see earlier placements. A placement is *feasible* when the node passes every
node filter and the set passes every set filter; among feasible sets the weighted score
decides (ties: node name, then GPU positions). Nothing is ever placed that the
performance model (times the learned bias) predicts below the job's SLA.

How it stays fast (1,000 jobs onto 10,000 GPUs in well under 2 s on one core):

1. per job, node filters are boolean masks over all nodes, and per-GPU necessary
   conditions (``SetFilter.slot_mask``: e.g. compute * memory * bias >= SLA) prune GPUs;
2. candidate sets come from the view's precomputed table of aligned sets (cliques of
   the alignment graph), kept when all their GPUs survived step 1 — one vectorized pass;
3. set filters and scores run on the whole candidate batch at once. For one GPU the
   model is exact here (single-GPU P_memory for every GPU comes from ``GpuFleet``);
   for k > 1 the joint memory factor is bounded above by the minimum single-GPU one,
   so the batch is ranked by its estimated score and then evaluated exactly
   (``subset_factors``) ``exact_batch`` at a time until a round yields a feasible set;
   the best-scoring feasible set of that round wins.

Every placement carries the :class:`~gleaner.scheduler.explain.NodeExplanation` of its
chosen set (every factor, the bias, every filter's verdict); :func:`explain_nodes` and
:func:`explain_set` answer the same question for any other node or set. :func:`decide`
is the entry the shells call, with a :class:`~gleaner.scheduler.cluster.SchedulingSnapshot`.

Work per job is proportional to the GPUs (and aligned sets) of the cluster, so a cycle
grows linearly with the cluster. Jobs that fit nowhere are explained (when
``config.explain``): every node is assigned to the first filter that rejects it (for set
filters: the one that rejects its most promising set) and the counts per reason are
reported. Explanations are cached per job shape until the next placement.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace

import numpy as np

from gleaner.perfmodel.admission import corrected
from gleaner.perfmodel.model import predict, subset_factors
from gleaner.scheduler.cluster import ClusterState, SchedulingSnapshot
from gleaner.scheduler.config import SchedulerConfig
from gleaner.scheduler.explain import NodeExplanation, Rule, runner_up_reasons
from gleaner.scheduler.framework import (
    BoolArray,
    CandidateBatch,
    FloatArray,
    IntArray,
    JobContext,
)
from gleaner.scheduler.gpusets import aligned_sets
from gleaner.scheduler.job import JobRequest, queue_order
from gleaner.scheduler.registry import Plugins, build_plugins
from gleaner.scheduler.result import PlacementDecision, ScheduleResult, Unschedulable
from gleaner.scheduler.view import ClusterView


def decide(snapshot: SchedulingSnapshot, config: SchedulerConfig | None = None) -> ScheduleResult:
    """The one entry to scheduling: place ``snapshot.jobs`` on the cluster it describes.

    The operator, ``gleaner place`` and the simulator call this with the snapshot they
    built; each placement carries the explanation that chose it.
    """
    return schedule(snapshot.jobs, snapshot.state(), config, now=snapshot.clock)


def explain_nodes(
    snapshot: SchedulingSnapshot,
    job: JobRequest,
    config: SchedulerConfig | None = None,
    skip: Iterable[str] = (),
) -> list[NodeExplanation]:
    """Why ``job`` would or would not go to each node of ``snapshot`` (but ``skip``), by name.

    Each node is judged as the cycle would judge it now: its node filters, then the set
    the cycle would choose there (else the most promising one) against the set filters.
    """
    scheduler = Scheduler(snapshot.state(), config or SchedulerConfig())
    ctx = scheduler.context(job)
    masks = scheduler.node_masks(ctx)
    skipped = set(skip)
    return [
        scheduler.explain_node(ctx, row, masks)
        for row, name in enumerate(scheduler.view.names)
        if name not in skipped
    ]


def explain_runner_ups(
    snapshot: SchedulingSnapshot,
    placed: Sequence[tuple[JobRequest, NodeExplanation]],
    config: SchedulerConfig | None = None,
    limit: int | None = None,
) -> list[tuple[str, ...]]:
    """For each (job, the explanation of its placement), why the job did not go to each
    other node of ``snapshot`` (``runner_up_reasons`` of what ``explain_nodes`` says), over
    one view of the cluster: the one "why not node X" of ``gleaner place`` and the operator."""
    if not placed:
        return []
    scheduler = Scheduler(snapshot.state(), config or SchedulerConfig())
    return [
        runner_up_reasons(
            chosen, scheduler.runner_ups(scheduler.context(job), chosen, limit), limit
        )
        for job, chosen in placed
    ]


def explain_set(
    snapshot: SchedulingSnapshot,
    job: JobRequest,
    node: str,
    gpus: Sequence[int],
    config: SchedulerConfig | None = None,
) -> NodeExplanation:
    """Why ``job`` may or may not use GPUs ``gpus`` (indices) of ``node``.

    Raises ValueError for an unknown node, unknown or duplicate GPUs, or a set whose size
    is not the job's.
    """
    scheduler = Scheduler(snapshot.state(), config or SchedulerConfig())
    row = scheduler.view.row.get(node)
    if row is None:
        raise ValueError(f"unknown node {node!r}")
    if len(gpus) != job.gpus:
        raise ValueError(f"job {job.key} runs on {job.gpus} GPU(s), the set has {len(gpus)}")
    positions = scheduler.view.summaries[row].positions([int(g) for g in gpus])
    return scheduler.explain_positions(scheduler.context(job), row, positions)


def schedule(
    jobs: Iterable[JobRequest],
    cluster: ClusterState,
    config: SchedulerConfig | None = None,
    now: float | None = None,
) -> ScheduleResult:
    """Place ``jobs`` on ``cluster`` (see the module docstring).

    When ``now`` is given, jobs whose ``not_before`` is later are only listed as deferred.
    """
    cfg = config or SchedulerConfig()
    return Scheduler(cluster, cfg).run(jobs, now)


class Scheduler:
    """The cycle's machinery over one ClusterView; ``run`` is the whole cycle."""

    def __init__(self, cluster: ClusterState, config: SchedulerConfig) -> None:
        self.config = config
        self.plugins: Plugins = build_plugins(config)
        self.view = ClusterView(cluster, self.plugins.pair_threshold, config.max_sets_per_node)
        self._explained: dict[Hashable, tuple[str, ...]] = {}
        self._explained_version = -1

    # -- the cycle ----------------------------------------------------------------------

    def run(self, jobs: Iterable[JobRequest], now: float | None = None) -> ScheduleResult:
        placements: list[PlacementDecision] = []
        unschedulable: list[Unschedulable] = []
        deferred: list[str] = []
        seen: set[str] = set()
        for job in queue_order(jobs, self.config.sla_step):
            if job.key in seen:
                raise ValueError(f"job {job.key} is queued twice")
            seen.add(job.key)
            if now is not None and job.not_before is not None and job.not_before > now:
                deferred.append(job.key)
                continue
            ctx = self.context(job)
            decision = self.place(ctx)
            if decision is not None:
                placements.append(decision)
            else:
                unschedulable.append(self.explain(ctx))
        return ScheduleResult(placements, unschedulable, deferred)

    def context(self, job: JobRequest) -> JobContext:
        view = self.view
        bias = view.bias(job.job_class)
        memory = view.memory(job.profile)
        return JobContext(
            job=job,
            view=view,
            config=self.config,
            allowed=view.allowed(job.products),
            bias=bias,
            memory=memory,
            estimate=view.compute * memory * bias[:, None],
        )

    # -- placing one job ----------------------------------------------------------------

    def node_mask(self, ctx: JobContext) -> BoolArray:
        ok = np.ones(self.view.n_nodes, dtype=bool)
        for f in self.plugins.node_filters:
            ok &= f.mask(ctx)
        return ok

    def slot_mask(self, ctx: JobContext) -> BoolArray:
        ok = ctx.allowed & self.view.free
        for f in self.plugins.set_filters:
            extra = f.slot_mask(ctx)
            if extra is not None:
                ok = ok & extra
        return ok

    def node_candidates(self, ctx: JobContext, row: int, slot_ok: BoolArray) -> CandidateBatch:
        """``candidates`` on node ``row`` alone, reading only that node's rows of the table."""
        view = self.view
        table = view.table(ctx.k)
        okmask = int(view.pack(slot_ok[row : row + 1])[0])
        start, end = int(table.node_start[row]), int(table.node_start[row + 1])
        rows = start + np.flatnonzero((table.mask[start:end] & ~okmask) == 0)
        batch = self._batch(ctx, rows.astype(np.int64))
        if table.truncated[row] and batch.size == 0:
            batch = _concat([batch, self._dynamic(ctx, row, okmask)])
        return batch

    def candidates(self, ctx: JobContext, node_ok: BoolArray, slot_ok: BoolArray) -> CandidateBatch:
        """Aligned sets whose GPUs all pass ``slot_ok`` on nodes passing ``node_ok``.

        ``memory`` is the single-GPU bound (exact for k = 1).
        """
        view, k = self.view, ctx.k
        table = view.table(k)
        okmask = view.pack(slot_ok)
        node = table.node
        rows = np.flatnonzero(node_ok[node] & ((table.mask & ~okmask[node]) == 0))
        batch = self._batch(ctx, rows)
        # Nodes whose enumeration was cut: search again within the GPUs that survived.
        cut = np.flatnonzero(table.truncated & node_ok)
        if cut.size:
            have = np.zeros(view.n_nodes, dtype=bool)
            have[batch.node] = True
            extra = [self._dynamic(ctx, int(i), int(okmask[i])) for i in cut if not have[i]]
            batch = _concat([batch, *extra])
        return batch

    def _batch(self, ctx: JobContext, rows: IntArray) -> CandidateBatch:
        table = self.view.table(ctx.k)
        node = table.node[rows]
        return CandidateBatch(
            row=rows,
            node=node,
            mask=table.mask[rows],
            slots=table.slots[rows],
            compute=table.compute[rows],
            memory=self.view.memory_bound(ctx.job.profile, ctx.k)[rows],
            multi=table.multi[rows],
            bias=ctx.bias[node],
            neighbours=table.neighbours[rows],
            exact=ctx.k == 1,
        )

    def _dynamic(self, ctx: JobContext, node_row: int, within: int) -> CandidateBatch:
        """Aligned sets of a node searched within ``within`` (for cut enumerations)."""
        view, k = self.view, ctx.k
        masks, _ = aligned_sets(view.adj[node_row], k, self.config.max_sets_per_node, within)
        if not masks:
            return _empty(k)
        sets = [[p for p in range(view.width) if m >> p & 1] for m in masks]
        return self._positions_batch(ctx, node_row, sets)

    def exact(self, ctx: JobContext, batch: CandidateBatch) -> CandidateBatch:
        """The batch with the joint (tightest-GPU) memory factor instead of its bound."""
        if batch.exact:
            return batch
        memory = batch.memory.copy()
        cached = batch.row >= 0
        if cached.any():
            memory[cached] = self.view.exact_memory(ctx.job.profile, ctx.k, batch.row[cached])
        return replace(batch, memory=memory, exact=True)

    def passes(self, ctx: JobContext, batch: CandidateBatch) -> BoolArray:
        ok = np.ones(batch.size, dtype=bool)
        for f in self.plugins.set_filters:
            if not ok.any():
                break
            ok &= f.check(ctx, batch)
        return ok

    def score(self, ctx: JobContext, batch: CandidateBatch) -> FloatArray:
        total = np.zeros(batch.size)
        weights = 0.0
        for plugin, weight in self.plugins.scores:
            total += weight * plugin.score(ctx, batch)
            weights += weight
        return total / weights if weights > 0 else total

    def place(self, ctx: JobContext) -> PlacementDecision | None:
        """Choose and commit the best feasible set for ``ctx.job``, or None."""
        node_ok = self.node_mask(ctx)
        if not node_ok.any():
            return None
        batch = self.candidates(ctx, node_ok, self.slot_mask(ctx))
        ok = self.passes(ctx, batch)
        if not ok.all():  # a copy of every array of the batch: only when some set failed
            batch = batch.take(ok)
        if batch.size == 0:
            return None
        if batch.exact:
            chosen = batch.take([int(np.argmax(self.score(ctx, batch)))])
        else:
            chosen_or_none = self._exact_rounds(ctx, batch)
            if chosen_or_none is None:
                return None
            chosen = chosen_or_none
        return self._commit(ctx, chosen)

    def _exact_rounds(self, ctx: JobContext, batch: CandidateBatch) -> CandidateBatch | None:
        step = self.config.exact_batch
        keys = -self.score(ctx, batch)
        order = _first_of_order(keys, step)
        for start in range(0, batch.size, step):
            if order.size < min(start + step, keys.size):
                order = np.argsort(keys, kind="stable")  # past the first round: all of it
            chunk = self.exact(ctx, batch.take(order[start : start + step]))
            chunk = chunk.take(self.passes(ctx, chunk))
            if chunk.size:
                scores = self.score(ctx, chunk)
                # Ties: node row, then mask (the table order), for determinism.
                best = np.lexsort((chunk.mask, chunk.node, -scores))[0]
                return chunk.take([int(best)])
        return None

    def _commit(self, ctx: JobContext, chosen: CandidateBatch) -> PlacementDecision:
        view, job = self.view, ctx.job
        node_row = int(chosen.node[0])
        slots = chosen.slots[0]
        gpus = view.gpu_indices(node_row, slots)
        bias = float(chosen.bias[0])
        prediction = predict(
            job.profile,
            job.sla,
            view.summaries[node_row],
            gpus,
            self.config.model,
            job=job.key,
            bias=bias,
        )
        score = float(self.score(ctx, chosen)[0])
        # The chosen node passed every node filter (``place`` masked by them): no need to
        # evaluate the masks again, only to word the passes.
        passed = [Rule(f.name, True, f.passed(ctx)) for f in self.plugins.node_filters]
        explanation = self._explanation(ctx, node_row, passed, chosen)
        decision = PlacementDecision(
            job=job.key,
            node=view.names[node_row],
            gpus=gpus,
            gpu_uuids=view.gpu_uuids(node_row, slots),
            prediction=prediction,
            bias=bias,
            score=score,
            explanation=replace(explanation, score=score),
        )
        view.place(node_row, slots)
        return decision

    # -- explaining one node ------------------------------------------------------------

    def _node_rules(
        self, ctx: JobContext, row: int, masks: Sequence[BoolArray] | None = None
    ) -> list[Rule]:
        """The node filters' verdicts on node ``row``, up to the first that rejects it (as
        the cycle counts a node under its first reason; later ones would only repeat it,
        e.g. "no free GPU" after a gpuSelector that allows none)."""
        rules = []
        for i, f in enumerate(self.plugins.node_filters):
            ok = bool((f.mask(ctx) if masks is None else masks[i])[row])
            text = f.passed(ctx) if ok else f.reasons(ctx, np.array([row], dtype=np.int64))[0]
            rules.append(Rule(f.name, ok, text))
            if not ok:
                break
        return rules

    def _explanation(
        self, ctx: JobContext, row: int, rules: list[Rule], one: CandidateBatch | None
    ) -> NodeExplanation:
        job = ctx.job
        base = NodeExplanation(
            job=job.key,
            node=self.view.names[row],
            sla=job.sla,
            rules=tuple(rules),
            bias=float(ctx.bias[row]),
        )
        if one is None:
            return base
        rules = rules + [Rule(f.name, *f.judge(ctx, one)) for f in self.plugins.set_filters]
        return replace(
            base,
            rules=tuple(rules),
            gpus=self.view.gpu_indices(row, one.slots[0]),
            compute=float(one.compute[0]),
            memory=float(one.memory[0]),
            multi_gpu=float(one.multi[0]),
        )

    def runner_ups(
        self, ctx: JobContext, chosen: NodeExplanation, limit: int | None
    ) -> list[NodeExplanation]:
        """The explanations (``explain_node``) of the nodes other than ``chosen``'s that
        ``runner_up_reasons(chosen, ..., limit)`` can name: every one without a limit, else
        only as many as it takes to know the closest ``limit``.

        ``runner_up_reasons`` ranks feasible nodes by predicted fraction (then name) ahead
        of the rest. A node's explained fraction is at most the best single-GPU-memory
        bound among its sets, so nodes are explained in the order of that bound, and the
        rest are left once ``limit`` feasible ones rank ahead of the next node's bound.
        Fewer than ``limit`` feasible nodes: every node is explained, as without a limit.
        """
        view = self.view
        masks = self.node_masks(ctx)
        skip = view.row.get(chosen.node, -1)
        everyone = [r for r in range(view.n_nodes) if r != skip]
        if limit is None or limit <= 0:
            return [self.explain_node(ctx, r, masks) for r in everyone]
        node_ok = np.ones(view.n_nodes, dtype=bool)
        for m in masks:
            node_ok &= m
        bound = self._fraction_bounds(ctx, node_ok)
        order = [int(r) for r in np.lexsort((np.arange(view.n_nodes), -bound)) if node_ok[r]]
        done: dict[int, NodeExplanation] = {}
        ranked: list[tuple[bool, float, str]] = []
        for row in order:
            if len(ranked) >= limit and ranked[limit - 1] < (
                False,
                -float(bound[row]),
                view.names[row],
            ):
                return list(done.values())
            if row == skip:
                continue
            explained = self.explain_node(ctx, row, masks)
            done[row] = explained
            if explained.feasible:
                ranked.append((False, -(explained.throughput_fraction or 0.0), explained.node))
                ranked.sort()
        if len(ranked) >= limit:
            return list(done.values())
        return [done.get(r) or self.explain_node(ctx, r, masks) for r in everyone]

    def _fraction_bounds(self, ctx: JobContext, node_ok: BoolArray) -> FloatArray:
        """[N] at least the predicted fraction ``explain_node`` can report for a feasible
        node (its sets' products with the single-GPU memory bound, plus a margin for
        rounding); +inf where the table does not hold every set it may judge."""
        view = self.view
        table = view.table(ctx.k)
        okmask = view.pack(ctx.allowed & view.free)
        node = table.node
        rows = np.flatnonzero(node_ok[node] & ((table.mask & ~okmask[node]) == 0))
        product = corrected(
            table.compute[rows]
            * view.memory_bound(ctx.job.profile, ctx.k)[rows]
            * table.multi[rows],
            ctx.bias[node[rows]],
        )
        bound = np.full(view.n_nodes, -np.inf)
        np.maximum.at(bound, node[rows], product + _BOUND_MARGIN)
        bound[(table.truncated | (bound == -np.inf)) & node_ok] = np.inf
        return bound

    def node_masks(self, ctx: JobContext) -> list[BoolArray]:
        """Each node filter's mask for ``ctx`` (in configured order), to judge many nodes of
        one job on the same occupancy (``explain_node``'s ``masks``)."""
        return [f.mask(ctx) for f in self.plugins.node_filters]

    def explain_node(
        self, ctx: JobContext, row: int, masks: Sequence[BoolArray] | None = None
    ) -> NodeExplanation:
        """Why ``ctx.job`` would or would not go to node ``row`` (``explain_nodes``);
        ``masks``: ``node_masks(ctx)`` when many nodes are judged at once."""
        rules = self._node_rules(ctx, row, masks)
        if not all(r.passed for r in rules):
            return self._explanation(ctx, row, rules, None)
        batch = self.exact(ctx, self.node_candidates(ctx, row, ctx.allowed & self.view.free))
        if batch.size == 0:
            # No set passes the alignment graph: judge the best unaligned set instead, so
            # that the pair rule says which pairs fail.
            free = np.flatnonzero(ctx.allowed[row] & self.view.free[row])
            combos = itertools.islice(
                itertools.combinations(free.tolist(), ctx.k), self.config.max_sets_per_node
            )
            batch = self._positions_batch(ctx, row, list(combos))
        if batch.size == 0:
            graphs = [f.name for f in self.plugins.set_filters if f.pair_threshold is not None]
            name = graphs[0] if graphs else "GPUFree"
            rules.append(Rule(name, False, self._no_sets_reason(ctx)))
            return self._explanation(ctx, row, rules, None)
        ok = self.passes(ctx, batch)
        if ok.any():
            feasible = batch.take(ok)
            scores = self.score(ctx, feasible)
            best = int(np.lexsort((feasible.mask, -scores))[0])
            one = feasible.take([best])
            return replace(self._explanation(ctx, row, rules, one), score=float(scores[best]))
        progress = np.zeros(batch.size, dtype=np.int64)
        still = np.ones(batch.size, dtype=bool)
        for f in self.plugins.set_filters:
            still &= f.check(ctx, batch)
            progress += still
        best = int(np.lexsort((batch.mask, -batch.product, -progress))[0])
        return self._explanation(ctx, row, rules, batch.take([best]))

    def explain_positions(
        self, ctx: JobContext, row: int, positions: Sequence[int]
    ) -> NodeExplanation:
        """The explanation of one given set (GPU ``positions``) of node ``row``."""
        one = self._positions_batch(ctx, row, [tuple(positions)])
        explanation = self._explanation(ctx, row, self._node_rules(ctx, row), one)
        if explanation.feasible:
            explanation = replace(explanation, score=float(self.score(ctx, one)[0]))
        return explanation

    def _positions_batch(
        self, ctx: JobContext, row: int, sets: Sequence[Sequence[int]]
    ) -> CandidateBatch:
        """An exact batch of the given GPU position sets of node ``row``."""
        if not sets:
            return _empty(ctx.k)
        view = self.view
        slots = np.array([list(p) for p in sets], dtype=np.int64)
        masks = [_or(1 << int(p) for p in r) for r in slots.tolist()]
        compute, memory, multi = subset_factors(ctx.job.profile, view.summaries[row], slots)
        adj = view.adj[row]
        neighbours = np.array(
            [_or(adj[p] for p in r) & ~m for r, m in zip(slots.tolist(), masks, strict=True)],
            dtype=np.int64,
        )
        n = len(masks)
        return CandidateBatch(
            row=np.full(n, -1, dtype=np.int64),
            node=np.full(n, row, dtype=np.int64),
            mask=np.asarray(masks, dtype=np.int64),
            slots=slots,
            compute=compute,
            memory=memory,
            multi=multi,
            bias=np.full(n, ctx.bias[row]),
            neighbours=neighbours,
            exact=True,
        )

    # -- explaining a job that fits nowhere ---------------------------------------------

    def explain(self, ctx: JobContext) -> Unschedulable:
        total = self.view.n_nodes
        if not self.config.explain:
            return Unschedulable(
                ctx.job.key, ("no feasible GPU set (explanations disabled)",), total
            )
        job = ctx.job
        key = (
            job.profile,
            job.gpus,
            job.sla,
            job.selector_key,
            job.excluded_nodes,
            job.job_class,
        )
        if self._explained_version != self.view.version:
            self._explained.clear()
            self._explained_version = self.view.version
        reasons = self._explained.get(key)
        if reasons is None:
            reasons = self._explain_counts(ctx)
            self._explained[key] = reasons
        return Unschedulable(job.key, reasons, total)

    def _explain_counts(self, ctx: JobContext) -> tuple[str, ...]:
        view = self.view
        counts: Counter[str] = Counter()
        alive = np.ones(view.n_nodes, dtype=bool)
        for f in self.plugins.node_filters:
            ok = f.mask(ctx)
            failing = np.flatnonzero(alive & ~ok)
            counts.update(f.reasons(ctx, failing))
            alive &= ok
        remaining = np.flatnonzero(alive)
        if remaining.size:
            batch = self.candidates(ctx, alive, ctx.allowed & view.free)
            batch = self.exact(ctx, batch)
            have = np.zeros(view.n_nodes, dtype=bool)
            have[batch.node] = True
            no_sets = int((alive & ~have).sum())
            if no_sets:
                counts[self._no_sets_reason(ctx)] += no_sets
            if batch.size:
                self._count_set_failures(ctx, batch, counts)
        return tuple(
            f"{n} {text}" for text, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )

    def _no_sets_reason(self, ctx: JobContext) -> str:
        for f in self.plugins.set_filters:
            if f.pair_threshold is not None:
                return f.no_sets_reason(ctx)
        return f"no {ctx.k} free GPUs form a set"

    def _count_set_failures(
        self, ctx: JobContext, batch: CandidateBatch, counts: Counter[str]
    ) -> None:
        filters = self.plugins.set_filters
        progress = np.zeros(batch.size, dtype=np.int64)
        still = np.ones(batch.size, dtype=bool)
        for f in filters:
            still &= f.check(ctx, batch)
            progress += still
        # Each node's most promising set: furthest through the filters, then best product.
        order = np.lexsort((-batch.product, -progress, batch.node))
        first = order[np.r_[True, np.diff(batch.node[order]) != 0]]
        for stage in np.unique(progress[first]):
            picked = first[progress[first] == stage]
            if stage >= len(filters):
                counts["feasible set missed by the bounded search"] += int(picked.size)
                continue
            text = filters[int(stage)].explain(ctx, batch.take(picked))
            counts[text] += int(picked.size)


_BOUND_MARGIN = 1e-9
"""Added to a fraction bound: the joint memory factor is at most the single-GPU one, but
the two are computed differently and may round apart."""


def _first_of_order(keys: FloatArray, count: int) -> IntArray:
    """The first ``count`` entries of ``np.argsort(keys, kind="stable")`` (all of it when
    there are no more), without sorting the rest: the smallest keys, ties by position."""
    if keys.size <= count:
        return np.argsort(keys, kind="stable")
    kth = np.partition(keys, count - 1)[count - 1]
    if np.isnan(kth):  # fewer than ``count`` numbers: NaNs sort last, by position
        return np.argsort(keys, kind="stable")[:count]
    near = np.flatnonzero(keys <= kth)
    return near[np.argsort(keys[near], kind="stable")][:count]


def _or(values: Iterable[int]) -> int:
    out = 0
    for v in values:
        out |= v
    return out


def _empty(k: int) -> CandidateBatch:
    z = np.zeros(0, dtype=np.int64)
    f = np.zeros(0)
    return CandidateBatch(z, z, z, np.zeros((0, k), dtype=np.int64), f, f, f, f, z, True)


def _concat(batches: list[CandidateBatch]) -> CandidateBatch:
    nonempty = [b for b in batches if b.size] or batches[:1]
    if len(nonempty) == 1:
        return nonempty[0]
    # Mixed batches count as bounds: rows < 0 hold exact values (valid bounds too), and
    # ``Scheduler.exact`` recomputes only rows >= 0.
    exact = all(b.exact for b in nonempty)
    return CandidateBatch(
        row=np.concatenate([b.row for b in nonempty]),
        node=np.concatenate([b.node for b in nonempty]),
        mask=np.concatenate([b.mask for b in nonempty]),
        slots=np.concatenate([b.slots for b in nonempty]),
        compute=np.concatenate([b.compute for b in nonempty]),
        memory=np.concatenate([b.memory for b in nonempty]),
        multi=np.concatenate([b.multi for b in nonempty]),
        bias=np.concatenate([b.bias for b in nonempty]),
        neighbours=np.concatenate([b.neighbours for b in nonempty]),
        exact=exact,
    )
