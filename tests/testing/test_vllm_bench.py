"""gleaner.testing.vllm_bench: the fake ``vllm bench throughput`` the profile tests run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gleaner.perfmodel.engine import GIB
from gleaner.perfmodel.engine import LLAMA31_8B_H100 as ENGINE
from gleaner.testing.vllm_bench import main, run_batch, swing


def test_above_the_knee_it_runs_at_the_engine_models_rate() -> None:
    # 24 GiB holds 256 whole requests of 640 tokens: no preemption, steady state.
    r = run_batch(ENGINE, lambda t: 24.0, 512, 128, 2000, 256)
    assert r.preemptions == 0
    assert r.output_tokens == 2000 * 128
    assert r.output_tokens / r.seconds == pytest.approx(
        ENGINE.batch_throughput(24.0, 512, 128, 256), rel=0.01
    )


def test_below_the_knee_recompute_preemptions_cost_a_little() -> None:
    r = run_batch(ENGINE, lambda t: 4.0, 512, 128, 1000, 256)
    ref = ENGINE.batch_throughput(4.0, 512, 128, 256)
    assert r.preemptions > 0
    assert 0.85 * ref < r.output_tokens / r.seconds < ref


def test_a_swing_preempts_and_slows_the_batch() -> None:
    still = run_batch(ENGINE, lambda t: 8.0, 512, 128, 1000, 256)
    swung = run_batch(ENGINE, swing(8.0, 4.0, 0.5, 2.0), 512, 128, 1000, 256)
    assert swung.preemptions > still.preemptions
    assert swung.output_tokens / swung.seconds < still.output_tokens / still.seconds
    assert swing(8.0, 4.0, 0.25, 4.0)(2.9) == 8.0
    assert swing(8.0, 4.0, 0.25, 4.0)(3.1) == 4.0


def test_refuses_a_cache_smaller_than_one_request() -> None:
    with pytest.raises(RuntimeError, match="too small"):
        run_batch(ENGINE, lambda t: 0.01, 512, 128, 10, 256)


def test_command_line_writes_vllm_bench_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "throughput", f"--kv-cache-memory-bytes={8 * int(GIB)}", "--num-prompts=100"]
    assert main([*args, f"--output-json={out}", "--unknown-engine-flag=1"]) == 0
    data = json.loads(out.read_text())
    assert data["num_requests"] == 100 and data["output_tokens"] == 100 * 128
    assert data["tokens_per_second"] == pytest.approx(
        data["total_num_tokens"] / data["elapsed_time"]
    )


def test_command_line_fails_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "throughput", "--kv-cache-memory-bytes=1", f"--output-json={tmp_path / 'r'}"]
    assert main([*args, "--fail=out of memory"]) == 1
    assert "out of memory" in capsys.readouterr().err
    assert main(args) == 1  # one byte of KV cache holds no request
