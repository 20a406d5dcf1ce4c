"""Generate the Python codec's messages from the protocol table (:mod:`gleaner.protocol.spec`).

Contract. :func:`render` turns a :class:`~gleaner.protocol.spec.Table` into the text of
``protocol/gleaner/protocol/messages.py``: every constant (``GL_X`` → ``X``, ``GL_PROTO_X`` →
``X``), every enum group as an ``IntEnum``, one precompiled ``struct.Struct`` per payload
struct, one class per message (frozen dataclass on :class:`gleaner.protocol.codec.Message`,
with ``payload()`` and ``from_payload()`` written out field by field, so the generated code
is as fast as a hand-written one), one class per record of a variable payload, and the
tables :mod:`gleaner.protocol.wire` decodes with (``MESSAGE_CLASSES``, ``VARIABLE_TYPES``,
``STRUCT_SIZES``, ``c_constants()``). Output is deterministic and passes the project's
linters and ``mypy --strict`` as written.

``python -m gleaner.protocol.pygen --write`` writes the module; ``--check`` exits 1 when the
file on disk differs from the table (a test does the same). ``make proto`` runs this and the
C header's generator. Standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gleaner.protocol import genfile, spec
from gleaner.protocol.spec import CTYPES, PyField, PyLayout, PyRecord, StructSpec, Table

MODULE_PATH = Path(__file__).resolve().with_name("messages.py")
"""The generated module in this checkout."""

_LIMIT = 100
_SCALAR_KINDS = {"int", "bool", "str", "flag"}


def py_const(c_name: str) -> str:
    """The Python name of a C constant: ``GL_PROTO_MAGIC`` → ``MAGIC``, ``GL_MAX_GPUS`` →
    ``MAX_GPUS``."""
    return c_name.removeprefix("GL_PROTO_").removeprefix("GL_")


def _dim(d: str) -> str:
    return py_const(d) if d.startswith("GL_") else d


def _call(ind: str, head: str, args: list[str], tail: str = ")") -> list[str]:
    """``head + args + tail`` on one line, or one argument a line when that is too long."""
    one = f"{ind}{head}{', '.join(args)}{tail}"
    if len(one) <= _LIMIT:
        return [one]
    return [f"{ind}{head}", *(f"{ind}    {a}," for a in args), f"{ind}{tail}"]


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _doc(ind: str, text: str) -> list[str]:
    """A docstring wrapped to the line limit."""
    words, lines, cur = text.split(), [], ""
    width = _LIMIT - len(ind) - 6
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    if len(lines) == 1 and len(ind) + len(lines[0]) + 6 <= _LIMIT:
        return [f'{ind}"""{lines[0]}"""']
    return [f'{ind}"""{lines[0]}', *(f"{ind}{x}" for x in lines[1:]), f'{ind}"""']


@dataclass(frozen=True)
class _Shape:
    """One struct with its Python fields: what the generator needs to write its codec."""

    struct: StructSpec
    fields: tuple[PyField, ...]
    sname: str
    """The module-level ``struct.Struct`` name."""


class _Gen:
    def __init__(self, table: Table) -> None:
        self.t = table
        self.enums: dict[str, str] = {g.enum: g.prefix for g in table.groups() if g.enum}

    # --- shapes -------------------------------------------------------------------------

    def sname(self, struct: str) -> str:
        return "_S_" + self.t.struct_spec(struct).name.upper()

    def layout_fields(self, struct: str) -> tuple[PyField, ...]:
        lay = self.t.layouts.get(struct)
        if lay is not None:
            return lay.fields
        out = []
        for f in self.t.struct_spec(struct).fields:
            if f.pad or f.name.startswith("reserved"):
                continue
            if f.ctype == "char" and len(f.dims) == 1:
                out.append(PyField(f.name, "str"))
            elif not f.dims:
                out.append(PyField(f.name, "int"))
            else:
                raise ValueError(f"{struct}.{f.name}: an array needs a layout in spec.LAYOUTS")
        return tuple(out)

    def shape(self, struct: str) -> _Shape:
        return _Shape(self.t.struct_spec(struct), self.layout_fields(struct), self.sname(struct))

    def record(self, struct: str) -> PyRecord:
        return self.t.records[struct]

    def tails(self, fields: tuple[PyField, ...]) -> list[PyField]:
        return [f for f in fields if f.kind == "tail"]

    def is_record(self, of: str) -> bool:
        return of in self.t.records

    def nested(self, fields: tuple[PyField, ...]) -> bool:
        """Whether a tail holds records that are themselves variable (checked as it goes)."""
        for f in self.tails(fields):
            if self.is_record(f.of):
                rec = self.record(f.of)
                if self.tails(rec.fields) or any(x.kind == "str" for x in rec.fields):
                    return True
        return False

    def annotation(self, f: PyField) -> str:
        if f.kind in ("int", "bool", "str"):
            return f.kind
        if f.kind == "flag":
            return "bool"
        if f.kind == "ints":
            return "tuple[int, ...]"
        if f.kind == "strs":
            return "tuple[str, ...]"
        if f.kind == "local":
            return "int | None"
        if f.kind == "tail" and self.is_record(f.of):
            return f"tuple[{self.record(f.of).name}, ...]"
        if f.kind == "tail":
            return "tuple[int, ...]"
        if f.kind in self.enums:
            return f.kind
        raise ValueError(f"{f.name}: unknown kind {f.kind!r}")

    def attr_lines(self, ind: str, fields: tuple[PyField, ...], dataclass_: bool) -> list[str]:
        out = []
        for f in fields:
            ann = self.annotation(f)
            if f.kind == "local":
                out.append(f"{ind}{f.name}: {ann} = field(default={f.default}, compare=False)")
            elif f.default is None:
                out.append(f"{ind}{f.name}: {ann}")
            else:
                out.append(f"{ind}{f.name}: {ann} = {f.default}")
        del dataclass_
        return out

    # --- encoding -----------------------------------------------------------------------

    def _c_fields(self, s: StructSpec) -> list[spec.Field]:
        return [f for f in s.fields if not f.pad]

    def pack_args(self, sh: _Shape, var: str, counts: dict[str, str]) -> list[str]:
        """The arguments of ``<struct>.pack`` for the object ``var``."""
        by_c: dict[str, list[PyField]] = {}
        for f in sh.fields:
            if f.kind not in ("tail", "local"):
                by_c.setdefault(f.c_field, []).append(f)
        args = []
        for cf in self._c_fields(sh.struct):
            if cf.name in counts:
                args.append(counts[cf.name])
                continue
            mapped = by_c.get(cf.name, [])
            if not mapped:
                args.append("0")
                continue
            f = mapped[0]
            x = f"{var}.{f.name}"
            if f.kind == "flag":
                args.append(
                    " | ".join(f"({py_const(m.bit)} if {var}.{m.name} else 0)" for m in mapped)
                )
            elif f.kind == "int":
                args.append(x)
            elif f.kind == "bool" or f.kind in self.enums:
                args.append(f"int({x})")
            elif f.kind == "str":
                n = _dim(cf.dims[-1])
                args.append(f"pad(truncate({x}, {n}), {n})" if f.truncate else f"pad({x}, {n})")
            elif f.kind == "ints":
                n = _dim(cf.dims[0])
                args.append(f"*{x}, *(({f.fill},) * ({n} - len({x})))")
            elif f.kind == "strs":
                n, size = _dim(cf.dims[0]), _dim(cf.dims[1])
                args.append(f"pad_array({x}, {size}, {n})")
            else:
                raise ValueError(f"{sh.struct.name}.{f.name}: kind {f.kind!r}")
        return args

    def counts(self, sh: _Shape, var: str) -> dict[str, str]:
        out: dict[str, str] = {}
        arrays: dict[str, list[str]] = {}
        for f in sh.fields:
            if f.kind == "tail":
                out[f.count] = f"len({var}.{f.name})"
            elif f.kind in ("ints", "strs"):
                arrays.setdefault(f.count, []).append(f"len({var}.{f.name})")
        for c, lens in arrays.items():
            out[c] = lens[0] if len(lens) == 1 else f"max({', '.join(lens)})"
        return out

    def prechecks_encode(self, ind: str, sh: _Shape, var: str, owner: str) -> list[str]:
        out = []
        arrays = [f for f in sh.fields if f.kind in ("ints", "strs")]
        if arrays:
            cf = {f.name: f for f in sh.struct.fields}
            n = _dim(cf[arrays[0].c_field].dims[0])
            cond = " or ".join(f"len({var}.{f.name}) > {n}" for f in arrays)
            out += [
                f"{ind}if {cond}:",
                f'{ind}    raise ProtocolError(f"{owner}: at most {{{n}}} {arrays[0].label}")',
            ]
        for f in sh.fields:
            if f.kind == "flag" and f.excludes:
                out += [
                    f"{ind}if {var}.{f.name} and {var}.{f.excludes}:",
                    f'{ind}    raise ProtocolError("{owner}: {f.excludes} in a {f.name} record")',
                ]
        return out

    def encode_into(self, ind: str, sh: _Shape, var: str, owner: str, depth: int) -> list[str]:
        """Lines that append the struct of ``var`` and its tails to ``out``."""
        lines = self.prechecks_encode(ind, sh, var, owner)
        args = self.pack_args(sh, var, self.counts(sh, var))
        lines += _call(ind, f"out.append({sh.sname}.pack(", args, "))")
        for t in self.tails(sh.fields):
            x = f"{var}.{t.name}"
            if self.is_record(t.of):
                ev = f"e{depth}"
                lines.append(f"{ind}for {ev} in {x}:")
                rec = self.record(t.of)
                rsh = _Shape(self.t.struct_spec(t.of), rec.fields, self.sname(t.of))
                lines += self.encode_into(ind + "    ", rsh, ev, owner, depth + 1)
            else:
                code = CTYPES[t.of][1]
                lines.append(f'{ind}out.append(array("{code}", len({x})).pack(*{x}))')
        return lines

    def payload_method(self, sh: _Shape | None, owner: str) -> list[str]:
        ind = "        "
        out = ["    def payload(self) -> bytes:"]
        if sh is None:
            return [*out, f'{ind}return b""']
        if not self.tails(sh.fields):
            out += self.prechecks_encode(ind, sh, "self", owner)
            args = self.pack_args(sh, "self", self.counts(sh, "self"))
            return out + _call(ind, f"return {sh.sname}.pack(", args)
        out.append(f"{ind}out: list[bytes] = []")
        out += self.encode_into(ind, sh, "self", owner, 0)
        out.append(f'{ind}return b"".join(out)')
        return out

    # --- decoding -----------------------------------------------------------------------

    def unpack_names(self, sh: _Shape, prefix: str) -> tuple[str, dict[str, str]]:
        """The left-hand side of an unpack of ``sh`` and each C field's expression."""
        fields = self._c_fields(sh.struct)
        if any(f.dims and f.ctype != "char" for f in fields):
            exprs, i = {}, 0
            for f in fields:
                n = 1 if f.ctype == "char" else self.t.count(f)
                exprs[f.name] = f"{prefix}v[{i}:{i + n}]" if n > 1 else f"{prefix}v[{i}]"
                i += n
            return f"{prefix}v", exprs
        used = {f.c_field for f in sh.fields if f.kind not in ("tail", "local")}
        used |= {f.count for f in sh.fields if f.count}
        names = [f"{prefix}{f.name}" if f.name in used else "_" for f in fields]
        lhs = ", ".join(names) + ("," if len(names) == 1 else "")
        return lhs, {f.name: f"{prefix}{f.name}" for f in fields}

    def value(self, f: PyField, sh: _Shape, c: dict[str, str], cached: bool) -> str:
        """The decoded value of Python field ``f`` from the unpacked C fields ``c``."""
        x = c.get(f.c_field, "")
        if f.kind == "int":
            return x
        if f.kind == "bool":
            return f"bool({x})"
        if f.kind in self.enums:
            return f"enum_value({f.kind}, {x})"
        if f.kind == "flag":
            return f"bool({x} & {py_const(f.bit)})"
        if f.kind == "str":
            return f"s_{x}" if cached else f"unpad({x})"
        cf = {g.name: g for g in sh.struct.fields}[f.c_field] if f.c_field in c else None
        if f.kind == "ints" and cf is not None:
            return f"tuple(i for i in {x}[: {c[f.count]}] if i != {f.fill})"
        if f.kind == "strs" and cf is not None:
            size = _dim(cf.dims[1])
            return f"unpad_array({x}, {size}, {c[f.count]})"
        raise ValueError(f"{sh.struct.name}.{f.name}: kind {f.kind!r}")

    def prechecks_decode(self, ind: str, sh: _Shape, c: dict[str, str], owner: str) -> list[str]:
        out = []
        arrays = [f for f in sh.fields if f.kind in ("ints", "strs")]
        if arrays:
            cf = {f.name: f for f in sh.struct.fields}
            n = _dim(cf[arrays[0].c_field].dims[0])
            cnt = c[arrays[0].count]
            out += [
                f"{ind}if {cnt} > {n}:",
                f'{ind}    raise ProtocolError(f"{owner}: {{{cnt}}} {arrays[0].label},'
                f' at most {{{n}}}")',
            ]
        for f in sh.fields:
            if f.kind == "flag" and f.excludes:
                tail = next(t for t in sh.fields if t.name == f.excludes)
                out += [
                    f"{ind}if {c[f.c_field]} & {py_const(f.bit)} and {c[tail.count]}:",
                    f'{ind}    raise ProtocolError("{owner}: {f.excludes} in a {f.name} record")',
                ]
        return out

    def build(
        self,
        cls: str,
        sh: _Shape,
        c: dict[str, str],
        tails: dict[str, str],
        cached: bool,
        positional: bool,
    ) -> str:
        vals = []
        for f in sh.fields:
            if f.kind == "local":
                continue
            v = tails[f.name] if f.kind == "tail" else self.value(f, sh, c, cached)
            vals.append(v if positional else f"{f.name}={v}")
        return f"{cls}({', '.join(vals)})"

    def decode_tails_checked(
        self, ind: str, sh: _Shape, c: dict[str, str], owner: str, depth: int
    ) -> tuple[list[str], dict[str, str]]:
        """Lines that read ``sh``'s tails from ``data`` at ``off``, each checked against
        ``end`` as it goes; and each tail's variable."""
        lines: list[str] = []
        names: dict[str, str] = {}
        for t in self.tails(sh.fields):
            n = c[t.count]
            var = f"t{depth}_{t.name}"
            names[t.name] = var
            if not self.is_record(t.of):
                size, code = CTYPES[t.of]
                lines += [
                    f"{ind}if off + {size} * {n} > end:",
                    f'{ind}    raise ProtocolError(f"{owner}: {{{n}}} {t.label} overrun'
                    f' {{end}} bytes")',
                    f'{ind}{var}: tuple[int, ...] = array("{code}", {n}).unpack_from(data, off)',
                    f"{ind}off += {size} * {n}",
                ]
                continue
            rec = self.record(t.of)
            rsh = _Shape(self.t.struct_spec(t.of), rec.fields, self.sname(t.of))
            lst = f"l{depth}_{t.name}"
            lhs, rc = self.unpack_names(rsh, f"r{depth + 1}_")
            inner = ind + "    "
            # The record's struct is bound to locals before the loops (see from_payload).
            rsize, runpack = f"{rsh.sname.lower()}_size", f"{rsh.sname.lower()}_unpack"
            lines += [
                f"{ind}{lst}: list[{rec.name}] = []",
                f"{ind}for _ in range({n}):",
                f"{inner}if off + {rsize} > end:",
                f'{inner}    raise ProtocolError(f"{owner}: {{{n}}} {t.label} overrun'
                f' {{end}} bytes")',
                f"{inner}{lhs} = {runpack}(data, off)",
                f"{inner}off += {rsize}",
            ]
            lines += self.prechecks_decode(inner, rsh, rc, owner)
            for f in rec.fields:
                if f.kind == "str":
                    raw, text = rc[f.c_field], f"s_{rc[f.c_field]}"
                    lines += [
                        f"{inner}{text} = names.get({raw})",
                        f"{inner}if {text} is None:",
                        f"{inner}    {text} = names[{raw}] = unpad({raw})",
                    ]
            sub, subnames = self.decode_tails_checked(inner, rsh, rc, owner, depth + 1)
            lines += sub
            lines.append(
                f"{inner}{lst}.append({self.build(rec.name, rsh, rc, subnames, True, True)})"
            )
            names[t.name] = f"tuple({lst})"
        return lines, names

    def from_payload_method(self, cls: str, sh: _Shape | None, owner: str) -> list[str]:
        ind = "        "
        out = [
            "    @classmethod",
            f"    def from_payload(cls, data: bytes, seq: int) -> {cls}:",
        ]
        if sh is None:
            return [*out, f"{ind}return cls()"]
        tails = self.tails(sh.fields)
        lhs, c = self.unpack_names(sh, "h_")
        if not tails:
            out.append(f"{ind}{lhs} = {sh.sname}.unpack(data)")
            out += self.prechecks_decode(ind, sh, c, owner)
            return out + _call(ind, "return cls(", self._kw(sh, c, {}), ")")
        out.append(f"{ind}{lhs} = {sh.sname}.unpack_from(data)")
        out += self.prechecks_decode(ind, sh, c, owner)
        first = tails[0]
        if not self.nested(sh.fields):
            need = " + ".join(
                [f"{sh.sname}.size"]
                + [
                    f"{c[t.count]} * "
                    + (f"{self.sname(t.of)}.size" if self.is_record(t.of) else str(CTYPES[t.of][0]))
                    for t in tails
                ]
            )
            out += [
                f"{ind}if len(data) != {need}:",
                f'{ind}    raise ProtocolError(f"{owner}: {{{c[first.count]}}} {first.label}'
                f' do not fill {{len(data)}} bytes")',
                f"{ind}off = {sh.sname}.size",
            ]
            tv: dict[str, str] = {}
            for t in tails:
                n = c[t.count]
                var = f"t_{t.name}"
                if self.is_record(t.of):
                    rec = self.record(t.of)
                    rsh = _Shape(self.t.struct_spec(t.of), rec.fields, self.sname(t.of))
                    lhs2, rc = self.unpack_names(rsh, "r_")
                    out += [
                        f"{ind}{var}: list[{rec.name}] = []",
                        f"{ind}for _ in range({n}):",
                        f"{ind}    {lhs2} = {rsh.sname}.unpack_from(data, off)",
                        f"{ind}    off += {rsh.sname}.size",
                        f"{ind}    {var}.append({self.build(rec.name, rsh, rc, {}, False, True)})",
                    ]
                    tv[t.name] = f"tuple({var})"
                else:
                    size, code = CTYPES[t.of]
                    out += [
                        f"{ind}{var}: tuple[int, ...] = "
                        f'array("{code}", {n}).unpack_from(data, off)',
                        f"{ind}off += {size} * {n}",
                    ]
                    tv[t.name] = var
            return out + _call(ind, "return cls(", self._kw(sh, c, tv), ")")
        out += [f"{ind}end = len(data)", f"{ind}off = {sh.sname}.size"]
        if self._has_record_str(sh.fields):
            # Each distinct string is decoded once per frame (request ids repeat).
            out.append(f"{ind}names: dict[bytes, str] = {{}}")
        for struct_name in self._record_structs(sh.fields):
            local = self.sname(struct_name).lower()
            out += [
                f"{ind}{local}_size = {self.sname(struct_name)}.size",
                f"{ind}{local}_unpack = {self.sname(struct_name)}.unpack_from",
            ]
        lines, tv = self.decode_tails_checked(ind, sh, c, owner, 0)
        out += lines
        out += [
            f"{ind}if off != end:",
            f'{ind}    raise ProtocolError(f"{owner}: {{{c[first.count]}}} {first.label}'
            f' do not fill {{end}} bytes")',
        ]
        return out + _call(ind, "return cls(", self._kw(sh, c, tv), ")")

    def _record_structs(self, fields: tuple[PyField, ...]) -> list[str]:
        """The structs of the records in ``fields``' tails, nested ones included."""
        out: list[str] = []
        for t in self.tails(fields):
            if self.is_record(t.of):
                out += [t.of, *self._record_structs(self.record(t.of).fields)]
        return out

    def _has_record_str(self, fields: tuple[PyField, ...]) -> bool:
        for t in self.tails(fields):
            if self.is_record(t.of):
                rec = self.record(t.of)
                if any(f.kind == "str" for f in rec.fields) or self._has_record_str(rec.fields):
                    return True
        return False

    def _kw(self, sh: _Shape, c: dict[str, str], tails: dict[str, str]) -> list[str]:
        out = []
        for f in sh.fields:
            if f.kind == "local":
                continue
            v = tails[f.name] if f.kind == "tail" else self.value(f, sh, c, False)
            out.append(f"{f.name}={v}")
        return out

    # --- the module ---------------------------------------------------------------------

    def render(self) -> str:
        t = self.t
        public: list[str] = []
        body: list[str] = []
        consts = t.constants()
        # constants
        body += ["", "# --- Constants (the C header's #defines) " + "-" * 47, ""]
        for g in t.groups():
            for cst in g.items:
                if g.enum and cst.name != f"{g.prefix}MAX":
                    continue
                name = py_const(cst.name)
                value = f"0x{cst.value:X}" if cst.text.startswith("0x") else str(cst.value)
                body.append(f"{name}: Final = {value}")
                public.append(name)
        # enums
        body += ["", "", "# --- Enums " + "-" * 78]
        for g in t.groups():
            if not g.enum:
                continue
            body += ["", "", f"class {g.enum}(IntEnum):"]
            body += _doc("    ", g.doc or g.comment)
            body.append("")
            for cst in g.items:
                if cst.name == f"{g.prefix}MAX":
                    continue
                body.append(f"    {cst.name.removeprefix(g.prefix)} = {cst.value}")
            public.append(g.enum)
        # structs
        body += ["", "", "# --- Payload structs (formats from the table) " + "-" * 42, ""]
        for s in t.structs:
            body.append(f'{self.sname(s.name)}: Final = struct.Struct("{t.fmt(s.name)}")')
        # records
        body += ["", "", "# --- Records of variable payloads " + "-" * 54]
        for struct_name, rec in t.records.items():
            body += ["", ""]
            if rec.named_tuple:
                body.append(f"class {rec.name}(NamedTuple):")
            else:
                body += ["@dataclass(frozen=True)", f"class {rec.name}:"]
            body += _doc("    ", rec.doc)
            body.append("")
            body += self.attr_lines("    ", rec.fields, not rec.named_tuple)
            public.append(rec.name)
            del struct_name
        # messages
        body += ["", "", "# --- Messages " + "-" * 75]
        classes: list[tuple[str, str]] = []
        done_bases: set[str] = set()
        variable: list[str] = []
        for m in t.messages:
            cls = spec.camel(m.name)
            classes.append((m.name, cls))
            lay: PyLayout | None = t.layouts.get(m.payload) if m.payload else None
            sh = self.shape(m.payload) if m.payload else None
            if sh is not None and self.tails(sh.fields):
                variable.append(m.name)
            size = f"{sh.sname}.size" if sh is not None else "0"
            if lay is not None and lay.base:
                if lay.base not in done_bases:
                    done_bases.add(lay.base)
                    body += self.message_class(
                        lay.base, "Message", m.name, lay.base_doc, sh, size, lay
                    )
                    public.append(lay.base)
                body += ["", "", "@dataclass(frozen=True)", f"class {cls}({lay.base}):"]
                body += _doc("    ", m.doc or m.summary)
                body += ["", f"    TYPE: ClassVar[MsgType] = MsgType.{m.name}"]
            else:
                body += self.message_class(
                    cls, "Message", m.name, m.doc or m.summary, sh, size, lay
                )
            public.append(cls)
        # tables
        body += ["", "", "# --- Tables " + "-" * 77, ""]
        body.append("MESSAGE_CLASSES: Final[dict[MsgType, type[Message]]] = {")
        body += [f"    MsgType.{n}: {c}," for n, c in classes]
        body.append("}")
        body.append('"""The class of each message type."""')
        body.append("VARIABLE_TYPES: Final[frozenset[MsgType]] = frozenset(")
        body.append("    {")
        body += [f"        MsgType.{n}," for n in variable]
        body.append("    }")
        body.append(")")
        body.append('"""Types whose payload is a fixed head and counted entries."""')
        body.append("STRUCT_SIZES: Final[dict[str, int]] = {")
        body += [f'    "{s.name}": {self.sname(s.name)}.size,' for s in t.structs]
        body += [f'    "{a.name}": {self.sname(a.of)}.size,' for a in t.aliases]
        body.append("}")
        body.append('"""Every struct\'s size as this codec packs it, by C name."""')
        body += ["", "", "def c_constants() -> dict[str, int]:"]
        body.append('    """Every ``#define GL_*`` number of gleaner_proto.h, by its C name."""')
        body.append("    return {")
        for g in t.groups():
            for cst in g.items:
                if g.enum and cst.name != f"{g.prefix}MAX":
                    expr = f"int({g.enum}.{cst.name.removeprefix(g.prefix)})"
                else:
                    expr = py_const(cst.name)
                body.append(f'        "{cst.name}": {expr},')
        body.append("    }")
        del consts
        public += ["MESSAGE_CLASSES", "VARIABLE_TYPES", "STRUCT_SIZES", "c_constants"]
        head = [
            '"""The protocol\'s messages, records, enums and constants (GENERATED: do not edit).',
            "",
            "Written by ``python -m gleaner.protocol.pygen --write`` (``make proto``) from the",
            "protocol table, :mod:`gleaner.protocol.spec`; change the table and regenerate (a test",
            "fails on drift). :mod:`gleaner.protocol.wire` re-exports everything here.",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "import struct",
            "from dataclasses import dataclass, field",
            "from enum import IntEnum",
            "from typing import ClassVar, Final, NamedTuple",
            "",
            "from gleaner.protocol.codec import (",
            "    Message,",
            "    ProtocolError,",
            "    array,",
            "    enum_value,",
            "    pad,",
            "    pad_array,",
            "    truncate,",
            "    unpad,",
            "    unpad_array,",
            ")",
            "",
            "__all__ = [",
            *(f'    "{n}",' for n in sorted(public, key=_all_order)),
            "]",
        ]
        fitted = [piece for line in body for piece in _fit(line)]
        return _drop_unused_imports("\n".join(head + fitted) + "\n")

    def message_class(
        self,
        cls: str,
        base: str,
        mname: str,
        doc: str,
        sh: _Shape | None,
        size: str,
        lay: PyLayout | None,
    ) -> list[str]:
        out = ["", "", "@dataclass(frozen=True)", f"class {cls}({base}):"]
        out += _doc("    ", doc)
        out += [
            "",
            f"    TYPE: ClassVar[MsgType] = MsgType.{mname}",
            f"    SIZE: ClassVar[int] = {size}",
        ]
        if sh is not None:
            out += self.attr_lines("    ", sh.fields, True)
        if lay is not None and lay.has_fd:
            out += ["", "    @property", "    def flags(self) -> int:"]
            out.append("        return FLAG_HAS_FD")
        out.append("")
        out += self.payload_method(sh, mname)
        out.append("")
        out += self.from_payload_method(cls, sh, mname)
        return out


