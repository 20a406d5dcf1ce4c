#!/usr/bin/env python3
"""Build the Gleaner container image without a Docker daemon: an OCI image layout from
Debian packages and Python wheels.

Contract. The image holds the same things as the ``Dockerfile``'s (docs/image.md):

- layer ``debian``: the files of the Debian packages ``BASE_PACKAGES`` and everything they
  depend on, as installed on this (Debian) machine and listed by ``dpkg -L``; the merged-/usr
  links ``/bin``, ``/lib``, ``/lib64``, ``/sbin``; each package's dpkg status under
  ``/var/lib/dpkg/status.d/`` (what image scanners read); ``/etc/passwd`` and ``/etc/group``
  with root and the unprivileged ``gleaner`` user (uid and gid ``USER_ID``); ``/tmp``.
  Documentation, manual pages and translations are left out.
- layer ``python``: the wheels given, installed by this script (no pip runs inside the image)
  into Debian's ``/usr/local/lib/python3.X/dist-packages``, console scripts in
  ``/usr/local/bin`` run by ``/usr/bin/python3.X``, optionally byte-compiled (unchecked-hash
  ``.pyc``, so the layer stays reproducible).
- layer ``shim``: the C shim at ``SHIM_PATH``. The native compute gate the agent loads is not
  here: the ``gleaner`` wheel carries it (``GATE_IN_WHEEL``, compiled when the wheel is built),
  so the image has one copy, in the python layer; a build without it is refused.
- config: user ``USER_ID:USER_ID``, entry point ``["gleaner"]``, command ``["--help"]``,
  ports 8080 and 9464, the Dockerfile's labels and environment.

Every tar entry is sorted, owned by root (uid 0) unless stated, dated ``SOURCE_DATE_EPOCH``
(0 by default) and gzip-compressed without a timestamp, so the same inputs give the same
digests. The output is an OCI image layout directory (``oci-layout``, ``index.json``,
``blobs/sha256/``) whose one manifest carries the ``org.opencontainers.image.ref.name``
annotation ``TAG``; ``--archive`` also writes it as one tar that ``podman load`` and
``docker load`` read. ``skopeo copy oci:DIR:TAG docker://REGISTRY/REPO:TAG`` or
``crane push DIR REGISTRY/REPO:TAG`` pushes it.

Usage: ``python scripts/image_build.py [--out build/image] [--tag 0.1.0] [--archive FILE]
[--wheelhouse DIR] [--shim FILE] [--no-compile]``. Without ``--wheelhouse`` it runs
``pip wheel`` for the repository (gleaner and gleaner-protocol with their dependencies from
PyPI; building the gleaner wheel compiles the gate, with make and a C compiler); without
``--shim`` it builds the shim with ``make``. Standard library only; needs ``dpkg-query`` and a
Debian Python of the wheels' version.
"""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"
BASE_PACKAGES = (f"python{PYTHON_VERSION}", "libstdc++6", "libgcc-s1")
"""Debian packages of the image (their dependencies come with them). libstdc++ and libgcc
are the system libraries manylinux wheels (numpy, pandas, pyarrow) may link against."""
SITE = f"usr/local/lib/python{PYTHON_VERSION}/dist-packages"
"""Where the wheels are installed (Debian's /usr/local scheme)."""
USER_ID = 65532
USER_NAME = "gleaner"
SHIM_PATH = "opt/gleaner/lib/libgleaner_shim.so"
GATE_IN_WHEEL = "gleaner/runtime_agent/_native/libgleaner_gate.so"
"""The native compute gate inside the installed gleaner wheel (``gatelib.PACKAGE_LIBRARY``)."""
ENTRYPOINT = ("gleaner",)
EXPOSED_PORTS = ("8080/tcp", "9464/tcp")
LABELS = {
    "org.opencontainers.image.title": "gleaner",
    "org.opencontainers.image.description": "Gleaner operator and runtime agent",
    "org.opencontainers.image.licenses": "Apache-2.0",
}
ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
MERGED_USR = ("bin", "lib", "lib64", "sbin")
"""Top-level folders that are links into /usr on Debian 12 and later."""
SKIPPED_PREFIXES = ("usr/share/doc/", "usr/share/man/", "usr/share/locale/", "usr/share/info/")
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


class BuildError(RuntimeError):
    """An input the build cannot use; the message is one line."""


# --- tar entries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One file, directory or symbolic link of a layer."""

    path: str
    """Relative POSIX path, no leading slash."""
    kind: str
    """``file``, ``dir`` or ``link``."""
    mode: int = 0o644
    data: bytes = b""
    target: str = ""
    """The link's target (``link``)."""
    uid: int = 0
    gid: int = 0


def _parents(path: str) -> Iterator[str]:
    parts = PurePosixPath(path).parts[:-1]
    for i in range(1, len(parts) + 1):
        yield "/".join(parts[:i])


