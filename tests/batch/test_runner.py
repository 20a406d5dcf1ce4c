"""gleaner.batch.runner against a fake engine that serves the OpenAI API.

The runner answers every request exactly once: retried engine trouble (503) ends in the
output, a refused request (400) in the error file, and a runner SIGKILLed at random points
and started again leaves each custom_id in its files exactly once, with the engine's answer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gleaner.batch.records import parse_input
from gleaner.batch.runner import EngineClient, RetryPolicy, main, run_batch
from gleaner.batch.store import CHECKPOINT_FILE, ERROR_FILE, OUTPUT_FILE, ProgressStore
from gleaner.testing.openai_engine import FakeOpenAIEngine, expected_text

FAST = RetryPolicy(max_attempts=3, first_backoff=0.01, max_backoff=0.05)


def write_input(
    path: Path, n: int, refused: frozenset[int] = frozenset()
) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    for i in range(n):
        body: dict[str, object] = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": f"question {i}"}],
            "max_tokens": 8 + i % 5,
        }
        url = "/v1/completions" if i % 7 == 3 else "/v1/chat/completions"
        if url == "/v1/completions":
            body = {"model": "fake-model", "prompt": f"question {i}", "max_tokens": 4}
        if i in refused:
            body["refuse"] = True
        lines.append({"custom_id": f"req-{i}", "method": "POST", "url": url, "body": body})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return lines


def lines_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def check_exactly_once(state: Path, requests: list[dict[str, object]], refused: set[str]) -> None:
    out = lines_of(state / OUTPUT_FILE)
    err = lines_of(state / ERROR_FILE)
    out_ids = [str(x["custom_id"]) for x in out]
    err_ids = [str(x["custom_id"]) for x in err]
    assert len(out_ids) == len(set(out_ids)), "an answer is duplicated in the output"
    assert set(err_ids) == refused
    assert sorted(out_ids + err_ids) == sorted(str(r["custom_id"]) for r in requests)
    by_id = {str(r["custom_id"]): r for r in requests}
    for line in out:
        response = line["response"]
        assert isinstance(response, dict)
        assert response["status_code"] == 200
        body = response["body"]
        text = json.dumps(body)
        want = expected_text(by_id[str(line["custom_id"])]["body"])  # type: ignore[arg-type]
        assert want in text, f"{line['custom_id']} holds another request's answer"
    for line in err:
        assert isinstance(line["error"], dict)
        assert line["error"]["code"] == "400"


@pytest.fixture
def engine() -> Iterator[FakeOpenAIEngine]:
    with FakeOpenAIEngine(flaky_every=4) as e:
        yield e


def test_every_request_answered_once_retries_and_refusals(
    tmp_path: Path, engine: FakeOpenAIEngine
) -> None:
    requests = write_input(tmp_path / "in.jsonl", 30, refused=frozenset({5, 17}))
    parsed = parse_input((tmp_path / "in.jsonl").read_text().splitlines())
    with ProgressStore(tmp_path / "state") as store:
        store.set_total(len(parsed))
        assert run_batch(parsed, store, EngineClient(engine.url), concurrency=4, policy=FAST)
        assert store.progress.complete
        assert (store.progress.succeeded, store.progress.failed) == (28, 2)
    check_exactly_once(tmp_path / "state", requests, {"req-5", "req-17"})
    # Every 4th body met a 503 first and was answered on its retry.
    assert sum(engine.tries.values()) > len(requests)


def test_a_stopped_run_resumes_without_resending_answers(
    tmp_path: Path, engine: FakeOpenAIEngine
) -> None:
    requests = write_input(tmp_path / "in.jsonl", 40)
    parsed = parse_input((tmp_path / "in.jsonl").read_text().splitlines())
    engine.delay = 0.01
    stop = threading.Event()
    with ProgressStore(tmp_path / "state") as store:
        orig = store.record

        def record_then_stop(result: object) -> bool:
            written = orig(result)  # type: ignore[arg-type]
            if store.progress.done >= 10:
                stop.set()
            return written

        store.record = record_then_stop  # type: ignore[method-assign]
        assert not run_batch(parsed, store, EngineClient(engine.url), concurrency=2, stop=stop)
        first = store.done_ids
    assert 10 <= len(first) < 40
    served_before = sum(engine.served.values())
    with ProgressStore(tmp_path / "state") as store:
        assert store.done_ids == first
        assert run_batch(parsed, store, EngineClient(engine.url), concurrency=4, policy=FAST)
    check_exactly_once(tmp_path / "state", requests, set())
    # The second run sent only what the first had not answered.
    assert sum(engine.served.values()) - served_before == 40 - len(first)


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.jsonl").write_text('{"custom_id": "a"}\n')
    rc = main(["--input", str(tmp_path / "in.jsonl"), "--state-dir", str(tmp_path / "s")])
    assert rc == 2
    assert "line 1: url must be one of" in capsys.readouterr().err


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def _answers(state: Path) -> int:
    total = 0
    for name in (OUTPUT_FILE, ERROR_FILE):
        path = state / name
        if path.exists():
            total += path.read_bytes().count(b"\n")
    return total


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    n = 80
    requests = write_input(tmp_path / "in.jsonl", n, refused=frozenset({11, 42}))
    state = tmp_path / "state"
    cmd = [
        sys.executable,
        "-m",
        "gleaner.batch.runner",
        "--input",
        str(tmp_path / "in.jsonl"),
        "--state-dir",
        str(state),
        "--concurrency",
        "4",
        "--checkpoint-every",
        str(rng.randint(1, 10)),
        "--max-attempts",
        "3",
    ]
    kills = launched = 0
    # Answers take a few ms each, so a kill lands with requests in flight, between an
    # answer's write and the next checkpoint, or inside a write.
    with FakeOpenAIEngine(
        delay=lambda body: 0.002 + (hash(json.dumps(body)) % 5) / 1000, flaky_every=9
    ) as engine:
        cmd += ["--engine-url", engine.url]
        while _answers(state) < n - 10 and kills < 6:
            proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
            launched += 1
            target = min(n, _answers(state) + rng.randint(1, 15))

            def progressed(t: int = target, p: subprocess.Popen[bytes] = proc) -> bool:
                return _answers(state) >= t or p.poll() is not None

            reached = _wait_for(progressed, timeout=60)
            assert reached, "the runner made no progress within a minute"
            time.sleep(rng.uniform(0, 0.02))
            if proc.poll() is not None:  # it finished before the kill
                break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
        final = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=120)
        assert final.returncode == 0, final.stderr
    assert kills >= 3
    check_exactly_once(state, requests, {"req-11", "req-42"})
    checkpoint = json.loads((state / CHECKPOINT_FILE).read_text())
    assert checkpoint["progress"]["complete"] is True
    # Every runner launched made progress (an answer past the last one), so it recorded its
    # start: the killed ones, one that finished before its kill, and the final run.
    assert checkpoint["progress"]["starts"] == launched + 1
    assert checkpoint["progress"]["succeeded"] == n - 2
    assert sorted(checkpoint["done"]) == sorted(str(r["custom_id"]) for r in requests)
