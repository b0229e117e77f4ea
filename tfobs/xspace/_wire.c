/* Compiled loops for columns.py: the protobuf wire walks that numpy can only do in rounds.
 *
 * Why C: on a capture of many small events (an RNN's executor events, each with its step
 * and context ids) the numpy walks cost one numpy call per field position per round, and
 * those calls, not the bytes, dominate a reduction. Each function here is one loop over
 * the bytes with the same rules as the numpy code it stands in for (columns.py keeps that
 * code, used where this module was not built, and tests hold the two equal).
 *
 * Arrays come in through the buffer protocol (numpy arrays, C-contiguous, dtypes fixed by
 * the caller in columns.py), so this module needs no numpy headers and no numpy ABI.
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
 * length in items: ANY whole number, a fixed number (>= 0), or DIM(d) (d = 1..3), which the
 * first array naming d sets and the others must match. An OPTIONAL one may be None. */
struct arg {
    const char *name;
    int size, writable;
    Py_ssize_t items;
    int optional;
};
#define ANY (-100)
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
    for (int d = 0; d < 4; d++)
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
    Py_buffer v[4];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 4, v, dims))
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
    release(v, 4);
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
    Py_buffer v[7];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 7, v, dims))
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
    release(v, 7);
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
    Py_buffer v[7];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 7, v, dims))
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
    release(v, 7);
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
    Py_buffer v[8];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 8, v, dims))
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
    release(v, 8);
    return PyBool_FromLong(ok);
}

/* int_stats(buf, stats_at, end, events, slots, value, kind) -> int: the wanted stats of
 * each of `events` in one walk, as timeline.int_stats_at takes them. `slots` (int8, 256:
 * the column of each one-byte metadata id, -1 for ids not wanted); value (uint64) and kind
 * (int8) hold one column of len(events) per wanted stat, zeroed by the caller. A stat's
 * last record in an event wins: its raw value and value kind (columns.KIND_*). Returns 1;
 * 0 when some record is not laid out as writers lay them out (a one-byte id, then one
 * value ending the record; the caller then decodes in general); -1 on a rule of field_at. */
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
    Py_buffer v[7];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 7, v, dims))
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
            uint64_t x = 0;
            if (size < 3 || b[at] != 0x08 || b[at + 1] >= 0x80) {
                result = 0;
                break;
            }
            int slot = slots[b[at + 1]];
            if (slot < 0)
                continue; /* not wanted: its value is never read */
            if ((Py_ssize_t)(slot + 1) * n > cells) {
                result = -1;
                break;
            }
            uint8_t tag = b[at + 2];
            int64_t rest = size - 3, fits = 0;
            int m;
            int8_t got = (int8_t)(tag >> 3);
            switch (tag) {
            case 0x18: case 0x20: case 0x38: /* uint64, int64, ref: a varint */
                m = varint(b, at + 3, lim, &x);
                fits = m && m == rest;
                break;
            case 0x11: /* double: fixed64 */
                fits = rest == 8;
                break;
            case 0x2A: case 0x32: /* string, bytes: a length, then the payload */
                m = varint(b, at + 3, lim, &x);
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
    release(v, 7);
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
    Py_buffer v[5];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 5, v, dims))
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
    release(v, 5);
    return PyLong_FromSsize_t(bad ? -1 : count);
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
    Py_buffer v[4];
    Py_ssize_t dims[4];
    if (take_all(args, spec, 4, v, dims))
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
    release(v, 4);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"type_sweep", w_type_sweep, METH_VARARGS, "Highest open type after each bound."},
    {"int_stats", w_int_stats, METH_VARARGS, "Wanted integer stats of events, one walk."},
    {"line_events", w_line_events, METH_VARARGS, "Event spans of serialized lines."},
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
