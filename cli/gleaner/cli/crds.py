"""``gleaner crds``: print the CRD manifests, or validate objects through them like kubectl.

Without arguments it prints both CustomResourceDefinitions as YAML (``--format json``:
a JSON list; ``--format table``: one row per CRD), ready for ``kubectl apply -f -``.
``gleaner crds --validate FILE...`` reads OfflineJob/NodeTrace manifests (multi-document
YAML; ``-`` is stdin) and validates each through the generated CRD schema, the way the
API server would (``gleaner.api.schema_validation``): one line per valid object, a
kubectl-style error block per invalid one, and exit 2 (with a one-line error) when any is
invalid. A file that cannot be read or is not valid YAML (the error gives the line and
column) is reported and the other files are still validated. A ConfigMap named by an
OfflineJob's ``profileFrom`` in the same files has its profile validated, too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from gleaner.cli.common import echo_json, echo_table, fail


def _load(paths: tuple[str, ...]) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """Every document of ``paths``, and one message per file that could not be read or
    parsed (the others are still read: one bad file hides no error of the next)."""
    from gleaner.cli.inputs import yaml_error

    docs: list[tuple[str, Any]] = []
    problems: list[tuple[str, str]] = []
    for name in paths:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            problems.append((name, f"cannot read {name}: {exc.strerror or exc}"))
            continue
        try:
            loaded = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            problems.append((name, f"{name}: not valid YAML: {yaml_error(exc)}"))
            continue
        docs.extend((name, doc) for doc in loaded)
    return docs, problems


def _print_manifests(output_format: str) -> None:
    from gleaner.api.crdgen import CRDS, build_crds, rendered_files

    if output_format == "json":
        echo_json(build_crds())
    elif output_format == "table":
        rows = [
            (
                spec.name,
                spec.kind,
                spec.scope,
                ",".join(spec.short_names),
                " ".join(c.name for c in spec.columns),
            )
            for spec in CRDS
        ]
        echo_table(("CRD", "Kind", "Scope", "Short names", "Columns"), rows)
    else:
        click.echo("---\n".join(rendered_files().values()), nl=False)


def _validate(paths: tuple[str, ...], output_format: str) -> None:
    from gleaner.api.schema_validation import validate_documents

    docs, problems = _load(paths)
    results = validate_documents(docs)
    checked = [r for r in results if not r.skipped]
    if not checked:
        if len(problems) == 1:
            fail(problems[0][1])
        fail("no OfflineJob or NodeTrace objects in " + ", ".join(paths))
    invalid = [r for r in checked if not r.valid]
    if output_format == "json":
        rows: list[dict[str, Any]] = [
            {"file": name, "valid": False, "errors": [{"field": None, "message": message}]}
            for name, message in problems
        ]
        rows += [
            {
                "file": r.source,
                "kind": r.kind,
                "name": r.name,
                "namespace": r.namespace,
                "valid": r.valid,
                "errors": [{"field": e.field, "message": str(e)} for e in r.errors],
            }
            for r in checked
        ]
        echo_json(rows)
    else:
        for _, message in problems:
            click.echo(message)
        for r in checked:
            if r.valid:
                click.echo(f"{r.resource} valid ({r.source})")
            else:
                click.echo(f'{r.source}: The {r.kind} "{r.name}" is invalid:')
                for err in r.errors:
                    click.echo(f"* {err}")
        unread = f", {len(problems)} file(s) unreadable" if problems else ""
        click.echo(f"{len(checked) - len(invalid)} valid, {len(invalid)} invalid{unread}")
    if invalid or problems:
        files = f"{len(problems)} file(s) unreadable; " if problems else ""
        fail(f"{files}{len(invalid)} of {len(checked)} objects are invalid")


@click.command(name="crds")
@click.option(
    "--validate",
    "validate",
    is_flag=True,
    help="Validate the OfflineJob/NodeTrace/NodeHistory objects in FILES through the CRD schemas.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["yaml", "json", "table"]),
    default=None,
    help="Output format [manifests: yaml (default), json, table; --validate: table "
    "(default), json].",
)
@click.argument("files", nargs=-1, type=str)
def command(validate: bool, output_format: str | None, files: tuple[str, ...]) -> None:
    """Print the CRD manifests generated from the API models, or validate objects.

    \b
    gleaner crds | kubectl apply -f -
    gleaner crds --validate examples/*.yaml
    """
    if not validate:
        if files:
            fail("FILES are only read with --validate")
        _print_manifests(output_format or "yaml")
        return
    if not files:
        fail("--validate needs at least one FILE (or - for stdin)")
    if output_format == "yaml":
        fail("--validate prints a table or json, not yaml")
    _validate(files, output_format or "table")