def layer_tar(entries: Iterable[Entry], mtime: int) -> bytes:
    """The uncompressed tar of ``entries``, sorted, with every missing parent directory."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        for parent in _parents(path):
            by_path.setdefault(parent, Entry(parent, "dir", 0o755))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(by_path):
            entry = by_path[path]
            info = tarfile.TarInfo(path)
            info.mtime = mtime
            info.mode = entry.mode
            info.uid, info.gid = entry.uid, entry.gid
            info.uname = info.gname = ""
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed with no name and no timestamp (same input, same bytes)."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return out.getvalue()


def host_entry(host_path: Path, image_path: str) -> Entry | None:
    """The entry for one file of this machine (None for sockets, devices and missing files)."""
    try:
        st = host_path.lstat()
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return Entry(image_path, "link", 0o777, target=str(host_path.readlink()))
    if stat.S_ISDIR(st.st_mode):
        return Entry(image_path, "dir", mode)
    if stat.S_ISREG(st.st_mode):
        return Entry(image_path, "file", mode, data=host_path.read_bytes())
    return None


# --- Debian layer -----------------------------------------------------------------------------


def _dpkg(fields: str, package: str) -> str | None:
    done = subprocess.run(
        ["dpkg-query", "-W", f"-f={fields}", package], capture_output=True, text=True
    )
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _installed(package: str) -> bool:
    status = _dpkg("${db:Status-Status}", package)
    return status is not None and status.strip() == "installed"


def dependency_names(depends: str) -> list[str]:
    """Package names of a ``Depends`` field; of alternatives ``a | b``, every name in order."""
    names: list[str] = []
    for clause in depends.split(","):
        alternatives = [a.strip() for a in clause.split("|") if a.strip()]
        names.append("|".join(re.split(r"[\s(:]", a, maxsplit=1)[0] for a in alternatives))
    return [n for n in names if n]


def package_closure(roots: Sequence[str]) -> list[str]:
    """``roots`` and every installed package they depend on (Depends, Pre-Depends), sorted.

    Of alternatives the first installed one is taken. A root or a required dependency that is
    not installed is a BuildError naming it and the apt-get command that fixes it.
    """
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        clause = todo.pop()
        options = clause.split("|")
        chosen = next((o for o in options if _installed(o)), None)
        if chosen is None:
            raise BuildError(
                f"Debian package {options[0]} is not installed (apt-get install {options[0]})"
            )
        if chosen in seen:
            continue
        seen.add(chosen)
        fields = _dpkg("${Depends},${Pre-Depends}", chosen) or ""
        todo.extend(dependency_names(fields))
    return sorted(seen)


def usr_merged(path: str) -> str:
    """Where ``path`` (no leading slash) lies in a merged-/usr tree (``lib/x``: ``usr/lib/x``)."""
    top, _, rest = path.partition("/")
    return f"usr/{top}/{rest}" if top in MERGED_USR and rest else path


def debian_entries(packages: Sequence[str]) -> list[Entry]:
    """Every file of ``packages`` (dpkg -L), their status records, the links, users, /tmp."""
    entries: dict[str, Entry] = {}
    for package in packages:
        listing = _dpkg("${binary:Package}", package)
        if listing is None:
            raise BuildError(f"Debian package {package} is not installed")
        files = subprocess.run(
            ["dpkg-query", "-L", package], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        for line in files:
            if not line.startswith("/") or line in {"/", "/."}:
                continue
            path = usr_merged(line.lstrip("/"))
            if path in MERGED_USR or path.startswith(SKIPPED_PREFIXES):
                continue
            entry = host_entry(Path(line), path)
            if entry is not None:
                entries[path] = entry
        status = subprocess.run(
            ["dpkg-query", "-s", package], capture_output=True, text=True, check=True
        ).stdout
        name = package.split(":")[0]
        entries[f"var/lib/dpkg/status.d/{name}"] = Entry(
            f"var/lib/dpkg/status.d/{name}", "file", 0o644, data=status.encode()
        )
    for top in MERGED_USR:
        entries[top] = Entry(top, "link", 0o777, target=f"usr/{top}")
    entries["etc/passwd"] = Entry(
        "etc/passwd",
        "file",
        data=(
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{USER_NAME}:x:{USER_ID}:{USER_ID}:{USER_NAME}:/nonexistent:/usr/sbin/nologin\n"
        ).encode(),
    )
    entries["etc/group"] = Entry(
        "etc/group", "file", data=f"root:x:0:\n{USER_NAME}:x:{USER_ID}:\n".encode()
    )
    entries["tmp"] = Entry("tmp", "dir", 0o1777)
    return list(entries.values())


# --- Python layer -----------------------------------------------------------------------------


@dataclass
class Installed:
    """What installing wheels produced: the layer's entries and the console scripts."""

    entries: list[Entry] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def console_script(module: str, function: str, interpreter: str) -> bytes:
    """The launcher of one ``console_scripts`` entry point."""
    head, _, attrs = function.partition(".")
    call = f"{head}.{attrs}" if attrs else head
    return (
        f"#!{interpreter}\nimport sys\nfrom {module} import {head}\nsys.exit({call}())\n"
    ).encode()


