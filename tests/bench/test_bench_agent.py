"""``python -m bench agent``'s reading of the kernel's preemption model (printed with every
run: under ``none`` no thread priority shortens a wakeup's wait for kernel code)."""

from __future__ import annotations

from pathlib import Path

from bench.bench_agent import kernel_preemption, wakeup_cost


def test_the_active_mode_from_debugfs(tmp_path: Path) -> None:
    debugfs = tmp_path / "preempt"
    debugfs.write_text("none voluntary (full) lazy\n")
    assert kernel_preemption(debugfs, lambda: "").startswith("full (PREEMPT_DYNAMIC")


def test_the_boot_log_when_debugfs_is_not_readable(tmp_path: Path) -> None:
    log = "[    0.1] rcu: Hierarchical RCU\n[    0.2] Dynamic Preempt: voluntary\n"
    found = kernel_preemption(tmp_path / "absent", lambda: log)
    assert found == "voluntary (PREEMPT_DYNAMIC, boot log)"


def test_neither_readable_falls_back_to_the_build(tmp_path: Path) -> None:
    found = kernel_preemption(tmp_path / "absent", lambda: "")
    assert "uname -v" in found


def test_the_wakeup_cost_is_measured_after_each_sleep() -> None:
    lines = wakeup_cost((0.001, 0.01), budget_s=0.05)
    assert lines[0].startswith("one unit of work, back to back: ")
    assert [line.split(":")[0] for line in lines[1:]] == [
        "after a 1 ms sleep",
        "after a 10 ms sleep",
    ]
    assert all(int(line.split(": ")[1].split()[0]) > 0 for line in lines)
