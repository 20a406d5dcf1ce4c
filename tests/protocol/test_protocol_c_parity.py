"""The C header and the Python codec agree on every constant and struct size; the RM ABI
facts the shim relies on (struct sizes, ioctl numbers, control commands) are pinned."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gleaner.protocol import wire as p
from gleaner.testing.shim import SHIM_DIR


def _dump(build: Path) -> dict[str, int]:
    out = subprocess.run([str(build / "proto_dump")], check=True, capture_output=True, text=True)
    values: dict[str, int] = {}
    for line in out.stdout.splitlines():
        name, value = line.split()
        values[name] = int(value, 0)
    return values


def test_every_constant_matches(shim_build: Path) -> None:
    dumped = _dump(shim_build)
    py = p.c_constants()
    c_consts = {k: v for k, v in dumped.items() if k.startswith("GL_")}
    assert c_consts == py


def test_every_define_in_the_header_is_dumped_and_mirrored(shim_build: Path) -> None:
    header = (SHIM_DIR / "include" / "gleaner_proto.h").read_text()
    defined = set(re.findall(r"^#define (GL_[A-Z0-9_]+) ", header, flags=re.M))
    defined -= {"GL_PROTO_H"}
    assert defined == set(p.c_constants()), defined ^ set(p.c_constants())
    assert defined <= set(_dump(shim_build))


def test_struct_sizes_match(shim_build: Path) -> None:
    dumped = _dump(shim_build)
    sizes = {k.removeprefix("sizeof:"): v for k, v in dumped.items() if k.startswith("sizeof:")}
    assert sizes == p.STRUCT_SIZES


def test_rm_abi_facts(shim_build: Path) -> None:
    d = _dump(shim_build)
    assert d["rm:sizeof:NVOS00"] == 16
    assert d["rm:sizeof:NVOS21"] == 32
    assert d["rm:sizeof:NVOS64"] == 48
    assert d["rm:sizeof:NVOS54"] == 32

    # _IOWR('F', nr, size): direction 3 << 30 | size << 16 | 'F' << 8 | nr
    def iowr(nr: int, size: int) -> int:
        return (3 << 30) | (size << 16) | (ord("F") << 8) | nr

    assert d["rm:ioctl:FREE"] == iowr(0x29, 16)
    assert d["rm:ioctl:ALLOC21"] == iowr(0x2B, 32)
    assert d["rm:ioctl:ALLOC64"] == iowr(0x2B, 48)
    assert d["rm:ioctl:CONTROL"] == iowr(0x2A, 32)
    assert d["rm:ctrl:TSG_SCHEDULE"] == 0xA06C0101
    assert d["rm:ctrl:CHANNEL_SCHEDULE"] == 0xA06F0103
