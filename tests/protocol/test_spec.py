"""The protocol table: the C header is generated from it (no drift), the Python codec's
formats, types and constants are the table's, and its layouts need no implicit padding."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gleaner.protocol import cheader, spec
from gleaner.protocol import wire as p
from gleaner.testing.shim import SHIM_DIR


def test_the_c_header_is_generated_from_the_table() -> None:
    header = SHIM_DIR / "include" / "gleaner_proto.h"
    assert header.resolve() == cheader.HEADER_PATH
    assert header.read_text() == cheader.render(), (
        "gleaner_proto.h drifted from protocol/gleaner/protocol/spec.py: "
        "run python -m gleaner.protocol.cheader --write"
    )


def test_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gleaner_proto.h"
    assert cheader.main(["--check", "--header", str(out)]) == 1  # missing
    assert cheader.main(["--write", "--header", str(out)]) == 0
    assert cheader.main(["--check", "--header", str(out)]) == 0
    out.write_text(out.read_text().replace("GL_MSG_GATE 8u", "GL_MSG_GATE 9u"))
    assert cheader.main(["--check", "--header", str(out)]) == 1
    assert "--write" in capsys.readouterr().err


def test_the_codec_speaks_the_tables_types_and_constants() -> None:
    assert {m.name: m.type_id for m in spec.MESSAGES} == {t.name: int(t) for t in p.MsgType}
    assert spec.constants() == p.c_constants()
    for m in spec.MESSAGES:
        assert m.payload is not None
        cls = p.MESSAGE_CLASSES[p.MsgType[m.name]]
        assert spec.c_layout(m.payload)[1] == cls.SIZE, m.name


def test_every_format_is_the_c_layout() -> None:
    names = [s.name for s in spec.STRUCTS] + [a.name for a in spec.ALIASES]
    assert set(names) == set(p.STRUCT_SIZES)
    for name in names:
        _, size = spec.c_layout(name)
        assert struct.calcsize(spec.fmt(name)) == size == p.STRUCT_SIZES[name], name
    assert spec.fmt("gl_gate") == "<QIB3x"  # padding fields are skipped, not decoded
    assert spec.fmt("gl_hello") == "<IBBH8i384s128s"
    assert spec.fmt("gl_gate_ack", upto="ok") == "<QQIBB"


def test_a_layout_that_c_would_pad_is_refused() -> None:
    u8, u32 = spec.Field("a", "uint8_t"), spec.Field("b", "uint32_t")
    with pytest.raises(ValueError, match="aligned"):
        spec.c_layout(spec.StructSpec("gl_bad", (u8, u32)))
    with pytest.raises(ValueError, match="multiple"):
        spec.c_layout(spec.StructSpec("gl_bad", (u32, u8)))
    assert (
        spec.c_layout(spec.StructSpec("gl_ok", (u32, u8, spec.Field("r", "uint8_t", ("3",)))))[1]
        == 8
    )
    with pytest.raises(KeyError):
        spec.struct_spec("gl_nothing")
