"""``kubectl-gleaner``: the kubectl plugin installed with the ``gleaner`` package.

kubectl runs any ``kubectl-NAME`` executable on its PATH as ``kubectl NAME``, so with
``gleaner`` installed:

- ``kubectl gleaner why JOB [-n NS]``: why the OfflineJob is in its phase, in words
  (:mod:`gleaner.cli.why`: the scheduler's reasons, the placement and its predicted
  factors, the observed throughput, the SLA evictions and the conditions);
- ``kubectl gleaner evictions [-n NS | -A] [--since 24h]``: the SLA eviction reports, the
  very command ``gleaner report evictions`` (:mod:`gleaner.cli.report`).

Both read the cluster through ``gleaner.clients.kube`` (the kubeconfig kubectl uses:
``--kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``, at ``--context`` or its
current context). Errors are one ``error:`` line and exit status 2, as in ``gleaner``.
"""

from __future__ import annotations

import sys

import click

from gleaner.cli.common import echo_json, echo_table, fail, format_option, run_command
from gleaner.cli.report import command as report_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gleaner", prog_name="kubectl gleaner")
def plugin() -> None:
    """Gleaner's kubectl plugin: explain OfflineJobs and their SLA evictions."""


@plugin.command(name="why")
@click.argument("job")
@click.option("--namespace", "-n", default=None, help="Namespace (default: the context's).")
@click.option("--kubeconfig", default=None, help="Kubeconfig file (default: as kubectl).")
@click.option("--context", default=None, help="Kubeconfig context (default: the current one).")
@format_option("table", "json")
def why(
    job: str,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """Why the OfflineJob JOB is in its phase: reasons, placement, prediction, evictions."""
    from gleaner.cli.why import explain_job, explanation_json
    from gleaner.clients.kube import (
        Credentials,
        KubeConfigError,
        KubeError,
        SyncKubeClient,
        offlinejobs_path,
    )

    try:
        credentials = Credentials.load(kubeconfig, context)
    except KubeConfigError as exc:
        fail(f"no cluster configuration: {exc}")
    target = namespace or credentials.namespace
    with SyncKubeClient(credentials) as client:
        try:
            body = client.get(offlinejobs_path(target, job))
        except KubeError as exc:
            if exc.status == 0:
                fail(f"cannot reach the cluster: {exc.message}")
            fail(f"cannot read offlinejob {target}/{job}: {exc.status} {exc.message}")
    if body is None:
        fail(f'offlinejobs.gleaner.dev "{job}" not found in namespace {target}')
    try:
        if output_format == "json":
            echo_json(explanation_json(body))
            return
        lines = explain_job(body)
    except ValueError as exc:
        fail(f"offlinejob {target}/{job}: {exc}")
    echo_table(["", "why"], [[line.label, line.text] for line in lines], title=f"{target}/{job}")


evictions = report_group.commands["evictions"]
plugin.add_command(evictions, name="evictions")


def main(argv: list[str] | None = None) -> int:
    """Run the plugin; return the exit code (0 ok, 1 failure, 2 bad input)."""
    return run_command(plugin, argv, "kubectl gleaner")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
