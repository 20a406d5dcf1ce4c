"""One cycle's index of the cluster as arrays, with per-cycle caches (pure).

Contract. :class:`ClusterView` turns a ``ClusterState`` into arrays indexed by node row
(nodes sorted by name) and GPU position (column; ``width`` = the most GPUs any node
has): existence, P_compute (``gleaner.perfmodel.model.compute_factors``), pair scores
(``pair_scores``), free/occupied, usability. It caches, for the length of one cycle:

- per gpuSelector: label masks [N] and allowed-product masks [N, W];
- per job class: the bias multipliers [N];
- per profile: single-GPU P_memory [N, W] for every GPU at once (``GpuFleet``);
- per set size k: the :class:`SetTable` of aligned GPU sets of every node (cliques of the
  alignment graph, ``gleaner.scheduler.gpusets``), with their static P_compute and
  P_multi; nodes with the same alignment graph share one enumeration;
- per (profile, k): exact joint-memory P_memory of table rows, computed on demand in
  per-node batches (``subset_factors``) and never twice.

The only mutable state is ``free`` (``place`` marks GPUs taken) and ``version`` (bumped
on every placement, so caches of anything that depends on occupancy can be dropped).
The numbers all come from the performance model; this module only arranges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gleaner.perfmodel.fleet import GpuFleet
from gleaner.perfmodel.model import compute_factors, memory_factor_at, pair_scores, subset_memory
from gleaner.perfmodel.profile import JobProfile
from gleaner.perfmodel.summary import NodeSummary
from gleaner.scheduler.cluster import ClusterState
from gleaner.scheduler.gpusets import MAX_POSITIONS, adjacency, aligned_sets

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_BULK_ROWS = 4
"""From this many sets of one node on, exact memory is computed in one vectorized call."""


@dataclass(frozen=True, eq=False)
class SetTable:
    """Every enumerated aligned GPU set of size k, over all nodes (row-parallel arrays)."""

    k: int
    node: IntArray
    """[m] node row."""
    mask: IntArray
    """[m] bitmask of positions."""
    slots: IntArray
    """[m, k] positions, ascending."""
    compute: FloatArray
    """[m] P_compute of the set (min over its GPUs)."""
    multi: FloatArray
    """[m] P_multi of the set (min pair score; 1 for k = 1)."""
    neighbours: IntArray
    """[m] bitmask of GPUs outside the set aligned with at least one of its members."""
    truncated: BoolArray
    """[N] the enumeration hit ``max_sets_per_node`` on this node."""
    node_start: IntArray
    """[N + 1] rows of node i are node_start[i]:node_start[i+1] (rows are node-sorted)."""


class ClusterView:
    """Array index of a ClusterState for one cycle (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterState,
        pair_threshold: float | None,
        max_sets_per_node: int = 512,
    ) -> None:
        self.cluster = cluster
        self.pair_threshold = pair_threshold
        self.max_sets_per_node = max_sets_per_node
        self.names: list[str] = sorted(cluster.nodes)
        self.row: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.summaries: list[NodeSummary] = [cluster.nodes[n] for n in self.names]
        n = len(self.names)
        width = max((s.n_gpus for s in self.summaries), default=0)
        if width > MAX_POSITIONS:
            raise ValueError(f"at most {MAX_POSITIONS} GPUs per node are supported")
        self.width = width
        self.n_gpus = np.array([s.n_gpus for s in self.summaries], dtype=np.int64)
        self.exists = np.arange(width)[None, :] < self.n_gpus[:, None]
        self.unavailable: list[str | None] = [cluster.unavailable_reason(x) for x in self.names]
        self.usable = np.array([r is None for r in self.unavailable], dtype=bool)
        self.labels = [cluster.labels(x) for x in self.names]

        self.compute = np.zeros((n, width))
        self.pairs = np.zeros((n, width, width))
        self.adj: list[tuple[int, ...]] = []
        threshold = -np.inf if pair_threshold is None else pair_threshold
        for i, s in enumerate(self.summaries):
            g = s.n_gpus
            if self.usable[i] and g:
                self.compute[i, :g] = compute_factors(s)
                scores = pair_scores(s)
                self.pairs[i, :g, :g] = scores
                self.adj.append(adjacency(scores, threshold))
            else:
                self.adj.append(tuple(0 for _ in range(g)))

        self.free = self.exists.copy()
        for node, held in cluster.occupied.items():
            r = self.row.get(node)
            if r is None:
                continue
            summary = self.summaries[r]
            for gpu in held:
                if gpu in summary.gpu_indices:
                    self.free[r, summary.position(gpu)] = False
        self.free_mask = self._pack(self.free)
        self.version = 0

        products = sorted({g.product for s in self.summaries for g in s.gpus})
        self._product_ids = {p: i for i, p in enumerate(products)}
        self.product = np.full((n, width), -1, dtype=np.int64)
        for i, s in enumerate(self.summaries):
            for p, spec in enumerate(s.gpus):
                self.product[i, p] = self._product_ids[spec.product]
        # GPUs whose product nobody reported (trace files have no product column).
        unknown_id = self._product_ids.get("", -2)
        self.unknown_product = np.asarray(self.exists & (self.product == unknown_id), dtype=bool)

        self._labels_cache: dict[tuple[tuple[str, str], ...], BoolArray] = {}
        self._products_cache: dict[tuple[str, ...], BoolArray] = {}
        self._bias_cache: dict[str, FloatArray] = {}
        self._memory_cache: dict[JobProfile, FloatArray] = {}
        self._tables: dict[int, SetTable] = {}
        self._exact_cache: dict[tuple[JobProfile, int], FloatArray] = {}
        self._bound_cache: dict[tuple[JobProfile, int], FloatArray] = {}
        self._fleet: GpuFleet | None = None
        self._fleet_flat: IntArray | None = None

    # -- shape helpers ----------------------------------------------------------------

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    def _pack(self, bits: BoolArray) -> IntArray:
        """[N, W] booleans -> [N] bitmasks."""
        if self.width == 0:
            return np.zeros(bits.shape[0], dtype=np.int64)
        weights = np.left_shift(np.int64(1), np.arange(self.width, dtype=np.int64))
        return np.asarray(bits.astype(np.int64) @ weights, dtype=np.int64)

    def pack(self, bits: BoolArray) -> IntArray:
        return self._pack(bits)

    def gpu_indices(self, node_row: int, slots: npt.ArrayLike) -> tuple[int, ...]:
        s = self.summaries[node_row]
        return tuple(s.gpus[int(p)].index for p in np.asarray(slots).reshape(-1))

    def gpu_uuids(self, node_row: int, slots: npt.ArrayLike) -> tuple[str, ...]:
        s = self.summaries[node_row]
        return tuple(s.gpus[int(p)].uuid for p in np.asarray(slots).reshape(-1))

    # -- mutation ---------------------------------------------------------------------

    def place(self, node_row: int, slots: npt.ArrayLike) -> None:
        """Mark GPUs taken (one offline job per GPU)."""
        pos = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not bool(self.free[node_row, pos].all()):
            raise ValueError(f"GPUs {pos.tolist()} of {self.names[node_row]} are not all free")
        self.free[node_row, pos] = False
        self.free_mask[node_row] = self._pack(self.free[node_row : node_row + 1])[0]
        self.version += 1

    # -- per-job caches -----------------------------------------------------------------

    def label_mask(self, selector: Mapping[str, str]) -> BoolArray:
        key = tuple(sorted(selector.items()))
        cached = self._labels_cache.get(key)
        if cached is None:
            cached = np.array(
                [all(lab.get(k) == v for k, v in key) for lab in self.labels], dtype=bool
            )
            self._labels_cache[key] = cached
        return cached

    def allowed(self, products: tuple[str, ...]) -> BoolArray:
        key = tuple(sorted(set(products)))
        cached = self._products_cache.get(key)
        if cached is None:
            if not key:
                cached = self.exists
            else:
                ids = [self._product_ids[p] for p in key if p in self._product_ids]
                cached = self.exists & np.isin(self.product, np.asarray(ids, dtype=np.int64))
            self._products_cache[key] = cached
        return cached

    def bias(self, job_class: str) -> FloatArray:
        cached = self._bias_cache.get(job_class)
        if cached is None:
            table = self.cluster.bias
            cached = np.ones(self.n_nodes)
            for node in table.nodes():
                r = self.row.get(node)
                if r is not None:
                    cached[r] = table.factor(node, job_class)
            self._bias_cache[job_class] = cached
        return cached

    def _fleet_index(self) -> tuple[GpuFleet, IntArray]:
        """A ``GpuFleet`` over the usable nodes, and each of its rows' flat [N*W] index.

        Each GPU's memory segment is its column of the node's joint sketch with the
        states' time shares (duplicate values are fine: the fleet takes a weighted sum),
        which is much cheaper to assemble than per-GPU distinct marginals.
        """
        if self._fleet is None or self._fleet_flat is None:
            rows = [i for i in range(self.n_nodes) if self.usable[i]]
            names: list[str] = []
            node_ids: list[IntArray] = []
            gpu_idx: list[IntArray] = []
            flat: list[IntArray] = []
            values: list[FloatArray] = []
            weights: list[FloatArray] = []
            lengths: list[IntArray] = []
            for nid, r in enumerate(rows):
                s = self.summaries[r]
                g = s.n_gpus
                names.append(s.node)
                node_ids.append(np.full(g, nid, dtype=np.int64))
                gpu_idx.append(np.asarray(s.gpu_indices, dtype=np.int64))
                flat.append(r * self.width + np.arange(g, dtype=np.int64))
                total = s.memory.total_seconds
                if s.memory.n_states and total > 0:
                    values.append(s.memory.states_gib().T.reshape(-1))
                    weights.append(np.tile(s.memory.seconds / total, g))
                    lengths.append(np.full(g, s.memory.n_states, dtype=np.int64))
                else:
                    values.append(np.zeros(g))
                    weights.append(np.zeros(g))
                    lengths.append(np.ones(g, dtype=np.int64))
            sizes = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
            offsets = np.zeros(sizes.size, dtype=np.int64)
            offsets[1:] = np.cumsum(sizes)[:-1]

            def cat(parts: list[FloatArray]) -> FloatArray:
                return np.concatenate(parts) if parts else np.zeros(0)

            def icat(parts: list[IntArray]) -> IntArray:
                return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

            self._fleet = GpuFleet(
                node_names=tuple(names),
                node_ids=icat(node_ids),
                gpu_indices=icat(gpu_idx),
                compute=self.compute.reshape(-1)[icat(flat)],
                memory_values=cat(values),
                memory_weights=cat(weights),
                offsets=offsets,
            )
            self._fleet_flat = icat(flat)
        return self._fleet, self._fleet_flat

    def memory(self, profile: JobProfile) -> FloatArray:
        """[N, W] single-GPU P_memory of ``profile`` on every GPU (0 where none/unusable)."""
        cached = self._memory_cache.get(profile)
        if cached is None:
            fleet, flat = self._fleet_index()
            out = np.zeros(self.n_nodes * self.width)
            out[flat] = fleet.memory_factors(profile)
            cached = out.reshape(self.n_nodes, self.width)
            self._memory_cache[profile] = cached
        return cached

    # -- GPU sets -----------------------------------------------------------------------

    def table(self, k: int) -> SetTable:
        cached = self._tables.get(k)
        if cached is None:
            cached = self._build_table(k)
            self._tables[k] = cached
        return cached

    def _build_table(self, k: int) -> SetTable:
        n, limit = self.n_nodes, self.max_sets_per_node
        patterns: dict[tuple[int, ...], tuple[list[int], bool]] = {}
        per_node: list[list[int]] = []
        truncated = np.zeros(n, dtype=bool)
        for i in range(n):
            if not self.usable[i] or self.n_gpus[i] < k:
                per_node.append([])
                continue
            adj = self.adj[i]
            found = patterns.get(adj)
            if found is None:
                found = aligned_sets(adj, k, limit)
                patterns[adj] = found
            per_node.append(found[0])
            truncated[i] = found[1]
        counts = np.array([len(x) for x in per_node], dtype=np.int64)
        node_start = np.zeros(n + 1, dtype=np.int64)
        node_start[1:] = np.cumsum(counts)
        node = np.repeat(np.arange(n, dtype=np.int64), counts)
        masks = np.array([m for x in per_node for m in x], dtype=np.int64)
        bits = (masks[:, None] >> np.arange(self.width, dtype=np.int64)[None, :]) & 1
        # Positions of the set bits, ascending: argsort puts the 1s last, stably.
        slots = np.argsort(bits, axis=1, kind="stable")[:, self.width - k :].astype(np.int64)
        if masks.size == 0:
            slots = np.zeros((0, k), dtype=np.int64)
        compute = self.compute[node[:, None], slots].min(axis=1) if masks.size else np.zeros(0)
        if k >= 2 and masks.size:
            ia, ib = np.triu_indices(k, 1)
            multi = self.pairs[node[:, None], slots[:, ia], slots[:, ib]].min(axis=1)
        else:
            multi = np.ones(masks.size)
        adj_arr = np.zeros((n, max(self.width, 1)), dtype=np.int64)
        for i, a in enumerate(self.adj):
            adj_arr[i, : len(a)] = a
        neighbours = np.zeros(masks.size, dtype=np.int64)
        for j in range(k if masks.size else 0):
            neighbours |= adj_arr[node, slots[:, j]]
        neighbours &= ~masks
        return SetTable(
            k=k,
            node=node,
            mask=masks,
            slots=slots,
            compute=np.asarray(compute, dtype=np.float64),
            multi=np.asarray(multi, dtype=np.float64),
            neighbours=neighbours,
            truncated=truncated,
            node_start=node_start,
        )

    def memory_bound(self, profile: JobProfile, k: int) -> FloatArray:
        """[m] the single-GPU bound of P_memory (the minimum over its GPUs) of every row of
        the size-k table, for ``profile`` (exact for k = 1); computed once per cycle."""
        key = (profile, k)
        cached = self._bound_cache.get(key)
        if cached is None:
            table, memory = self.table(k), self.memory(profile)
            if k == 1:
                cached = memory[table.node, table.slots[:, 0]]
            elif table.node.size:
                cached = memory[table.node[:, None], table.slots].min(axis=1)
            else:
                cached = np.zeros(0)
            cached = np.asarray(cached, dtype=np.float64)
            self._bound_cache[key] = cached
        return cached

    def exact_memory(self, profile: JobProfile, k: int, rows: IntArray) -> FloatArray:
        """Joint (tightest-GPU) P_memory of table rows, computed once per (profile, k, row)."""
        table = self.table(k)
        key = (profile, k)
        cache = self._exact_cache.get(key)
        if cache is None:
            cache = np.full(table.node.size, np.nan)
            self._exact_cache[key] = cache
        rows = np.asarray(rows, dtype=np.int64)
        todo = rows[np.isnan(cache[rows])]
        if todo.size:
            todo = np.unique(todo)
            nodes = table.node[todo]
            cuts = np.flatnonzero(np.diff(nodes)) + 1
            for group in np.split(todo, cuts):
                summary = self.summaries[int(table.node[group[0]])]
                if group.size >= _BULK_ROWS:
                    cache[group] = subset_memory(profile, summary, table.slots[group])
                else:  # a few sets: the plain per-set rule costs less
                    for r in group.tolist():
                        cache[r] = memory_factor_at(profile, summary, table.slots[r].tolist())
        return np.asarray(cache[rows], dtype=np.float64)
