/* Compiled loops for columns.py: the protobuf wire walks that numpy can only do in rounds.
 *
 * Why C: on a capture of many small events (an RNN's executor events, each with its step
 * and context ids) the numpy walks cost one numpy call per field position per round, and
 * those calls, not the bytes, dominate a reduction. Each function here is one loop over
 * the bytes with the same rules as the numpy code it stands in for (columns.py keeps that
 * code, used where this module was not built, and tests hold the two equal).
 *
 * The same holds for the analyses' loops at the end (step grouping's link index and walk,
 * the breakdown's sweep and gaps, the op table's nesting): per-event work that numpy does
 * in many small passes, each loop equal to the numpy code its analysis keeps (its wrapper
 * is in that analysis: breakdown.py, steps.py, ops.py). Each is kept because it pays on
 * some capture (benchmarks/compiled_loops.py --each).
 *
 * Arrays come in through the buffer protocol (numpy arrays, C-contiguous, dtypes fixed by
 * the Python wrapper), so this module needs no numpy headers and no numpy ABI.
 * Every read is bounds-checked against the buffer; nothing here trusts the capture.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define STATS_TAG 0x22 /* XEvent.stats: field 4, length-delimited */
#define MAX_FIELD ((1ULL << 29) - 1)
#define MAX_LENGTH (1ULL << 31)

/* One varint at b[p] (reading no byte at or past lim): its byte count (1..10), or 0 when
 * it runs past lim or its tenth byte continues. Bits past 64 are dropped, as protobuf
 * drops them (the tenth byte contributes its lowest bit only). */
static inline int varint(const uint8_t *b, Py_ssize_t p, Py_ssize_t lim, uint64_t *out)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= lim)
            return 0;
        uint8_t c = b[p + i];
        x |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = x;
            return i + 1;
        }
    }
    return 0;
}

/* The field at b[*p] of a message ending at e: its number and wire type, and for a
 * length-delimited one its payload's span; *p moves past it. 0 when the bytes break a rule
 * the numpy walk (columns.walk) raises on: a zero or huge field number, a group wire type,
 * a length over 2 GiB, a malformed varint, a field running past the message's end. */
static inline int field_at(const uint8_t *b, Py_ssize_t lim, int64_t *p, int64_t e,
                           uint64_t *number, int *wire, int64_t *payload, int64_t *size)
{
    uint64_t tag, x;
    int m = varint(b, *p, lim, &tag);
    *number = tag >> 3;
    *wire = (int)(tag & 7);
    if (!m || *number == 0 || *number > MAX_FIELD)
        return 0;
    *p += m;
    if (*wire == 2) {
        m = varint(b, *p, lim, &x);
        if (!m || x > MAX_LENGTH)
            return 0;
        *payload = *p + m;
        *size = (int64_t)x;
        *p = *payload + *size;
    } else if (*wire == 0) {
        m = varint(b, *p, lim, &x);
        if (!m)
            return 0;
        *p += m;
    } else if (*wire == 1) {
        *p += 8;
    } else if (*wire == 5) {
        *p += 4;
    } else {
        return 0; /* group wire types: never written in an XSpace */
    }
    return *p <= e;
}

/* The next length-delimited field 4 of a message ending at e (an event's stat record, a
 * line's event), stepping over other fields: 1 with its payload's span, 0 at the message's
 * end, -1 when the bytes break a rule of field_at. */
static inline int next_record(const uint8_t *b, Py_ssize_t lim, int64_t *p, int64_t e,
                              int64_t *payload, int64_t *size)
{
    while (*p < e) {
        uint64_t number;
        int wire;
        if (!field_at(b, lim, p, e, &number, &wire, payload, size))
            return -1;
        if (wire == 2 && number == 4)
            return 1;
    }
    return 0;
}

/* How one argument array is taken: its item size in bytes, whether it is written, and its
 * length in items: ANY whole number, a fixed number (>= 0), or DIM(d) (d = 1..NDIMS - 1), which the
 * first array naming d sets and the others must match. An OPTIONAL one may be None. */
struct arg {
    const char *name;
    int size, writable;
    Py_ssize_t items;
    int optional;
};
#define ANY (-100)
#define NDIMS 8
/* A function's argument count, from its table (never written out by hand). */
#define NARGS(spec) ((int)(sizeof(spec) / sizeof((spec)[0])))
#define DIM(d) (-(d))
#define OPTIONAL 1

static void release(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

/* Every argument's buffer (C-contiguous) as `spec` says, into v; dims[d] gets dimension
 * d's length (-1 if unset). -1 with a Python exception, holding nothing, when an argument
 * is missing, not a buffer, or the wrong size. */
static int take_all(PyObject *args, const struct arg *spec, int count, Py_buffer *v,
                    Py_ssize_t *dims)
{
    if (PyTuple_GET_SIZE(args) != count) {
        PyErr_Format(PyExc_TypeError, "expected %d arrays, got %zd", count,
                     PyTuple_GET_SIZE(args));
        return -1;
    }
    for (int d = 0; d < NDIMS; d++)
        dims[d] = -1;
    for (int i = 0; i < count; i++) {
        const struct arg *a = &spec[i];
        PyObject *obj = PyTuple_GET_ITEM(args, i);
        memset(&v[i], 0, sizeof(Py_buffer)); /* an empty view: releasing it does nothing */
        if (a->optional && obj == Py_None)
            continue;
        int flags = PyBUF_C_CONTIGUOUS | (a->writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj, &v[i], flags)) {
            release(v, i);
            return -1;
        }
        Py_ssize_t items = v[i].len / a->size, want = a->items;
        if (want < 0 && want != ANY) {
            if (dims[-want] < 0)
                dims[-want] = items;
            want = dims[-want];
        }
        if (v[i].len % a->size || (want != ANY && items != want)) {
            PyErr_Format(PyExc_ValueError, "%s: %zd bytes, not %zd items of %d bytes",
                         a->name, v[i].len, want == ANY ? items : want, a->size);
            release(v, i + 1);
            return -1;
        }
    }
    return 0;
}

/* varints(buf, pos, value, length) -> bool: the varint at each of pos (int64) into value
 * (uint64) and its byte count into length (int64); False when one is malformed. */
static PyObject *w_varints(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"pos", 8, 0, DIM(1), 0},
        {"value", 8, 1, DIM(1), 0},
        {"length", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *pos = v[1].buf;
    uint64_t *value = v[2].buf;
    int64_t *length = v[3].buf;
    Py_ssize_t n = dims[1], lim = v[0].len;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int m = pos[k] < 0 ? 0 : varint(b, pos[k], lim, &value[k]);
        if (!m) {
            ok = 0;
            break;
        }
        length[k] = m;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* events(buf, start, end, mid, offset, duration, stats_at) -> bool: the columns of events
 * laid out as protobuf's serializers write them (metadata id, offset and duration when not
 * zero, then stats or nothing), as columns._canonical_events decides them; False, with the
 * columns unspecified, when some event is laid out otherwise (the general walk decides). */
