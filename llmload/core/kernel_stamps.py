"""Kernel receive timestamps of TCP data (Linux `SO_TIMESTAMPNS`): switching them on for a
socket and reading the stamp out of `recvmsg`'s ancillary data.

The kernel stamps every received packet (CLOCK_REALTIME, ns); `recvmsg` returns the stamp of
the last packet the read consumed. The load generator uses it to time server messages when they
arrived, not when it got round to reading them (`llmload.loadgen.transport.receive_stamps`); the simulator
uses it to log when a request reached the server (`llmload.sim.connections`).

The one module of core that imports `socket` (besides the error boundary's `socket.gaierror`), an
exception written in the "I/O at the edges" contract of pyproject.toml: it opens no connection and
sends nothing, it sets an option on a socket its caller made and decodes bytes, and it stays in
core because the simulator, which may import nothing of llmload but a few core helpers, uses it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterable

SO_TIMESTAMPNS = 35  # Linux's SO_TIMESTAMPNS_OLD (= SCM_TIMESTAMPNS); Python does not export it
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)  # the `ancbufsize` of a stamped recvmsg


def enable_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp `sock`'s received data; False where it cannot."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return True
    return False


def stamp_of(ancillary: Iterable[tuple[int, int, bytes]]) -> float | None:
    """Epoch seconds of the receive stamp in `recvmsg`'s ancillary data; None if it holds none."""
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            return float(sec + nsec * 1e-9)
    return None
