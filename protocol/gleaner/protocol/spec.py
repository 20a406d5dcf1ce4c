"""The wire protocol, declared once: constants, message types and payload structs (pure data).

Contract. This table is the single declaration of the agent ⇄ shim ⇄ framework protocol's
numbers and fixed layouts:

- :data:`CONSTANTS`: every ``#define GL_*`` of the C header, in groups, with its value;
- :data:`MESSAGES`: every message type — id, name, sender, what it says, its payload struct;
- :data:`STRUCTS`: every payload struct (and fixed entry of a variable payload), field by
  field with its C type, array dimensions and whether the Python codec skips it as padding.

From it, :mod:`gleaner.protocol.cheader` generates ``runtime-agent/shim/include/gleaner_proto.h``
(``--write`` / ``--check``; a test fails on drift), and :func:`fmt` gives the Python codec
(:mod:`gleaner.protocol.wire`) each struct's ``struct`` format, so a layout is written once.
Adding a message: a :class:`MessageSpec` (and its :class:`StructSpec`) here, regenerate the
header; in :mod:`gleaner.protocol.wire` its ``MsgType`` member (kept static for the type
checker; a test compares the enum with this table) and a codec class built on :func:`fmt`.

Layout rules (checked by :func:`c_layout`, and by the compiler through the header's static
asserts): little-endian, natural alignment, no implicit padding — every field starts at a
multiple of its size and the struct's size is a multiple of its largest field, so the C
struct and the Python format (``<``, no alignment) have the same bytes. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# C type → (bytes, struct code). ``char`` arrays become one ``s`` of their total length.
CTYPES: Final[dict[str, tuple[int, str]]] = {
    "uint8_t": (1, "B"),
    "uint16_t": (2, "H"),
    "uint32_t": (4, "I"),
    "int32_t": (4, "i"),
    "uint64_t": (8, "Q"),
    "char": (1, "s"),
}


@dataclass(frozen=True, slots=True)
class Const:
    """One ``#define``: C name, value, how the C header writes it, and a comment."""

    name: str
    value: int
    text: str
    comment: str = ""


@dataclass(frozen=True, slots=True)
class ConstGroup:
    """Constants written together (one comment above them in the C header).

    ``enum``: the Python codec makes the group an ``IntEnum`` of that name, members named
    after the constants less ``prefix`` (a ``<prefix>MAX`` constant stays a plain number);
    ``doc`` is its docstring. ``from_messages``: the group is the message types, filled
    from :data:`MESSAGES` (``GL_MSG_<name>``, then ``GL_MSG_MAX``)."""

    comment: str
    items: tuple[Const, ...]
    enum: str = ""
    prefix: str = ""
    doc: str = ""
    from_messages: bool = False


def _u(name: str, value: int, comment: str = "", hex_digits: int = 0) -> Const:
    text = f"0x{value:0{hex_digits}X}u" if hex_digits else f"{value}u"
    return Const(name, value, text, comment)


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One message type (``header.type``)."""

    type_id: int
    name: str
    """Upper-case name: ``GL_MSG_<name>`` in C, ``MsgType.<name>`` in Python."""
    sender: str
    """Direction as the header comment writes it (``S->A``, ``A->S``, ...)."""
    summary: str
    payload: str | None
    """The payload struct (or the fixed head of a variable payload); None: no payload."""
    doc: str = ""
    """The Python class's docstring (``MsgType.<name>``'s class is the name in CamelCase)."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    ctype: str
    dims: tuple[str, ...] = ()
    """Array dimensions, as constant names (``GL_MAX_GPUS``) or numbers."""
    comment: str = ""
    pad: bool = False
    """The Python codec skips it (``x``): a reserved field it neither reads nor writes."""


@dataclass(frozen=True, slots=True)
class StructSpec:
    name: str
    fields: tuple[Field, ...]
    comment: str = ""
    """A comment block written above the struct."""


@dataclass(frozen=True, slots=True)
class Alias:
    """``typedef <of> <name>;`` — a message with another message's layout."""

    name: str
    of: str