def _all_order(name: str) -> tuple[int, str]:
    """``__all__``'s order: constants, then classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth after it) outside string literals, from ``start``."""
    depth, in_str = 0, False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"':
            in_str = not in_str
        if in_str or ch == '"':
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        yield i, ch, depth


def _top_level(text: str, opener: int) -> int:
    """The index of the bracket that closes the one at ``opener`` (strings skipped)."""
    return next((i for i, ch, depth in _scan(text, opener) if depth == 0 and ch in ")]}"), -1)


def _split_commas(text: str) -> list[str]:
    """``text`` split at its commas outside brackets and strings."""
    cuts = [i for i, ch, depth in _scan(text) if ch == "," and depth == 0]
    bounds = zip([-1, *cuts], [*cuts, len(text)], strict=True)
    return [p for p in (text[a + 1 : b].strip() for a, b in bounds) if p]


def _fit(line: str) -> list[str]:
    """A generated line split at its brackets until each piece fits the line limit."""
    if len(line) <= _LIMIT:
        return [line]
    ind = line[: len(line) - len(line.lstrip())]
    inner_ind = ind + "    "
    code = line.strip()
    # ``a, b, c = f(...)``: the names in brackets, one a line.
    eq = code.find(" = ")
    if eq > 0 and "," in code[:eq] and "(" not in code[:eq]:
        names = _split_commas(code[:eq])
        rhs = code[eq + 3 :]
        return [f"{ind}(", *(f"{inner_ind}{n}," for n in names), f"{ind}) = {rhs}"]
    in_str = False
    for i, ch in enumerate(code):
        if ch == '"':
            in_str = not in_str
        if in_str or ch != "(":
            continue
        close = _top_level(code, i)
        if close < 0 or code[close + 1 :].strip(")") not in ("", ":"):
            continue
        head, inner, tail = code[: i + 1], code[i + 1 : close], code[close:]
        parts = _split_commas(inner)
        body = [f"{inner_ind}{inner}"] if len(parts) == 1 else [f"{inner_ind}{x}," for x in parts]
        out = [f"{ind}{head}"]
        for b in body:
            out += _fit(b)
        return [*out, f"{ind}{tail}"]
    return [line]


