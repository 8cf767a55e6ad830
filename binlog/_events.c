/* The compiled path of the event stream: packets into events, and the most frequent events decoded in one call.

   split_packets cuts what the replication connection has buffered into events (binlog/connection.py,
   read_events). feed_events decodes a run of events into an EventDecoder (binlog/parser.py, feed_from) for the
   kinds of event the decoder's configure() names: TABLE_MAPs already in its cache, rows events (their row images
   read by the layout's decoder, compiled or Python, as EventDecoder._rows calls it) and the events the decoder skips
   by their size. It stops, with nothing of that event taken, at the first event it is not sure of: another kind, a
   checksum that does not match, a header that disagrees with the event's length, a rows event whose table, columns
   or row images are not what they should be. EventDecoder.feed then decodes that event, with its exact error if it
   has one; so both paths leave the decoder in the same state, and the Python one says what is wrong. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <zlib.h>

#define HEADER_LEN 19
#define CRC32_RESIDUE 0x2144DF1CUL /* the CRC-32 of any bytes followed by their own CRC-32 */
#define ARTIFICIAL_F 0x20          /* an event the source made up (not in any file) */
#define MAX_PACKET 0xFFFFFF        /* a packet of this length continues in the next */

enum { K_PYTHON = 0, K_SKIP, K_TABLE_MAP, K_ROWS };
static unsigned char kinds[256];     /* configure(): what this module does with each event type */
static unsigned char rows_kind[256]; /* of each rows event type: its change kind (insert, update, delete) */
static unsigned char rows_v2[256];   /* rows events of version 2 (an extra-data block after the post-header) */
static unsigned char rows_update[256];

/* The decoder's attributes read and written here, interned once. */
static PyObject *s_pos, *s_last_timestamp, *s_events, *s_rows_bytes, *s_trx_timestamp, *s_in_transaction,
    *s_past_start, *s_group_started, *s_checksum_alg, *s_verify_checksum, *s_file, *s_trx_gtid, *s_tables,
    *s_map_cache, *s_changes, *s_counts, *s_chunk_rows, *s_chunk_bytes, *s_fde, *s_post_header_lengths, *s_map,
    *s_table_id, *s_info, *s_columns, *s_decoders, *s_rows_decoder, *s_schema, *s_table, *s_names;
static long crc32_alg = 1;

static PyObject *configure(PyObject *self, PyObject *args) {
    Py_buffer table, change_kinds, v2, update;
    if (!PyArg_ParseTuple(args, "y*y*y*y*l", &table, &change_kinds, &v2, &update, &crc32_alg)) return NULL;
    int ok = table.len == 256 && change_kinds.len == 256 && v2.len == 256 && update.len == 256;
    if (ok) {
        memcpy(kinds, table.buf, 256);
        memcpy(rows_kind, change_kinds.buf, 256);
        memcpy(rows_v2, v2.buf, 256);
        memcpy(rows_update, update.buf, 256);
    }
    PyBuffer_Release(&table);
    PyBuffer_Release(&change_kinds);
    PyBuffer_Release(&v2);
    PyBuffer_Release(&update);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "configure takes four tables of 256 bytes");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* -- packets ---------------------------------------------------------------------------------------------------- */

/* split_packets(data) -> (events, used): the whole event packets at the start of data (an OK byte, then the event),
   and how many bytes they took. It stops before anything else: a packet not all there, an error or end packet, an
   empty one, one of 16 MiB that continues in the next (the connection's own reader takes those). */
static PyObject *split_packets(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, p = 0;
    PyObject *events = PyList_New(0);
    if (events == NULL) goto fail;
    while (n - p >= 4) {
        Py_ssize_t length = b[p] | b[p + 1] << 8 | b[p + 2] << 16;
        if (length == 0 || length >= MAX_PACKET || n - p - 4 < length || b[p + 4] != 0) break;
        PyObject *event = PyBytes_FromStringAndSize((const char *)b + p + 5, length - 1);
        if (event == NULL || PyList_Append(events, event) < 0) {
            Py_XDECREF(event);
            goto fail;
        }
        Py_DECREF(event);
        p += 4 + length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", events, p);
fail:
    Py_XDECREF(events);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- events ----------------------------------------------------------------------------------------------------- */

/* The decoder's state while a run of events is decoded: read at the start, written back at the end. */
typedef struct {
    PyObject *decoder;
    long long pos, last_timestamp, events, rows_bytes, trx_timestamp, chunk_rows, chunk_bytes;
    int in_transaction, past_start, group_started, crc, verify;
    PyObject *file, *trx_gtid, *tables, *map_cache, *changes, *counts, *post_lengths;
    long long type_counts[256];
} State;

static int get_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int get_bool(PyObject *obj, PyObject *name, int *out) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) return -1;
    *out = PyObject_IsTrue(value);
    Py_DECREF(value);
    return *out < 0 ? -1 : 0;
}

