"""``gleaner profile``: measure a job's profile by running its own engine at several KV budgets.

Contract (docs/profiling.md). The engine is ``vllm bench throughput`` (vLLM's offline
throughput benchmark), started once per KV-cache budget with ``--kv-cache-memory-bytes``
(the KV cache per GPU, which replaces vLLM's sizing by ``--gpu-memory-utilization``) and a
prompt set of ``--input-len``/``--output-len`` tokens (or lengths estimated from a
JSONL sample of the job's dataset). Each run's ``--output-json`` gives the seconds; output
tokens are the JSON's ``output_tokens`` when present, else ``num_requests × output_len``.
``--engine-command`` replaces ``vllm`` (a container's path, or the fake engine in tests).

The loop and the fit are ``gleaner.perfmodel.profiling``'s (pure); this shell only starts
processes, shows a progress bar on stderr, and writes, under ``--out``:

- ``profile.yaml``: the fields of ``spec.profile`` (what ``profileFrom`` reads);
- ``profile-configmap.yaml``: the same as a ConfigMap manifest (key ``profile.yaml``),
  the format of examples/mistral-7b-profile-configmap.yaml;
- ``measurements.json``: every run and the goodness of fit;
- ``profile.html``: the fitted curve over the measurements (plotly, opens offline).

Exit codes: 0 ok, 1 an engine run failed (its last stderr line is printed), 2 bad input.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from gleaner.api import ConfigMapProfileRef
from gleaner.api.contract import LABEL_PROFILE
from gleaner.cli.common import fail
from gleaner.perfmodel.engine import GIB
from gleaner.perfmodel.engine_args import bench_argv, job_engine
from gleaner.perfmodel.profiling import (
    FitReport,
    Measurement,
    SwingMeasurement,
    fit_profile,
    fit_summary,
    measure,
    profile_document,
)

DEFAULT_MAX_NUM_SEQS = 256
"""--max-num-seqs when neither the option nor the job sets it."""
PROFILE_KEY: str = ConfigMapProfileRef.model_fields["key"].default
"""The ConfigMap key ``profileFrom`` reads by default."""
CHARS_PER_TOKEN = 4.0
"""Prompt tokens of a JSONL sample are estimated as characters / 4 (English text with a
BPE tokenizer); the engine's own tokenizer is not loaded here."""


class EngineFailed(click.ClickException):
    """An engine run failed: one line on stderr, exit 1."""

    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@dataclass(frozen=True)
