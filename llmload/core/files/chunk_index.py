"""The chunk-times index: each record's chunk times in whole microseconds, as binary, beside its
records file.

A record's `chunk_times` (256 numbers for a 256-token request) are most of its JSON line and most
of what reading it costs: decoding them makes 256 Python floats that the ITL histogram only turns
back into microseconds. `RecordWriter` therefore writes, for every record it writes, an entry
into `<records file>.chunks`: the line's byte offset and length in the records file, the number
of chunk times, the CRC-32 of the times' bytes, and the times themselves as little-endian int32
microseconds (`round(t * 1e6)`, half to even: the client records them to the microsecond and
`llmload.analysis.run.metrics.chunk_times_us` reads them the same way). The file starts with
`MAGIC`. A record whose times are not finite numbers within +-2147 s gets an entry without
times (count `NO_TIMES`): its line is decoded in full.

The records file stays the truth. The post-processor (`llmload.analysis.run.records_pass`, through
`llmload.core.files.records.iter_indexed_record_lines`) uses an entry only for the line it was written
with: the same offset and length, times whose bytes have the entry's checksum, the same last
time as the line's `chunk_times` list, and an index file at least as new as the records file (a
records file edited after the run is read without its index). Any other line is decoded in
full, as without an index; old runs have none, and an index of the earlier format (magic
`llmload-chunks1`, entries without a checksum) is not read. An entry found for a line whose
checksum or last time disagrees (a damaged disk, an edited index) is `DAMAGED`: the reader decodes
that line in full and the post-processor says so in a warning; the checksum is what catches a
time changed inside an entry whose offset, length and last time still agree.
The index costs 4 bytes a chunk time (~1 GB beside the 2.7 GB of a million 256-token records);
deleting it loses nothing but speed.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MAGIC = b"llmload-chunks2\n"
SUFFIX = ".chunks"
_HEADER = struct.Struct("<qIII")  # the line's offset, its length, the number of chunk times, their CRC-32
_LIMIT_US = 2**31 - 1  # int32 microseconds: +-2147 s after t_start
NO_TIMES = 2**32 - 1  # the count of an entry without times


def index_path(records: Path) -> Path:
    """The index of the records file `records`."""
    return Path(f"{records}{SUFFIX}")


def entry(offset: int, length: int, chunk_times: Any) -> bytes:
    """The index entry of a records line at `offset` of `length` bytes with these chunk times;
    one without times when they are not a list of finite numbers within the int32 microsecond
    range."""
    micros = _micros(chunk_times)
    if micros is None:
        return _HEADER.pack(offset, length, NO_TIMES, 0)
    packed = micros.astype("<i4").tobytes()
    return _HEADER.pack(offset, length, micros.size, zlib.crc32(packed)) + packed


def _micros(chunk_times: Any) -> np.ndarray | None:
    if type(chunk_times) is not list or not set(map(type, chunk_times)) <= _NUMBERS:
        return None
    micros = np.rint(np.asarray(chunk_times, dtype=np.float64) * 1e6)
    if micros.size and not (np.abs(micros) <= _LIMIT_US).all():  # nan: False
        return None
    return micros


_NUMBERS = frozenset({int, float})  # not bool: JSON's true and false are no times
DAMAGED = (-1, b"")  # `ChunkIndex.micros` of a line whose entry fails its checksum


class ChunkIndex:
    """A records file's index, read forward alongside its lines (`micros`), a block at a time
    (mapping it whole would make the pages of a 1 GB index resident)."""

    BLOCK = 1 << 22

    def __init__(self, fh: BinaryIO, unread: int) -> None:
        self._fh = fh
        self._unread = unread  # bytes of the file not yet in the buffer
        self._buffer = b""
        self._at = 0  # the next entry, in the buffer

    @classmethod
    def open(cls, records: Path, start: int = 0) -> ChunkIndex | None:
        """The index of `records`, at its first entry for a line at `start` or later; None when
        there is none, it is not an index, or it is older than the records file."""
        path = index_path(records)
        try:
            if path.stat().st_mtime_ns < records.stat().st_mtime_ns:
                return None
            fh = path.open("rb")
        except OSError:
            return None
        if fh.read(len(MAGIC)) != MAGIC:
            fh.close()
            return None
        index = cls(fh, os.fstat(fh.fileno()).st_size - len(MAGIC))
        index._skip_to(start)
        return index

    def close(self) -> None:
        self._fh.close()

    def _has(self, size: int) -> bool:
        """Whether the next `size` bytes are in the buffer (read from the file when they are not;
        never more than the file holds, whatever size a damaged entry claims)."""
        held = len(self._buffer) - self._at
        if held >= size:
            return True
        if held + self._unread < size:
            return False
        read = self._fh.read(min(max(self.BLOCK, size - held), self._unread))
        self._unread -= len(read)
        self._buffer = self._buffer[self._at :] + read
        self._at = 0
        return len(self._buffer) >= size

    def _skip_to(self, offset: int) -> tuple[int, int, int, int] | None:
        """Move to the first entry for a line at `offset` or later; its header, None at the end."""
        unpack = _HEADER.unpack_from
        while self._has(_HEADER.size):
            header = unpack(self._buffer, self._at)
            if header[0] >= offset:
                return header
            size = _HEADER.size + (0 if header[2] == NO_TIMES else 4 * header[2])
            if not self._has(size):
                return None
            self._at += size
        return None

    def micros(self, offset: int, length: int) -> tuple[int, bytes] | None:
        """(number of chunk times, their int32 microseconds) of the line at `offset` of `length`
        bytes, the lines being asked for in file order; None when the index has no entry for it,
        `DAMAGED` when its entry's times fail their checksum (the entry is passed over)."""
        header = self._skip_to(offset)
        if header is None or header[0] != offset or header[1] != length or header[2] == NO_TIMES:
            return None
        size = _HEADER.size + 4 * header[2]
        if not self._has(size):  # a half-written last entry
            return None
        at = self._at
        self._at = at + size
        micros = self._buffer[at + _HEADER.size : at + size]
        if zlib.crc32(micros) != header[3]:
            return DAMAGED
        return header[2], micros


def last_micros(micros: bytes) -> int:
    """The last of these int32 microseconds (at least one)."""
    return int.from_bytes(micros[-4:], "little", signed=True)