def install_wheel(wheel: Path, site: str, bindir: str, interpreter: str) -> Installed:
    """The files ``wheel`` installs under ``site`` and ``bindir`` (paths without leading /)."""
    out = Installed()
    records: list[tuple[str, str, int]] = []
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        dist_info = next(
            (n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None
        )
        if dist_info is None:
            raise BuildError(f"{wheel.name}: no .dist-info folder (not a wheel)")
        data_dir = dist_info[: -len(".dist-info")] + ".data"
        for name in sorted(names):
            if name == f"{dist_info}/RECORD":
                continue
            data = archive.read(name)
            info = archive.getinfo(name)
            executable = bool((info.external_attr >> 16) & 0o111)
            if name.startswith(data_dir + "/"):
                _, kind, rest = name.split("/", 2)
                if kind in {"purelib", "platlib"}:
                    target = f"{site}/{rest}"
                elif kind == "scripts":
                    target = f"{bindir}/{rest}"
                    if data.startswith(b"#!python"):
                        data = f"#!{interpreter}".encode() + data[len(b"#!python") :]
                    executable = True
                else:  # headers and data: the scheme's prefix
                    target = f"usr/local/{rest}" if kind == "data" else f"usr/local/include/{rest}"
            else:
                target = f"{site}/{name}"
            out.entries.append(Entry(target, "file", 0o755 if executable else 0o644, data=data))
            records.append((target, _record_hash(data), len(data)))
        entry_points = f"{dist_info}/entry_points.txt"
        if entry_points in names:
            for script, value in _console_scripts(archive.read(entry_points).decode()):
                module, _, function = value.partition(":")
                data = console_script(module.strip(), function.strip(), interpreter)
                target = f"{bindir}/{script}"
                out.entries.append(Entry(target, "file", 0o755, data=data))
                out.scripts.append(script)
                records.append((target, _record_hash(data), len(data)))
    installer = f"{site}/{dist_info}/INSTALLER"
    out.entries.append(Entry(installer, "file", data=b"gleaner-image-build\n"))
    records.append((installer, _record_hash(b"gleaner-image-build\n"), 21))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for target, digest, size in records:
        writer.writerow([os.path.relpath("/" + target, "/" + site), digest, size])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    out.entries.append(Entry(f"{site}/{dist_info}/RECORD", "file", data=record.getvalue().encode()))
    return out


def _console_scripts(text: str) -> list[tuple[str, str]]:
    section = ""
    found: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == "console_scripts" and "=" in line:
            name, _, value = line.partition("=")
            found.append((name.strip(), value.strip()))
    return found


def compile_entries(entries: list[Entry], site: str) -> list[Entry]:
    """``.pyc`` files (unchecked-hash, reproducible) for the ``.py`` files under ``site``."""
    sources = [e for e in entries if e.path.startswith(site + "/") and e.path.endswith(".py")]
    if not sources:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for entry in sources:
            (root / entry.path).parent.mkdir(parents=True, exist_ok=True)
            (root / entry.path).write_bytes(entry.data)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "compileall",
                "-q",
                "-j",
                "0",
                "--invalidation-mode",
                "unchecked-hash",
                "-s",
                str(root),
                "-p",
                "/",
                str(root / site),
            ],
            check=False,
        )
        compiled = []
        for pyc in sorted((root / site).rglob("*.pyc")):
            rel = pyc.relative_to(root).as_posix()
            compiled.append(Entry(rel, "file", 0o644, data=pyc.read_bytes()))
    return compiled


def python_entries(wheels: Sequence[Path], compile_pyc: bool) -> Installed:
    """Every wheel installed into Debian's /usr/local scheme."""
    site = SITE
    interpreter = f"/usr/bin/python{PYTHON_VERSION}"
    total = Installed()
    for wheel in sorted(wheels):
        part = install_wheel(wheel, site, "usr/local/bin", interpreter)
        total.entries += part.entries
        total.scripts += part.scripts
    if compile_pyc:
        total.entries += compile_entries(total.entries, site)
    return total


# --- OCI layout -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    name: str
    tar: bytes