class EngineSpec:
    """How to start one engine run (everything but the budget)."""

    command: tuple[str, ...]
    model: str
    input_len: int
    output_len: int
    num_prompts: int
    max_num_seqs: int
    extra: tuple[str, ...] = ()
    timeout_s: float = 3600.0

    def argv(self, kv_gib: float, out_json: str, swing: str | None = None) -> list[str]:
        """The command line of one run at ``kv_gib`` GiB of KV cache."""
        argv = bench_argv(
            self.command,
            self.model,
            kv_gib,
            self.input_len,
            self.output_len,
            self.num_prompts,
            self.max_num_seqs,
            out_json,
            self.extra,
        )
        if swing is not None:
            argv.append(f"--kv-swing={swing}")
        return argv

    def run(self, kv_gib: float, swing: str | None = None) -> tuple[float, float]:
        """Run once; return (output tokens, seconds)."""
        with tempfile.TemporaryDirectory(prefix="gleaner-profile-") as tmp:
            out = Path(tmp) / "result.json"
            try:
                proc = subprocess.run(
                    self.argv(kv_gib, str(out), swing),
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    check=False,
                )
            except FileNotFoundError as exc:
                raise EngineFailed(f"cannot start the engine: {exc}") from exc
            except subprocess.TimeoutExpired as exc:
                raise EngineFailed(f"engine run at {kv_gib:.2f} GiB timed out") from exc
            if proc.returncode != 0 or not out.exists():
                lines = (proc.stderr or proc.stdout or "no output").strip().splitlines()
                last = lines[-1] if lines else "no output"
                raise EngineFailed(
                    f"engine run at {kv_gib:.2f} GiB KV failed (exit {proc.returncode}): {last}"
                )
            text = out.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
            tokens = data.get("output_tokens")
            if tokens is None:
                tokens = int(data["num_requests"]) * self.output_len
            return float(tokens), float(data["elapsed_time"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EngineFailed(
                f"engine run at {kv_gib:.2f} GiB KV wrote no usable --output-json "
                f"(elapsed_time and num_requests or output_tokens): {exc!r}"
            ) from exc


def sample_lengths(path: Path, limit: int = 1000) -> tuple[int, int]:
    """Mean prompt and output lengths (tokens) of a JSONL sample of the job's dataset.

    Each line is a vLLM batch request (``body.messages`` or ``body.prompt``, and
    ``body.max_tokens``) or a bare ``{"prompt", "max_tokens"}``. Prompt tokens are
    estimated from characters (:data:`CHARS_PER_TOKEN`).
    """
    chars: list[int] = []
    outs: list[int] = []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            body = row.get("body", row)
            if "messages" in body:
                text = "".join(str(m.get("content", "")) for m in body["messages"])
            else:
                text = str(body.get("prompt", ""))
            chars.append(len(text))
            outs.append(int(body.get("max_tokens", 128)))
    if not chars:
        raise ValueError(f"{path}: no requests")
    prompt = max(1, round(sum(chars) / len(chars) / CHARS_PER_TOKEN))
    return prompt, max(1, round(sum(outs) / len(outs)))


def load_job_manifest(path: Path) -> dict[str, Any]:
    """The OfflineJob document of a (multi-document) YAML file."""
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "OfflineJob":
            return doc
    raise ValueError(f"{path}: no OfflineJob in it")


def configmap(doc: dict[str, object], name: str, namespace: str, model: str, comment: str) -> str:
    """The ConfigMap manifest holding the profile under ``profile.yaml``."""
    body = f"# {comment}\n" + yaml.safe_dump(doc, sort_keys=False)
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_PROFILE: _label_value(model)},
        },
        "data": {PROFILE_KEY: body},
    }
    return yaml.dump(manifest, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as ``|`` blocks, so the ConfigMap reads like the example."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def _label_value(text: str) -> str:
    """A label value from a model name: [A-Za-z0-9._-], at most 63, alnum at both ends."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in text)[-63:]
    return cleaned.strip("._-") or "profile"


def plot_html(report: FitReport, title: str) -> str:
    """The fitted curve over the measurements, as a self-contained HTML page."""
    import plotly.graph_objects as go

    p = report.profile
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[m.memory_gib for m in report.measurements],
            y=[m.tokens_per_second for m in report.measurements],
            mode="markers",
            name="measured",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=list(p.curve_memory_gib),
            y=list(p.curve_tokens_per_second),
            mode="lines",
            name="fitted curve",
        )
    )
    fig.add_vline(x=p.required_memory_gib, line_dash="dash", annotation_text="requiredMemoryGiB")
    fig.update_layout(
        title=title, xaxis_title="GPU memory per GPU (GiB)", yaxis_title="output tokens/s"
    )
    out: str = fig.to_html(full_html=True, include_plotlyjs=True)
    return out


def _progress(enabled: bool, total: int) -> Any:
    """A tqdm bar on stderr, one step per engine run (closed by the caller)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="profile", file=sys.stderr, disable=not enabled, unit="run")


