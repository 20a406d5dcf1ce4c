"""The simulated cluster's online load as a trace file (the format of docs/formats.md).

Contract. :func:`trace_frame` turns an :class:`~gleaner.simulator.online.OnlineCluster` into
the rows of the trace file format that ``gleaner predict``, ``gleaner place``,
``gleaner simulate --trace`` and the simulated agent read: one row per (timestamp, node, GPU)
with ``timestamp`` (epoch seconds; simulated time 0 is ``EPOCH``), ``node``, ``gpu``,
``online_busy`` and ``free_memory_gib``, rounded to ``decimals`` places so that a sample
file stays small and diff-friendly. :func:`cluster_trace` draws a scenario cluster's online
load (history and run) for a seed, deterministically. :func:`write_trace` writes a frame as
CSV (``.csv`` or ``.csv.gz``) or Parquet (``.parquet``), chosen by the file name.
Pure except :func:`write_trace`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.online import EPOCH_SECONDS, OnlineCluster, generate_online

TRACE_COLUMNS = ("timestamp", "node", "gpu", "online_busy", "free_memory_gib")
"""The columns written, in order (``offline_enabled`` is left out: no agent ran)."""


def trace_frame(online: OnlineCluster, decimals: int = 4) -> Any:
    """The trace rows of ``online``: time-major, then node, then GPU (a pandas DataFrame)."""
    import pandas as pd

    steps = int(online.busy.shape[1])
    g = online.gpus_per_node
    n_nodes = len(online.node_names)
    # Timestamps count from simulated time 0, so the history lies before EPOCH.
    times = EPOCH_SECONDS + (np.arange(steps) - online.t0_step) * online.step_s
    per_step = n_nodes * g
    return pd.DataFrame(
        {
            "timestamp": np.repeat(times, per_step),
            "node": np.tile(np.repeat(np.array(online.node_names, dtype=object), g), steps),
            "gpu": np.tile(np.tile(np.arange(g, dtype=np.int64), n_nodes), steps),
            # busy and free_gib are [GPUs, steps]; the transpose gives time-major rows.
            "online_busy": np.round(online.busy.T.reshape(-1), decimals),
            "free_memory_gib": np.round(online.free_gib.T.reshape(-1), decimals),
        },
        columns=list(TRACE_COLUMNS),
    )


def cluster_trace(cfg: ClusterScenario, seed: int, decimals: int = 4) -> Any:
    """The online load of ``cfg``'s cluster for ``seed`` (history and run) as trace rows."""
    return trace_frame(generate_online(cfg, np.random.default_rng(seed)), decimals)


def write_trace(frame: Any, path: Path) -> None:
    """Write ``frame`` as Parquet (``.parquet``) or CSV (anything else; ``.gz`` compresses)."""
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
