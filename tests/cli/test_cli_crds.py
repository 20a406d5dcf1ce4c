"""``gleaner crds``: prints the generated manifests; ``--validate`` behaves like kubectl."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gleaner.api import crdgen
from gleaner.cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["crds", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_prints_the_generated_manifests() -> None:
    code, out, _ = run()
    assert code == 0
    assert out == "---\n".join(crdgen.rendered_files().values())
    docs = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in docs] == [
        "offlinejobs.gleaner.dev",
        "nodetraces.gleaner.dev",
        "nodehistories.gleaner.dev",
    ]


def test_json_and_table_formats() -> None:
    code, out, _ = run("--format", "json")
    assert code == 0 and json.loads(out) == crdgen.build_crds()
    code, out, _ = run("--format", "table")
    assert code == 0 and "offlinejobs.gleaner.dev" in out and "Namespaced" in out


def test_validate_good_examples() -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    code, out, _ = run("--validate", *files)
    assert code == 0, out
    assert "offlinejob.gleaner.dev/llama-8b-nightly-summaries valid" in out
    assert "configmap/mistral-7b-h100-profile valid" in out
    assert "offlinejob.gleaner.dev/llama-8b-weekly-digest valid" in out
    assert out.rstrip().endswith("5 valid, 0 invalid")  # 4 jobs and 1 ConfigMap


def test_validate_invalid_examples_exits_2_with_field_errors() -> None:
    files = sorted(str(p) for p in (EXAMPLES / "invalid").glob("*.yaml"))
    code, out, err = run("--validate", *files)
    assert code == 2
    assert 'The OfflineJob "bad-sla" is invalid:' in out
    assert (
        "* spec.throughputSLA: Invalid value: 1.5: spec.throughputSLA in body should be less "
        "than or equal to 1"
    ) in out
    assert "* spec.gpus: Invalid value: 12:" in out
    assert err.strip() == "error: 4 of 4 objects are invalid"


def test_validate_json_and_stdin() -> None:
    text = (EXAMPLES / "invalid" / "too-many-gpus.yaml").read_text()
    code, out, _ = run("--validate", "--format", "json", "-", stdin=text)
    assert code == 2
    (entry,) = json.loads(out)
    assert entry["valid"] is False and entry["errors"][0]["field"] == "spec.gpus"


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    for args, needle in [
        (("--validate", str(tmp_path / "missing.yaml")), "cannot read"),
        (("--validate", str(broken)), "not valid YAML"),
        (("--validate", str(pod)), "no OfflineJob or NodeTrace objects"),
        (("--validate",), "needs at least one FILE"),
        ((str(pod),), "only read with --validate"),
        (("--validate", "--format", "yaml", str(pod)), "table or json"),
    ]:
        code, _, err = run(*args)
        assert code == 2, args
        assert len(err.strip().splitlines()) == 1 and needle in err, (args, err)