static void state_clear(State *s) {
    Py_CLEAR(s->file);
    Py_CLEAR(s->trx_gtid);
    Py_CLEAR(s->tables);
    Py_CLEAR(s->map_cache);
    Py_CLEAR(s->changes);
    Py_CLEAR(s->counts);
    Py_CLEAR(s->post_lengths);
}

static int state_read(State *s, PyObject *decoder) {
    memset(s, 0, sizeof(*s));
    s->decoder = decoder;
    long long alg;
    PyObject *chunk = NULL, *fde = NULL;
    if (get_ll(decoder, s_pos, &s->pos) < 0 || get_ll(decoder, s_last_timestamp, &s->last_timestamp) < 0 ||
        get_ll(decoder, s_events, &s->events) < 0 || get_ll(decoder, s_rows_bytes, &s->rows_bytes) < 0 ||
        get_ll(decoder, s_trx_timestamp, &s->trx_timestamp) < 0 || get_ll(decoder, s_checksum_alg, &alg) < 0 ||
        get_ll(decoder, s_chunk_bytes, &s->chunk_bytes) < 0 ||
        get_bool(decoder, s_in_transaction, &s->in_transaction) < 0 ||
        get_bool(decoder, s_past_start, &s->past_start) < 0 ||
        get_bool(decoder, s_group_started, &s->group_started) < 0 ||
        get_bool(decoder, s_verify_checksum, &s->verify) < 0)
        return -1;
    s->crc = alg == crc32_alg;
    if ((chunk = PyObject_GetAttr(decoder, s_chunk_rows)) == NULL) return -1;
    s->chunk_rows = chunk == Py_None ? -1 : PyLong_AsLongLong(chunk);
    Py_DECREF(chunk);
    if (s->chunk_rows == -1 && PyErr_Occurred()) return -1;
    if ((s->file = PyObject_GetAttr(decoder, s_file)) == NULL ||
        (s->trx_gtid = PyObject_GetAttr(decoder, s_trx_gtid)) == NULL ||
        (s->tables = PyObject_GetAttr(decoder, s_tables)) == NULL ||
        (s->map_cache = PyObject_GetAttr(decoder, s_map_cache)) == NULL ||
        (s->changes = PyObject_GetAttr(decoder, s_changes)) == NULL ||
        (s->counts = PyObject_GetAttr(decoder, s_counts)) == NULL || (fde = PyObject_GetAttr(decoder, s_fde)) == NULL)
        return -1;
    s->post_lengths = PyObject_GetAttr(fde, s_post_header_lengths);
    Py_DECREF(fde);
    if (s->post_lengths == NULL) return -1;
    if (!PyDict_Check(s->tables) || !PyDict_Check(s->map_cache) || !PyList_Check(s->changes) ||
        !PyDict_Check(s->counts) || !PyBytes_Check(s->post_lengths)) {
        PyErr_SetString(PyExc_TypeError, "feed_events: the decoder's state is not of the types it reads");
        return -1;
    }
    return 0;
}

static int set_ll(PyObject *obj, PyObject *name, long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, number);
    Py_DECREF(number);
    return rc;
}

/* The state of the events taken, back into the decoder. */
static int state_write(State *s) {
    PyObject *d = s->decoder;
    if (set_ll(d, s_pos, s->pos) < 0 || set_ll(d, s_last_timestamp, s->last_timestamp) < 0 ||
        set_ll(d, s_events, s->events) < 0 || set_ll(d, s_rows_bytes, s->rows_bytes) < 0 ||
        set_ll(d, s_trx_timestamp, s->trx_timestamp) < 0 ||
        PyObject_SetAttr(d, s_in_transaction, s->in_transaction ? Py_True : Py_False) < 0 ||
        PyObject_SetAttr(d, s_past_start, s->past_start ? Py_True : Py_False) < 0)
        return -1;
    for (int type = 0; type < 256; type++) {
        if (!s->type_counts[type]) continue;
        PyObject *key = PyLong_FromLong(type);
        if (key == NULL) return -1;
        PyObject *old = PyDict_GetItemWithError(s->counts, key);
        long long count = s->type_counts[type];
        if (old != NULL) count += PyLong_AsLongLong(old);
        PyObject *value = PyErr_Occurred() ? NULL : PyLong_FromLongLong(count);
        int rc = value == NULL ? -1 : PyDict_SetItem(s->counts, key, value);
        Py_DECREF(key);
        Py_XDECREF(value);
        if (rc < 0) return -1;
    }
    return 0;
}

