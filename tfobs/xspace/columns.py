"""A plane's events decoded in bulk from their raw bytes: numpy columns, no per-event objects.

Reduction speed is decided by how often Python touches an event or a stat: building a
protobuf wrapper for each of a capture's tens of thousands of events and hundreds of
thousands of stats costs many times the parse itself. So the reader parses lines with
their events left unread (`schema.XLineLite`; `LineBytes`), and this module walks the wire
format of all of a plane's events at once, one field per event per numpy round: metadata
ids, offsets and durations, stopping at each event's first stat. Stat records are walked
and decoded the same way, only for the events and stats an analysis asks for (most
events are never asked: a capture has several stats per event). Varints are decoded
eight bytes at a time as one uint64 each. Malformed bytes raise `CaptureError`, as a
failed parse would; an event's stats are checked when they are read.

Where the compiled module `_wire` was built (setup.py; it needs a C compiler at install),
the same walks run as one loop each in C: the numpy code below is then used only for what
those loops hand back (layouts they do not take), and everywhere `_wire` is missing.
The module also holds the analyses' own per-event loops (step grouping, the breakdown's
sweep and gaps, the op table's nesting); each analysis calls its loop through `wire()` and
runs its numpy code where that is None.
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError, EncodeError

from tfobs.errors import CaptureError
from tfobs.xspace import schema

try:  # the compiled walks; numpy alone where they were not built (same results)
    from tfobs.xspace import _wire
except ImportError:  # pragma: no cover - depends on the install
    _wire = None  # type: ignore[assignment]

_U64 = np.uint64
_PAD = 16  # zero bytes after the data: a varint read past the end stops there
_MAX_FIELD = 2**29 - 1
_STATS_TAG = 0x22  # XEvent.stats: field 4, length-delimited
_CONT = _U64(0x8080808080808080)  # the continuation bit of each of eight bytes
_BYTE_ONES = _U64(0x0101010101010101)
_DATA = _U64(0x7F7F7F7F7F7F7F7F)
# (low halves, high halves, shift): each round joins neighbouring groups of data bits.
_SQUEEZE = tuple((_U64(lo), _U64(hi), _U64(shift)) for lo, hi, shift in (
    (0x007F007F007F007F, 0x7F007F007F007F00, 1),
    (0x00003FFF00003FFF, 0x3FFF00003FFF0000, 2),
    (0x000000000FFFFFFF, 0x0FFFFFFF00000000, 4)))

# XStat value fields: field number -> wire type (double is fixed64, strings length-delimited).
_STAT_WIRE = {2: 1, 3: 0, 4: 0, 5: 2, 6: 2, 7: 0}
KIND_NONE, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = (
    0, 2, 3, 4, 5, 6, 7)
# The wire type of each field number of a stat's value (-1: not a value field).
_WIRE_OF = np.full(32, -1, np.int8)
for _number, _wire_type in _STAT_WIRE.items():
    _WIRE_OF[_number] = _wire_type
# The value kind of each one-byte tag of a varint value field (int64, uint64, ref); else 0.
_VARINT_KIND = np.zeros(256, np.int8)
for _number, _wire_type in _STAT_WIRE.items():
    if _wire_type == 0:
        _VARINT_KIND[_number << 3] = _number


def _bad(what: str) -> CaptureError:
    return CaptureError(f"not a readable XSpace capture: malformed {what}")


def _words(buf: np.ndarray) -> np.ndarray:
    """The eight bytes starting at each position of buf, as little-endian uint64 (a view)."""
    words: np.ndarray = np.ndarray((buf.size - 7,), "<u8", buffer=buf, strides=(1,))
    return words


def _count_continuations(cont: np.ndarray) -> np.ndarray:
    """Set bits of `cont` (only bit 7 of each byte may be set). `np.bitwise_count` (NumPy
    2, one pass) where there is one; else move them to bit 0 of each byte, and one
    multiply sums the eight bytes into the top one (uint64 products wrap, as the trick
    needs)."""
    counts: np.ndarray
    if _BITWISE_COUNT is not None:
        counts = _BITWISE_COUNT(cont).astype(np.int64)
    else:
        counts = (((cont >> _U64(7)) * _BYTE_ONES) >> _U64(56)).astype(np.int64)
    return counts


_BITWISE_COUNT = getattr(np, "bitwise_count", None)


def compiled() -> bool:
    """Whether the compiled walks (`_wire`) are in use."""
    return _wire is not None


def wire() -> ModuleType | None:
    """The compiled module (`_wire.c`: the wire walks here, and the analyses' per-event
    loops, whose wrappers live with each analysis); None where it was not built."""
    return _wire


def _varint(buf: np.ndarray, p: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint64, byte lengths) of the varints starting at positions p."""
    if _wire is not None:
        p = np.ascontiguousarray(p, np.int64)
        x, n = np.empty(p.size, _U64), np.empty(p.size, np.int64)
        if not _wire.varints(buf, p, x, n):
            raise _bad(what)
        return x, n
    return _np_varint(buf, p, what)


