"""A fake ``vllm bench throughput``: a continuous-batching engine on a virtual clock.

Contract. :func:`run_batch` serves ``num_prompts`` requests of ``input_len`` prompt and
``output_len`` output tokens with a KV cache of a given size, step by step, the way vLLM's
v1 scheduler does it (our own code, no vLLM):

- a KV block holds ``engine.block_tokens`` tokens of ``engine.kv_bytes_per_token`` bytes
  each; a request holds the blocks of its prompt plus the tokens it has generated;
- each step first grows the running requests by one token (newest preempted first, back to
  the head of the queue, when the blocks run out: vLLM's recompute preemption, so a
  preempted request prefills its prompt and generated tokens again), then admits waiting
  requests while blocks, ``max_num_seqs`` and the step's token budget allow (chunked
  prefill rides along the decode step);
- a step takes ``engine.batch(new_tokens, context)`` seconds (the one engine model,
  :class:`gleaner.perfmodel.engine.EngineModel`) on the virtual clock; every request
  whose prefill completes or that decodes samples one output token.

So its throughput against KV memory is known: in steady state it is
:meth:`EngineModel.batch_throughput` (tests/perfmodel/test_profiling.py states how close).
``kv_gib_at(t)`` may change the cache size over virtual time (a *swing*: reclamation
taking memory away), which preempts requests as vLLM does when blocks vanish.
``step_end(t, seconds)`` (optional) says when a step of ``seconds`` of GPU time asked for
at ``t`` ends: a GPU shared under the compute gate, where steps wait for the gate to open
(the clock is then wall time; ``bench/bench_profile.py`` models the gate).

:func:`main` is a command line with the flags of ``vllm bench throughput`` that
``gleaner profile`` passes (``--kv-cache-memory-bytes``, ``--input-len``, ``--output-len``,
``--num-prompts``, ``--max-num-seqs``, ``--output-json``), writing the same JSON keys
(``elapsed_time``, ``num_requests``, ``total_num_tokens``, ``requests_per_second``,
``tokens_per_second``) plus ``output_tokens``; the extension ``--kv-swing LOW_BYTES:FRACTION``
drops the cache to LOW_BYTES for that share of each period. ``--fail`` makes it exit 1 with
a message (the failure path). Run as ``python -m gleaner.testing.vllm_bench bench
throughput ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gleaner.perfmodel.engine import GIB, LLAMA31_8B_H100, EngineModel


@dataclass
class BatchResult:
    output_tokens: int
    seconds: float
    steps: int
    preemptions: int


@dataclass
class _Req:
    prompt: int
    generated: int = 0
    computed: int = 0  # tokens whose KV is in the cache


def run_batch(
    engine: EngineModel,
    kv_gib_at: Callable[[float], float],
    input_len: int,
    output_len: int,
    num_prompts: int,
    max_num_seqs: int = 256,
    token_budget: int = 8192,
    step_end: Callable[[float, float], float] | None = None,
) -> BatchResult:
    """Serve the batch; return output tokens, virtual seconds, steps and preemptions."""
    if min(input_len, output_len, num_prompts, max_num_seqs, token_budget) < 1:
        raise ValueError("lengths, counts and budgets must be >= 1")
    bt = engine.block_tokens
    waiting: deque[_Req] = deque(_Req(input_len) for _ in range(num_prompts))
    running: list[_Req] = []
    t = 0.0
    out = steps = preempted = 0
    while waiting or running:
        capacity = int(kv_gib_at(t) * GIB / engine.kv_bytes_per_token) // bt
        if engine.blocks_for(input_len + output_len) > capacity:
            raise RuntimeError("KV cache too small for one request")
        # Decode: every running request needs room for one more token.
        used = sum(engine.blocks_for(r.computed + 1) for r in running)
        while running and used > capacity:
            victim = running.pop()
            used -= engine.blocks_for(victim.computed + 1)
            victim.computed = 0
            waiting.appendleft(victim)
            preempted += 1
        new = [1] * len(running)
        ctx = [r.computed for r in running]
        budget = token_budget - len(running)
        admitted: list[_Req] = []
        while waiting and len(running) + len(admitted) < max_num_seqs and budget > 0:
            req = waiting[0]
            todo = req.prompt + req.generated
            need = engine.blocks_for(todo + 1)
            if used + need > capacity or todo > budget:
                break
            waiting.popleft()
            used += need
            budget -= todo
            admitted.append(req)
            new.append(todo)
            ctx.append(0)
        if not running and not admitted:
            raise RuntimeError("no progress: the step's token budget is below one prompt")
        step = engine.batch(np.asarray(new, dtype=np.float64), np.asarray(ctx, dtype=np.float64))
        t = t + step if step_end is None else step_end(t, step)
        steps += 1
        for r in running:
            r.computed += 1
        for r in admitted:
            r.computed = r.prompt + r.generated
        running.extend(admitted)
        for r in running:
            r.generated += 1
            out += 1
        running = [r for r in running if r.generated < output_len]
    return BatchResult(output_tokens=out, seconds=t, steps=steps, preemptions=preempted)


def swing(
    high_gib: float, low_gib: float, low_fraction: float, period_s: float
) -> Callable[[float], float]:
    """A cache of ``high_gib`` that drops to ``low_gib`` for the last share of each period."""

    def at(t: float) -> float:
        return low_gib if (t % period_s) >= (1.0 - low_fraction) * period_s else high_gib

    return at


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm")
    p.add_argument("bench")
    p.add_argument("throughput")
    p.add_argument("--model", default="fake")
    p.add_argument("--kv-cache-memory-bytes", type=int, required=True)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--output-json", required=True)
    p.add_argument("--kv-swing", default=None)
    p.add_argument("--swing-period", type=float, default=2.0)
    p.add_argument("--fail", default=None)
    return p


def result_json(argv: list[str]) -> str:
    """The ``--output-json`` document of a run with these arguments (after the executable).

    RuntimeError when the engine cannot run (the fake's ``--fail``, a KV cache below one
    request). Tests that play the kubelet for a profiling Pod use it to write the Pod's
    termination message from the Pod's own command line.
    """
    args, _unknown = _parser().parse_known_args(argv)
    if args.fail:
        raise RuntimeError(args.fail)
    high = args.kv_cache_memory_bytes / GIB
    kv_at: Callable[[float], float] = lambda t: high  # noqa: E731
    if args.kv_swing:
        low_bytes, frac = args.kv_swing.split(":")
        kv_at = swing(high, int(low_bytes) / GIB, float(frac), args.swing_period)
    res = run_batch(
        LLAMA31_8B_H100,
        kv_at,
        args.input_len,
        args.output_len,
        args.num_prompts,
        args.max_num_seqs,
    )
    total = args.num_prompts * args.input_len + res.output_tokens
    return json.dumps(
        {
            "elapsed_time": res.seconds,
            "num_requests": args.num_prompts,
            "total_num_tokens": total,
            "requests_per_second": args.num_prompts / res.seconds,
            "tokens_per_second": total / res.seconds,
            "output_tokens": res.output_tokens,
        }
    )


def main(argv: list[str] | None = None) -> int:
    args, _unknown = _parser().parse_known_args(argv)
    try:
        text = result_json(sys.argv[1:] if argv is None else argv)
    except RuntimeError as exc:
        print(f"fake engine: {exc}", file=sys.stderr)
        return 1
    Path(args.output_json).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
