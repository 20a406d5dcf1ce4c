"""docs/integration.md tells the truth about the hook: the log lines it tells users to look
for are the hook's own, the reasons it lists for "memory path off" are the ones
``memory.unsupported`` gives, and the wheels it builds are the hook's two distributions.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

from gleaner.vllm_hook import memory

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "integration.md").read_text(encoding="utf-8")
HOOK_SOURCES = "\n".join(
    p.read_text(encoding="utf-8") for p in sorted((ROOT / "vllm-hook").rglob("*.py"))
)


LOG_LINES = (
    "scheduler signature differs from the pinned one; hook off",
    "vLLM v1 scheduler not importable",
    "KV memory path off: ",
    "KV cache not allocated through the shim",
)


def test_every_log_line_the_doc_names_is_one_the_hook_writes() -> None:
    flat_doc = " ".join(DOC.split())
    for line in LOG_LINES:
        assert line in flat_doc, line
        assert line in HOOK_SOURCES, line


def test_the_tensor_parallel_reason_is_the_one_the_doc_quotes() -> None:
    parallel = SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1)
    sched = SimpleNamespace(parallel_config=parallel)
    why = memory.unsupported(sched)
    assert why is not None and why.startswith("tensor_parallel_size != 1")
    assert "KV memory path off: tensor_parallel_size != 1" in DOC
    single = SimpleNamespace(
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
        scheduler_config=SimpleNamespace(async_scheduling=True),
    )
    assert "async" in (memory.unsupported(single) or "")


def test_the_wheels_built_are_the_hooks_two_distributions() -> None:
    assert "pip wheel --no-deps -w wheels ./protocol ./vllm-hook" in DOC
    hook = tomllib.loads((ROOT / "vllm-hook" / "pyproject.toml").read_text())
    assert hook["project"]["dependencies"] == ["gleaner-protocol==0.1.0"]
    assert "gleaner_kv" in hook["project"]["entry-points"]["vllm.general_plugins"]
    assert "`gleaner_kv`" in DOC