def _np_varint(buf: np.ndarray, p: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """`_varint` in numpy."""
    b = buf[p]
    more = b >= 0x80
    if not more.any():
        return b.astype(_U64), np.ones(p.shape, np.int64)
    short = _short_varint(buf, p, b, more)
    if short is not None:
        return short
    # All at once, eight bytes per varint as one uint64 (times in ps take 5-8 bytes): keep
    # the bytes up to the first one without the continuation bit, then squeeze out the
    # continuation bits, pairs of 7-bit groups, then of 14-bit, then of 28-bit groups.
    # In place where it can be, on three scratch arrays: a reduction decodes a few hundred
    # thousand varints, and fresh temporaries cost more than the arithmetic.
    w = _words(buf)[p]
    term = np.invert(w)
    term &= _CONT
    long = np.flatnonzero(term == 0)  # no terminating byte in the first eight
    low = np.negative(term)
    low &= term  # the lowest terminating bit
    low -= _U64(1)
    w &= low  # the varint's own bytes (all eight where it is longer)
    n = _count_continuations(np.bitwise_and(w, _CONT, out=term))
    n += 1
    x = w
    x &= _DATA
    for lo, hi, shift in _SQUEEZE:
        high = np.bitwise_and(x, hi, out=low)
        high >>= shift
        x &= lo
        x |= high
    if long.size:  # 9 or 10 bytes (negative int64s): the last bytes one by one
        last = buf[p[long] + 8]
        x[long] |= (last & 0x7F).astype(_U64) << _U64(56)
        more = last >= 0x80
        tail = buf[p[long[more]] + 9]
        if (tail >= 0x80).any():
            raise _bad(what)
        x[long[more]] |= (tail & 0x7F).astype(_U64) << _U64(63)
        n[long[more]] += 1
    return x, n


def _short_varint(buf: np.ndarray, p: np.ndarray, b: np.ndarray,
                  more: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`_varint` where every varint has one or two bytes (metadata ids, lengths), on
    small integer types: a third of the numpy passes of the general decoding. None when
    some varint is longer."""
    if buf[p[more.argmax()] + 1] >= 0x80:  # the first long one is longer: not worth a pass
        return None
    b2 = buf[p + 1]
    b2 &= more.view(np.uint8) * np.uint8(0xFF)  # second bytes only where there is one
    if (b2 >= 0x80).any():
        return None
    x = b2.astype(_U64)
    x <<= _U64(7)
    x |= b & np.uint8(0x7F)
    return x, more + np.int64(1)


def _tail(buf: np.ndarray, msg: int, p: int, end: int, what: str) -> Fields:
    """Every remaining field of one message, parsed in Python (see TAIL_MESSAGES)."""
    data = buf[p:end].tobytes()
    fields: list[int] = []
    wires: list[int] = []
    values: list[int] = []
    poss: list[int] = []
    sizes: list[int] = []
    i, n = 0, len(data)
    while i < n:
        tag, i = _py_varint(data, i, what)
        wire, field = tag & 7, tag >> 3
        if field == 0 or field > _MAX_FIELD:
            raise _bad(what)
        value = size = 0
        if wire == 0:
            pos = i
            value, i = _py_varint(data, i, what)
        elif wire == 2:
            size, i = _py_varint(data, i, what)
            if size > 2**31:
                raise _bad(what)
            pos, i = i, i + size
        elif wire == 1:
            pos, value, i = i, int.from_bytes(data[i:i + 8], "little"), i + 8
        elif wire == 5:
            pos, i = i, i + 4
        else:
            raise _bad(what)  # group wire types: never written in an XSpace
        fields.append(field)
        wires.append(wire)
        values.append(value)
        poss.append(pos)
        sizes.append(size)
    if i > n:
        raise _bad(what)
    return Fields(np.full(len(fields), msg, np.int64), np.array(fields, np.int64),
                  np.array(wires, np.int8), np.array(values, _U64),
                  np.array(poss, np.int64) + p, np.array(sizes, np.int64))


def _py_varint(data: bytes, i: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise _bad(what)
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, i
        shift += 7


def _fixed64(buf: np.ndarray, p: np.ndarray) -> np.ndarray:
    values: np.ndarray = buf[p[:, None] + np.arange(8)].copy().view("<u8").ravel()
    return values


class Fields:
    """One round of a walk: the next field of each message still open (message order)."""

    __slots__ = ("msg", "field", "wire", "value", "pos", "size")

    def __init__(self, msg: np.ndarray, field: Any, wire: Any, value: Any, pos: np.ndarray,
                 size: np.ndarray) -> None:
        self.msg, self.field, self.wire = msg, field, wire
        self.value, self.pos, self.size = value, pos, size  # varint/fixed64; payload span


# A walk whose open messages drop to this few after TAIL_ROUNDS rounds finishes them one by
# one in Python: a round costs tens of microseconds of numpy overhead however few messages
# it holds, so one event with a million stats would otherwise take a million rounds.
TAIL_MESSAGES = 8
TAIL_ROUNDS = 64


def walk(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, what: str, run_tag: int = 0,
    stop_tag: int = 0, stopped: np.ndarray | None = None, max_rounds: int = 2**62,
    tail: bool = False,
) -> list[Fields]:
    """Every field of the messages buf[start[k]:end[k]], one `Fields` per field position.

    Varints and fixed64 values land in `value`; length-delimited payloads in `pos`/`size`.
    Round j holds the j-th field of every message that has one, so a message's fields
    come in wire order across the rounds (the last occurrence of a field wins, as in
    protobuf). A round where every field is a record with the one-byte tag `run_tag` has
    `field`, `wire` and `value` None. A message whose next tag byte is `stop_tag` is left
    there: `stopped[k]` gets that position (else it keeps its value). At most `max_rounds`
    rounds are taken. With `tail`, the last few long messages may end as one `Fields` each
    holding all their remaining fields in wire order (for callers that need each message's
    fields in order, not the round numbers).
    """
    msgs = np.flatnonzero(start < end)
    p, e = start[msgs], end[msgs]
    rounds: list[Fields] = []
    while msgs.size and len(rounds) < max_rounds:
        if tail and not stop_tag and msgs.size <= TAIL_MESSAGES and len(rounds) >= TAIL_ROUNDS:
            rounds.extend(_tail(buf, int(k), int(a), int(b), what)
                          for k, a, b in zip(msgs, p, e, strict=True))
            break
        t = buf[p]
        if stop_tag:
            stop = t == stop_tag
            if stop.any():
                stopped[msgs[stop]] = p[stop]  # type: ignore[index]
                keep = ~stop
                msgs, p, e, t = msgs[keep], p[keep], e[keep], t[keep]
                if not msgs.size:
                    break
        if run_tag and not (t != run_tag).any():
            # Fast path for a run of short records of one field (an event's stats): the
            # same as below with the tag and a one-byte length known.
            ln = buf[p + 1]
            if not (ln >= 0x80).any():
                pos = p + 2
                p = pos + ln
                if (p > e).any():
                    raise _bad(what)
                rounds.append(Fields(msgs, None, None, None, pos, ln.astype(np.int64)))
                more = p < e
                if not more.all():
                    msgs, p, e = msgs[more], p[more], e[more]
                continue
        if (t >= 0x80).any():
            tag, n = _varint(buf, p, what)
            p = p + n
        else:
            tag = t.astype(_U64)
            p = p + 1
        wire = (tag & _U64(7)).astype(np.int8)
        number = tag >> _U64(3)  # tested unsigned: a 10-byte tag must not wrap negative
        if ((number == 0) | (number > _U64(_MAX_FIELD))).any():
            raise _bad(what)
        field = number.astype(np.int64)
        value = np.zeros(msgs.size, _U64)
        size = np.zeros(msgs.size, np.int64)
        pos = p.copy()
        is_len = wire == 2
        if is_len.all():  # the common case: a run of stat records
            lb = buf[p]
            if (lb >= 0x80).any():
                ln, n = _varint(buf, p, what)
            else:
                ln, n = lb.astype(_U64), np.ones(p.size, np.int64)
            if (ln > _U64(2**31)).any():
                raise _bad(what)
            size = ln.astype(np.int64)
            pos = p + n
            p = pos + size
        elif not wire.any():  # varints only (an event's id, offset, duration)
            value, n = _varint(buf, p, what)
            p = p + n
        else:
            i0 = np.flatnonzero(wire == 0)
            if i0.size:
                v, n = _varint(buf, p[i0], what)
                value[i0] = v
                p[i0] += n
            i2 = np.flatnonzero(is_len)
            if i2.size:
                ln, n = _varint(buf, p[i2], what)
                if (ln > _U64(2**31)).any():
                    raise _bad(what)
                size[i2] = ln.astype(np.int64)
                pos[i2] = p[i2] + n
                p[i2] = pos[i2] + size[i2]
            i1 = np.flatnonzero(wire == 1)
            if i1.size:
                value[i1] = _fixed64(buf, p[i1])
                p[i1] += 8
            i5 = np.flatnonzero(wire == 5)
            p[i5] += 4
            if i0.size + i1.size + i2.size + i5.size != msgs.size:
                raise _bad(what)  # group wire types: never written in an XSpace
        if (p > e).any():
            raise _bad(what)
        rounds.append(Fields(msgs, field, wire, value, pos, size))
        more = p < e
        if not more.all():
            msgs, p, e = msgs[more], p[more], e[more]
    return rounds


def _buffer(raw: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lens = np.fromiter(map(len, raw), np.int64, len(raw))
    end = np.cumsum(lens)
    raw.append(bytes(_PAD))  # joined with the data: one copy of the plane's bytes, not two
    try:
        buf = np.frombuffer(b"".join(raw), np.uint8)
    finally:
        raw.pop()
    return buf, end - lens, end


class LineBytes:
    """One plane's lines serialized whole, and how many events each holds.

    The light schema (`schema.XLineLite`) leaves a line's events as its unknown fields:
    protobuf holds their bytes in one piece and writes them back with the line, so the
    events are found here by the compiled walk in one buffer, never as a Python object
    each. Counting them decodes no event (the capture-size check reads the counts first).
    Where the walk is not built, or refuses a line, protobuf reads each line's events as
    bytes (`schema.XLineEvents`) instead.
    """

    def __init__(self, lines: Any) -> None:
        try:
            raw = [line.SerializeToString() for line in lines]
        except EncodeError as exc:  # never bad bytes here: see schema.out_of_memory
            raise MemoryError(f"serializing a capture's lines: {exc}") from None
        self.buf, self.lstart, self.lend = _buffer(raw)
        self.counts: list[int] = []
        # Each line's events as bytes, where protobuf read them (no compiled walk).
        self.events: list[Any] | None = None
        if _wire is not None:
            counts = np.zeros(len(raw), np.int64)
            if _wire.line_event_counts(self.buf, self.lstart, self.lend, counts):
                self.counts = counts.tolist()
                return
        try:
            self.events = [schema.XLineEvents.FromString(r).events for r in raw]
        except (DecodeError, RuntimeError, ValueError) as exc:
            if schema.out_of_memory(exc):
                raise MemoryError(f"reading a capture's lines: {exc}") from None
            raise CaptureError(f"not a readable XSpace capture: a line's events: {exc}"
                               ) from None
        self.counts = [len(e) for e in self.events]

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buffer, start, end): each event's payload span, lines in order."""
        n = sum(self.counts)
        if self.events is None:
            start, end = np.empty(n, np.int64), np.empty(n, np.int64)
            if _wire.line_events(self.buf, self.lstart, self.lend, start, end) == n:
                return self.buf, start, end
            raise _bad("line")  # the count walk read these very bytes: never here
        return _buffer([e for events in self.events for e in events])


class StatBatch:
    """Decoded XStat records: metadata id, value kind and raw value, per record."""

    __slots__ = ("buf", "event", "mid", "kind", "value", "pos", "size")

    def __init__(self, buf: np.ndarray, event: np.ndarray, pos: np.ndarray,
                 size: np.ndarray) -> None:
        n = event.size
        self.buf, self.event = buf, event
        if n and self._varints(pos, size):
            return
        self.mid = np.zeros(n, np.int64)
        self.kind = np.zeros(n, np.int8)
        self.value = np.zeros(n, _U64)
        self.pos = np.zeros(n, np.int64)
        self.size = np.zeros(n, np.int64)
        slow = self._canonical(pos, size)
        if slow.size:
            self._general(slow, pos[slow], size[slow])

    def _varints(self, pos: np.ndarray, size: np.ndarray) -> bool:
        """Decode records that are all a one-byte id then one varint value (integers and
        refs: the stats that link events), as `_canonical` would, in a third of its numpy
        calls. False, decoding nothing, when any record is laid out otherwise."""
        if _wire is not None:
            count = pos.size
            mid, kind = np.empty(count, np.int64), np.empty(count, np.int8)
            value, at = np.empty(count, _U64), np.empty(count, np.int64)
            if not _wire.stat_varints(self.buf, np.ascontiguousarray(pos, np.int64),
                                      np.ascontiguousarray(size, np.int64), _VARINT_KIND,
                                      mid, kind, value, at):
                return False
            self.mid, self.kind, self.value = mid, kind, value
            self.pos, self.size = at, np.zeros(count, np.int64)
            return True
        buf = self.buf
        at = pos + 1  # the id byte, then the value's tag, then the value
        mid = buf[at]
        at += 1
        kind = _VARINT_KIND[buf[at]]
        at += 1
        # (size < 4: no value byte inside the record; its next bytes are not read as one.)
        if ((size < 4) | (buf[pos] != 0x08) | (mid >= 0x80) | (kind == KIND_NONE)).any():
            return False
        value, n = _varint(buf, at, "event stat")
        n -= size
        if (n != -3).any():  # the value must end the record
            return False
        self.mid = mid.astype(np.int64)
        self.kind, self.value = kind, value
        self.pos, self.size = at, np.zeros(pos.size, np.int64)
        return True

    def _canonical(self, pos: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Decode records laid out as writers lay them out: id < 128 first, then one value.

        Returns the records that are not (decoded in general by `_general`). All value
        kinds at once: one varint pass for every varint and length (wire 0 and 2), one
        fixed64 read for doubles, no per-kind selection.
        """
        buf, end = self.buf, pos + size
        ok = (size >= 3) & (buf[pos] == 0x08)
        ok &= buf[np.where(ok, pos + 1, 0)] < 0x80
        every = bool(ok.all())
        idx = np.arange(pos.size) if every else np.flatnonzero(ok)
        p = pos if every else pos[idx]
        stop = end if every else end[idx]
        tag = buf[p + 2]
        number, wire = (tag >> 3).astype(np.int8), (tag & 7).astype(np.int8)
        valid = _WIRE_OF[number] == wire
        at = p + 3
        value = np.zeros(p.size, _U64)
        payload = at.copy()
        length = np.zeros(p.size, np.int64)
        fit = np.zeros(p.size, bool)
        fixed = np.flatnonzero(valid & (wire == 1))
        if fixed.size:
            value[fixed] = _fixed64(buf, at[fixed])
            fit[fixed] = at[fixed] + 8 == stop[fixed]
        var = valid & (wire != 1)
        iv = np.arange(p.size) if var.all() else np.flatnonzero(var)
        if iv.size:
            v, n = _varint(buf, at[iv], "event stat")
            value[iv] = v
            is_len = wire[iv] == 2
            ln = np.where(is_len, np.minimum(v, _U64(2**31)).astype(np.int64), 0)
            payload[iv] = np.where(is_len, at[iv] + n, at[iv])
            length[iv] = ln
            fit[iv] = at[iv] + n + ln == stop[iv]
        done = valid & fit
        if every and done.all():
            self.mid = buf[pos + 1].astype(np.int64)
            self.kind = number
            self.value, self.pos, self.size = value, payload, length
            return np.zeros(0, np.int64)
        rec = idx[done]
        self.mid[rec] = buf[p[done] + 1]
        self.kind[rec] = number[done]
        self.value[rec] = value[done]
        self.pos[rec] = payload[done]
        self.size[rec] = length[done]
        ok[idx[~done]] = False
        return np.flatnonzero(~ok)

    def _general(self, recs: np.ndarray, pos: np.ndarray, size: np.ndarray) -> None:
        mid = np.zeros(recs.size, _U64)
        for f in walk(self.buf, pos, pos + size, "event stat"):
            sel = (f.field == 1) & (f.wire == 0)
            mid[f.msg[sel]] = f.value[sel]
            for number, wire in _STAT_WIRE.items():
                sel = (f.field == number) & (f.wire == wire)
                if sel.any():
                    m = recs[f.msg[sel]]
                    self.kind[m] = number
                    self.value[m] = f.value[sel]
                    self.pos[m] = f.pos[sel]
                    self.size[m] = f.size[sel]
        self.mid[recs] = mid.view(np.int64)

    def numbers(self) -> np.ndarray:
        """Each value as a signed 64-bit integer; 0 where it has none (strings, NaN, huge)."""
        out = np.zeros(self.kind.size, np.int64)
        kind, value = self.kind, self.value
        sel = kind == KIND_INT64
        out[sel] = value[sel].view(np.int64)
        sel = ((kind == KIND_UINT64) | (kind == KIND_REF)) & (value < _U64(2**63))
        out[sel] = value[sel].view(np.int64)
        sel = np.flatnonzero(kind == KIND_DOUBLE)
        if sel.size:
            d = value[sel].view(np.float64)
            ok = np.isfinite(d) & (np.abs(d) < 2.0**63)
            out[sel[ok]] = d[ok].astype(np.int64)  # truncates toward zero, as int()
        return out

    def pythons(self, records: np.ndarray) -> list[Any]:
        """`python(k)` for each of `records`, numbers converted in bulk."""
        value = self.value[records]
        signed = value.view(np.int64).tolist()
        unsigned = value.tolist()
        double = value.view(np.float64).tolist()
        out: list[Any] = []
        for j, (k, kind) in enumerate(zip(records.tolist(), self.kind[records].tolist(),
                                          strict=True)):
            if kind == KIND_INT64:
                out.append(signed[j])
            elif kind in (KIND_UINT64, KIND_REF):
                out.append(unsigned[j])
            elif kind == KIND_DOUBLE:
                out.append(double[j])
            else:
                out.append(self.python(k))
        return out

    def python(self, k: int) -> Any:
        """Record k's value as the protobuf accessor returns it (a ref stays an int)."""
        kind = int(self.kind[k])
        if kind == KIND_NONE:
            return None
        if kind == KIND_INT64:
            return int(self.value[k:k + 1].view(np.int64)[0])
        if kind == KIND_DOUBLE:
            return float(self.value[k:k + 1].view(np.float64)[0])
        if kind in (KIND_UINT64, KIND_REF):
            return int(self.value[k])
        raw = self.buf[self.pos[k]:self.pos[k] + self.size[k]].tobytes()
        return raw.decode("utf-8", "replace") if kind == KIND_STR else raw


def _canonical_events(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(mid, offset, duration, stats_at) of events laid out as protobuf serializers write
    them: metadata id, then offset and duration if not zero, then stats or nothing.

    The same columns the general walk gives, in fewer numpy passes (no per-field
    selection); None when any event is laid out otherwise (the walk decodes those).
    """
    n = start.size
    if _wire is not None:
        mid, offset, duration = np.empty(n, _U64), np.empty(n, _U64), np.empty(n, _U64)
        stats_at = np.empty(n, np.int64)
        if _wire.events(buf, start, end, mid, offset, duration, stats_at):
            return mid, offset, duration, stats_at
        return None
    if not n or (start >= end).any() or (buf[start] != 0x08).any():
        return None
    mid, size = _varint(buf, start + 1, "event")
    p = start + 1 + size
    columns = []
    for tag in (0x10, 0x18):  # offset_ps, duration_ps: absent when zero
        has = (p < end) & (buf[p] == tag)
        if has.all():  # the usual case: no selection needed
            column, size = _varint(buf, p + 1, "event")
            p += 1 + size
        else:
            column = np.zeros(n, _U64)
            at = np.flatnonzero(has)
            if at.size:
                value, size = _varint(buf, p[at] + 1, "event")
                column[at] = value
                p[at] += 1 + size
        columns.append(column)
    if (p > end).any():
        return None
    rest = p < end
    if (buf[p[rest]] != _STATS_TAG).any():
        return None  # another field, or a field again: the walk decides what wins
    return mid, columns[0], columns[1], np.where(rest, p, end)


class PlaneEvents:
    """All events of one plane's lines: times decoded in bulk, stats only on demand.

    `mid`, `offset`, `duration`: int64 per event; `line_start[j]:line_start[j + 1]` are
    line j's events in stored order. Writers put an event's metadata id, offset and
    duration before its stats (field-number order, as protobuf's serializers do), so the
    bulk walk stops at each event's first stat record, `stats_at[k]`: most events are
    never asked for their stats, and a capture has several stats per event. `stats_of`
    and `nth_stats` walk the stat records of only the events they are given.
    """

    def __init__(self, lines: Any) -> None:
        """`lines`: a plane's `LineBytes`, or its line messages."""
        read = lines if isinstance(lines, LineBytes) else LineBytes(lines)
        self.line_start = [0, *itertools.accumulate(read.counts)]
        n = self.line_start[-1]
        buf, start, end = read.spans()
        self.buf, self.start, self.end = buf, start, end
        fast = _canonical_events(buf, start, end)
        if fast is not None:
            mid, offset, duration, self.stats_at = fast
            self.mid = mid.view(np.int64)
            self.offset = offset.view(np.int64)
            self.duration = duration.view(np.int64)
            return
        self.stats_at = end.copy()
        mid = np.zeros(n, _U64)
        offset = np.zeros(n, _U64)
        duration = np.zeros(n, _U64)
        for f in walk(buf, start, end, "event", stop_tag=_STATS_TAG, stopped=self.stats_at):
            varint = f.wire == 0
            for number, column in ((1, mid), (2, offset), (3, duration)):
                sel = varint & (f.field == number)
                if sel.any():
                    column[f.msg[sel]] = f.value[sel]
            sel = varint & (f.field == 5)  # num_occurrences shares a oneof with offset_ps
            if sel.any():
                offset[f.msg[sel]] = 0
            sel = (f.wire == 2) & (f.field == 4)
            if sel.any():  # a stat behind an unusual (multi-byte) tag: walk the whole event
                self.stats_at[f.msg[sel]] = start[f.msg[sel]]
        self.mid = mid.view(np.int64)
        self.offset = offset.view(np.int64)
        self.duration = duration.view(np.int64)

    def __len__(self) -> int:
        return self.start.size

    def event(self, k: int) -> Any:
        """Event k as a full protobuf XEvent (for the few events read in detail)."""
        return schema.XEvent.FromString(self.buf[self.start[k]:self.end[k]].tobytes())

    def _stat_rounds(self, events: np.ndarray, max_rounds: int = 2**62,
                     tail: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]]:
        """(position in `events`, payload pos, size, whole round) of stat records, by round.

        "Whole round": every field of the round is a stat record. With `tail` (see `walk`)
        the last rounds may hold several records of one event, in stored order.
        """
        out = []
        for f in walk(self.buf, self.stats_at[events], self.end[events], "event stat",
                      run_tag=_STATS_TAG, max_rounds=max_rounds, tail=tail):
            if f.field is None:  # a run of stat records
                out.append((f.msg, f.pos, f.size, True))
                continue
            sel = (f.wire == 2) & (f.field == 4)
            out.append((f.msg[sel], f.pos[sel], f.size[sel], bool(sel.all())))
        return out

    def _records(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position in `events`, payload pos, size) of every stat record of `events`,
        event by event, in stored order: the compiled walk, counting, then filling."""
        events = np.ascontiguousarray(events, np.int64)
        count = _wire.stat_records(self.buf, self.stats_at, self.end, events, None, None, None)
        if count < 0:
            raise _bad("event stat")
        which, pos, size = (np.empty(count, np.int64) for _ in range(3))
        _wire.stat_records(self.buf, self.stats_at, self.end, events, which, pos, size)
        return which, pos, size

    def int_stats(self, events: np.ndarray, slots: np.ndarray, value: np.ndarray,
                  kind: np.ndarray) -> bool:
        """The compiled `int_stats` walk over `events` (see _wire.c); False where a
        record is laid out otherwise (nothing is then decided)."""
        done = _wire.int_stats(self.buf, self.stats_at, self.end, events, slots, value, kind)
        if done < 0:
            raise _bad("event stat")
        return bool(done)

    def nth_stats(
        self, events: np.ndarray, nths: list[int]
    ) -> list[tuple[StatBatch, np.ndarray]]:
        """For each n in `nths`: the nth stat record of each of `events`, and which have one.

        The walk stops after the last record asked for; an event with other fields among
        its first stats may come out without one (callers decode those in full).
        """
        want = {n: (np.zeros(events.size, np.int64), np.zeros(events.size, np.int64),
                    np.zeros(events.size, bool)) for n in nths}
        count = None  # records seen per event, once some round held other fields
        before = np.zeros(0, np.int64)  # the events of the round before
        for j, (m, pos, size, whole) in enumerate(
                self._stat_rounds(events, max(nths, default=-1) + 1)):
            if count is None and whole:
                # Every round so far held only stat records: they are each event's jth.
                if j in want and m.size == events.size:  # all of them: m is 0, 1, 2, ...
                    want[j] = (pos, size, np.ones(events.size, bool))
                elif j in want:
                    at, length, present = want[j]
                    at[m], length[m], present[m] = pos, size, True
                before = m
                continue
            if count is None:  # events still open had one record in each round so far
                count = np.zeros(events.size, np.int64)
                count[before] = j
            k = count[m]
            count[m] += 1
            for n, (at, length, present) in want.items():
                hit = k == n
                if hit.any():
                    at[m[hit]], length[m[hit]], present[m[hit]] = pos[hit], size[hit], True
        return [(StatBatch(self.buf, events, want[n][0], want[n][1]), want[n][2])
                for n in nths]

    def stats_of(self, events: np.ndarray, mids: np.ndarray | None = None) -> StatBatch:
        """Every stat record of `events`, in stored order within each event.

        With `mids`, records whose metadata id is plainly another one are left out before
        their values are decoded (a record laid out otherwise is always kept).
        """
        return self.stats_by_slot(events, mids)[0]

    def stats_by_slot(self, events: np.ndarray, mids: np.ndarray | None = None,
                      by_event: bool = True) -> tuple[StatBatch, np.ndarray]:
        """`stats_of`, and for each record the position in `events` of its event
        (non-decreasing: an event's records are together). Without `by_event`, records
        come round by round instead, with no sort (an event's records are still in
        stored order among themselves)."""
        if _wire is not None:
            which, pos, size = self._records(events)
            by_event = False  # the compiled walk gives them event by event already
        else:
            rounds = self._stat_rounds(events, tail=True)
            if not rounds:
                none = np.zeros(0, np.int64)
                return StatBatch(self.buf, none, none, none), none
            which = np.concatenate([s[0] for s in rounds])
            pos = np.concatenate([s[1] for s in rounds])
            size = np.concatenate([s[2] for s in rounds])
            del rounds  # large captures: not held while the records are decoded
        if mids is not None:
            # Kept: the wanted one-byte ids, and every record that does not start with a
            # one-byte id (its id is read in full later). The buffer's padding makes
            # pos + 1 readable even for an empty last record.
            buf = self.buf
            table = np.zeros(256, bool)
            table[mids[(mids >= 0) & (mids < 128)]] = True
            table[0x80:] = True
            keep = table[buf[pos + 1]] | (buf[pos] != 0x08) | (size < 3)
            if not keep.all():
                which, pos, size = which[keep], pos[keep], size[keep]
        if not by_event:
            return StatBatch(self.buf, events[which], pos, size), which
        # Records come round by round; sorted by event (stable), each event's are together
        # and in stored order.
        order = np.argsort(which, kind="stable")
        which, pos, size = which[order], pos[order], size[order]
        return StatBatch(self.buf, events[which], pos, size), which