def _drop_unused_imports(text: str) -> str:
    """Leave out of the import block the helpers no generated line uses."""
    lines = text.split("\n")
    start = lines.index("from gleaner.protocol.codec import (")
    end = lines.index(")", start)
    code = "\n".join(lines[end + 1 :])
    keep = [ln for ln in lines[start + 1 : end] if _used(ln.strip().rstrip(","), code)]
    typing = lines.index("from typing import ClassVar, Final, NamedTuple")
    names = [n for n in ("ClassVar", "Final", "NamedTuple") if _used(n, code)]
    lines[typing] = f"from typing import {', '.join(names)}"
    dc = lines.index("from dataclasses import dataclass, field")
    if not _used("field", code, call=True):
        lines[dc] = "from dataclasses import dataclass"
    return "\n".join(lines[: start + 1] + keep + lines[end:])


def _used(name: str, code: str, call: bool = False) -> bool:
    pattern = rf"\b{name}\(" if call else rf"\b{name}\b"
    return re.search(pattern, code) is not None


def render(table: Table = spec.TABLE) -> str:
    """The generated module's text for ``table``."""
    return _Gen(table).render()


def main(argv: list[str] | None = None) -> int:
    return genfile.main(
        argv,
        prog="python -m gleaner.protocol.pygen",
        description=(__doc__ or "").split("\n\n")[0],
        render=render,
        option="--module",
        default=MODULE_PATH,
    )


if __name__ == "__main__":
    sys.exit(main())
