"""``gleaner`` entry point.

Subcommands are imported only when invoked (``gleaner --help`` stays fast and a broken
optional dependency of one command cannot break the others). Each lives in its own
module under ``gleaner.cli`` and exposes a ``click.Command`` named ``command``.
"""

from __future__ import annotations

import importlib
import sys

import click

from gleaner.cli.common import run_command

# name -> (module, one-line help). Order is the order shown in --help.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("gleaner.cli.simulate", "Simulate a whole harvested cluster from traces."),
    "predict": ("gleaner.cli.predict", "Predict a job's throughput on one node's GPUs."),
    "place": ("gleaner.cli.place", "Place a queue of OfflineJobs on a cluster trace."),
    "backtest": ("gleaner.cli.backtest", "Backtest placements on held-out time of a trace."),
    "operator": ("gleaner.cli.operator", "Run the Kubernetes operator (kopf)."),
    "agent": ("gleaner.cli.agent", "Run the per-node runtime agent."),
    "cpu-latency": (
        "gleaner.cli.cpulatency",
        "Hold a CPU wakeup-latency bound for the gate (the agent's sidecar).",
    ),
    "profile": ("gleaner.cli.profile", "Measure a job's profile with its own engine."),
    "report": ("gleaner.cli.report", "Reports from the cluster (SLA evictions)."),
    "dashboard": ("gleaner.cli.dashboard", "Serve the cluster dashboard."),
    "crds": ("gleaner.cli.crds", "Print the CRD manifests generated from the API models."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command = module.command
        if not isinstance(command, click.Command):  # pragma: no cover - programming error
            raise TypeError(f"{entry[0]}.command is not a click command")
        if command.short_help is None and command.help is None:
            command.short_help = entry[1]
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gleaner", prog_name="gleaner")
def cli() -> None:
    """Gleaner: run offline LLM inference on the idle capacity of online GPUs."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 failure, 2 bad input / not built)."""
    return run_command(cli, argv, "gleaner")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
