"""Request-trace replay: the three public formats, windows, rate scaling, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gleaner.simulator.node import NodeScenario, RunSpec, run_node
from gleaner.simulator.request_trace import (
    RequestTraceConfig,
    TraceError,
    parse_requests,
    read_requests,
    split_round_robin,
)

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:16:06.5000000,5000,10\n"
    "2023-11-16 18:15:47.0000000,91,16\n"
)


def _cfg(**kw: object) -> RequestTraceConfig:
    return RequestTraceConfig.model_validate({"path": "x", **kw})


def test_azure_rows_are_sorted_relative_and_capped() -> None:
    got = parse_requests(AZURE, _cfg(), max_prompt=4096, max_output=4096)
    assert got.format == "azure" and got.rows == 4 and got.dropped == 0
    r = got.requests
    assert r.arrival.tolist() == pytest.approx([0.0, 0.3194100, 4.314579, 19.81941])
    assert r.prompt.tolist() == [374, 91, 396, 4096] and r.output.tolist() == [44, 16, 109, 10]
    assert got.clipped == 1


def test_window_and_rate_scale() -> None:
    got = parse_requests(AZURE, _cfg(start_s=0.2, duration_s=10.0, rate_scale=2.0), 8192, 8192)
    # Requests at 0.319 and 4.315 s fall in [0.2, 10.2); times from the window start, halved.
    assert got.requests.arrival.tolist() == pytest.approx([0.059705, 2.0572895])
    assert got.window_s == pytest.approx(5.0)


def test_mooncake_jsonl_in_milliseconds() -> None:
    lines = [
        {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 100, "output_length": 7},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    got = parse_requests(text, _cfg(), 32768, 4096)
    assert got.format == "mooncake"
    assert got.requests.arrival.tolist() == [0.0, 1.5]
    assert got.requests.prompt.tolist() == [6955, 100]


def test_burstgpt_drops_failed_requests() -> None:
    text = (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    got = parse_requests(text, _cfg(), 32768, 4096)
    assert got.format == "burstgpt" and got.dropped == 1
    assert got.requests.arrival.tolist() == [0.0, 113.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12x,4\n",
            "trace:2: column 'ContextTokens': not a number ('12x')",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,4\n",
            "trace:2: column 'TIMESTAMP': not a date-time or seconds ('yesterday')",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,4\n"
            "2023-11-16 18:15:47,1\n",
            "trace:3: column 'GeneratedTokens': missing (2 of 3)",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n',
            "trace:2: column 'input_length': missing",
        ),
        (
            '{"timestamp": 0, "input_length": -5, "output_length": 1}\n',
            "trace:1: column 'input_length': must be a finite number ≥ 0 (-5)",
        ),
        ("a,b\n1,2\n", "unknown request trace format"),
    ],
)
def test_malformed_rows_name_the_row_and_column(text: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_requests(text, _cfg(), 8192, 8192)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_empty_window_is_an_error() -> None:
    with pytest.raises(TraceError, match="no request"):
        parse_requests(AZURE, _cfg(start_s=1000.0), 8192, 8192)


def test_read_requests_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"missing\.csv"):
        read_requests(_cfg(path=str(tmp_path / "missing.csv")), 8192, 8192)


def test_round_robin_split() -> None:
    got = parse_requests(AZURE, _cfg(), 8192, 8192).requests
    a, b = split_round_robin(got, 2)
    assert len(a) == 2 and len(b) == 2 and a.arrival[1] == got.arrival[2]


def test_the_node_level_replays_a_written_trace(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(40):
        rows.append(f"2024-05-10 00:{i // 60:02d}:{i % 60:02d}.5000000,{300 + 37 * i},{20 + i}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    scenario = NodeScenario(
        requests=RequestTraceConfig(path=str(path), rate_scale=0.5),
        runs=[
            RunSpec(name="online-only", compute="online-only", memory="none"),
            RunSpec(name="gleaner", compute="gleaner", memory="gleaner"),
        ],
    )
    res = run_node(scenario, seed=3)
    assert res["replay"]["format"] == "azure" and res["replay"]["requests"] == 40
    assert res["scenario"]["duration_s"] == pytest.approx(78.0, abs=0.1)
    for run in res["runs"].values():
        assert run["requests"] == 40
