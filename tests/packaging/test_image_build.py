"""scripts/image_build.py: the daemonless OCI image build, inspected layer by layer.

Contract, checked on an image built here in a few seconds from small inputs (a wheel made by
the test, the Debian package ``zlib1g`` and what it depends on, a stand-in shim): the OCI
layout is well formed (every digest and size matches its blob, the config's ``diff_ids``
match the uncompressed layers); the three layers hold the Debian files with merged-/usr
links, users and dpkg status records, the wheel installed with a ``gleaner`` launcher run by
Debian's Python, and the shim at the Dockerfile's path; the config runs ``gleaner`` as the
unprivileged user, exposes the Dockerfile's ports and keeps its labels; the same inputs give
the same digests. The full image (every wheel from PyPI, ~2 minutes) is built and run
(chroot, as the image's user) only with ``GLEANER_IMAGE_FULL=1`` (docs/image.md).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gleaner.runtime_agent import gatelib

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-query") is None, reason="the image is built from Debian packages"
)


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_build", ROOT / "scripts/image_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["image_build"] = module
    spec.loader.exec_module(module)
    return module


ib = load_builder()


def make_wheel(folder: Path) -> Path:
    """A small wheel with a package, a console script ``gleaner``, a ``#!python`` script and
    a stand-in of the native compute gate where the gleaner wheel carries it."""
    path = folder / "fakegleaner-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("fakegleaner/__init__.py", "def main() -> int:\n    return 0\n")
        whl.writestr(ib.GATE_IN_WHEEL, b"\x7fELF gate stand-in")
        whl.writestr("fakegleaner-1.0.data/scripts/helper", "#!python\nprint('hi')\n")
        whl.writestr(
            "fakegleaner-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fakegleaner\n"
        )
        whl.writestr("fakegleaner-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        whl.writestr(
            "fakegleaner-1.0.dist-info/entry_points.txt",
            "[console_scripts]\ngleaner = fakegleaner:main\n",
        )
        whl.writestr("fakegleaner-1.0.dist-info/RECORD", "")
    return path


def build(tmp: Path, name: str) -> tuple[Path, str]:
    wheel = make_wheel(tmp)
    shim = tmp / "libgleaner_shim.so"
    shim.write_bytes(b"\x7fELF stand-in")
    out = tmp / name
    digest = ib.build_image(
        out, tag="9.9.9", wheels=[wheel], shim=shim, packages=("zlib1g",), mtime=0
    )
    return out, digest


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return build(tmp_path_factory.mktemp("img"), "layout")


def blob(layout: Path, digest: str) -> bytes:
    algorithm, hexdigest = digest.split(":")
    assert algorithm == "sha256"
    data = (layout / "blobs" / "sha256" / hexdigest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hexdigest
    return data


def manifest_and_config(layout: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    manifest = json.loads(blob(layout, entry["digest"]))
    assert len(blob(layout, entry["digest"])) == entry["size"]
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    return manifest, config


def layers(layout: Path) -> list[dict[str, tarfile.TarInfo | bytes]]:
    """Per layer, path -> TarInfo, with the file contents under ``"<path>#data"``."""
    manifest, _ = manifest_and_config(layout)
    out = []
    for descriptor in manifest["layers"]:
        compressed = blob(layout, descriptor["digest"])
        assert len(compressed) == descriptor["size"]
        members: dict[str, tarfile.TarInfo | bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(compressed))) as tar:
            for info in tar.getmembers():
                members[info.name] = info
                if info.isfile():
                    extracted = tar.extractfile(info)
                    assert extracted is not None
                    members[info.name + "#data"] = extracted.read()
        out.append(members)
    return out


def info(members: dict[str, tarfile.TarInfo | bytes], path: str) -> tarfile.TarInfo:
    found = members[path]
    assert isinstance(found, tarfile.TarInfo)
    return found


def data(members: dict[str, tarfile.TarInfo | bytes], path: str) -> bytes:
    found = members[path + "#data"]
    assert isinstance(found, bytes)
    return found


def test_the_layout_is_an_oci_image_with_three_layers(image: tuple[Path, str]) -> None:
    layout, digest = image
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["digest"] == digest
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "9.9.9"
    manifest, config = manifest_and_config(layout)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert [d["mediaType"] for d in manifest["layers"]] == [ib.MEDIA_LAYER] * 3
    diff_ids = [
        "sha256:" + hashlib.sha256(gzip.decompress(blob(layout, d["digest"]))).hexdigest()
        for d in manifest["layers"]
    ]
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")


def test_the_config_runs_gleaner_unprivileged_like_the_dockerfile(image: tuple[Path, str]) -> None:
    _, config = manifest_and_config(image[0])
    run = config["config"]
    assert run["User"] == "65532:65532"
    assert run["Entrypoint"] == ["gleaner"] and run["Cmd"] == ["--help"]
    assert set(run["ExposedPorts"]) == {"8080/tcp", "9464/tcp"}
    assert "PYTHONUNBUFFERED=1" in run["Env"]
    assert any(e.startswith("PATH=") and "/usr/local/bin" in e for e in run["Env"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 65532:65532" in dockerfile and 'ENTRYPOINT ["gleaner"]' in dockerfile
    assert "EXPOSE 8080 9464" in dockerfile
    assert f"/{ib.SHIM_PATH}" in dockerfile
    for key, value in run["Labels"].items():
        assert f'{key}="{value}"' in dockerfile


def test_the_debian_layer_holds_the_packages_links_users_and_status(
    image: tuple[Path, str],
) -> None:
    debian, _, _ = layers(image[0])
    libz = "usr/lib/x86_64-linux-gnu/libz.so.1"
    assert info(debian, libz).issym()
    target = info(debian, libz).linkname
    assert info(debian, f"usr/lib/x86_64-linux-gnu/{target}").isfile()
    for top in ("bin", "lib", "lib64", "sbin"):
        assert info(debian, top).issym() and info(debian, top).linkname == f"usr/{top}"
    # The dynamic loader every binary names (/lib64/ld-linux-x86-64.so.2) resolves in the image.
    assert "usr/lib64/ld-linux-x86-64.so.2" in debian
    for package in ("zlib1g", "libc6"):
        status = data(debian, f"var/lib/dpkg/status.d/{package}").decode()
        assert status.startswith(f"Package: {package}\n") and "Version: " in status
    passwd = data(debian, "etc/passwd").decode()
    assert "gleaner:x:65532:65532:" in passwd
    assert "gleaner:x:65532:" in data(debian, "etc/group").decode()
    assert info(debian, "tmp").mode == 0o1777
    assert not any(str(p).startswith("usr/share/doc/") for p in debian)


def test_the_python_layer_installs_the_wheel_for_debians_python(image: tuple[Path, str]) -> None:
    _, python, _ = layers(image[0])
    site = "usr/local/lib/python3.11/dist-packages"
    launcher = data(python, "usr/local/bin/gleaner").decode()
    assert launcher.startswith("#!/usr/bin/python3.11\n")
    assert "from fakegleaner import main" in launcher and "sys.exit(main())" in launcher
    assert info(python, "usr/local/bin/gleaner").mode == 0o755
    assert data(python, "usr/local/bin/helper").startswith(b"#!/usr/bin/python3.11\n")
    assert f"{site}/fakegleaner/__init__.py" in python
    assert any(str(p).startswith(f"{site}/fakegleaner/__pycache__/") for p in python)
    record = data(python, f"{site}/fakegleaner-1.0.dist-info/RECORD").decode()
    assert "fakegleaner/__init__.py,sha256=" in record
    assert "../../../bin/gleaner,sha256=" in record


def test_the_shim_layer_and_every_entry_is_root_owned_and_dated_0(image: tuple[Path, str]) -> None:
    all_layers = layers(image[0])
    shim = all_layers[2]
    assert info(shim, ib.SHIM_PATH).mode == 0o755
    assert data(shim, ib.SHIM_PATH) == b"\x7fELF stand-in"
    # One copy of the native compute gate: the wheel's, in the python layer, where the
    # agent's binding looks for it inside the installed package.
    assert [str(k) for k in shim if str(k).endswith(gatelib.LIBRARY_NAME)] == []
    assert data(all_layers[1], f"{ib.SITE}/{ib.GATE_IN_WHEEL}") == b"\x7fELF gate stand-in"
    assert gatelib.PACKAGE_LIBRARY.as_posix().endswith("/" + ib.GATE_IN_WHEEL)
    for members in all_layers:
        for value in members.values():
            if isinstance(value, tarfile.TarInfo):
                assert (value.uid, value.gid, value.mtime) == (0, 0, 0), value.name


def test_the_same_inputs_give_the_same_digests(image: tuple[Path, str], tmp_path: Path) -> None:
    _, again = build(tmp_path, "again")
    assert again == image[1]


def test_an_image_without_the_native_compute_gate_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    bare = tmp_path / "bare" / wheel.name
    bare.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bare, "w") as dst:
        for name in src.namelist():
            if name != ib.GATE_IN_WHEEL:
                dst.writestr(name, src.read(name))
    shim = tmp_path / "libgleaner_shim.so"
    shim.write_bytes(b"\x7fELF stand-in")
    with pytest.raises(ib.BuildError, match="native compute gate"):
        ib.build_image(
            tmp_path / "out", tag="9.9.9", wheels=[bare], shim=shim, packages=("zlib1g",)
        )


def test_a_missing_debian_package_names_the_apt_command(tmp_path: Path) -> None:
    with pytest.raises(ib.BuildError, match=r"apt-get install no-such-package-gleaner"):
        ib.package_closure(["no-such-package-gleaner"])


def test_dependency_fields_are_parsed_with_alternatives() -> None:
    names = ib.dependency_names("libc6 (>= 2.34), media-types | mime-support, libgcc-s1:any")
    assert names == ["libc6", "media-types|mime-support", "libgcc-s1"]
    assert ib.usr_merged("lib64/ld-linux-x86-64.so.2") == "usr/lib64/ld-linux-x86-64.so.2"
    assert ib.usr_merged("etc/passwd") == "etc/passwd"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("GLEANER_IMAGE_FULL") != "1",
    reason="the full image downloads every wheel from PyPI: set GLEANER_IMAGE_FULL=1",
)
def test_the_full_image_runs_gleaner_as_its_user(tmp_path: Path) -> None:
    layout = tmp_path / "image"
    assert ib.main(["--out", str(layout)]) == 0
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    for members in layers(layout):
        names = {str(k) for k in members if not str(k).endswith("#data")}
        assert names
    manifest, _ = manifest_and_config(layout)
    for descriptor in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layout, descriptor["digest"]))) as tar:
            tar.extractall(rootfs, filter="tar")
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        pytest.skip("running the image's gleaner needs chroot as root")
    user = ["chroot", "--userspec=65532:65532", str(rootfs)]
    done = subprocess.run([*user, "/usr/local/bin/gleaner", "--version"], capture_output=True)
    assert done.returncode == 0 and done.stdout.startswith(b"gleaner, version ")
    imports = (
        "import gleaner.operator.main, gleaner.runtime_agent.daemon, pandas, pyarrow\n"
        "from gleaner.runtime_agent.gatelib import gate_library; gate_library()"
    )
    done = subprocess.run([*user, "/usr/bin/python3.11", "-c", imports], capture_output=True)
    assert done.returncode == 0, done.stderr