MESSAGES: Final[tuple[MessageSpec, ...]] = (
    MessageSpec(
        1,
        "HELLO",
        "S->A",
        "who I am",
        "gl_hello",
        doc="First frame on every connection: the process, its role, GPUs and job.",
    ),
    MessageSpec(
        2,
        "HELLO_ACK",
        "A->S",
        "accepted, initial gate state",
        "gl_hello_ack",
        doc="The agent's answer to HELLO: the initial gate state and who runs the controls.",
    ),
    MessageSpec(
        3,
        "CHANNEL_ADD",
        "S->A",
        "a TSG / GPFIFO channel was allocated",
        "gl_channel",
        doc="CHANNEL_ADD: sent after the RM allocation succeeded.",
    ),
    MessageSpec(
        4,
        "CHANNEL_FREE",
        "S->A",
        "... was freed",
        "gl_channel",
        doc="CHANNEL_FREE: sent after the RM free of that handle succeeded.",
    ),
    MessageSpec(
        5,
        "ONLINE_BUSY",
        "S->A",
        "online process turned busy",
        "gl_online_edge",
        doc="ONLINE_BUSY: the online process launched work while idle.",
    ),
    MessageSpec(
        6,
        "ONLINE_IDLE",
        "S->A",
        "online process turned idle",
        "gl_online_edge",
        doc="ONLINE_IDLE: every tracked launch of the online process completed.",
    ),
    MessageSpec(
        7,
        "DECODE_GAP",
        "S->A",
        "gap between two decode iterations",
        "gl_decode_gap",
        doc="The idle gap between two busy periods (decode iterations) of an online process.",
    ),
    MessageSpec(
        8,
        "GATE",
        "A->S",
        "enable / disable offline channels",
        "gl_gate",
        doc="Agent → offline shim: enable (``enable=True``) or disable its channels.",
    ),
    MessageSpec(
        9,
        "GATE_ACK",
        "S->A",
        "result of a GATE",
        "gl_gate_ack",
        doc="Shim → agent: what a GATE did; ``latency_ns`` from receipt to the last control.",
    ),
    MessageSpec(
        10,
        "FD_REQUEST",
        "A->S",
        "send me your nvidiactl fd",
        "gl_fd_request",
        doc="Agent → shim: pass me your nvidiactl descriptor (answered by FD_PASS).",
    ),
    MessageSpec(
        11,
        "FD_PASS",
        "S->A",
        "here it is (GL_FLAG_HAS_FD)",
        "gl_fd_pass",
        doc=(
            "Shim → agent: the frame that carries libcuda's nvidiactl fd as SCM_RIGHTS. ``fd`` is"
            " the descriptor received in *this* process (set by ``recv_messages``), or the one to"
            " send (used by ``send_message``); it is not part of the payload."
        ),
    ),
    MessageSpec(
        12,
        "STATUS",
        "S->A",
        "why the process waits gated, or ok",
        "gl_status",
        doc="Shim → agent: whether the offline process runs, and if not, why.",
    ),
    MessageSpec(
        13,
        "MEM_HANDLES",
        "S->A",
        "memory handle table entries",
        "gl_mem_handles",
        doc="Shim → agent: a batch of memory-handle table entries.",
    ),
    MessageSpec(
        14,
        "INVALIDATE_BLOCKS",
        "A->framework",
        "KV blocks to recompute",
        "gl_invalidate_blocks",
        doc="Agent → framework: KV-cache block ids of one request whose pages were reclaimed.",
    ),
    MessageSpec(
        15,
        "HEARTBEAT",
        "both ways",
        "liveness",
        "gl_heartbeat",
        doc="Liveness, both ways; the shim's ``state`` is 1 while its gate is open.",
    ),
    MessageSpec(
        16,
        "ONLINE_MEMORY",
        "S->A",
        "online KV bytes in use / reserved",
        "gl_online_memory",
        doc=(
            "Online side → agent: KV-cache bytes in use and reserved on one GPU (``gpu`` as in "
            "ONLINE_BUSY: an index into the process's GPUs, or ``GPU_ALL``)."
        ),
    ),
    MessageSpec(
        17,
        "OFFLINE_HANDLES",
        "offline hook->A",
        "KV page handles and their blocks",
        "gl_offline_handles",
        doc="Offline framework hook → agent: its KV page handles on one GPU and what they hold.",
    ),
    MessageSpec(
        18,
        "RECLAIM",
        "A->offline shim",
        "quarantine-remap and release pages",
        "gl_reclaim",
        doc=(
            "Agent → offline shim: remap these page handles to the quarantine page and release "
            "them (the process's channels on ``gpu`` are already disabled and acked)."
        ),
    ),
    MessageSpec(
        19,
        "RECLAIM_ACK",
        "offline shim->A",
        "result of a RECLAIM",
        "gl_reclaim_ack",
        doc=(
            "Offline shim → agent: how many handles of RECLAIM ``reclaim_seq`` were released; "
            "``ok=False`` with ``err`` (errno or CUDA error) when one could not be (the shim then"
            " keeps its work held: fail closed)."
        ),
    ),
    MessageSpec(
        20,
        "RESTORE",
        "A->offline shim",
        "back quarantined pages with fresh memory",
        "gl_restore",
        doc=(
            "Agent → offline shim: back these quarantined pages with fresh physical memory again "
            "(memory the online side gave back). The pages hold no live blocks (the framework "
            "retired them when they were reclaimed), so this needs no gate; the shim answers "
            "RESTORE_ACK."
        ),
    ),
    MessageSpec(
        21,
        "RESTORE_ACK",
        "offline shim->A",
        "result of a RESTORE",
        "gl_restore_ack",
        doc=(
            "Offline shim → agent: how many pages of RESTORE ``restore_seq`` are backed again; "
            "``ok=False`` with ``err`` when one could not be (e.g. CUDA out of memory: that page "
            "stays quarantined; nothing is held, a failed restore is harmless)."
        ),
    ),
    MessageSpec(
        22,
        "OFFLINE_PAGE_GROUPS",
        "offline hook->A",
        "KV page groups and their spans",
        "gl_page_groups",
        doc=(
            "Offline framework hook → agent: its KV pages on one GPU, by group of pages holding"
            " the same spans (docs/protocol.md). Decoding unpacks each group's page VAs and each"
            " span's block ids with one precompiled struct call; no per-page objects."
        ),
    ),
)