def _parse_swing(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        low, frac = (float(v) for v in text.split(":"))
    except ValueError:
        fail(f"--swing {text!r}: expected LOW_SHARE:TIME_SHARE, e.g. 0.5:0.3")
    if not (0 < low < 1 and 0 < frac < 1):
        fail("--swing: both shares must be in (0, 1)")
    return low, frac


@click.command(name="profile")
@click.option(
    "--from-job",
    "from_job",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="An OfflineJob manifest: its vLLM container's --model, --max-num-seqs, engine flags "
    "and --input-file (when readable here), and its name and namespace for the ConfigMap.",
)
@click.option("--model", default=None, help="The model the engine serves (vLLM --model).")
@click.option(
    "--base-gib",
    type=float,
    required=True,
    help="GPU memory per GPU the job holds besides its KV cache (weights, "
    "activations, CUDA graphs), GiB; memoryGiB = base + KV budget.",
)
@click.option(
    "--kv-min-gib",
    type=float,
    default=0.5,
    show_default=True,
    help="Smallest KV-cache budget, GiB.",
)
@click.option("--kv-max-gib", type=float, required=True, help="Largest KV-cache budget, GiB.")
@click.option(
    "--points",
    type=click.IntRange(2, 32),
    default=6,
    show_default=True,
    help="Runs at budgets spread geometrically over [min, max].",
)
@click.option(
    "--refine",
    type=click.IntRange(0, 16),
    default=2,
    show_default=True,
    help="Extra runs where the measured curve bends most.",
)
@click.option(
    "--input-len",
    type=click.IntRange(1),
    default=512,
    show_default=True,
    help="Prompt tokens of the synthetic prompt set.",
)
@click.option(
    "--output-len",
    type=click.IntRange(1),
    default=128,
    show_default=True,
    help="Output tokens of the synthetic prompt set.",
)
@click.option(
    "--dataset",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSONL sample of the job's dataset: prompt and output "
    "lengths are taken from it (instead of --input-len/--output-len).",
)
@click.option("--num-prompts", type=click.IntRange(1), default=1000, show_default=True)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(1),
    default=None,
    help="The job's vLLM --max-num-seqs (default: the job's, else 256).",
)
@click.option(
    "--full-speed",
    type=click.FloatRange(0.5, 1.0),
    default=0.95,
    show_default=True,
    help="requiredMemoryGiB reaches this share of standalone.",
)
@click.option(
    "--swing",
    default=None,
    metavar="LOW:SHARE",
    help="Also measure memoryDeficitCoefficient: a run at requiredMemoryGiB whose "
    "KV budget drops to LOW of it for SHARE of the time (engines with --kv-swing).",
)
@click.option(
    "--engine-command",
    default="vllm",
    show_default=True,
    help="The engine's command (split like a shell would).",
)
@click.option(
    "--engine-arg",
    "engine_args",
    multiple=True,
    help="Extra argument for every engine run (repeatable).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seconds one engine run may take.",
)
@click.option(
    "--name", default=None, help="ConfigMap name (default: <job>-profile or <model>-profile)."
)
@click.option(
    "--namespace", default=None, help="ConfigMap namespace (default: the job's, or default)."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the profile, manifest, measurements, plot.",
)
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
def command(
    from_job: Path | None,
    model: str | None,
    base_gib: float,
    kv_min_gib: float,
    kv_max_gib: float,
    points: int,
    refine: int,
    input_len: int,
    output_len: int,
    dataset: Path | None,
    num_prompts: int,
    max_num_seqs: int | None,
    full_speed: float,
    swing: str | None,
    engine_command: str,
    engine_args: Sequence[str],
    timeout_s: float,
    name: str | None,
    namespace: str | None,
    out_dir: Path,
    progress: bool,
) -> None:
    """Measure a job's profile: its engine's tokens/s at several KV-cache budgets, fitted.

    See docs/profiling.md for the method, the fields and how to check the result.
    """
    if base_gib < 0 or not 0 < kv_min_gib < kv_max_gib:
        fail("need --base-gib >= 0 and 0 < --kv-min-gib < --kv-max-gib")
    swing_shares = _parse_swing(swing)
    if from_job is not None:
        try:
            job = job_engine(load_job_manifest(from_job))
        except (ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
            fail(f"--from-job: {str(exc).splitlines()[0]}")
        model = model or job.model
        namespace = namespace or job.namespace
        name = name or f"{job.name}-profile"
        engine_args = (*job.engine_args, *engine_args)
        max_num_seqs = max_num_seqs or job.max_num_seqs
        if dataset is None and job.input_file is not None and Path(job.input_file).is_file():
            dataset = Path(job.input_file)
    if not model:
        fail("--model is required (or a --from-job whose container names one)")
    if dataset is not None:
        try:
            input_len, output_len = sample_lengths(dataset)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            fail(f"--dataset: {exc}")
    engine = EngineSpec(
        command=tuple(shlex.split(engine_command)),
        model=model,
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        max_num_seqs=max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        extra=tuple(engine_args),
        timeout_s=timeout_s,
    )
    bar = _progress(progress, points + refine + (1 if swing_shares else 0))

    def step(label: str) -> None:
        bar.set_postfix_str(label)
        bar.update(1)

    def run(kv: float) -> Measurement:
        tokens, seconds = engine.run(kv)
        m = Measurement(kv_gib=kv, memory_gib=base_gib + kv, output_tokens=tokens, seconds=seconds)
        step(f"{kv:.2f} GiB: {m.tokens_per_second:.0f} tok/s")
        return m

    try:
        report = _measure_and_fit(
            engine,
            step,
            run,
            base_gib,
            swing_shares,
            full_speed,
            kv_min_gib,
            kv_max_gib,
            points,
            refine,
        )
    finally:
        bar.close()
    write_outputs(
        report,
        out_dir,
        name or f"{_label_value(model)}-profile",
        namespace or "default",
        model,
        f"{input_len}/{output_len}-token prompts, {num_prompts} per run",
    )
    s = fit_summary(report)
    p = report.profile
    click.echo(
        f"standaloneTokensPerSecond {p.standalone_tokens_per_second:.1f}, requiredMemoryGiB "
        f"{p.required_memory_gib:.2f}, memoryDeficitCoefficient "
        f"{p.memory_deficit_coefficient:.2f}{'' if report.deficit_measured else ' (not measured)'}"
    )
    click.echo(
        f"fit: R² {s['rSquared']}, RMS {s['rmsRelative']:.1%}, leave-one-out worst "
        f"{s['leaveOneOutMaxRelative']:.1%} of standalone; {s['runs']} runs, "
        f"{s['seconds']} engine seconds; wrote {out_dir}"
    )
    if from_job is not None:
        cm = name or f"{_label_value(model)}-profile"
        click.echo(
            f"to use it: kubectl apply -f {out_dir / 'profile-configmap.yaml'}, and set "
            f"the job's spec.profileFrom: {{name: {cm}}}"
        )


def _measure_and_fit(
    engine: EngineSpec,
    step: Callable[[str], None],
    run: Callable[[float], Measurement],
    base_gib: float,
    swing_shares: tuple[float, float] | None,
    full_speed: float,
    kv_min_gib: float,
    kv_max_gib: float,
    points: int,
    refine: int,
) -> FitReport:
    # Budgets closer than a thousandth of the range tell nothing new (and round together).
    gap = (kv_max_gib - kv_min_gib) / 1000
    measured = measure(run, kv_min_gib, kv_max_gib, points, refine, gap)
    report = fit_profile(measured, full_speed_fraction=full_speed)
    if swing_shares is None:
        return report
    low_share, time_share = swing_shares
    high = report.profile.required_memory_gib - base_gib
    if high <= 0:
        fail("--swing: requiredMemoryGiB is within --base-gib")
    low = high * low_share
    tokens, seconds = engine.run(high, swing=f"{int(low * GIB)}:{time_share}")
    step(f"swing {high:.2f}->{low:.2f} GiB")
    sw = SwingMeasurement(base_gib + high, base_gib + low, time_share, tokens / seconds)
    return fit_profile(measured, [sw], full_speed_fraction=full_speed)


def write_outputs(
    report: FitReport, out_dir: Path, name: str, namespace: str, model: str, prompts: str
) -> None:
    """profile.yaml, profile-configmap.yaml, measurements.json and profile.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = profile_document(report)
    s = fit_summary(report)
    comment = (
        f"Measured by gleaner profile: {model}, {prompts}; R^2 {s['rSquared']}, "
        f"leave-one-out worst {s['leaveOneOutMaxRelative']} of standalone."
    )
    (out_dir / PROFILE_KEY).write_text(
        f"# {comment}\n" + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8"
    )
    (out_dir / "profile-configmap.yaml").write_text(
        configmap(doc, name, namespace, model, comment), encoding="utf-8"
    )
    runs = [
        {
            "kvGiB": m.kv_gib,
            "memoryGiB": m.memory_gib,
            "outputTokens": m.output_tokens,
            "seconds": m.seconds,
            "tokensPerSecond": m.tokens_per_second,
        }
        for m in report.measurements
    ]
    (out_dir / "measurements.json").write_text(
        json.dumps({"fit": s, "profile": doc, "runs": runs}, indent=2), encoding="utf-8"
    )
    (out_dir / "profile.html").write_text(plot_html(report, f"{model}: profile"), encoding="utf-8")