def _blob(out: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = out / "blobs" / "sha256" / digest.split(":")[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_layout(out: Path, layers: Sequence[Layer], tag: str, mtime: int) -> str:
    """Write the OCI image layout; return the manifest's digest."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    descriptors = []
    diff_ids = []
    for layer in layers:
        compressed = gzip_bytes(layer.tar)
        descriptors.append(
            {"mediaType": MEDIA_LAYER, "digest": _blob(out, compressed), "size": len(compressed)}
        )
        diff_ids.append("sha256:" + hashlib.sha256(layer.tar).hexdigest())
    created = f"{datetime.fromtimestamp(mtime, UTC):%Y-%m-%dT%H:%M:%SZ}"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{USER_ID}:{USER_ID}",
            "Entrypoint": list(ENTRYPOINT),
            "Cmd": ["--help"],
            "Env": list(ENV),
            "ExposedPorts": {port: {} for port in EXPOSED_PORTS},
            "Labels": dict(LABELS),
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created": created, "created_by": f"scripts/image_build.py: {layer.name}"}
            for layer in layers
        ],
    }
    config_bytes = _json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {
            "mediaType": MEDIA_CONFIG,
            "digest": _blob(out, config_bytes),
            "size": len(config_bytes),
        },
        "layers": descriptors,
        "annotations": {"org.opencontainers.image.title": "gleaner"},
    }
    manifest_bytes = _json(manifest)
    manifest_digest = _blob(out, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": tag},
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    (out / "index.json").write_bytes(_json(index))
    (out / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    return manifest_digest


def write_archive(layout: Path, archive: Path, mtime: int) -> None:
    """The layout as one tar (what ``podman load`` and ``docker load`` take)."""
    files = sorted(p for p in layout.rglob("*") if p.is_file())
    entries = [
        Entry(p.relative_to(layout).as_posix(), "file", 0o644, data=p.read_bytes()) for p in files
    ]
    archive.write_bytes(layer_tar(entries, mtime))


# --- inputs -----------------------------------------------------------------------------------


def build_wheels(into: Path) -> list[Path]:
    """gleaner and gleaner-protocol and their dependencies as wheels (pip, from PyPI)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--wheel-dir",
            str(into),
            str(ROOT / "protocol"),
            str(ROOT),
        ],
        check=True,
    )
    return sorted(into.glob("*.whl"))


def build_shim() -> Path:
    """The shim library, built with make when missing."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "runtime-agent" / "shim")], check=True)
    found = sorted((ROOT / "runtime-agent" / "shim").rglob("libgleaner_shim.so"))
    if not found:
        raise BuildError("make built no libgleaner_shim.so under runtime-agent/shim")
    return found[0]


def build_image(
    out: Path,
    *,
    tag: str,
    wheels: Sequence[Path],
    shim: Path,
    packages: Sequence[str] = BASE_PACKAGES,
    compile_pyc: bool = True,
    mtime: int = 0,
) -> str:
    """Write the image's OCI layout to ``out``; return the manifest digest."""
    python = python_entries(wheels, compile_pyc)
    native = [Entry(SHIM_PATH, "file", 0o755, data=shim.read_bytes())]
    if "gleaner" not in python.scripts:
        raise BuildError("no wheel installs the console script 'gleaner'")
    if not any(e.path == f"{SITE}/{GATE_IN_WHEEL}" for e in python.entries):
        raise BuildError(
            f"no wheel carries the native compute gate ({GATE_IN_WHEEL}): build the gleaner "
            "wheel from source with a C compiler and make"
        )
    layers = [
        Layer("debian", layer_tar(debian_entries(package_closure(packages)), mtime)),
        Layer("python", layer_tar(python.entries, mtime)),
        Layer("shim", layer_tar(native, mtime)),
    ]
    return write_layout(out, layers, tag, mtime)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "image")
    parser.add_argument("--tag", default=_chart_app_version())
    parser.add_argument("--archive", type=Path, default=None)
    parser.add_argument("--wheelhouse", type=Path, default=None)
    parser.add_argument("--shim", type=Path, default=None)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args(argv)
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheels = (
                sorted(args.wheelhouse.glob("*.whl"))
                if args.wheelhouse is not None
                else build_wheels(Path(tmp))
            )
            shim = args.shim if args.shim is not None else build_shim()
            digest = build_image(
                args.out,
                tag=args.tag,
                wheels=wheels,
                shim=shim,
                compile_pyc=not args.no_compile,
                mtime=mtime,
            )
        if args.archive is not None:
            write_archive(args.out, args.archive, mtime)
    except (BuildError, OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} (tag {args.tag}, manifest {digest})")
    return 0


def _chart_app_version() -> str:
    chart = (ROOT / "helm" / "gleaner" / "Chart.yaml").read_text(encoding="utf-8")
    found = re.search(r"^appVersion:\s*\"?([^\"\s]+)", chart, re.MULTILINE)
    return found.group(1) if found else "latest"


if __name__ == "__main__":
    sys.exit(main())
