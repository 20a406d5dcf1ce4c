"""LoadSpread: the load spread learned per node, the cluster's until a node has its own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.perfmodel.admission import SPREAD_KEPT, SPREAD_MIN, LoadSpread, load_scale


def test_a_node_uses_the_clusters_ratios_until_it_has_enough_of_its_own() -> None:
    spread = LoadSpread()
    spread.add("a", [0.5] * 40)  # a's load was twice its forecast
    spread.add("b", [1.0] * (SPREAD_MIN - 1))
    # b has too few of its own: it is judged by the cluster's, a's included.
    assert spread.ratios("b") == [0.5] * 40 + [1.0] * (SPREAD_MIN - 1)
    assert spread.scale("b", 0.9) == load_scale(spread.ratios("b"), 0.9) > 1.0
    spread.add("b", [1.0])
    assert spread.ratios("b") == [1.0] * SPREAD_MIN
    assert spread.scale("b", 0.9) == 1.0
    assert spread.scale("a", 0.9) == pytest.approx(2.0)
    # An unknown node is judged by the cluster's ratios too.
    assert spread.ratios("c") == [0.5] * 40 + [1.0] * SPREAD_MIN


def test_no_target_or_too_few_windows_scale_by_one() -> None:
    spread = LoadSpread()
    spread.add("a", [0.5] * (SPREAD_MIN - 1))
    assert spread.scale("a", 0.9) == 1.0
    spread.add("a", [0.5])
    assert spread.scale("a", None) == 1.0
    assert spread.scale("a", 0.9) == pytest.approx(2.0)


def test_memory_is_bounded_and_keeps_the_latest() -> None:
    spread = LoadSpread()
    spread.add("a", [1.0] * SPREAD_KEPT)
    spread.add("a", [0.25] * 10)
    own = spread.ratios("a")
    assert len(own) == SPREAD_KEPT and own[-10:] == [0.25] * 10
    for i in range(10):
        spread.add(f"n{i}", [1.0] * SPREAD_KEPT)
    spread.retain({"a"})
    assert len(spread.ratios("gone")) == 4 * SPREAD_KEPT  # the cluster's, bounded
    assert spread.ratios("n0") == spread.ratios("gone")  # n0's own were forgotten


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        LoadSpread(kept=0)
    with pytest.raises(ValueError):
        LoadSpread(min_samples=0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "retain", "scale"]),
            st.sampled_from(["a", "b", "c"]),
            st.lists(st.floats(min_value=0.05, max_value=5.0), min_size=1, max_size=15),
        ),
        max_size=40,
    )
)
def test_a_kept_scale_is_the_scale_of_the_ratios_now(
    ops: list[tuple[str, str, list[float]]],
) -> None:
    """Whatever was added and forgotten since, the scale a pass gets (kept from an earlier
    call until the ratios it read change) is load_scale of the ratios now."""
    spread = LoadSpread(kept=30, min_samples=10)
    for op, node, ratios in ops:
        if op == "add":
            spread.add(node, ratios)
        elif op == "retain":
            spread.retain({node})
        for n in ("a", "b", "c"):
            for target in (0.5, 0.9):
                assert spread.scale(n, target) == load_scale(spread.ratios(n), target, 10)
