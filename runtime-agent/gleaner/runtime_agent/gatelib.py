"""The binding to the native compute gate, ``libgleaner_gate.so`` (ctypes).

Contract. :func:`gate_library` loads the library once and declares its functions (the C
contract is ``runtime-agent/shim/include/gleaner_gate.h``); :class:`GateView` mirrors
``gl_gate_view``, the state every gate exposes in place, and :class:`GateConfigC` mirrors
``gl_gate_config``. The calls hold the GIL (``ctypes.PyDLL``). The typed Python face is
:class:`gleaner.runtime_agent.policy.ComputeGate`; nothing else should call the library.

The library is looked for, in order, at ``$GLEANER_GATE_LIBRARY``, inside the installed
package (``_native/``: the ``gleaner`` wheel carries it, compiled at wheel build time by
``hatch_build.py``; the image installs that wheel), and in the shim's build directory of a
source checkout (``make shim`` builds it; ``scripts/bootstrap.sh``, hence ``make simulate``
and ``make test``, does too; an editable install has no ``_native/``).
:class:`GateLibraryError` says where it looked and how to get the library.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
from collections.abc import Sequence
from pathlib import Path

from gleaner.api.contract import ENV_GATE_LIBRARY

LIBRARY_NAME = "libgleaner_gate.so"
ENV_LIBRARY = ENV_GATE_LIBRARY
PACKAGE_LIBRARY = Path(__file__).resolve().parent / "_native" / LIBRARY_NAME
"""The copy an installed ``gleaner`` wheel carries (``hatch_build.NATIVE_PATH``)."""
CHECKOUT_LIBRARY = Path(__file__).resolve().parents[2] / "shim" / "build" / LIBRARY_NAME
"""``make shim``'s build in a source checkout
(``runtime-agent/gleaner/runtime_agent/gatelib.py`` → ``runtime-agent/shim/build``)."""
ABI = 1
"""``GL_GATE_ABI`` of the header this binding was written against."""

NONE, DISABLE, DISABLE_QUIET, ENABLE = 0, 1, 2, 3
BAD_TIME, NO_MEMORY = -1, -2


class GateLibraryError(RuntimeError):
    """The native gate library could not be loaded."""


class GateConfigC(ctypes.Structure):
    """``gl_gate_config``."""

    _fields_ = [
        ("cool_floor_s", ctypes.c_double),
        ("cool_ceiling_s", ctypes.c_double),
        ("cool_factor", ctypes.c_double),
        ("request_timeout_s", ctypes.c_double),
    ]


class GateView(ctypes.Structure):
    """``gl_gate_view``: a gate's state, read in place."""

    _fields_ = [
        ("now", ctypes.c_double),
        ("idle_since", ctypes.c_double),
        ("enabled_s", ctypes.c_double),
        ("busy_s", ctypes.c_double),
        ("g_max_s", ctypes.c_double),
        ("preemptions", ctypes.c_uint64),
        ("online_requests", ctypes.c_uint64),
        ("max_preemptions_per_request", ctypes.c_uint64),
        ("inflight", ctypes.c_uint64),
        ("finished", ctypes.c_uint64),
        ("gpu", ctypes.c_int32),
        ("enabled", ctypes.c_uint8),
        ("busy", ctypes.c_uint8),
        ("held", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
    ]


def view_memory(view: GateView) -> tuple[memoryview[int], memoryview[float], memoryview[int]]:
    """Byte, double and 64-bit views of a gate's state: a memoryview item is read several
    times faster than a ctypes field (the agent reads ``enabled`` and ``busy`` per edge)."""
    raw = (ctypes.c_char * ctypes.sizeof(GateView)).from_address(ctypes.addressof(view))
    as_bytes = memoryview(raw).cast("B")
    return as_bytes, as_bytes.cast("d"), as_bytes.cast("Q")


# Indices into view_memory's views (a test checks them against GateView).
D_NOW, D_G_MAX = GateView.now.offset // 8, GateView.g_max_s.offset // 8
Q_PREEMPTIONS = GateView.preemptions.offset // 8
Q_ONLINE_REQUESTS = GateView.online_requests.offset // 8
Q_MAX_PREEMPTIONS = GateView.max_preemptions_per_request.offset // 8
Q_FINISHED = GateView.finished.offset // 8
B_ENABLED, B_BUSY, B_HELD = GateView.enabled.offset, GateView.busy.offset, GateView.held.offset


def candidates() -> list[Path]:
    """Where the library is looked for, in order."""
    out: list[Path] = []
    env = os.environ.get(ENV_LIBRARY)
    if env:
        out.append(Path(env))
    out.append(PACKAGE_LIBRARY)
    if CHECKOUT_LIBRARY.parent.parent.is_dir():  # runtime-agent/shim: a source checkout
        out.append(CHECKOUT_LIBRARY)
    return out


@functools.cache
def gate_library() -> ctypes.CDLL:
    """The loaded library with its prototypes declared (loaded on first use)."""
    return load(candidates())


def load(paths: Sequence[Path]) -> ctypes.CDLL:
    """The first of ``paths`` that loads, with its prototypes declared."""
    tried: list[str] = []
    lib: ctypes.CDLL | None = None
    for path in paths:
        if not path.is_file():
            tried.append(f"{path} (absent)")
            continue
        try:
            # PyDLL: the calls keep the GIL (each is a few hundred nanoseconds of C), so a
            # gate is used across threads as a Python object would be: the metrics thread
            # reading a gate never sees the event loop's thread halfway through a change.
            lib = ctypes.PyDLL(str(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        break
    if lib is None:
        raise GateLibraryError(
            f"the native compute gate ({LIBRARY_NAME}) is not installed: install a gleaner "
            "wheel built for this platform (building one from source needs a C compiler and "
            f"make), run `make shim` in a source checkout, or name the library in "
            f"{ENV_LIBRARY}. Looked for: " + "; ".join(tried)
        )
    _declare(lib)
    if lib.gl_gate_abi() != ABI:
        raise GateLibraryError(
            f"{LIBRARY_NAME} at {lib._name} speaks gate ABI {lib.gl_gate_abi()}, this "
            f"Gleaner needs {ABI}: reinstall the gleaner wheel, or rebuild it with `make shim` in "
            "a source checkout"
        )
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    g, d, i, sz = ctypes.c_void_p, ctypes.c_double, ctypes.c_int, ctypes.c_size_t
    name = ctypes.c_char_p
    protos: dict[str, tuple[object, list[object]]] = {
        "gl_gate_abi": (i, []),
        "gl_gate_config_error": (ctypes.c_char_p, [ctypes.POINTER(GateConfigC)]),
        "gl_gate_new": (g, [ctypes.c_int32, ctypes.POINTER(GateConfigC), d]),
        "gl_gate_free": (None, [g]),
        "gl_gate_state": (ctypes.POINTER(GateView), [g]),
        "gl_gate_online_busy": (i, [g, d, name, sz]),
        "gl_gate_finish": (i, [g, d, name, sz]),
        "gl_gate_online_idle": (i, [g, d]),
        "gl_gate_request_done": (i, [g, d, name, sz]),
        "gl_gate_decode_gap": (i, [g, d, d, i]),
        "gl_gate_tick": (i, [g, d]),
        "gl_gate_force_disable": (i, [g, d]),
        "gl_gate_hold": (i, [g, d, i]),
        "gl_gate_cooldown": (d, [g]),
        "gl_gate_next_deadline": (d, [g]),
        "gl_gate_enabled_seconds": (d, [g, d]),
        "gl_gate_busy_seconds": (d, [g, d]),
        "gl_gate_drain_finished": (sz, [g, ctypes.POINTER(ctypes.c_uint32), sz]),
        "gl_gate_inflight_at": (
            i,
            [
                g,
                sz,
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(sz),
                ctypes.POINTER(ctypes.c_uint32),
            ],
        ),
    }
    for fn, (restype, argtypes) in protos.items():
        f = getattr(lib, fn)
        f.restype = restype
        f.argtypes = argtypes


# -- the native gate loop (include/gleaner_gateloop.h) ---------------------------------------

LOOP_ABI = 2
"""``GL_LOOP_ABI`` of the header this binding was written against."""


class LoopStatsC(ctypes.Structure):
    """``gl_loop_stats``."""

    _fields_ = [
        ("edges", ctypes.c_uint64),
        ("lost_edges", ctypes.c_uint64),
        ("wakeups", ctypes.c_uint64),
        ("decisions", ctypes.c_uint64),
        ("log_dropped", ctypes.c_uint64),
        ("state", ctypes.c_uint32),
        ("busy_from_words", ctypes.c_uint32),
    ]


ACCT_BUSY, ACCT_ENABLED, ACCT_PREEMPTION, ACCT_REQUEST = 1, 2, 3, 4
"""``GL_LOOP_ACCT_*``: what an accounting entry of the loop records."""


class LoopAcctC(ctypes.Structure):
    """``gl_loop_acct``: one accounting entry."""

    _fields_ = [
        ("t", ctypes.c_double),
        ("value", ctypes.c_double),
        ("gpu", ctypes.c_int32),
        ("op", ctypes.c_uint32),
    ]


_ACCT_LAYOUT = struct.Struct("=ddiI")
"""``gl_loop_acct`` as bytes: t, value, gpu, op."""
assert _ACCT_LAYOUT.size == ctypes.sizeof(LoopAcctC)


@functools.cache
def loop_library() -> ctypes.CDLL:
    """The gate library again, as ``ctypes.CDLL``: the loop's calls release the GIL (they may
    wait for the loop thread's lock, which never needs Python)."""
    lib = ctypes.CDLL(gate_library()._name, use_errno=True)
    if lib.gl_loop_abi() != LOOP_ABI:
        raise GateLibraryError(
            f"{LIBRARY_NAME} at {lib._name} speaks gate loop ABI {lib.gl_loop_abi()}, this "
            f"Gleaner needs {LOOP_ABI}: reinstall the gleaner wheel, or rebuild it with `make "
            "shim` in a source checkout"
        )
    p, u32, sz, i = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_int
    u64 = ctypes.c_uint64
    protos: dict[str, tuple[object, list[object]]] = {
        "gl_loop_abi": (i, []),
        "gl_loop_start": (p, [p, ctypes.POINTER(GateConfigC)]),
        "gl_loop_stop": (None, [p]),
        "gl_loop_free": (None, [p]),
        "gl_loop_stats_read": (
            i,
            [p, ctypes.POINTER(LoopStatsC), u32, ctypes.POINTER(GateView)],
        ),
        "gl_loop_hold": (i, [p, u32, i]),
        "gl_loop_force_disable": (i, [p, u32]),
        "gl_loop_drain_log": (sz, [p, ctypes.POINTER(LoopAcctC), sz]),
        "gl_loop_drop_source": (None, [p, u32]),
        "gl_loop_edge": (i, [p, u32, u32, u64, u64, u64, u64]),
        "gl_loop_test_kill": (None, [p]),
        "gl_loop_alive": (i, [p]),
    }
    for fn, (restype, argtypes) in protos.items():
        f = getattr(lib, fn)
        f.restype = restype
        f.argtypes = argtypes
    return lib


class GateLoop:
    """The native gate loop on a mapped gate segment (one per agent).

    ``segment_address`` is the agent's own mapping (:attr:`GateSegment.address
    <gleaner.runtime_agent.fastgate.GateSegment.address>`), which must stay mapped until
    :meth:`close`. Slots are the segment's (``k``: the k-th GPU it was created with).
    """

    def __init__(self, segment_address: int, config: GateConfigC) -> None:
        self._lib = loop_library()
        handle = self._lib.gl_loop_start(ctypes.c_void_p(segment_address), ctypes.byref(config))
        if not handle:
            err = ctypes.get_errno()
            raise GateLibraryError(f"the native gate loop could not start ({os.strerror(err)})")
        self._handle: int | None = handle
        self._buf = (LoopAcctC * 1024)()
        self._raw = memoryview(self._buf).cast("B")

    def _h(self) -> int:
        if self._handle is None:
            raise RuntimeError("the native gate loop was closed")
        return self._handle

    def stats(self, slot: int = 0) -> tuple[LoopStatsC, GateView]:
        """The loop's counters and slot ``slot``'s gate state (enabled and busy seconds up to
        now), read under the loop's lock."""
        st, view = LoopStatsC(), GateView()
        if not self._lib.gl_loop_stats_read(self._h(), ctypes.byref(st), slot, ctypes.byref(view)):
            raise IndexError(f"no slot {slot} in the gate segment")
        return st, view

    def hold(self, slot: int, held: bool) -> int:
        """Keep slot ``slot``'s gate closed, or let go; the gate's answer (NONE, ...)."""
        return int(self._lib.gl_loop_hold(self._h(), slot, int(held)))

    def force_disable(self, slot: int) -> int:
        """Close slot ``slot``'s gate without a preemption; the gate's answer."""
        return int(self._lib.gl_loop_force_disable(self._h(), slot))

    def drain_log(self) -> list[tuple[int, float, int, float]]:
        """The accounting entries since the last drain, oldest first: (op, time, GPU, value)
        with op one of ``ACCT_*`` (see ``gl_loop_acct``)."""
        out: list[tuple[int, float, int, float]] = []
        buf, raw, unpack = self._buf, self._raw, _ACCT_LAYOUT.iter_unpack
        size = _ACCT_LAYOUT.size
        while True:
            n = self._lib.gl_loop_drain_log(self._h(), buf, len(buf))
            # One unpack over the copied entries: no ctypes object per entry.
            out += [(op, t, gpu, value) for t, value, gpu, op in unpack(raw[: n * size])]
            if n < len(buf):
                return out

    def drop_source(self, source: int) -> None:
        """Online connection ``source`` went away: its busy periods end now."""
        self._lib.gl_loop_drop_source(self._h(), source)

    def edge(
        self, source: int, kind: int, mask: int, t_ns: int, request: int = 0, gap_ns: int = 0
    ) -> None:
        """An online edge that reached the agent as a frame, from connection ``source`` on the
        slots of ``mask`` at ``t_ns`` (``CLOCK_MONOTONIC``): into the ring with the shims' own
        writer, so the loop gates and accounts it as a shim's (``kind``: ``EDGE_BUSY``,
        ``EDGE_IDLE`` or ``EDGE_GAP`` of :mod:`gleaner.runtime_agent.fastgate`; ``request``
        0: anonymous; ``gap_ns``: a gap edge's decode gap)."""
        if not self._lib.gl_loop_edge(self._h(), source, kind, mask, t_ns, request, gap_ns):
            raise ValueError(f"not an online edge: kind {kind}, slots {mask:#x}")

    @property
    def alive(self) -> bool:
        return self._handle is not None and bool(self._lib.gl_loop_alive(self._handle))

    def test_kill(self) -> None:
        """Test hook: the loop thread ends without a word (its beat stops)."""
        self._lib.gl_loop_test_kill(self._h())

    def stop(self) -> None:
        """Stop the thread; offline gates close (the segment says the loop stopped)."""
        if self._handle is not None:
            self._lib.gl_loop_stop(self._handle)

    def close(self) -> None:
        """Stop and free; idempotent."""
        if self._handle is not None:
            self._lib.gl_loop_free(self._handle)
            self._handle = None
