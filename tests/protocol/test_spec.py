"""The protocol table: the C header and the Python messages are generated from it (no
drift), the Python codec's formats, types and constants are the table's, its layouts need no
implicit padding, and a message added to the table reaches both without another edit."""

from __future__ import annotations

import dataclasses
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gleaner.protocol import cheader, pygen, spec
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


def test_the_python_messages_are_generated_from_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert pygen.MODULE_PATH.read_text() == pygen.render(), (
        "messages.py drifted from protocol/gleaner/protocol/spec.py: "
        "run python -m gleaner.protocol.pygen --write"
    )
    out = tmp_path / "messages.py"
    assert pygen.main(["--check", "--module", str(out)]) == 1  # missing
    assert pygen.main(["--write", "--module", str(out)]) == 0
    assert pygen.main(["--check", "--module", str(out)]) == 0
    out.write_text(out.read_text().replace("GATE = 8", "GATE = 9"))
    assert pygen.main(["--check", "--module", str(out)]) == 1
    assert "--write" in capsys.readouterr().err


def _with_a_new_message() -> spec.Table:
    """This protocol's table plus one message, PING_STATS, added in the table only: a fixed
    head with an enum, a bool, a string and a counted tail of uint64 samples."""
    t = spec.TABLE
    ping = spec.MessageSpec(
        23, "PING_STATS", "A->S", "round-trip samples", "gl_ping_stats", doc="Test message."
    )
    fields = (
        spec.Field("role", "uint8_t"),
        spec.Field("urgent", "uint8_t"),
        spec.Field("reserved", "uint16_t", pad=True),
        spec.Field("count", "uint32_t"),
        spec.Field("label", "char", ("GL_REQUEST_ID_LEN",)),
    )
    layout = spec.PyLayout(
        (
            spec.PyField("role", "Role"),
            spec.PyField("label", "str"),
            spec.PyField("urgent", "bool", "False"),
            spec.PyField("samples", "tail", "()", count="count", of="uint64_t", label="samples"),
        )
    )
    return dataclasses.replace(
        t,
        messages=(*t.messages, ping),
        structs=(*t.structs, spec.StructSpec("gl_ping_stats", fields)),
        layouts={**t.layouts, "gl_ping_stats": layout},
    )


def test_a_message_added_to_the_table_reaches_the_c_header_and_the_codec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _with_a_new_message()
    # The C header: its type number, its struct, its size checked by the compiler, and the
    # lists a dump program walks.
    header = cheader.render(table)
    assert "#define GL_MSG_PING_STATS 23u" in header
    assert "#define GL_MSG_MAX 23u" in header
    assert "typedef struct gl_ping_stats {" in header
    assert '_Static_assert(sizeof(gl_ping_stats) == 72, "gl_ping_stats");' in header
    assert "X(gl_ping_stats)" in header and "X(GL_MSG_PING_STATS)" in header
    (tmp_path / "gleaner_proto.h").write_text(header)
    (tmp_path / "use.c").write_text(
        '#include "gleaner_proto.h"\n'
        "int size(void) { return (int)sizeof(gl_ping_stats) + GL_MSG_PING_STATS; }\n"
    )
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is not None:
        subprocess.run(
            [cc, "-std=c11", "-Wall", "-Werror", "-c", "-o", str(tmp_path / "use.o"), "use.c"],
            cwd=tmp_path,
            check=True,
        )
    # The Python codec: the generated module has the class, and it round-trips.
    source = pygen.render(table)
    module = types.ModuleType("gleaner_protocol_messages_with_ping")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    exec(compile(source, "<generated>", "exec"), module.__dict__)
    ns = module.__dict__
    assert ns["MsgType"].PING_STATS == 23
    cls = ns["MESSAGE_CLASSES"][ns["MsgType"].PING_STATS]
    assert cls.__name__ == "PingStats" and cls.SIZE == 72
    assert ns["MsgType"].PING_STATS in ns["VARIABLE_TYPES"]
    assert ns["STRUCT_SIZES"]["gl_ping_stats"] == 72
    assert ns["c_constants"]() == table.constants()
    msg = cls(role=p.Role.ONLINE, label="probe", urgent=True, samples=(1, 2**63))
    frame = msg.encode(seq=4)
    assert struct.unpack_from("<IBBHII", frame) == (p.MAGIC, p.VERSION, 23, 0, 72 + 16, 4)
    assert frame[p.HEADER_SIZE : p.HEADER_SIZE + 4] == bytes([2, 1, 0, 0])
    assert cls.from_payload(frame[p.HEADER_SIZE :], 4) == msg
    with pytest.raises(p.ProtocolError, match="do not fill"):
        cls.from_payload(frame[p.HEADER_SIZE : -8], 4)
    # This protocol's own module is untouched by the copy.
    assert "PING_STATS" not in pygen.render()
    assert "PING_STATS" not in cheader.render()