CONSTANTS: Final[tuple[ConstGroup, ...]] = (
    ConstGroup(
        "",
        (
            _u("GL_PROTO_MAGIC", 0x524E4C47, 'bytes "GLNR" on the wire', hex_digits=8),
            _u("GL_PROTO_VERSION", 1),
            _u("GL_HEADER_SIZE", 16),
            _u("GL_MAX_PAYLOAD", 65536),
        ),
    ),
    ConstGroup(
        "Header flags.",
        (_u("GL_FLAG_HAS_FD", 0x0001, "one fd rides along as SCM_RIGHTS", hex_digits=4),),
    ),
    ConstGroup(
        "Message types (header.type). Direction: S = shim/framework, A = agent.",
        (),
        enum="MsgType",
        prefix="GL_MSG_",
        doc="``header.type``: who sends it is in the protocol table (docs/protocol.md).",
        from_messages=True,
    ),
    ConstGroup(
        "OFFLINE_HANDLES.flags",
        (
            _u(
                "GL_OFFLINE_HANDLES_RESET",
                0x0001,
                "forget this GPU's table before adding",
                hex_digits=4,
            ),
        ),
    ),
    ConstGroup(
        "OFFLINE_PAGE_GROUPS.flags: GL_OFFLINE_HANDLES_RESET. gl_page_group.gflags:",
        (
            _u(
                "GL_PAGE_GROUP_QUARANTINED",
                0x0001,
                "reclaimed earlier, restorable; no spans",
                hex_digits=4,
            ),
        ),
    ),
    ConstGroup(
        "HELLO.role",
        (
            _u("GL_ROLE_OFFLINE", 1),
            _u("GL_ROLE_ONLINE", 2),
            _u("GL_ROLE_FRAMEWORK", 3, "the vLLM plugin: receives INVALIDATE_BLOCKS"),
        ),
        enum="Role",
        prefix="GL_ROLE_",
        doc="Who is on the other end of a connection (``Hello.role``).",
    ),
    ConstGroup(
        "HELLO.caps bits",
        (
            _u("GL_CAP_GATE_THREAD", 0x0001, "shim runs the schedule controls itself", 4),
            _u("GL_CAP_FD_PASS", 0x0002, "shim can hand its nvidiactl fd over", 4),
            _u("GL_CAP_LAUNCH_HOOK", 0x0004, "launch entry points are intercepted", 4),
            _u("GL_CAP_BUSY_TRACK", 0x0008, "completion tracking is available", 4),
        ),
    ),
    ConstGroup(
        "HELLO_ACK.gate_mode",
        (
            _u("GL_GATE_MODE_SHIM", 0, "shim's control thread issues the controls"),
            _u("GL_GATE_MODE_AGENT", 1, "agent issues them on the passed fd"),
        ),
        enum="GateMode",
        prefix="GL_GATE_MODE_",
        doc="Who issues the schedule controls (``HelloAck.gate_mode``).",
    ),
    ConstGroup(
        "CHANNEL.kind",
        (_u("GL_KIND_TSG", 1), _u("GL_KIND_CHANNEL", 2)),
        enum="Kind",
        prefix="GL_KIND_",
        doc="What a ``Channel`` record describes.",
    ),
    ConstGroup(
        "FD kinds",
        (_u("GL_FD_NVIDIACTL", 1),),
        enum="FdKind",
        prefix="GL_FD_",
        doc="What descriptor an ``FdPass`` carries.",
    ),
    ConstGroup(
        "STATUS.code",
        (
            _u("GL_STATUS_OK", 0, "running, gate open"),
            _u("GL_STATUS_GATED_BY_AGENT", 1, "agent disabled us: waiting"),
            _u("GL_STATUS_NO_AGENT", 2, "agent unreachable: fail closed"),
            _u("GL_STATUS_NO_HANDLES", 3, "no channel group found to gate"),
            _u("GL_STATUS_CONTROL_REFUSED", 4, "the RM refused the schedule control"),
            _u("GL_STATUS_PROTOCOL_ERROR", 5, "agent spoke garbage: fail closed"),
        ),
        enum="StatusCode",
        prefix="GL_STATUS_",
        doc="Why an offline process is (not) running (``Status.code``).",
    ),
    ConstGroup("MEM_HANDLE entry flags", (_u("GL_MEM_ADDED", 1), _u("GL_MEM_FREED", 2))),
    ConstGroup(
        "",
        (
            _u("GL_GPU_UNKNOWN", 0xFFFFFFFF, hex_digits=8),
            _u("GL_GPU_ALL", 0xFFFFFFFF, hex_digits=8),
            _u("GL_MAX_GPUS", 8),
            _u("GL_UUID_LEN", 48),
            _u("GL_JOB_LEN", 128),
            _u("GL_REASON_LEN", 96),
            _u("GL_REQUEST_ID_LEN", 64),
        ),
    ),
)


