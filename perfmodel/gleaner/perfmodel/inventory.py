"""Node inventory files: what a trace cannot say about a node (labels, GPU product, memory).

Contract. A trace file (docs/architecture.md, "Trace file format") holds samples only; a
job's ``gpuSelector`` needs node labels and GPU products, and the free-memory check needs
each GPU's memory. ``parse_nodes`` reads them from the already-parsed documents of a nodes
file, in either of two forms (docs/architecture.md, "Nodes file"):

- Gleaner's own: a mapping ``{nodes: [{name, labels, gpuProduct, gpuMemoryGiB}, ...]}``
  (every key but ``name`` optional);
- Kubernetes Node objects, as ``kubectl get nodes -o yaml`` prints them (a ``List`` or
  single ``Node`` documents): their ``metadata.labels``; the GPU memory from the NVIDIA GPU
  Feature Discovery label ``nvidia.com/gpu.memory`` (MiB). The product is not read from
  Feature Discovery, which writes it with dashes for spaces: the agent (and ``gpuSelector``)
  use the NVML name, so give ``gpuProduct`` in Gleaner's form instead.

``apply_inventory`` returns the summaries with those labels (merged over what the source
knew) and GPU specs; nodes of the file that are not in the trace are ignored (a cluster's
node list includes CPU nodes). Errors are ``InventoryError`` (a ValueError) with a one-line
message naming the document and the field. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gleaner.perfmodel.summary import NodeSummary

GFD_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GPU Feature Discovery's label: each GPU's memory in MiB."""


class InventoryError(ValueError):
    """A nodes file that follows neither accepted form."""


@dataclass(frozen=True)
class NodeInfo:
    """What a nodes file says about one node."""

    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_product: str = ""
    """Product of every GPU of the node (NVML's name); empty: unknown."""
    gpu_memory_gib: float = 0.0
    """Memory of each GPU, GiB; 0: unknown."""


def _labels(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InventoryError(f"{where}: labels must be a mapping of name: value")
    return {str(k): str(v) for k, v in value.items()}


def _memory(value: Any, where: str) -> float:
    if value is None:
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InventoryError(f"{where}: gpuMemoryGiB must be a number, got {value!r}") from None
    if not number > 0:
        raise InventoryError(f"{where}: gpuMemoryGiB must be > 0, got {number:g}")
    return number


def _gleaner_entry(entry: Any, where: str) -> tuple[str, NodeInfo]:
    if not isinstance(entry, Mapping):
        raise InventoryError(f"{where}: each node must be a mapping with a name")
    name = entry.get("name")
    if not name:
        raise InventoryError(f"{where}: a node has no name")
    here = f"{where} ({name})"
    unknown = sorted(set(entry) - {"name", "labels", "gpuProduct", "gpuMemoryGiB"})
    if unknown:
        raise InventoryError(
            f"{here}: unknown field(s) {', '.join(unknown)}; "
            "a node takes name, labels, gpuProduct and gpuMemoryGiB"
        )
    product = entry.get("gpuProduct")
    return str(name), NodeInfo(
        labels=_labels(entry.get("labels"), here),
        gpu_product="" if product is None else str(product),
        gpu_memory_gib=_memory(entry.get("gpuMemoryGiB"), here),
    )


def _kubernetes_node(item: Mapping[str, Any], where: str) -> tuple[str, NodeInfo]:
    meta = item.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise InventoryError(f"{where}: a Node has no metadata.name")
    labels = _labels(meta.get("labels"), f"{where} ({name})")
    memory = 0.0
    if GFD_MEMORY_LABEL in labels:
        try:
            memory = float(labels[GFD_MEMORY_LABEL]) / 1024.0
        except ValueError:
            memory = 0.0  # a label we cannot read is no reason to refuse the node
    return str(name), NodeInfo(labels=labels, gpu_memory_gib=memory)


def parse_nodes(documents: Sequence[Any]) -> dict[str, NodeInfo]:
    """Node information by name from the parsed documents of a nodes file (see module doc)."""
    out: dict[str, NodeInfo] = {}

    def add(name: str, info: NodeInfo, where: str) -> None:
        if name in out:
            raise InventoryError(f"{where}: node {name} is given twice")
        out[name] = info

    for number, doc in enumerate(documents, start=1):
        where = f"document {number}"
        if not isinstance(doc, Mapping):
            raise InventoryError(f"{where}: expected a mapping, got {type(doc).__name__}")
        kind = doc.get("kind")
        if kind == "List" or (kind is None and "items" in doc):
            for i, item in enumerate(doc.get("items") or [], start=1):
                if isinstance(item, Mapping) and item.get("kind", "Node") == "Node":
                    add(*_kubernetes_node(item, f"{where}, item {i}"), where)
        elif kind == "Node":
            add(*_kubernetes_node(doc, where), where)
        elif "nodes" in doc:
            nodes = doc["nodes"]
            if not isinstance(nodes, list):
                raise InventoryError(f"{where}: nodes must be a list")
            for i, entry in enumerate(nodes, start=1):
                add(*_gleaner_entry(entry, f"{where}, nodes[{i - 1}]"), where)
        else:
            raise InventoryError(
                f"{where}: expected {{nodes: [...]}} or Kubernetes Node objects "
                "(kubectl get nodes -o yaml)"
            )
    return out


def apply_inventory(
    summaries: Mapping[str, NodeSummary], nodes: Mapping[str, NodeInfo]
) -> dict[str, NodeSummary]:
    """``summaries`` with the labels, GPU products and memory that ``nodes`` gives.

    The file's labels are merged over the source's; a product or memory it gives replaces
    the source's for every GPU of the node.
    """
    out: dict[str, NodeSummary] = {}
    for name, summary in summaries.items():
        info = nodes.get(name)
        if info is None:
            out[name] = summary
            continue
        gpus = tuple(
            replace(
                spec,
                product=info.gpu_product or spec.product,
                memory_gib=info.gpu_memory_gib or spec.memory_gib,
            )
            for spec in summary.gpus
        )
        out[name] = replace(summary, labels={**summary.labels, **info.labels}, gpus=gpus)
    return out