static PyObject *w_events(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"start", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"mid", 8, 1, DIM(1), 0},
        {"offset", 8, 1, DIM(1), 0},
        {"duration", 8, 1, DIM(1), 0},
        {"stats_at", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *start = v[1].buf, *end = v[2].buf;
    uint64_t *mid = v[3].buf, *offset = v[4].buf, *duration = v[5].buf;
    int64_t *stats_at = v[6].buf;
    Py_ssize_t n = dims[1], lim = v[0].len;
    int ok = n > 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n && ok; k++) {
        int64_t p = start[k], e = end[k];
        if (p < 0 || p >= e || e > lim || b[p] != 0x08) {
            ok = 0;
            break;
        }
        int m = varint(b, p + 1, lim, &mid[k]);
        p += 1 + m;
        uint64_t *column[2] = {&offset[k], &duration[k]};
        uint8_t tags[2] = {0x10, 0x18};
        for (int j = 0; j < 2 && m; j++) {
            *column[j] = 0;
            if (p < e && b[p] == tags[j]) {
                m = varint(b, p + 1, lim, column[j]);
                p += 1 + m;
            }
        }
        if (!m || p > e || (p < e && b[p] != STATS_TAG)) {
            ok = 0;
            break;
        }
        stats_at[k] = p;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* stat_records(buf, stats_at, end, events, which, pos, size) -> int: every stat record of
 * each of `events` (indices into stats_at/end), in stored order, event by event: its place
 * in `events` (which), payload position and size. With which/pos/size None it only counts
 * them. Other fields among the stats are stepped over. -1 when the bytes break a rule of
 * field_at. */
static PyObject *w_stat_records(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"stats_at", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"events", 8, 0, DIM(2), 0},
        {"which", 8, 1, DIM(3), OPTIONAL},
        {"pos", 8, 1, DIM(3), OPTIONAL},
        {"size", 8, 1, DIM(3), OPTIONAL},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    /* Filled only with all three arrays given (a count otherwise). */
    int fill = v[4].obj && v[5].obj && v[6].obj;
    const uint8_t *b = v[0].buf;
    const int64_t *stats_at = v[1].buf, *end = v[2].buf, *events = v[3].buf;
    int64_t *which = v[4].buf, *pos = v[5].buf, *size = v[6].buf;
    Py_ssize_t total = dims[1], n = dims[2], cap = fill ? dims[3] : 0;
    Py_ssize_t lim = v[0].len, count = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n && !bad; j++) {
        int64_t k = events[j];
        if (k < 0 || k >= total) {
            bad = 1;
            break;
        }
        int64_t p = stats_at[k], e = end[k], at, size_;
        if (p < 0 || e > lim) {
            bad = 1;
            break;
        }
        int found;
        while ((found = next_record(b, lim, &p, e, &at, &size_)) > 0) {
            if (fill) {
                if (count >= cap) {
                    found = -1;
                    break;
                }
                which[count] = j;
                pos[count] = at;
                size[count] = size_;
            }
            count++;
        }
        bad = found < 0;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyLong_FromSsize_t(bad ? -1 : count);
}

/* stat_varints(buf, pos, size, kinds, mid, kind, value, at) -> bool: stat records that are
 * each a one-byte metadata id then one varint value ending the record (the integer and
 * reference stats that link events), decoded as columns.StatBatch._varints decodes them:
 * id into mid (int64), value kind from the 256-entry table `kinds` (int8, by the value's
 * tag byte; 0: not a varint value) into kind (int8), value into value (uint64), its
 * position into at (int64). False when any record is laid out otherwise. */