def _f(name: str, ctype: str, comment: str = "", *dims: str, pad: bool = False) -> Field:
    return Field(name, ctype, tuple(dims), comment, pad)


def _reserved(name: str = "reserved", ctype: str = "uint32_t", *dims: str) -> Field:
    return Field(name, ctype, tuple(dims), "", pad=True)


U8, U16, U32, I32, U64, CHAR = "uint8_t", "uint16_t", "uint32_t", "int32_t", "uint64_t", "char"

STRUCTS: Final[tuple[StructSpec, ...]] = (
    StructSpec(
        "gl_header",
        (
            _f("magic", U32),
            _f("version", U8),
            _f("type", U8),
            _f("flags", U16),
            _f("length", U32, "payload bytes after the header"),
            _f("seq", U32, "sender's frame counter; replies echo nothing here"),
        ),
    ),
    StructSpec(
        "gl_hello",
        (
            _f("pid", U32),
            _f("role", U8),
            _f("ngpus", U8),
            _f("caps", U16),
            _f("gpu_index", I32, "-1: unknown / unused", "GL_MAX_GPUS"),
            _f("gpu_uuid", CHAR, 'NUL-padded "GPU-..."', "GL_MAX_GPUS", "GL_UUID_LEN"),
            _f("job", CHAR, '"<namespace>/<name>", NUL-padded', "GL_JOB_LEN"),
        ),
    ),
    StructSpec(
        "gl_hello_ack",
        (
            _f("heartbeat_ms", U32),
            _f("accepted", U8),
            _f("gate_open", U8, "initial gate state for an offline process"),
            _f("gate_mode", U8, "GL_GATE_MODE_*"),
            _f("reserved", U8),
            _f(
                "source_id",
                U64,
                "an online connection's busy-source id (its shared-memory edges carry it); 0: none",
            ),
        ),
    ),
    StructSpec(
        "gl_channel",
        (
            _f("h_client", U32),
            _f("h_parent", U32),
            _f("h_object", U32),
            _f("h_class", U32),
            _f("kind", U8, "GL_KIND_*"),
            _reserved("reserved", U8, "3"),
            _f("gpu", U32, "RM device instance, GL_GPU_UNKNOWN if unseen"),
            _f("engine_type", U32, "TSG alloc engineType when parsed, else 0"),
            _f("reserved2", U32),
        ),
    ),
    StructSpec(
        "gl_online_edge",
        (
            _f("gpu", U32),
            _reserved(),
            _f("mono_ns", U64, "CLOCK_MONOTONIC of the transition"),
            _f("request_id", U64, "0: unknown"),
        ),
    ),
    StructSpec(
        "gl_decode_gap",
        (
            _f("gpu", U32),
            _reserved(),
            _f("mono_ns", U64, "end of the gap"),
            _f("gap_ns", U64),
        ),
    ),
    StructSpec(
        "gl_gate",
        (
            _f("gate_seq", U64),
            _f("gpu", U32, "GL_GPU_ALL or one device instance"),
            _f("enable", U8),
            _reserved("reserved", U8, "3"),
        ),
    ),
    StructSpec(
        "gl_gate_ack",
        (
            _f("gate_seq", U64),
            _f("latency_ns", U64, "GATE received -> last control returned"),
            _f("gpu", U32),
            _f("enabled", U8, "gate state now"),
            _f("ok", U8, "every control succeeded (or nothing to control)"),
            _f("n_objects", U16),
            _f("err", I32, "errno of a failed ioctl, else 0"),
            _f("rm_status", U32, "first non-zero RM status, else 0"),
            _f("n_failed", U32),
            _f("reserved", U32),
        ),
    ),
    StructSpec("gl_fd_request", (_f("fd_kind", U32), _reserved())),
    StructSpec(
        "gl_fd_pass",
        (
            _f("fd_kind", U32),
            _f("h_client", U32, "the RM client created on this fd (0 if none yet)"),
            _f("sender_fd", I32, "the fd number inside the shim's process"),
            _reserved(),
        ),
    ),
    StructSpec(
        "gl_status",
        (
            _f("code", U32, "GL_STATUS_*"),
            _f("gpu", U32),
            _f("mono_ns", U64),
            _f("blocked_ns", U64, "how long work has been held so far"),
            _f("blocked_threads", U32),
            _reserved(),
            _f("reason", CHAR, "NUL-padded human-readable text", "GL_REASON_LEN"),
        ),
    ),
    StructSpec(
        "gl_mem_handles",
        (_f("count", U32, "gl_mem_handle entries that follow"), _reserved()),
    ),
    StructSpec(
        "gl_mem_handle",
        (
            _f("h_client", U32),
            _f("h_parent", U32),
            _f("h_memory", U32),
            _f("h_class", U32),
            _f("gpu", U32),
            _f("flags", U32, "GL_MEM_*"),
            _f("size", U64, "bytes, 0 if unknown"),
        ),
    ),
    StructSpec(
        "gl_invalidate_blocks",
        (
            _f("request_id", CHAR, "NUL-padded framework request id", "GL_REQUEST_ID_LEN"),
            _f("count", U32, "uint32 block ids that follow"),
            _reserved(),
        ),
    ),
    StructSpec(
        "gl_heartbeat",
        (
            _f("mono_ns", U64),
            _f("pid", U32),
            _f("state", U32, "shim: 1 = gate open; agent: 0"),
        ),
    ),
    StructSpec(
        "gl_online_memory",
        (
            _f("gpu", U32, "as in gl_online_edge"),
            _reserved(),
            _f("mono_ns", U64),
            _f("kv_used_bytes", U64, "KV cache bytes holding live blocks"),
            _f("kv_reserved_bytes", U64, "KV cache bytes allocated (pool size)"),
        ),
    ),
    StructSpec(
        "gl_offline_handles",
        (
            _f("gpu", U32),
            _f("count", U32, "gl_handle_span entries follow, each with its block ids"),
            _f("flags", U32, "GL_OFFLINE_HANDLES_*"),
            _f("reserved", U32),
        ),
    ),
    StructSpec(
        "gl_handle_span",
        (
            _f("handle", U64, "the page's device virtual address (as mapped by cuMemMap)"),
            _f("size", U64, "page bytes"),
            _f(
                "request_id",
                CHAR,
                '"" : the page holds no request\'s blocks',
                "GL_REQUEST_ID_LEN",
            ),
            _f("tokens", U32, "tokens the request recomputes if this page is lost"),
            _f("nblocks", U32, "uint32 block ids that follow"),
        ),
    ),
    StructSpec(
        "gl_page_groups",
        (
            _f("gpu", U32),
            _f("count", U32, "gl_page_group records follow"),
            _f("flags", U32, "GL_OFFLINE_HANDLES_RESET"),
            _f("reserved", U32),
        ),
        comment=(
            "OFFLINE_PAGE_GROUPS: gl_page_groups, then count x (gl_page_group, npages x uint64"
            " page VA, nspans x (gl_group_span, nblocks x uint32 block id)). Every page of a"
            " group holds every span of the group; records add to what the connection reported"
            " since the last RESET (a page named in two records holds the union of their"
            " spans)."
        ),
    ),
    StructSpec(
        "gl_page_group",
        (
            _f("page_bytes", U64),
            _f("npages", U32, "uint64 page virtual addresses follow, then the spans"),
            _f("nspans", U32, "gl_group_span records (0: empty pages, or quarantined)"),
            _f("gflags", U32, "GL_PAGE_GROUP_*"),
            _f("reserved", U32),
        ),
    ),
    StructSpec(
        "gl_group_span",
        (
            _f("request_id", CHAR, "", "GL_REQUEST_ID_LEN"),
            _f("tokens", U32, "tokens the request recomputes if any page of the group is lost"),
            _f("nblocks", U32, "uint32 block ids (that request's blocks in these pages) follow"),
        ),
    ),
    StructSpec(
        "gl_reclaim",
        (
            _f("reclaim_seq", U64),
            _f("gpu", U32),
            _f("count", U32, "uint64 handles (page virtual addresses) follow"),
        ),
    ),
    StructSpec(
        "gl_reclaim_ack",
        (
            _f("reclaim_seq", U64),
            _f("gpu", U32),
            _f("released", U32, "handles unmapped, quarantined and released"),
            _f("err", I32, "errno or CUresult of the first failure, else 0"),
            _f("ok", U8),
            _reserved("reserved", U8, "3"),
        ),
    ),
)

