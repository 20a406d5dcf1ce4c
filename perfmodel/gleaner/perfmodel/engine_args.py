"""What a job's template says about its engine, and one benchmark run's command line (pure).

Contract (docs/profiling.md). :func:`job_engine` reads an OfflineJob document (a dict; no
profile needed): the engine container is the first whose command or args mention vllm, and
its ``--model``, ``--max-num-seqs``, ``--input-file`` and the throughput-relevant flags
(:data:`ENGINE_FLAGS`) are taken. :func:`bench_argv` is the command line of one
``<engine> bench throughput`` run at one KV-cache budget. ``gleaner profile`` (a process per
run) and the operator's profile on submit (a Pod per run) both build their runs here, so
the two measure the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gleaner.perfmodel.engine import GIB

ENGINE_FLAGS = frozenset(
    {
        "--dtype", "--quantization", "--kv-cache-dtype", "--tensor-parallel-size",
        "--pipeline-parallel-size", "--max-num-batched-tokens", "--block-size",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
        "--enforce-eager", "--trust-remote-code", "--revision", "--tokenizer", "--seed",
        "--load-format",
    }
)  # fmt: skip
"""vLLM engine flags of the job's container that change its throughput; `--from-job`
passes these to every run (the rest, such as the batch's input and output files, are the
job's own business)."""


@dataclass(frozen=True)
class JobEngine:
    """What `--from-job` takes from an OfflineJob manifest."""

    name: str
    namespace: str
    model: str | None
    max_num_seqs: int | None
    engine_args: tuple[str, ...]
    input_file: str | None


def _flag_values(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """``--flag=value``, ``--flag value`` and bare ``--flag`` items of a command line."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        item = argv[i]
        if item.startswith("--") and "=" in item:
            flag, value = item.split("=", 1)
            out.append((flag, value))
        elif item.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                out.append((item, nxt))
                i += 1
            else:
                out.append((item, None))
        i += 1
    return out


def job_engine(doc: Mapping[str, Any]) -> JobEngine:
    """Read the engine settings of an OfflineJob manifest (a dict; no profile needed).

    The engine container is the first whose command or args mention vllm (else the first).
    ``--model``, ``--max-num-seqs`` and ``--input-file`` (vLLM's run_batch) are read; the
    flags in :data:`ENGINE_FLAGS` pass through; ``spec.gpus`` > 1 becomes
    ``--tensor-parallel-size`` unless the container sets it.
    """
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
        raise ValueError("spec.template.spec.containers is empty")

    def words(c: Mapping[str, Any]) -> list[str]:
        return [str(w) for w in [*(c.get("command") or []), *(c.get("args") or [])]]

    engine = next((c for c in containers if any("vllm" in w for w in words(c))), containers[0])
    model = max_seqs = input_file = None
    passed: list[str] = []
    for flag, value in _flag_values(words(engine)):
        if flag == "--model":
            model = value
        elif flag == "--max-num-seqs" and value is not None:
            max_seqs = int(value)
        elif flag == "--input-file":
            input_file = value
        elif flag in ENGINE_FLAGS:
            passed.append(flag if value is None else f"{flag}={value}")
    gpus = int(spec.get("gpus") or 1)
    if gpus > 1 and not any(a.startswith("--tensor-parallel-size") for a in passed):
        passed.append(f"--tensor-parallel-size={gpus}")
    return JobEngine(
        name=str(meta.get("name") or "job"),
        namespace=str(meta.get("namespace") or "default"),
        model=model,
        max_num_seqs=max_seqs,
        engine_args=tuple(passed),
        input_file=input_file,
    )


def bench_argv(
    command: Sequence[str],
    model: str,
    kv_gib: float,
    input_len: int,
    output_len: int,
    num_prompts: int,
    max_num_seqs: int,
    out_json: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of one ``bench throughput`` run at ``kv_gib`` GiB of KV cache per GPU."""
    return [
        *command,
        "bench",
        "throughput",
        f"--model={model}",
        f"--kv-cache-memory-bytes={int(kv_gib * GIB)}",
        f"--input-len={input_len}",
        f"--output-len={output_len}",
        f"--num-prompts={num_prompts}",
        f"--max-num-seqs={max_num_seqs}",
        # vLLM refuses a KV cache that cannot hold one request of --max-model-len (the
        # model's context by default); the prompt set needs no more than this.
        f"--max-model-len={input_len + output_len}",
        f"--output-json={out_json}",
        *extra,
    ]
