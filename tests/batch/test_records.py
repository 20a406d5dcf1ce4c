"""gleaner.batch.records: input lines refused with their line number, output lines in the
OpenAI batch format, and a torn line never taken for an answer."""

from __future__ import annotations

import json

import pytest

from gleaner.batch.records import (
    InputError,
    Result,
    decode_output_line,
    encode_line,
    parse_input,
    request_line_id,
)


def line(custom_id: str = "a", **over: object) -> str:
    doc: dict[str, object] = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    }
    doc.update(over)
    return json.dumps(doc)


def test_a_valid_file_parses_in_order_and_skips_blank_lines() -> None:
    reqs = parse_input([line("a"), "", line("b", url="/v1/completions"), "  \n"])
    assert [(r.custom_id, r.url, r.line) for r in reqs] == [
        ("a", "/v1/chat/completions", 1),
        ("b", "/v1/completions", 3),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "line 2: not JSON"),
        ("[1]", "line 2: a request must be a JSON object"),
        (line(""), "line 2: custom_id must be a non-empty string"),
        (line("x", method="GET"), "line 2: method must be POST"),
        (line("x", url="/v1/images"), "line 2: url must be one of"),
        (line("x", body="text"), "line 2: body must be a JSON object"),
        (line("a"), "line 2: custom_id 'a' repeats line 1"),
    ],
)
def test_a_malformed_line_is_refused_with_its_number(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_input([line("a"), text])


def test_output_lines_have_the_openai_batch_shape() -> None:
    ok = Result("a", 200, {"choices": [], "usage": {"prompt_tokens": 3}}, "req-1").to_line()
    assert ok == {
        "id": request_line_id("a"),
        "custom_id": "a",
        "response": {"status_code": 200, "request_id": "req-1", "body": ok["response"]["body"]},
        "error": None,
    }
    bad = Result("b", 400, {"error": {"message": "too long"}}).to_line()
    assert bad["error"] == {"code": "400", "message": "too long"}
    assert bad["response"]["status_code"] == 400
    # The line id is stable across attempts, and distinct per request.
    assert request_line_id("a") == request_line_id("a") != request_line_id("b")


def test_only_a_whole_line_decodes() -> None:
    data = encode_line(
        Result("a", 200, {"usage": {"prompt_tokens": 3, "completion_tokens": 4}}).to_line()
    )
    decoded = decode_output_line(data)
    assert decoded is not None
    assert decoded[0] == "a"
    assert decoded[1].total_tokens == 7
    for cut in range(len(data)):
        assert decode_output_line(data[:cut]) is None