ALIASES: Final[tuple[Alias, ...]] = (
    Alias("gl_restore", "gl_reclaim"),
    Alias("gl_restore_ack", "gl_reclaim_ack"),
)
ALIASES_DOC: Final = (
    "RESTORE has RECLAIM's layout (restore_seq, gpu, count, then uint64 page addresses);"
    " RESTORE_ACK has RECLAIM_ACK's (the count field is the pages restored)."
)


# --- The Python view of each payload: which attribute fills which C field ----------------


@dataclass(frozen=True, slots=True)
class PyField:
    """One attribute of a generated Python class, in constructor order.

    ``kind`` says how it maps onto the C fields:

    - ``int``, ``bool``, ``str`` (a ``char`` array, NUL-padded; ``truncate``: cut to fit
      instead of refusing), or an enum's name (an ``IntEnum`` of :data:`CONSTANTS`): the C
      field ``c`` (default: the same name);
    - ``ints`` / ``strs``: a tuple written into the fixed C array ``c`` (``ints`` padded with
      ``fill``), whose length goes into the C field ``count``;
    - ``flag``: a bool that is the bit ``bit`` (a constant's name) of the C field ``c``;
      ``excludes``: while set, the tail of that name must be empty;
    - ``tail``: a tuple that follows the fixed part, its length in the C field ``count``;
      ``of`` is a C scalar type or the struct of a record (:data:`RECORDS`). Tails follow
      the fixed part in the order they are declared;
    - ``local``: an ``int | None`` that is not on the wire (compared: no).

    ``label`` names the items in error messages and in "at most" refusals.
    ``default`` is Python source (None: required)."""

    name: str
    kind: str = "int"
    default: str | None = None
    c: str = ""
    count: str = ""
    of: str = ""
    label: str = ""
    bit: str = ""
    fill: int = 0
    truncate: bool = False
    excludes: str = ""

    @property
    def c_field(self) -> str:
        return self.c or self.name