static PyObject *w_stat_varints(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"pos", 8, 0, DIM(1), 0},
        {"size", 8, 0, DIM(1), 0},
        {"kinds", 1, 0, 256, 0},
        {"mid", 8, 1, DIM(1), 0},
        {"kind", 1, 1, DIM(1), 0},
        {"value", 8, 1, DIM(1), 0},
        {"at", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *pos = v[1].buf, *size = v[2].buf;
    const int8_t *kinds = v[3].buf;
    int64_t *mid = v[4].buf, *at = v[7].buf;
    int8_t *kind = v[5].buf;
    uint64_t *value = v[6].buf;
    Py_ssize_t n = dims[1], lim = v[0].len;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t p = pos[k];
        /* (size < 4: no value byte inside the record.) */
        if (p < 0 || size[k] < 4 || p + 3 >= lim || b[p] != 0x08 || b[p + 1] >= 0x80 ||
            !kinds[b[p + 2]]) {
            ok = 0;
            break;
        }
        int m = varint(b, p + 3, lim, &value[k]);
        if (!m || m + 3 != size[k]) { /* the value must end the record */
            ok = 0;
            break;
        }
        mid[k] = b[p + 1];
        kind[k] = kinds[b[p + 2]];
        at[k] = p + 3;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* int_stats(buf, stats_at, end, events, slots, value, kind) -> int: the wanted stats of
 * each of `events` in one walk, as timeline.int_stats_at takes them. `slots` (int8, 256:
 * the column of each metadata id below 256, -1 for ids not wanted); value (uint64) and kind
 * (int8) hold one column of len(events) per wanted stat, zeroed by the caller. A stat's
 * last record in an event wins: its raw value and value kind (columns.KIND_*). Returns 1;
 * 0 when some record is not laid out as writers lay them out (the id, then one value
 * ending the record; the caller then decodes in general); -1 on a rule of field_at. */
static PyObject *w_int_stats(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"stats_at", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"events", 8, 0, DIM(2), 0},
        {"slots", 1, 0, 256, 0},
        {"value", 8, 1, DIM(3), 0},
        {"kind", 1, 1, DIM(3), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *stats_at = v[1].buf, *end = v[2].buf, *events = v[3].buf;
    const int8_t *slots = v[4].buf;
    uint64_t *value = v[5].buf;
    int8_t *kind = v[6].buf;
    Py_ssize_t total = dims[1], n = dims[2], cells = dims[3], lim = v[0].len;
    int result = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n && result == 1; j++) {
        int64_t k = events[j];
        if (k < 0 || k >= total || stats_at[k] < 0 || end[k] > lim) {
            result = -1;
            break;
        }
        int64_t p = stats_at[k], e = end[k], at, size;
        int found;
        while ((found = next_record(b, lim, &p, e, &at, &size)) > 0) {
            uint64_t x = 0, id = 0;
            /* The id: one byte in most captures, more where the plane names over 127
             * stats (ids past the table are never wanted). */
            int im = size < 3 || b[at] != 0x08 ? 0 : varint(b, at + 1, at + size, &id);
            if (!im || im + 1 >= size) {
                result = 0;
                break;
            }
            int slot = id < 256 ? slots[id] : -1;
            if (slot < 0)
                continue; /* not wanted: its value is never read */
            if ((Py_ssize_t)(slot + 1) * n > cells) {
                result = -1;
                break;
            }
            int64_t vat = at + 1 + im; /* the value's tag byte */
            uint8_t tag = b[vat];
            int64_t rest = size - 2 - im, fits = 0;
            int m;
            int8_t got = (int8_t)(tag >> 3);
            switch (tag) {
            case 0x18: case 0x20: case 0x38: /* uint64, int64, ref: a varint */
                m = varint(b, vat + 1, lim, &x);
                fits = m && m == rest;
                break;
            case 0x11: /* double: fixed64 */
                fits = rest == 8;
                break;
            case 0x2A: case 0x32: /* string, bytes: a length, then the payload */
                m = varint(b, vat + 1, lim, &x);
                fits = m && x <= MAX_LENGTH && (int64_t)x == rest - m;
                x = 0;
                break;
            }
            if (!fits) {
                result = 0;
                break;
            }
            value[slot * n + j] = (got == 3 || got == 4) ? x : 0;
            kind[slot * n + j] = got;
        }
        if (found < 0)
            result = -1;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyLong_FromLong(result);
}

/* line_events(buf, lstart, lend, start, end) -> int: the events (field 4) of the XLine
 * messages buf[lstart[j]:lend[j]], in stored order: each event's payload span into
 * start/end (int64, room for as many events as the caller counted). Returns how many there
 * are, or -1 when a line's bytes break a rule of field_at or hold more events than there
 * is room for. */
static PyObject *w_line_events(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"lstart", 8, 0, DIM(1), 0},
        {"lend", 8, 0, DIM(1), 0},
        {"start", 8, 1, DIM(2), 0},
        {"end", 8, 1, DIM(2), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *lstart = v[1].buf, *lend = v[2].buf;
    int64_t *start = v[3].buf, *end = v[4].buf;
    Py_ssize_t lines = dims[1], cap = dims[2], lim = v[0].len, count = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < lines && !bad; j++) {
        int64_t p = lstart[j], e = lend[j], at, size;
        if (p < 0 || e > lim) {
            bad = 1;
            break;
        }
        int found;
        while ((found = next_record(b, lim, &p, e, &at, &size)) > 0 && count < cap) {
            start[count] = at;
            end[count] = at + size;
            count++;
        }
        bad = found != 0; /* a broken line, or more events than counted */
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyLong_FromSsize_t(bad ? -1 : count);
}

/* line_event_counts(buf, lstart, lend, counts) -> bool: how many events (field 4) each
 * XLine message buf[lstart[j]:lend[j]] holds, into counts (int64): what line_events needs
 * room for, and a capture's event count read without decoding an event. False when a
 * line's bytes break a rule of field_at. */
static PyObject *w_line_event_counts(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"buf", 1, 0, ANY, 0},
        {"lstart", 8, 0, DIM(1), 0},
        {"lend", 8, 0, DIM(1), 0},
        {"counts", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint8_t *b = v[0].buf;
    const int64_t *lstart = v[1].buf, *lend = v[2].buf;
    int64_t *counts = v[3].buf;
    Py_ssize_t lines = dims[1], lim = v[0].len;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < lines && !bad; j++) {
        int64_t p = lstart[j], e = lend[j], at, size, count = 0;
        if (p < 0 || e > lim) {
            bad = 1;
            break;
        }
        int found;
        while ((found = next_record(b, lim, &p, e, &at, &size)) > 0)
            count++;
        counts[j] = count;
        bad = found != 0;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(!bad);
}

/* type_sweep(typ, start, current, own) -> bool: the step breakdown's sweep over sorted
 * event bounds (breakdown.all_type_times): after each bound, the highest type (0..255)
 * with more starts than ends so far into current (0 when none), and the running count of
 * the bound's own type into own (int64 each; start is one byte per bound). False when a
 * type is outside 0..255 (nothing is then decided). */
static PyObject *w_type_sweep(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"typ", 8, 0, DIM(1), 0},
        {"start", 1, 0, DIM(1), 0},
        {"current", 8, 1, DIM(1), 0},
        {"own", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *typ = v[0].buf;
    const uint8_t *start = v[1].buf;
    int64_t *current = v[2].buf, *own = v[3].buf;
    Py_ssize_t n = dims[1];
    int64_t count[256] = {0};
    uint64_t open[4] = {0, 0, 0, 0}; /* bit t: type t has a positive count */
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t t = typ[k];
        if (t < 0 || t > 255) {
            ok = 0;
            break;
        }
        int64_t c = count[t] += start[k] ? 1 : -1;
        own[k] = c;
        if (c > 0)
            open[t >> 6] |= 1ULL << (t & 63);
        else
            open[t >> 6] &= ~(1ULL << (t & 63));
        int64_t top = 0;
        for (int w = 3; w >= 0; w--) {
            if (open[w]) {
                top = 64 * w + 63 - __builtin_clzll(open[w]);
                break;
            }
        }
        current[k] = top;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* step_members(...) -> int: the step grouping walk's members as the breakdown reads them
 * (steps._groups_from_columns and _add_typed_events in one pass). In: each member's group,
 * host line and sorted position (m_group, m_line, m_pos; walk order), each group's step
 * (-1: none), each step's root line and position, each host line's first plane-wide index,
 * whether it is stored in time order, and its start (ps from the time base), the plane's
 * mid/offset/duration columns and each mid's CPU event type (-1: none). Out: the members
 * kept (of a step, not the step's own root), in order: step, line number (lines numbered
 * in first-seen order; `used` gets each number's host line) and plane-wide index; and of
 * those with a type: type, begin, end (absolute ps) and step. `counts` gets (members,
 * typed members, lines used). Returns 1; 0 when the numpy code must decide (a member on a
 * line not in time order, or steps out of order); -1 on an index out of range. */
static PyObject *w_step_members(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"m_group", 8, 0, DIM(1), 0},
        {"m_line", 8, 0, DIM(1), 0},
        {"m_pos", 8, 0, DIM(1), 0},
        {"step_of_group", 8, 0, DIM(2), 0},
        {"root_line", 8, 0, DIM(3), 0},
        {"root_pos", 8, 0, DIM(3), 0},
        {"line_first", 8, 0, DIM(4), 0},
        {"line_ordered", 1, 0, DIM(4), 0},
        {"line_start", 8, 0, DIM(4), 0},
        {"mid", 8, 0, DIM(5), 0},
        {"offset", 8, 0, DIM(5), 0},
        {"duration", 8, 0, DIM(5), 0},
        {"type_of_mid", 8, 0, DIM(6), 0},
        {"k", 8, 1, DIM(1), 0},
        {"line", 8, 1, DIM(1), 0},
        {"flat", 8, 1, DIM(1), 0},
        {"t_type", 8, 1, DIM(1), 0},
        {"t_begin", 8, 1, DIM(1), 0},
        {"t_end", 8, 1, DIM(1), 0},
        {"t_step", 8, 1, DIM(1), 0},
        {"used", 8, 1, DIM(4), 0},
        {"counts", 8, 1, 3, 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *m_group = v[0].buf, *m_line = v[1].buf, *m_pos = v[2].buf;
    const int64_t *step_of_group = v[3].buf, *root_line = v[4].buf, *root_pos = v[5].buf;
    const int64_t *line_first = v[6].buf, *line_start = v[8].buf;
    const uint8_t *line_ordered = v[7].buf;
    const int64_t *mid = v[9].buf, *offset = v[10].buf, *duration = v[11].buf;
    const int64_t *type_of_mid = v[12].buf;
    int64_t *k_out = v[13].buf, *line_out = v[14].buf, *flat_out = v[15].buf;
    int64_t *t_type = v[16].buf, *t_begin = v[17].buf, *t_end = v[18].buf, *t_step = v[19].buf;
    int64_t *used = v[20].buf, *counts = v[21].buf;
    Py_ssize_t n = dims[1], groups = dims[2], steps = dims[3], lines = dims[4];
    Py_ssize_t events = dims[5], types = dims[6];
    int64_t *number = PyMem_RawMalloc((lines ? lines : 1) * sizeof(int64_t));
    if (!number) {
        release(v, NARGS(spec));
        return PyErr_NoMemory();
    }
    int result = 1;
    Py_ssize_t kept = 0, typed = 0, numbered = 0;
    int64_t last_step = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t l = 0; l < lines; l++)
        number[l] = -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t g = m_group[j], li = m_line[j], pos = m_pos[j];
        if (g < 0 || g >= groups || li < 0 || li >= lines) {
            result = -1;
            break;
        }
        int64_t st = step_of_group[g];
        if (st < 0)
            continue; /* a group that makes no step */
        if (st >= steps) {
            result = -1;
            break;
        }
        if (li == root_line[st] && pos == root_pos[st])
            continue; /* the step's own root */
        if (st < last_step || !line_ordered[li]) {
            result = 0; /* steps out of walk order, or a line's stored order differs */
            break;
        }
        last_step = st;
        int64_t e = line_first[li] + pos;
        if (pos < 0 || e < 0 || e >= events) {
            result = -1;
            break;
        }
        if (number[li] < 0) {
            number[li] = numbered;
            used[numbered++] = li;
        }
        k_out[kept] = st;
        line_out[kept] = number[li];
        flat_out[kept] = e;
        kept++;
        int64_t m = mid[e];
        int64_t t = (m >= 0 && m < types) ? type_of_mid[m] : -1;
        if (t < 0)
            continue;
        /* unsigned sums: wrap as numpy's int64 do (the reader bounds every time) */
        int64_t b = (int64_t)((uint64_t)offset[e] + (uint64_t)line_start[li]);
        t_type[typed] = t;
        t_begin[typed] = b;
        t_end[typed] = (int64_t)((uint64_t)b + (uint64_t)duration[e]);
        t_step[typed] = st;
        typed++;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(number);
    counts[0] = kept;
    counts[1] = typed;
    counts[2] = numbered;
    release(v, NARGS(spec));
    return PyLong_FromLong(result);
}

/* nested(typ, begin, end, grp, inside) -> bool: which events lie strictly inside another
 * event of their type and group (breakdown._without_nested): inside[k] = 1 where an
 * earlier event of k's type in k's run begins strictly before k and ends strictly after
 * it, and k is not an instant. A run is a stretch of events in time order within one
 * group (a new run where the group changes or a begin goes back: the next thread).
 * int64 columns, inside one byte per event. False when a type is outside 0..255. */
static PyObject *w_nested(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"typ", 8, 0, DIM(1), 0},
        {"begin", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"grp", 8, 0, DIM(1), 0},
        {"inside", 1, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *typ = v[0].buf, *begin = v[1].buf, *end = v[2].buf, *grp = v[3].buf;
    uint8_t *inside = v[4].buf;
    Py_ssize_t n = dims[1];
    /* Per type, in the current run: whether seen (run stamp), the latest end among its
     * events that begin before the current begin (`reach`, valid where `has_reach`), and
     * the begin and latest end of its events at that begin (`tie_*`). */
    int64_t stamp[256], reach[256], tie_begin[256], tie_max[256];
    uint8_t has_reach[256];
    int64_t run = 0;
    int ok = 1;
    for (int t = 0; t < 256; t++)
        stamp[t] = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t t = typ[k], b = begin[k], e = end[k];
        if (t < 0 || t > 255) {
            ok = 0;
            break;
        }
        if (k > 0 && (grp[k] != grp[k - 1] || b < begin[k - 1]))
            run++;
        if (stamp[t] != run) {
            stamp[t] = run;
            has_reach[t] = 0;
            tie_begin[t] = b;
            tie_max[t] = e;
        } else if (b != tie_begin[t]) {
            if (!has_reach[t] || tie_max[t] > reach[t])
                reach[t] = tie_max[t];
            has_reach[t] = 1;
            tie_begin[t] = b;
            tie_max[t] = e;
        } else if (e > tie_max[t]) {
            tie_max[t] = e;
        }
        inside[k] = has_reach[t] && reach[t] > e && e > b;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* gap_sums(time, grp, current, g_begin, g_end, sums, first) -> bool: the step breakdown's
 * gaps (breakdown.all_type_times), after the sweep: each gap between sorted bounds k and
 * k + 1 of one group g, clipped to [g_begin[g], g_end[g]], adds its length to
 * sums[g * width + current[k]]; first[g * width + t] gets the index of the first gap of
 * type t in g (it must come in as -1). width: sums' items per group (the caller numbers
 * the types it has densely: a window of thousands of steps would otherwise hold 256 cells
 * per step). False, with sums and first not to be used, when a group or a type is out of
 * range. */
static PyObject *w_gap_sums(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"time", 8, 0, DIM(1), 0},
        {"grp", 8, 0, DIM(1), 0},
        {"current", 8, 0, DIM(1), 0},
        {"g_begin", 8, 0, DIM(2), 0},
        {"g_end", 8, 0, DIM(2), 0},
        {"sums", 8, 1, DIM(3), 0},
        {"first", 8, 1, DIM(3), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    if (dims[2] ? dims[3] % dims[2] != 0 || dims[3] / dims[2] > 256 : dims[3] != 0) {
        release(v, NARGS(spec));
        return PyErr_Format(PyExc_ValueError,
                            "sums: %zd items, not 1 to 256 for each of %zd groups", dims[3],
                            dims[2]);
    }
    const Py_ssize_t width = dims[2] ? dims[3] / dims[2] : 0;
    const int64_t *time = v[0].buf, *grp = v[1].buf, *current = v[2].buf;
    const int64_t *g_begin = v[3].buf, *g_end = v[4].buf;
    int64_t *sums = v[5].buf, *first = v[6].buf;
    Py_ssize_t n = dims[1], groups = dims[2];
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k + 1 < n; k++) {
        int64_t g = grp[k], t = current[k];
        if (g != grp[k + 1])
            continue;
        if (g < 0 || g >= groups || t < 0 || t >= width) {
            ok = 0;
            break;
        }
        int64_t lo = time[k] > g_begin[g] ? time[k] : g_begin[g];
        int64_t hi = time[k + 1] < g_end[g] ? time[k + 1] : g_end[g];
        Py_ssize_t at = g * width + t;
        if (first[at] < 0)
            first[at] = k;
        if (hi > lo)
            sums[at] += hi - lo;
    }
    Py_END_ALLOW_THREADS
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* A link key's table index bits: splitmix64's finaliser over both words, so keys that
 * differ in any bit spread over the table. */
static inline uint64_t key_hash(uint64_t high, uint64_t low)
{
    uint64_t x = high * 0x9e3779b97f4a7c15ULL ^ low;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* link_codes(high, low, consumer, code, count, order) -> int: step grouping's link index
 * (steps._Grouper._index_links). Rows with equal (high, low) keys share a code, numbered
 * from 0 in order of each key's first row, into code; count[c] gets the number of consumer
 * rows (consumer != 0) of code c, and order the consumer rows grouped by code, in code
 * order and row order within a code. Returns the number of codes (count and order are
 * meaningful up to it and up to the number of consumers). One hash table, no sort. */
static PyObject *w_link_codes(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"high", 8, 0, DIM(1), 0},
        {"low", 8, 0, DIM(1), 0},
        {"consumer", 1, 0, DIM(1), 0},
        {"code", 8, 1, DIM(1), 0},
        {"count", 8, 1, DIM(1), 0},
        {"order", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const uint64_t *high = v[0].buf, *low = v[1].buf;
    const uint8_t *consumer = v[2].buf;
    int64_t *code = v[3].buf, *count = v[4].buf, *order = v[5].buf;
    Py_ssize_t n = dims[1];
    /* slot: 1 + the first row of its key, 0 when empty. Sized to the keys seen, not the
     * rows (links repeat a few hundred keys over tens of thousands of rows), doubled
     * when half full. */
    size_t size = 1024;
    int64_t *slot = PyMem_RawCalloc(size, sizeof(int64_t)), *fill = NULL;
    int64_t codes = 0;
    int failed = !slot;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n && !failed; r++) {
        if ((size_t)codes * 2 >= size) {
            int64_t *grown = PyMem_RawCalloc(2 * size, sizeof(int64_t));
            if (!grown) {
                failed = 1;
                break;
            }
            for (size_t h = 0; h < size; h++) {
                int64_t s = slot[h];
                if (!s)
                    continue;
                size_t at = key_hash(high[s - 1], low[s - 1]) & (2 * size - 1);
                while (grown[at])
                    at = (at + 1) & (2 * size - 1);
                grown[at] = s;
            }
            PyMem_RawFree(slot);
            slot = grown;
            size *= 2;
        }
        size_t h = key_hash(high[r], low[r]) & (size - 1);
        for (;;) {
            int64_t s = slot[h];
            if (!s) {
                slot[h] = r + 1;
                count[codes] = 0;
                code[r] = codes++;
                break;
            }
            if (high[s - 1] == high[r] && low[s - 1] == low[r]) {
                code[r] = code[s - 1];
                break;
            }
            h = (h + 1) & (size - 1);
        }
        if (consumer[r])
            count[code[r]]++;
    }
    /* each code's next place in order: consumers grouped by code, rows in order */
    if (!failed && !(fill = PyMem_RawMalloc(((size_t)codes + 1) * sizeof(int64_t))))
        failed = 1;
    if (!failed) {
        int64_t at = 0;
        for (int64_t c = 0; c < codes; c++) {
            fill[c] = at;
            at += count[c];
        }
        for (Py_ssize_t r = 0; r < n; r++)
            if (consumer[r])
                order[fill[code[r]]++] = r;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(slot);
    PyMem_RawFree(fill);
    release(v, NARGS(spec));
    if (failed)
        return PyErr_NoMemory();
    return PyLong_FromLongLong(codes);
}

/* A growable array of int64 (the group walk's frontiers); -1 from push when out of memory. */
struct vec {
    int64_t *at;
    Py_ssize_t n, cap;
};

static int reserve(struct vec *v, Py_ssize_t n)
{
    if (n > v->cap) {
        Py_ssize_t cap = v->cap ? v->cap : 64;
        while (cap < n)
            cap *= 2;
        int64_t *at = PyMem_RawRealloc(v->at, (size_t)cap * sizeof(int64_t));
        if (!at)
            return -1;
        v->at = at;
        v->cap = cap;
    }
    return 0;
}

static int push(struct vec *v, int64_t x)
{
    if (reserve(v, v->n + 1))
        return -1;
    v->at[v->n++] = x;
    return 0;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The walk's state: the host lines' events as flat arrays (line l holds events
 * first[l] .. first[l + 1] - 1, sorted by start) and the link index. */
struct walk {
    const int64_t *first, *start, *end, *prod, *cons_ptr, *cons_line, *cons_idx;
    int64_t *gid, *member, *chunk_line, *chunk_group, *chunk_end;
    Py_ssize_t lines, events, codes, consumers, members, chunks;
    /* Stamps per line and per code (what this step has seen), and each line's place in
     * the next wave's order. */
    int64_t *line_mark, *code_mark, *slot, *rank;
    int64_t stamp;
    /* Scratch, reused from root to root: this wave's and the next wave's (line, event)
     * pairs and lines in order, a wave's events bucketed by line, a line's consumer lines. */
    struct vec wave, next, order, next_order, nodes, found;
};

/* One line's nodes of a wave (line-relative, sorted, distinct, all ungrouped) and the
 * ungrouped events nested in any of them take group g: appended to member as one chunk.
 * Event k is nested when it starts and ends by the latest end of the nodes before it,
 * and no event since the last node began inside that reach and ran past it: XProf's
 * nesting is a tree (each event's parent the innermost event that holds it), so what
 * lies inside such an overhanging event is its subtree, not the node's. */
static void cover(struct walk *w, int64_t line, const int64_t *nodes, Py_ssize_t m, int64_t g)
{
    const int64_t base = w->first[line], len = w->first[line + 1] - base;
    const int64_t *start = w->start + base, *end = w->end + base;
    int64_t *gid = w->gid + base;
    int64_t top = INT64_MIN, reach = INT64_MIN;
    for (Py_ssize_t j = 0; j < m; j++)
        top = end[nodes[j]] > top ? end[nodes[j]] : top;
    Py_ssize_t j = 0;
    for (int64_t k = nodes[0]; k < len; k++) {
        int is_node = j < m && nodes[j] == k;
        if (!is_node && start[k] > top)
            break; /* starts after every node ends: nothing further is nested */
        if (is_node || (reach >= end[k] && reach >= start[k] && gid[k] < 0)) {
            gid[k] = g;
            w->member[w->members++] = k;
        } else if (reach >= start[k] && end[k] > reach) {
            reach = INT64_MIN; /* overhangs the nodes: what follows is inside it */
        }
        if (is_node) {
            reach = end[k] > reach ? end[k] : reach;
            j++;
        }
    }
    w->chunk_line[w->chunks] = line;
    w->chunk_group[w->chunks] = g;
    w->chunk_end[w->chunks++] = w->members;
}

/* Group g from the root event (line, i): breadth first, one wave at a time, as
 * steps._Grouper.group walks it (lines of a wave in order of first mention). 0, or -1 when
 * out of memory. */
static int walk_root(struct walk *w, int64_t line, int64_t i, int64_t g)
{
    struct vec *wave = &w->wave, *next = &w->next, *order = &w->order;
    struct vec *next_order = &w->next_order, *nodes = &w->nodes, *found = &w->found;
    wave->n = order->n = 0;
    if (push(wave, line) || push(wave, i) || push(order, line))
        return -1;
    w->rank[line] = 0;
    while (order->n) {
        /* The wave's events bucketed by their line's place in order: bucket o is
         * nodes[bounds[o] .. bounds[o + 1] - 1]. */
        Py_ssize_t lines = order->n, events = wave->n / 2;
        if (reserve(nodes, lines + 1 + events))
            return -1;
        memset(nodes->at, 0, (size_t)(lines + 1) * sizeof(int64_t));
        int64_t *bounds = nodes->at, *bucket = nodes->at + lines + 1;
        for (Py_ssize_t f = 0; f < wave->n; f += 2)
            bounds[w->rank[wave->at[f]] + 1]++;
        for (Py_ssize_t o = 0; o < lines; o++)
            bounds[o + 1] += bounds[o];
        for (Py_ssize_t f = 0; f < wave->n; f += 2)
            bucket[bounds[w->rank[wave->at[f]]]++] = wave->at[f + 1];
        for (Py_ssize_t o = lines; o > 0; o--) /* back to each bucket's start */
            bounds[o] = bounds[o - 1];
        bounds[0] = 0;
        next->n = next_order->n = 0;
        int64_t next_stamp = ++w->stamp;
        for (Py_ssize_t o = 0; o < lines; o++) {
            int64_t l = order->at[o], base = w->first[l];
            int64_t *mine = bucket + bounds[o];
            Py_ssize_t m = 0;
            for (Py_ssize_t k = 0; k < bounds[o + 1] - bounds[o]; k++)
                if (w->gid[base + mine[k]] < 0)
                    mine[m++] = mine[k];
            if (!m)
                continue;
            qsort(mine, (size_t)m, sizeof(int64_t), by_value);
            Py_ssize_t distinct = 1;
            for (Py_ssize_t k = 1; k < m; k++)
                if (mine[k] != mine[distinct - 1])
                    mine[distinct++] = mine[k];
            Py_ssize_t from = w->members;
            cover(w, l, mine, distinct, g);
            /* The consumers of the taken events' codes, each code once; their lines
             * join the next wave's order in ascending order. */
            int64_t code_stamp = ++w->stamp;
            found->n = 0;
            for (Py_ssize_t k = from; k < w->members; k++) {
                int64_t c = w->prod[base + w->member[k]];
                if (c < 0 || w->code_mark[c] == code_stamp)
                    continue;
                w->code_mark[c] = code_stamp;
                for (int64_t q = w->cons_ptr[c]; q < w->cons_ptr[c + 1]; q++) {
                    int64_t cl = w->cons_line[q];
                    if (push(next, cl) || push(next, w->cons_idx[q]))
                        return -1;
                    if (w->line_mark[cl] != code_stamp) {
                        w->line_mark[cl] = code_stamp;
                        if (push(found, cl))
                            return -1;
                    }
                }
            }
            qsort(found->at, (size_t)found->n, sizeof(int64_t), by_value);
            for (Py_ssize_t k = 0; k < found->n; k++) {
                int64_t cl = found->at[k];
                if (w->slot[cl] != next_stamp) {
                    w->slot[cl] = next_stamp;
                    w->rank[cl] = next_order->n;
                    if (push(next_order, cl))
                        return -1;
                }
            }
        }
        struct vec t = *wave;
        *wave = *next;
        *next = t;
        t = *order;
        *order = *next_order;
        *next_order = t;
    }
    return 0;
}

/* Whether the walk's arrays hold together: line bounds in order over all events, link
 * targets inside their lines, codes inside the index. */
static int walk_valid(const struct walk *w, const int64_t *root_line, const int64_t *root_idx,
                      Py_ssize_t roots)
{
    if (w->first[0] != 0 || w->first[w->lines] != w->events)
        return 0;
    for (Py_ssize_t l = 0; l < w->lines; l++)
        if (w->first[l + 1] < w->first[l])
            return 0;
    if (w->cons_ptr[0] != 0 || w->cons_ptr[w->codes] != w->consumers)
        return 0;
    for (Py_ssize_t c = 0; c < w->codes; c++)
        if (w->cons_ptr[c + 1] < w->cons_ptr[c])
            return 0;
    for (Py_ssize_t q = 0; q < w->consumers; q++) {
        int64_t l = w->cons_line[q];
        if (l < 0 || l >= w->lines || w->cons_idx[q] < 0
                || w->cons_idx[q] >= w->first[l + 1] - w->first[l])
            return 0;
    }
    for (Py_ssize_t e = 0; e < w->events; e++)
        if (w->prod[e] >= w->codes)
            return 0;
    for (Py_ssize_t r = 0; r < roots; r++) {
        int64_t l = root_line[r];
        if (l < 0 || l >= w->lines || root_idx[r] < 0
                || root_idx[r] >= w->first[l + 1] - w->first[l])
            return 0;
    }
    return 1;
}

/* group_walk(first, start, end, gid, prod, cons_ptr, cons_line, cons_idx, root_line,
 * root_idx, root_group, member, chunk_line, chunk_group, chunk_end) -> int: step grouping
 * (steps._Grouper.group) from every root in turn. A root already grouped gets
 * root_group -1; the others groups 0, 1, ... Each group's members come out as chunks (one
 * line's events taken in one wave, line-relative positions in member up to chunk_end),
 * and gid (flat, in/out) records every event's group. Returns the number of chunks, -1
 * when the arrays do not hold together (nothing changed). */
static PyObject *w_group_walk(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"first", 8, 0, DIM(1), 0},
        {"start", 8, 0, DIM(2), 0},
        {"end", 8, 0, DIM(2), 0},
        {"gid", 8, 1, DIM(2), 0},
        {"prod", 8, 0, DIM(2), 0},
        {"cons_ptr", 8, 0, DIM(3), 0},
        {"cons_line", 8, 0, DIM(4), 0},
        {"cons_idx", 8, 0, DIM(4), 0},
        {"root_line", 8, 0, DIM(5), 0},
        {"root_idx", 8, 0, DIM(5), 0},
        {"root_group", 8, 1, DIM(5), 0},
        {"member", 8, 1, DIM(2), 0},
        {"chunk_line", 8, 1, DIM(2), 0},
        {"chunk_group", 8, 1, DIM(2), 0},
        {"chunk_end", 8, 1, DIM(2), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    if (dims[1] < 1 || dims[3] < 1) {
        release(v, NARGS(spec));
        return PyErr_Format(PyExc_ValueError, "first and cons_ptr need at least one item");
    }
    struct walk w = {
        .first = v[0].buf, .start = v[1].buf, .end = v[2].buf, .gid = v[3].buf,
        .prod = v[4].buf, .cons_ptr = v[5].buf, .cons_line = v[6].buf,
        .cons_idx = v[7].buf, .member = v[11].buf, .chunk_line = v[12].buf,
        .chunk_group = v[13].buf, .chunk_end = v[14].buf,
        .lines = dims[1] - 1, .events = dims[2], .codes = dims[3] - 1,
        .consumers = dims[4],
    };
    const int64_t *root_line = v[8].buf, *root_idx = v[9].buf;
    int64_t *root_group = v[10].buf;
    Py_ssize_t roots = dims[5];
    size_t stamps = (size_t)(3 * w.lines + w.codes + 4);
    int64_t *marks = PyMem_RawCalloc(stamps, sizeof(int64_t));
    int64_t result = 0;
    if (!marks) {
        release(v, NARGS(spec));
        return PyErr_NoMemory();
    }
    w.line_mark = marks;
    w.slot = marks + w.lines + 1;
    w.rank = marks + 2 * w.lines + 2;
    w.code_mark = marks + 3 * w.lines + 3;
    Py_BEGIN_ALLOW_THREADS
    if (!walk_valid(&w, root_line, root_idx, roots)) {
        result = -1;
    } else {
        int64_t g = 0;
        for (Py_ssize_t r = 0; r < roots && result >= 0; r++) {
            if (w.gid[w.first[root_line[r]] + root_idx[r]] >= 0) {
                root_group[r] = -1;
                continue;
            }
            root_group[r] = g;
            if (walk_root(&w, root_line[r], root_idx[r], g++))
                result = -2;
        }
        if (result >= 0)
            result = w.chunks;
    }
    Py_END_ALLOW_THREADS
    struct vec *scratch[] = {&w.wave, &w.next, &w.order, &w.next_order, &w.nodes, &w.found};
    for (int k = 0; k < 6; k++)
        PyMem_RawFree(scratch[k]->at);
    PyMem_RawFree(marks);
    release(v, NARGS(spec));
    if (result == -2)
        return PyErr_NoMemory();
    return PyLong_FromLongLong(result);
}

/* last_open(start, end, at, out) -> bool: for each time of `at` (non-decreasing), the last
 * event by start (`start` sorted) that has begun by then and ends after it, or -1
 * (python_time._last_open). One sweep with a stack of begun events: an event found ended
 * on top is popped for good (the times only grow). False when `at` goes back in time. */
static PyObject *w_last_open(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"start", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"at", 8, 0, DIM(2), 0},
        {"out", 8, 1, DIM(2), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *start = v[0].buf, *end = v[1].buf, *at = v[2].buf;
    int64_t *out = v[3].buf;
    Py_ssize_t n = dims[1], m = dims[2], next = 0, depth = 0;
    int64_t *stack = PyMem_RawMalloc(((size_t)n + 1) * sizeof(int64_t));
    int ok = 1;
    if (!stack) {
        release(v, NARGS(spec));
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t q = 0; q < m; q++) {
        int64_t t = at[q];
        if (q && t < at[q - 1]) {
            ok = 0;
            break;
        }
        while (next < n && start[next] <= t)
            stack[depth++] = next++;
        while (depth && end[stack[depth - 1]] <= t)
            depth--;
        out[q] = depth ? stack[depth - 1] : -1;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(stack);
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

/* Pop the least end of the binary min-heap (end, idx) of `n` entries; returns the new size. */
static Py_ssize_t heap_pop(int64_t *hend, int64_t *hidx, Py_ssize_t n)
{
    n--;
    int64_t e = hend[n], x = hidx[n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hend[c + 1] < hend[c])
            c++;
        if (hend[c] >= e)
            break;
        hend[i] = hend[c];
        hidx[i] = hidx[c];
        i = c;
    }
    hend[i] = e;
    hidx[i] = x;
    return n;
}

static void heap_push(int64_t *hend, int64_t *hidx, Py_ssize_t n, int64_t e, int64_t x)
{
    Py_ssize_t i = n;
    while (i) {
        Py_ssize_t up = (i - 1) / 2;
        if (hend[up] <= e)
            break;
        hend[i] = hend[up];
        hidx[i] = hidx[up];
        i = up;
    }
    hend[i] = e;
    hidx[i] = x;
}

/* stretches(start, end, bounds, offs, lo, hi, owner, flags) -> int: one thread's events
 * (`start` sorted, each ending at or after its start) and span sets (set k's merged
 * (begin, end) rows flattened at bounds[offs[k]:offs[k + 1]]; the last set is the busy
 * time, the others the regions) cut into stretches between consecutive distinct times of
 * all of them (python_time._stretches): each stretch lying in some region and outside
 * the busy time, in time order, with its start, end, the last-begun event still open at
 * its start (-1: none) and whether it lies in each region (flags[k * M + q], M the
 * outputs' length, at least 2 * events + bounds). One sweep: starts in order, ends from a
 * heap of the begun events, each set's bounds by a pointer (inside = odd count passed).
 * The count written; -1 when the input is laid out otherwise (the numpy code decides). */
static PyObject *w_stretches(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"start", 8, 0, DIM(1), 0},
        {"end", 8, 0, DIM(1), 0},
        {"bounds", 8, 0, DIM(2), 0},
        {"offs", 8, 0, DIM(3), 0},
        {"lo", 8, 1, DIM(4), 0},
        {"hi", 8, 1, DIM(4), 0},
        {"owner", 8, 1, DIM(4), 0},
        {"flags", 1, 1, ANY, 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *start = v[0].buf, *end = v[1].buf, *bounds = v[2].buf, *offs = v[3].buf;
    int64_t *lo = v[4].buf, *hi = v[5].buf, *owner = v[6].buf;
    uint8_t *flags = v[7].buf;
    Py_ssize_t n = dims[1], nb = dims[2], sets = dims[3] - 1, m = dims[4];
    if (sets < 2 || sets > 64 || m < 2 * n + nb || v[7].len < (sets - 1) * m) {
        release(v, NARGS(spec));
        return PyErr_Format(PyExc_ValueError, "stretches: 2-64 span sets and outputs of at "
                            "least 2 * events + bounds items");
    }
    Py_ssize_t ptr[64];
    int ok = offs[0] == 0 && offs[sets] == nb;
    for (Py_ssize_t k = 0; ok && k < sets; k++) {
        ok = offs[k] <= offs[k + 1] && (offs[k + 1] - offs[k]) % 2 == 0;
        for (int64_t j = offs[k] + 1; ok && j < offs[k + 1]; j++)
            ok = bounds[j - 1] <= bounds[j];
        ptr[k] = ok ? offs[k] : 0;
    }
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = end[i] >= start[i] && (i == 0 || start[i - 1] <= start[i]);
    if (!ok) {
        release(v, NARGS(spec));
        return PyLong_FromLong(-1);
    }
    int64_t *scratch = PyMem_RawMalloc((3 * (size_t)n + 2 * (size_t)nb + 1) * sizeof(int64_t));
    uint8_t *closed = PyMem_RawCalloc((size_t)n + 1, 1);
    if (!scratch || !closed) {
        PyMem_RawFree(scratch);
        PyMem_RawFree(closed);
        release(v, NARGS(spec));
        return PyErr_NoMemory();
    }
    int64_t *stack = scratch, *hend = scratch + n, *hidx = scratch + 2 * n;
    int64_t *sb = scratch + 3 * n, *sk = sb + nb;
    Py_ssize_t q = 0;
    Py_BEGIN_ALLOW_THREADS
    /* The sets' bounds in one time order (sb: the time, sk: its set): the sweep then
     * passes them by one pointer, and whether it is inside each set is one bit of `mask`
     * (an odd count passed), flipped as each bound is passed. */
    for (Py_ssize_t j = 0; j < nb; j++) {
        Py_ssize_t best = -1;
        for (Py_ssize_t k = 0; k < sets; k++)
            if (ptr[k] < offs[k + 1] && (best < 0 || bounds[ptr[k]] < bounds[ptr[best]]))
                best = k;
        sb[j] = bounds[ptr[best]];
        sk[j] = best;
        ptr[best]++;
    }
    const uint64_t busy_bit = (uint64_t)1 << (sets - 1), region_bits = busy_bit - 1;
    /* A thread's events nest (each ends by the end of every event open when it begins):
     * then the open event that ends first is always the innermost, the stack's top, and
     * no heap is needed. The sweep assumes it and checks each event as it begins; on the
     * first that overhangs, it starts again with the heap. */
    int nests = 1;
again:;
    Py_ssize_t next = 0, depth = 0, heap = 0, sp = 0;
    uint64_t mask = 0;
    int have = 0;
    int64_t t = 0;
    q = 0;
    for (;;) {
        /* The next distinct time of any stream: the end of the stretch begun at t. */
        int found = 0;
        int64_t u = 0;
        if (next < n) {
            u = start[next];
            found = 1;
        }
        if (nests) {
            if (depth && (!found || end[stack[depth - 1]] < u)) {
                u = end[stack[depth - 1]];
                found = 1;
            }
        } else if (heap && (!found || hend[0] < u)) {
            u = hend[0];
            found = 1;
        }
        if (sp < nb && (!found || sb[sp] < u)) {
            u = sb[sp];
            found = 1;
        }
        if (!found)
            break;
        if (have && (mask & region_bits) && !(mask & busy_bit)) {
            lo[q] = t;
            hi[q] = u;
            owner[q] = depth ? stack[depth - 1] : -1;
            for (Py_ssize_t k = 0; k + 1 < sets; k++)
                flags[k * m + q] = (uint8_t)((mask >> k) & 1);
            q++;
        }
        /* Everything at u: each set's bounds passed, events begun join the stack (and the
         * heap), events ended close and leave the stack's top. */
        t = u;
        have = 1;
        while (sp < nb && sb[sp] <= t)
            mask ^= (uint64_t)1 << sk[sp++];
        if (nests) {
            while (next < n && start[next] == t) {
                while (depth && end[stack[depth - 1]] <= t)
                    depth--;
                if (depth && end[next] > end[stack[depth - 1]]) {
                    nests = 0;
                    goto again;
                }
                stack[depth++] = next++;
            }
            while (depth && end[stack[depth - 1]] <= t)
                depth--;
            continue;
        }
        while (next < n && start[next] == t) {
            stack[depth++] = next;
            heap_push(hend, hidx, heap++, end[next], next);
            next++;
        }
        while (heap && hend[0] <= t) {
            closed[hidx[0]] = 1;
            heap = heap_pop(hend, hidx, heap);
        }
        while (depth && closed[stack[depth - 1]])
            depth--;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(scratch);
    PyMem_RawFree(closed);
    release(v, NARGS(spec));
    return PyLong_FromSsize_t(q);
}

/* op_nesting(starts, ends, done, child) -> bool: the host op table's stack walk over one
 * thread's ops sorted by start (ops._nesting): the order ops close into done, each op's
 * direct children's time into child (zeroed here). An op overlapping the one open
 * without nesting in it closes that one and is pushed. False when a child sum overflows
 * int64 (a corrupt capture; the Python walk then decides). */
static PyObject *w_op_nesting(PyObject *self, PyObject *args)
{
    static const struct arg spec[] = {
        {"starts", 8, 0, DIM(1), 0},
        {"ends", 8, 0, DIM(1), 0},
        {"done", 8, 1, DIM(1), 0},
        {"child", 8, 1, DIM(1), 0},
    };
    Py_buffer v[NARGS(spec)];
    Py_ssize_t dims[NDIMS];
    if (take_all(args, spec, NARGS(spec), v, dims))
        return NULL;
    const int64_t *starts = v[0].buf, *ends = v[1].buf;
    int64_t *done = v[2].buf, *child = v[3].buf;
    Py_ssize_t n = dims[1], closed = 0, depth = 0;
    int64_t *stack = PyMem_RawMalloc(((size_t)n + 1) * sizeof(int64_t));
    int ok = 1;
    if (!stack) {
        release(v, NARGS(spec));
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    memset(child, 0, (size_t)n * sizeof(int64_t));
    for (Py_ssize_t j = 0; j < n && ok; j++) {
        int64_t s = starts[j], e = ends[j];
        while (depth && ends[stack[depth - 1]] < s)
            done[closed++] = stack[--depth];
        if (depth) {
            int64_t top = stack[depth - 1], sum;
            if (e <= ends[top]) {
                if (__builtin_sub_overflow(e, s, &sum)
                        || __builtin_add_overflow(child[top], sum, &child[top]))
                    ok = 0;
            } else {
                done[closed++] = stack[--depth];
            }
        }
        stack[depth++] = j;
    }
    for (Py_ssize_t k = 0; ok && k < depth; k++) /* open at the thread's end: outermost first */
        done[closed++] = stack[k];
    Py_END_ALLOW_THREADS
    PyMem_RawFree(stack);
    release(v, NARGS(spec));
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"type_sweep", w_type_sweep, METH_VARARGS, "Highest open type after each bound."},
    {"gap_sums", w_gap_sums, METH_VARARGS, "Type time of each group from swept bounds."},
    {"nested", w_nested, METH_VARARGS, "Events strictly inside another of their type."},
    {"step_members", w_step_members, METH_VARARGS, "Members of steps, typed ones apart."},
    {"group_walk", w_group_walk, METH_VARARGS, "Step groups from roots, by nesting and links."},
    {"op_nesting", w_op_nesting, METH_VARARGS, "Close order and child time of nested ops."},
    {"last_open", w_last_open, METH_VARARGS, "Last begun event still open at each time."},
    {"stretches", w_stretches, METH_VARARGS, "A thread's stretches in regions, outside busy."},
    {"link_codes", w_link_codes, METH_VARARGS, "Codes of link keys, consumers by code."},
    {"int_stats", w_int_stats, METH_VARARGS, "Wanted integer stats of events, one walk."},
    {"line_events", w_line_events, METH_VARARGS, "Event spans of serialized lines."},
    {"line_event_counts", w_line_event_counts, METH_VARARGS, "Events of each serialized line."},
    {"varints", w_varints, METH_VARARGS, "Varints at positions into value/length arrays."},
    {"events", w_events, METH_VARARGS, "Columns of canonically laid out events."},
    {"stat_records", w_stat_records, METH_VARARGS, "Stat records of events, event by event."},
    {"stat_varints", w_stat_varints, METH_VARARGS, "Stat records of one id and one varint."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_wire",
    .m_doc = "Compiled protobuf wire walks for tfobs.xspace.columns.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    return PyModule_Create(&module);
}