static inline uint32_t u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t bitmap(const unsigned char *p, Py_ssize_t len, Py_ssize_t ncols) {
    uint64_t bits = 0;
    for (Py_ssize_t i = 0; i < len; i++) bits |= (uint64_t)p[i] << (8 * i);
    return ncols == 64 ? bits : bits & ((UINT64_C(1) << ncols) - 1);
}

/* What every event taken does to the decoder, as EventDecoder.feed does it before its handler. */
static inline void count_event(State *s, int type, uint32_t timestamp, uint32_t log_pos, int flags) {
    s->events++;
    s->type_counts[type]++;
    if (!s->past_start && log_pos && !(flags & ARTIFICIAL_F)) s->past_start = 1;
    if (timestamp) s->last_timestamp = timestamp;
}

/* EventDecoder._move_past. */
static inline void move_past(State *s, uint32_t log_pos, int flags) {
    if (log_pos && !(flags & ARTIFICIAL_F) && log_pos > s->pos) s->pos = log_pos;
}

enum { TAKEN = 0, NOT_SURE = 1, ERROR = -1 };

/* A TABLE_MAP whose body the decoder has met (its _map_cache): the table id points to that entry again. */
static int table_map(State *s, const unsigned char *b, Py_ssize_t end) {
    if (!s->group_started) return NOT_SURE; /* EventDecoder._table_map says why */
    PyObject *body = PyBytes_FromStringAndSize((const char *)b + HEADER_LEN, end - HEADER_LEN);
    if (body == NULL) return ERROR;
    PyObject *entry = PyDict_GetItemWithError(s->map_cache, body);
    Py_DECREF(body);
    if (entry == NULL) return PyErr_Occurred() ? ERROR : NOT_SURE;
    Py_INCREF(entry);
    PyObject *map = PyObject_GetAttr(entry, s_map);
    PyObject *table_id = map == NULL ? NULL : PyObject_GetAttr(map, s_table_id);
    int rc = table_id == NULL ? -1 : PyDict_SetItem(s->tables, table_id, entry);
    Py_XDECREF(table_id);
    Py_XDECREF(map);
    Py_DECREF(entry);
    return rc < 0 ? ERROR : TAKEN;
}

/* The layout's decoder of these rows: entry.decoders[(kind, present, present_after)], made by entry.rows_decoder. */
static PyObject *rows_decoder(PyObject *entry, int kind, uint64_t present, uint64_t present_after) {
    PyObject *key = Py_BuildValue("(iKK)", kind, (unsigned long long)present, (unsigned long long)present_after);
    if (key == NULL) return NULL;
    PyObject *decoders = PyObject_GetAttr(entry, s_decoders), *decode = NULL;
    if (decoders != NULL && PyDict_Check(decoders)) {
        decode = PyDict_GetItemWithError(decoders, key);
        Py_XINCREF(decode);
    }
    Py_XDECREF(decoders);
    if (decode == NULL && !PyErr_Occurred())
        decode = PyObject_CallMethodObjArgs(entry, s_rows_decoder, PyTuple_GET_ITEM(key, 0), PyTuple_GET_ITEM(key, 1),
                                            PyTuple_GET_ITEM(key, 2), NULL);
    Py_DECREF(key);
    return decode;
}