@dataclass(frozen=True, slots=True)
class PyLayout:
    """The Python attributes of a payload struct (or alias). A struct several messages share
    becomes a base class ``base`` with one subclass per message; ``has_fd``: the frame
    carries a descriptor (``GL_FLAG_HAS_FD``). A payload without a layout here gets one
    attribute per C field (``int``, or ``str`` for a ``char`` array), reserved and padding
    fields left out."""

    fields: tuple[PyField, ...]
    base: str = ""
    base_doc: str = ""
    has_fd: bool = False


@dataclass(frozen=True, slots=True)
class PyRecord:
    """A fixed entry of a variable payload as a Python class (``named_tuple``: a
    ``NamedTuple``, cheaper to build in bulk; else a frozen dataclass)."""

    name: str
    doc: str
    fields: tuple[PyField, ...]
    named_tuple: bool = False


def _p(name: str, kind: str = "int", default: str | None = None, **kw: str | int | bool) -> PyField:
    return PyField(name, kind, default, **kw)  # type: ignore[arg-type]


LAYOUTS: Final[dict[str, PyLayout]] = {
    "gl_hello": PyLayout(
        (
            _p("pid"),
            _p("role", "Role"),
            _p("gpu_uuids", "strs", "()", c="gpu_uuid", count="ngpus", label="GPUs"),
            _p("gpu_indices", "ints", "()", c="gpu_index", count="ngpus", label="GPUs", fill=-1),
            _p("job", "str", '""'),
            _p("caps", "int", "0"),
        )
    ),
    "gl_hello_ack": PyLayout(
        (
            _p("accepted", "bool", "True"),
            _p("gate_open", "bool", "False"),
            _p("gate_mode", "GateMode", "GateMode.SHIM"),
            _p("heartbeat_ms", "int", "1000"),
            _p("source_id", "int", "0"),
        )
    ),
    "gl_channel": PyLayout(
        (
            _p("h_client"),
            _p("h_parent"),
            _p("h_object"),
            _p("h_class"),
            _p("kind", "Kind"),
            _p("gpu", "int", "GPU_UNKNOWN"),
            _p("engine_type", "int", "0"),
        ),
        base="Channel",
        base_doc="A channel group (TSG) or GPFIFO channel the process allocated (RM handles).",
    ),
    "gl_online_edge": PyLayout(
        (_p("gpu"), _p("mono_ns"), _p("request_id", "int", "0")),
        base="OnlineEdge",
        base_doc="A busy/idle transition of an online process (CLOCK_MONOTONIC nanoseconds).",
    ),
    "gl_gate": PyLayout((_p("gate_seq"), _p("enable", "bool"), _p("gpu", "int", "GPU_ALL"))),
    "gl_gate_ack": PyLayout(
        (
            _p("gate_seq"),
            _p("enabled", "bool"),
            _p("ok", "bool"),
            _p("latency_ns", "int", "0"),
            _p("gpu", "int", "GPU_ALL"),
            _p("n_objects", "int", "0"),
            _p("err", "int", "0"),
            _p("rm_status", "int", "0"),
            _p("n_failed", "int", "0"),
        )
    ),
    "gl_fd_request": PyLayout((_p("fd_kind", "FdKind", "FdKind.NVIDIACTL"),)),
    "gl_fd_pass": PyLayout(
        (
            _p("fd_kind", "FdKind", "FdKind.NVIDIACTL"),
            _p("h_client", "int", "0"),
            _p("sender_fd", "int", "-1"),
            _p("fd", "local", "None"),
        ),
        has_fd=True,
    ),
    "gl_status": PyLayout(
        (
            _p("code", "StatusCode"),
            _p("reason", "str", '""', truncate=True),
            _p("gpu", "int", "GPU_ALL"),
            _p("mono_ns", "int", "0"),
            _p("blocked_ns", "int", "0"),
            _p("blocked_threads", "int", "0"),
        )
    ),
    "gl_mem_handles": PyLayout(
        (_p("entries", "tail", "()", count="count", of="gl_mem_handle", label="entries"),)
    ),
    "gl_invalidate_blocks": PyLayout(
        (
            _p("request_id", "str"),
            _p("block_ids", "tail", "()", count="count", of=U32, label="ids"),
        )
    ),
    "gl_heartbeat": PyLayout((_p("mono_ns"), _p("pid", "int", "0"), _p("state", "int", "0"))),
    "gl_online_memory": PyLayout(
        (
            _p("gpu"),
            _p("kv_used_bytes"),
            _p("kv_reserved_bytes", "int", "0"),
            _p("mono_ns", "int", "0"),
        )
    ),
    "gl_offline_handles": PyLayout(
        (
            _p("gpu"),
            _p("entries", "tail", "()", count="count", of="gl_handle_span", label="entries"),
            _p("reset", "flag", "True", c="flags", bit="GL_OFFLINE_HANDLES_RESET"),
        )
    ),
    "gl_page_groups": PyLayout(
        (
            _p("gpu"),
            _p("groups", "tail", "()", count="count", of="gl_page_group", label="groups"),
            _p("reset", "flag", "True", c="flags", bit="GL_OFFLINE_HANDLES_RESET"),
        )
    ),
    "gl_reclaim": PyLayout(
        (
            _p("reclaim_seq"),
            _p("gpu"),
            _p("handles", "tail", "()", count="count", of=U64, label="handles"),
        )
    ),
    "gl_reclaim_ack": PyLayout(
        (
            _p("reclaim_seq"),
            _p("gpu"),
            _p("released"),
            _p("ok", "bool", "True"),
            _p("err", "int", "0"),
        )
    ),
    "gl_restore": PyLayout(
        (
            _p("restore_seq", c="reclaim_seq"),
            _p("gpu"),
            _p("handles", "tail", "()", count="count", of=U64, label="handles"),
        )
    ),
    "gl_restore_ack": PyLayout(
        (
            _p("restore_seq", c="reclaim_seq"),
            _p("gpu"),
            _p("restored", c="released"),
            _p("ok", "bool", "True"),
            _p("err", "int", "0"),
        )
    ),
}
"""The Python class of each payload struct (or alias) that needs more than the default."""

