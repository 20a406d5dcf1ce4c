"""gleaner.api.units: GIB and the one duration grammar, which accepts every form the four
parsers it replaced accepted (perfmodel ``--window``, ``gleaner agent``, ``gleaner operator``,
``gleaner report --since``)."""

from __future__ import annotations

import pytest

from gleaner.api.units import GIB, parse_duration


def test_gib() -> None:
    assert GIB == 2**30 == 1073741824
    assert isinstance(GIB, int)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        # perfmodel --window: a number with an optional unit ms, s, m, h, d or w.
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h", 3600.0),
        ("1.5d", 1.5 * 86400),
        ("2w", 2 * 604800.0),
        ("30", 30.0),
        (" 15 m ", 900.0),
        ("250ms", 0.25),
        # gleaner agent: 15s, 500ms, 2m, 1h or plain seconds.
        ("15s", 15.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("3", 3.0),
        # gleaner operator: float() syntax before a ms/s/m/h suffix.
        ("1e3", 1000.0),
        ("1e3s", 1000.0),
        (".5s", 0.5),
        ("2.s", 2.0),
        ("+5m", 300.0),
        ("1_000", 1000.0),
        ("5 ms", 0.005),
        # gleaner report --since: any case (it lowercased), d for days.
        ("24H", 86400.0),
        ("7D", 7 * 86400.0),
        ("30M", 1800.0),
        # New: terms add up.
        ("1h30m", 5400.0),
        ("1d 12h", 1.5 * 86400),
        ("1m30s500ms", 90.5),
    ],
)
def test_every_old_form_parses(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    "text",
    ["", " ", "h", "soon", "1y", "1h30", "h1", "-1h", "-5", "inf", "nan", "1e999s", "1.2.3s"],
)
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_zero_only_where_allowed() -> None:
    for text in ("0", "0s", "0h0m"):
        with pytest.raises(ValueError, match="must be positive"):
            parse_duration(text)
        assert parse_duration(text, allow_zero=True) == 0.0