/* A rows event, as EventDecoder._rows reads it; its rows go to the decoder's changes. */
static int rows_event(State *s, PyObject *event, const unsigned char *b, Py_ssize_t end, int type, uint32_t size,
                      uint32_t timestamp, uint32_t log_pos, Py_ssize_t *rows_taken) {
    Py_ssize_t n_lengths = PyBytes_GET_SIZE(s->post_lengths);
    int post_len = type - 1 < n_lengths ? (unsigned char)PyBytes_AS_STRING(s->post_lengths)[type - 1] : 0;
    Py_ssize_t p = HEADER_LEN;
    if (post_len < 8 || p + post_len > end) return NOT_SURE; /* 6 (a 4-byte table id) is a 5.1.0-5.1.15 binlog */
    uint64_t table_id = (uint64_t)u32(b + p) | (uint64_t)b[p + 4] << 32 | (uint64_t)b[p + 5] << 40;
    p += post_len;
    if (rows_v2[type]) {
        Py_ssize_t extra = b[p - 2] | b[p - 1] << 8; /* it counts its own two bytes */
        if (extra < 2 || p + extra - 2 > end) return NOT_SURE;
        p += extra - 2;
    }
    if (p >= end || b[p] >= 0xFB) return NOT_SURE; /* 251 columns or more: a longer length, the Python reader */
    Py_ssize_t ncols = b[p++];
    if (ncols > 64) return NOT_SURE;
    PyObject *key = PyLong_FromUnsignedLongLong(table_id);
    if (key == NULL) return ERROR;
    PyObject *entry = PyDict_GetItemWithError(s->tables, key);
    Py_DECREF(key);
    if (entry == NULL) return PyErr_Occurred() ? ERROR : NOT_SURE;
    Py_INCREF(entry);
    int result = ERROR;
    PyObject *info = NULL, *columns = NULL, *decode = NULL, *schema = NULL, *table = NULL, *names = NULL,
             *rows = NULL;
    if ((info = PyObject_GetAttr(entry, s_info)) == NULL || (columns = PyObject_GetAttr(info, s_columns)) == NULL)
        goto done;
    Py_ssize_t ncolumns = PyObject_Length(columns);
    if (ncolumns < 0) goto done;
    Py_ssize_t bitmap_len = (ncols + 7) >> 3;
    int update = rows_update[type];
    result = NOT_SURE;
    if (ncolumns != ncols || p + bitmap_len * (update ? 2 : 1) > end) goto done;
    uint64_t present = bitmap(b + p, bitmap_len, ncols), present_after = 0;
    p += bitmap_len;
    if (update) {
        present_after = bitmap(b + p, bitmap_len, ncols);
        p += bitmap_len;
    }
    if (!present && !(update && present_after) && p < end) goto done; /* rows of no column would never end */
    result = ERROR;
    if ((decode = rows_decoder(entry, rows_kind[type], present, present_after)) == NULL ||
        (schema = PyObject_GetAttr(info, s_schema)) == NULL || (table = PyObject_GetAttr(info, s_table)) == NULL ||
        (names = PyObject_GetAttr(info, s_names)) == NULL)
        goto done;
    PyObject *call = PyObject_CallFunction(decode, "OnnOOOOIIOOi", event, p, end, schema, table, names, s->file,
                                           log_pos, timestamp, s->trx_gtid, info, 0);
    if (call == NULL) goto done; /* a malformed event (feed_events) */
    Py_ssize_t read_to = -1;
    if (PyTuple_Check(call) && PyTuple_GET_SIZE(call) == 2 && PyList_Check(PyTuple_GET_ITEM(call, 0))) {
        rows = PyTuple_GET_ITEM(call, 0);
        Py_INCREF(rows);
        read_to = PyLong_AsSsize_t(PyTuple_GET_ITEM(call, 1));
    }
    Py_DECREF(call);
    if (read_to != end) {
        PyErr_Clear();
        result = NOT_SURE; /* the last row runs past the event, or stops short of its end */
        goto done;
    }
    if (!s->in_transaction && PyList_GET_SIZE(s->changes) == 0 && !s->trx_timestamp) s->trx_timestamp = timestamp;
    Py_ssize_t before = PyList_GET_SIZE(s->changes);
    if (PyList_SetSlice(s->changes, before, before, rows) < 0) goto done;
    s->in_transaction = 1;
    if (log_pos > s->pos) s->pos = log_pos;
    s->rows_bytes += size;
    *rows_taken = PyList_GET_SIZE(rows);
    result = TAKEN;
done:
    Py_XDECREF(rows);
    Py_XDECREF(names);
    Py_XDECREF(table);
    Py_XDECREF(schema);
    Py_XDECREF(decode);
    Py_XDECREF(columns);
    Py_XDECREF(info);
    Py_DECREF(entry);
    return result;
}