RECORDS: Final[dict[str, PyRecord]] = {
    "gl_mem_handle": PyRecord(
        "MemHandle",
        "One memory-handle table entry (an RM memory object added or freed).",
        (
            _p("h_client"),
            _p("h_parent"),
            _p("h_memory"),
            _p("h_class"),
            _p("gpu", "int", "GPU_UNKNOWN"),
            _p("flags", "int", "MEM_ADDED"),
            _p("size", "int", "0"),
        ),
    ),
    "gl_handle_span": PyRecord(
        "HandleSpan",
        "One OFFLINE_HANDLES entry: the KV blocks of one request inside one page handle."
        " ``handle`` is the page's device virtual address (what the shim saw in ``cuMemMap``);"
        " an entry with no request and no blocks says the handle exists and holds nothing.",
        (
            _p("handle"),
            _p("size"),
            _p("request_id", "str", '""'),
            _p("tokens", "int", "0"),
            _p("block_ids", "tail", "()", count="nblocks", of=U32, label="block ids"),
        ),
    ),
    "gl_page_group": PyRecord(
        "PageGroup",
        "Pages that hold the same spans (an OFFLINE_PAGE_GROUPS record). No spans and not"
        " quarantined: empty pages; ``quarantined``: reclaimed earlier, restorable, no spans.",
        (
            _p("page_bytes"),
            _p("pages", "tail", count="npages", of=U64, label="pages"),
            _p("spans", "tail", "()", count="nspans", of="gl_group_span", label="spans"),
            _p(
                "quarantined",
                "flag",
                "False",
                c="gflags",
                bit="GL_PAGE_GROUP_QUARANTINED",
                excludes="spans",
            ),
        ),
        named_tuple=True,
    ),
    "gl_group_span": PyRecord(
        "GroupSpan",
        "One request's blocks in every page of a ``PageGroup``; ``tokens`` is what the"
        " request recomputes if any page of the group is lost.",
        (
            _p("request_id", "str"),
            _p("tokens"),
            _p("block_ids", "tail", count="nblocks", of=U32, label="block ids"),
        ),
        named_tuple=True,
    ),
}
"""The Python class of each fixed entry of a variable payload."""