/* feed_events(decoder, events, index) -> (index, chunk_due): decodes events[index:] into the decoder until one it
   is not sure of (at the index returned), or the end of the list, or a rows event after which the open transaction
   holds as many rows or bytes as the decoder hands on in a part (chunk_due: EventDecoder.feed_from decides). */
static PyObject *feed_events(PyObject *self, PyObject *args) {
    PyObject *decoder, *events;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "OO!n", &decoder, &PyList_Type, &events, &index)) return NULL;
    State s;
    if (state_read(&s, decoder) < 0) {
        state_clear(&s);
        return NULL;
    }
    Py_ssize_t start = index, count = PyList_GET_SIZE(events);
    int chunk_due = 0, failed = 0;
    for (; index < count && !chunk_due; index++) {
        PyObject *event = PyList_GET_ITEM(events, index);
        if (!PyBytes_CheckExact(event)) break;
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(event);
        Py_ssize_t length = PyBytes_GET_SIZE(event);
        if (length < HEADER_LEN) break;
        uint32_t timestamp = u32(b), size = u32(b + 9), log_pos = u32(b + 13);
        int type = b[4], flags = b[17] | b[18] << 8;
        if ((Py_ssize_t)size != length || kinds[type] == K_PYTHON) break;
        Py_ssize_t end = size;
        if (s.crc) {
            end -= 4;
            if (end < HEADER_LEN) break;
            if (s.verify && crc32(0L, b, (uInt)size) != CRC32_RESIDUE) break;
        }
        int rc = TAKEN;
        Py_ssize_t rows = 0;
        switch (kinds[type]) {
        case K_SKIP:
            move_past(&s, log_pos, flags);
            break;
        case K_TABLE_MAP:
            if ((rc = table_map(&s, b, end)) == TAKEN) move_past(&s, log_pos, flags);
            break;
        case K_ROWS:
            rc = rows_event(&s, event, b, end, type, size, timestamp, log_pos, &rows);
            if (rc == TAKEN && s.chunk_rows >= 0)
                chunk_due = PyList_GET_SIZE(s.changes) >= s.chunk_rows || s.rows_bytes >= s.chunk_bytes;
            break;
        }
        if (rc == ERROR && PyErr_ExceptionMatches(PyExc_Exception)) {
            /* Whatever failed (the layout's decoder could not be made, the row images are malformed), feed reads
               the event again and raises it with the state it leaves. What is not an Exception (KeyboardInterrupt,
               SystemExit) goes on up. */
            PyErr_Clear();
            rc = NOT_SURE;
        }
        if (rc == ERROR) failed = 1;
        if (rc != TAKEN) break;
        count_event(&s, type, timestamp, log_pos, flags);
    }
    if (index > start && state_write(&s) < 0) failed = 1;
    state_clear(&s);
    if (failed) return NULL;
    return Py_BuildValue("(nO)", index, chunk_due ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Set what is done with each event type."},
    {"split_packets", split_packets, METH_O, "The whole event packets at the start of a buffer."},
    {"feed_events", feed_events, METH_VARARGS, "Decode a run of events into an EventDecoder."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "binlog._events", NULL, -1, methods};

#ifndef SOURCE_SHA1
#define SOURCE_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__events(void) {
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_pos, "pos"}, {&s_last_timestamp, "last_timestamp"}, {&s_events, "events"},
        {&s_rows_bytes, "_rows_bytes"}, {&s_trx_timestamp, "trx_timestamp"}, {&s_in_transaction, "in_transaction"},
        {&s_past_start, "_past_start"}, {&s_group_started, "_group_started"}, {&s_checksum_alg, "checksum_alg"},
        {&s_verify_checksum, "verify_checksum"}, {&s_file, "file"}, {&s_trx_gtid, "trx_gtid"},
        {&s_tables, "tables"}, {&s_map_cache, "_map_cache"}, {&s_changes, "changes"}, {&s_counts, "counts"},
        {&s_chunk_rows, "chunk_rows"}, {&s_chunk_bytes, "chunk_bytes"}, {&s_fde, "fde"},
        {&s_post_header_lengths, "post_header_lengths"}, {&s_map, "map"}, {&s_table_id, "table_id"},
        {&s_info, "info"}, {&s_columns, "columns"}, {&s_decoders, "decoders"}, {&s_rows_decoder, "rows_decoder"},
        {&s_schema, "schema"}, {&s_table, "table"}, {&s_names, "names"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA1", SOURCE_SHA1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