def camel(name: str) -> str:
    """``OFFLINE_PAGE_GROUPS`` → ``OfflinePageGroups``: a message's Python class name."""
    return "".join(part.capitalize() for part in name.split("_"))


# --- The table as one value (the module-level names are its default instance) ------------


@dataclass(frozen=True)
class Table:
    """The whole protocol declaration. The generators (:mod:`gleaner.protocol.cheader`,
    :mod:`gleaner.protocol.pygen`) read a table, by default :data:`TABLE`; a copy with one
    more message renders a header and a codec with that message."""

    messages: tuple[MessageSpec, ...]
    const_groups: tuple[ConstGroup, ...]
    structs: tuple[StructSpec, ...]
    aliases: tuple[Alias, ...]
    aliases_doc: str
    layouts: dict[str, PyLayout]
    records: dict[str, PyRecord]

    def groups(self) -> tuple[ConstGroup, ...]:
        """The constant groups, the message types filled in from :attr:`messages`."""
        out: list[ConstGroup] = []
        for g in self.const_groups:
            if g.from_messages:
                items = (
                    *(
                        _u(f"GL_MSG_{m.name}", m.type_id, f"{m.sender}: {m.summary}")
                        for m in self.messages
                    ),
                    _u("GL_MSG_MAX", max(m.type_id for m in self.messages)),
                )
                g = ConstGroup(g.comment, items, g.enum, g.prefix, g.doc)
            out.append(g)
        return tuple(out)

    def constants(self) -> dict[str, int]:
        """Every ``#define GL_*`` number, by its C name."""
        return {c.name: c.value for group in self.groups() for c in group.items}

    def struct_spec(self, name: str) -> StructSpec:
        """The struct ``name`` (an alias gives the struct it names)."""
        target = next((a.of for a in self.aliases if a.name == name), name)
        for s in self.structs:
            if s.name == target:
                return s
        raise KeyError(name)

    def count(self, field: Field) -> int:
        """How many elements a field holds (1 for a scalar)."""
        known = self.constants()
        n = 1
        for d in field.dims:
            n *= known[d] if d in known else int(d)
        return n

    def c_layout(self, struct: str | StructSpec) -> tuple[tuple[tuple[str, int], ...], int]:
        """((field, offset), ...) and the size of a struct (by name, or given) under C's
        natural alignment.

        Raises ValueError where C would pad implicitly (the Python format would then differ)."""
        s = self.struct_spec(struct) if isinstance(struct, str) else struct
        name = s.name
        offset, widest, out = 0, 1, []
        for f in s.fields:
            size = CTYPES[f.ctype][0]
            if offset % size:
                raise ValueError(f"{name}.{f.name}: offset {offset} is not {size}-aligned")
            out.append((f.name, offset))
            offset += size * self.count(f)
            widest = max(widest, size)
        if offset % widest:
            raise ValueError(f"{name}: size {offset} is not a multiple of {widest}")
        return tuple(out), offset

    def fmt(self, name: str, upto: str | None = None) -> str:
        """The little-endian ``struct`` format of struct ``name`` for the Python codec:
        padding fields are ``x``, a ``char`` array is one ``s``, other arrays a repeat count.
        ``upto``: only the fields up to that one (a head read in place)."""
        fields = self.struct_spec(name).fields
        if upto is not None:
            fields = fields[: [f.name for f in fields].index(upto) + 1]
        parts = ["<"]
        for f in fields:
            size, code = CTYPES[f.ctype]
            n = self.count(f)
            if f.pad:
                parts.append(f"{size * n}x")
            elif code == "s":
                parts.append(f"{n}s")
            else:
                parts.append(f"{n}{code}" if n > 1 else code)
        return "".join(parts)


TABLE: Final = Table(MESSAGES, CONSTANTS, STRUCTS, ALIASES, ALIASES_DOC, LAYOUTS, RECORDS)
"""This protocol's table."""


def constants() -> dict[str, int]:
    """Every ``#define GL_*`` number, by its C name."""
    return TABLE.constants()


def struct_spec(name: str) -> StructSpec:
    """The struct ``name`` (an alias gives the struct it names)."""
    return TABLE.struct_spec(name)


def c_layout(struct: str | StructSpec) -> tuple[tuple[tuple[str, int], ...], int]:
    """:meth:`Table.c_layout` of this protocol's table."""
    return TABLE.c_layout(struct)


def fmt(name: str, upto: str | None = None) -> str:
    """:meth:`Table.fmt` of this protocol's table."""
    return TABLE.fmt(name, upto)
