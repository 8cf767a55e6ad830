/* The compiled path of the row decoders: one rows event's row images into RowChange objects or into dump's lines.

   binlog/nativerows.py describes each row image of a table layout as a list of operations, one per present column
   (compile_image), and calls decode_rows / text_rows with an event. The values are those of the generated Python
   decoders (binlog/rowdecoder.py), byte for byte: what is rare or costly to reproduce is not done here but handed
   back, either per value to the same Python helpers the generated code calls (the operations' tables and callables),
   or per event: a row image that reads past the buffer or a DECIMAL whose digit groups are out of range makes these
   functions hand the event to the Python decoder they are given, which gives its exact values or its exact error. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

enum {
    OP_INT = 1,      /* little-endian integer of `size` bytes, a = unsigned: its decimal text */
    OP_TABLE_INT,    /* little-endian unsigned of `size` bytes: obj[that number] */
    OP_TEMPORAL,     /* DATE (a = 0) or DATETIME2 (a = 1, b = its precision): its text here when its fields are in
                        range, else obj[the `size` raw bytes] (the Python decoders' memo) */
    OP_DECIMAL,      /* NEWDECIMAL, a = precision, b = scale */
    OP_FLOAT,        /* FLOAT: "%.6g" when it reads back to the same single, else obj(raw) */
    OP_DOUBLE,       /* DOUBLE: repr in fixed notation, else obj(raw) */
    OP_TIMESTAMP,    /* TIMESTAMP(0), big-endian seconds: obj[seconds // 86400] + obj2[seconds % 86400] */
    OP_CALL,         /* obj(the `size` raw bytes) */
    OP_VAR_TEXT,     /* length-prefixed (`size` bytes of length), decoded with codec obj and errors obj2 */
    OP_VAR_BYTES,    /* length-prefixed bytes, padded with zero bytes to `a` */
    OP_VAR_CALL,     /* length-prefixed: obj(the bytes) */
    OP_TIME2,        /* TIME(0): obj[value] for a time of day (value under 98304), obj2(raw) for a negative one */
};

typedef struct {
    int op, size, a, b, nullable;
    Py_ssize_t index;        /* the column's place in the row */
    PyObject *obj, *obj2;
    const char *codec, *errors;
    int utf8_replace;
} Op;

typedef struct {
    Py_ssize_t ncolumns, nops, null_bytes;
    Op ops[];
} Image;

#define FALLBACK 1

static PyObject *NotPresent = NULL;       /* binlog.changes.NOT_PRESENT */
static PyTypeObject *RowChangeType = NULL; /* binlog.changes.RowChange */
enum { S_SCHEMA, S_TABLE, S_KIND, S_COLUMNS, S_BEFORE, S_AFTER, S_FILE, S_POS, S_ROW, S_TIMESTAMP, S_GTID, S_INFO,
       S_COUNT };
static const char *const slot_names[S_COUNT] = {"schema", "table", "kind", "columns", "before", "after", "file",
                                                "pos", "row", "timestamp", "gtid", "table_info"};
static Py_ssize_t slot_offsets[S_COUNT];
static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t powers10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* -- images ----------------------------------------------------------------------------------------------------- */

static void image_free(PyObject *capsule) {
    Image *image = PyCapsule_GetPointer(capsule, "binlog._rows.Image");
    if (image == NULL) return;
    for (Py_ssize_t i = 0; i < image->nops; i++) {
        Py_XDECREF(image->ops[i].obj);
        Py_XDECREF(image->ops[i].obj2);
    }
    PyMem_Free(image);
}

static int fixed_op(int op) { return op != OP_VAR_TEXT && op != OP_VAR_BYTES && op != OP_VAR_CALL; }

/* compile_image(ncolumns, ops): ops is a sequence of (index, nullable, op, size, a, b, obj, obj2), one per present
   column in order. */
static PyObject *compile_image(PyObject *self, PyObject *args) {
    Py_ssize_t ncolumns;
    PyObject *ops;
    if (!PyArg_ParseTuple(args, "nO", &ncolumns, &ops)) return NULL;
    PyObject *seq = PySequence_Fast(ops, "ops must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Image *image = PyMem_Calloc(1, sizeof(Image) + (size_t)n * sizeof(Op));
    if (image == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    image->ncolumns = ncolumns;
    image->null_bytes = (n + 7) / 8;
    PyObject *capsule = PyCapsule_New(image, "binlog._rows.Image", image_free);
    if (capsule == NULL) {
        PyMem_Free(image);
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Op *op = &image->ops[i];
        PyObject *obj, *obj2;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "npiiiiOO", &op->index, &op->nullable, &op->op,
                              &op->size, &op->a, &op->b, &obj, &obj2))
            goto fail;
        image->nops = i + 1;
        op->obj = Py_NewRef(obj);
        op->obj2 = Py_NewRef(obj2);
        if (op->index < 0 || op->index >= ncolumns || op->op < OP_INT || op->op > OP_TIME2 || op->size < 0 ||
            op->size > 65535 || (op->op == OP_DECIMAL && (op->b > op->a || op->a > 80)) ||
            (op->op == OP_TEMPORAL && (op->a ? op->b < 0 || op->b > 6 || op->size != 5 + (op->b + 1) / 2
                                             : op->size != 3))) {
            PyErr_Format(PyExc_ValueError, "operation %zd is malformed", i);
            goto fail;
        }
        if (op->op == OP_VAR_TEXT) {
            op->codec = PyUnicode_AsUTF8(obj);
            op->errors = op->codec ? PyUnicode_AsUTF8(obj2) : NULL;
            if (op->errors == NULL) goto fail;
            op->utf8_replace = strcmp(op->codec, "utf-8") == 0 && strcmp(op->errors, "replace") == 0;
        }
        if ((op->op == OP_INT && op->size != 1 && op->size != 2 && op->size != 3 && op->size != 4 && op->size != 8) ||
            (op->op == OP_TABLE_INT && op->size != 1 && op->size != 2) ||
            (!fixed_op(op->op) && (op->size < 1 || op->size > 4))) {
            PyErr_Format(PyExc_ValueError, "operation %zd has a size it cannot have", i);
            goto fail;
        }
    }
    Py_DECREF(seq);
    return capsule;
fail:
    Py_DECREF(seq);
    Py_DECREF(capsule);
    return NULL;
}

/* -- values ----------------------------------------------------------------------------------------------------- */

static PyObject *ascii_text(const char *text, Py_ssize_t length) {
    PyObject *s = PyUnicode_New(length, 127);
    if (s != NULL) memcpy(PyUnicode_1BYTE_DATA(s), text, (size_t)length);
    return s;
}

static uint64_t little(const unsigned char *p, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t big(const unsigned char *p, int size) {
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v = v << 8 | p[i];
    return v;
}

/* The decimal digits of v at out (no terminator); how many. */
static Py_ssize_t unsigned_text(uint64_t v, char *out) {
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
    return n;
}

/* v (under 10^9) as 9 digits with leading zeros at out; 9. */
static Py_ssize_t nine_digits(uint32_t v, char *out) {
    for (int i = 8; i >= 0; i--, v /= 10) out[i] = (char)('0' + v % 10);
    return 9;
}

/* The text of a NEWDECIMAL at p into out (room for 2 + precision + 1 bytes); FALLBACK when a digit group is out of
   range (not written by a server: the Python decoder says what such bytes give). */
static int decimal_text(const unsigned char *p, int precision, int scale, char *out, Py_ssize_t *length) {
    int intg = precision - scale, intg0 = intg / 9, intg0x = intg % 9, frac0 = scale / 9, frac0x = scale % 9;
    int size = dig2bytes[intg0x] + intg0 * 4 + frac0 * 4 + dig2bytes[frac0x];
    unsigned char bytes[64];
    if (size == 0) {
        out[0] = '0';
        *length = 1;
        return 0;
    }
    if (size > (int)sizeof(bytes)) return FALLBACK;
    memcpy(bytes, p, (size_t)size);
    int negative = !(bytes[0] & 0x80);
    bytes[0] ^= 0x80;
    if (negative)
        for (int i = 0; i < size; i++) bytes[i] ^= 0xFF;
    char *w = out + 1; /* out[0] for the sign */
    const unsigned char *q = bytes;
    int started = 0, nonzero = 0;
    if (intg0x) {
        int width = dig2bytes[intg0x];
        uint32_t group = (uint32_t)big(q, width);
        q += width;
        if (group >= powers10[intg0x]) return FALLBACK;
        if (group) {
            w += unsigned_text(group, w);
            started = nonzero = 1;
        }
    }
    for (int i = 0; i < intg0; i++, q += 4) {
        uint32_t group = (uint32_t)big(q, 4);
        if (group >= powers10[9]) return FALLBACK;
        if (started) {
            w += nine_digits(group, w);
        } else if (group) {
            w += unsigned_text(group, w);
            started = nonzero = 1;
        }
    }
    if (!started) *w++ = '0';
    if (scale) {
        *w++ = '.';
        for (int i = 0; i < frac0; i++, q += 4) {
            uint32_t group = (uint32_t)big(q, 4);
            if (group >= powers10[9]) return FALLBACK;
            nonzero |= group != 0;
            w += nine_digits(group, w);
        }
        if (frac0x) {
            int width = dig2bytes[frac0x];
            uint32_t group = (uint32_t)big(q, width);
            if (group >= powers10[frac0x]) return FALLBACK;
            nonzero |= group != 0;
            for (int i = frac0x - 1; i >= 0; i--, group /= 10) w[i] = (char)('0' + group % 10);
            w += frac0x;
        }
    }
    if (negative && nonzero) {
        out[0] = '-';
        *length = w - out;
    } else {
        memmove(out, out + 1, (size_t)(w - out - 1));
        *length = w - out - 1;
    }
    return 0;
}

/* A FLOAT's text in its common notation into out (room for 32 bytes): "%.6g" when it reads back to the same single
   and has no exponent. 1 written (*length set), 0 for the Python helper's longer forms, -1 with an exception. */
static int float_text(const unsigned char *p, char *out, Py_ssize_t *length) {
    float f;
    memcpy(&f, p, 4);
    double v = f;
    if (v == 0.0) return 0;
    char *text = PyOS_double_to_string(v, 'g', 6, 0, NULL);
    if (text == NULL) return -1;
    int written = 0;
    size_t n = strlen(text);
    if (strchr(text, 'e') == NULL && n < 32) {
        double back = PyOS_string_to_double(text, NULL, NULL);
        float single = (float)back;
        if (back == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
        } else if (memcmp(&single, p, 4) == 0) {
            memcpy(out, text, n);
            *length = (Py_ssize_t)n;
            written = 1;
        }
    }
    PyMem_Free(text);
    return written;
}

/* A DOUBLE's text in fixed notation (repr without its ".0") into out (room for 32 bytes); as float_text. */
static int double_text(const unsigned char *p, char *out, Py_ssize_t *length) {
    double v;
    memcpy(&v, p, 8);
    if (!(-1e15 < v && v < 1e15)) return 0;
    char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL) return -1;
    int written = 0;
    size_t n = strlen(text);
    if (strchr(text, 'e') == NULL && n < 32) {
        if (n >= 2 && text[n - 2] == '.' && text[n - 1] == '0') n -= 2;
        memcpy(out, text, n);
        *length = (Py_ssize_t)n;
        written = 1;
    }
    PyMem_Free(text);
    return written;
}

static PyObject *table_item(PyObject *table, uint64_t key) {
    if (PyTuple_CheckExact(table) && key < (uint64_t)PyTuple_GET_SIZE(table))
        return Py_NewRef(PyTuple_GET_ITEM(table, (Py_ssize_t)key));
    PyObject *k = PyLong_FromUnsignedLongLong(key);
    if (k == NULL) return NULL;
    PyObject *v = PyObject_GetItem(table, k);
    Py_DECREF(k);
    return v;
}

static PyObject *call_with_bytes(PyObject *callable, const unsigned char *p, Py_ssize_t n) {
    PyObject *raw = PyBytes_FromStringAndSize((const char *)p, n);
    if (raw == NULL) return NULL;
    PyObject *v = PyObject_CallOneArg(callable, raw);
    Py_DECREF(raw);
    return v;
}

/* The text of an integer or DECIMAL value at p into out (room for 96 bytes); FALLBACK where the Python decoder
   must say what it is. */
static int number_text(const Op *op, const unsigned char *p, char *out, Py_ssize_t *length) {
    if (op->op == OP_DECIMAL) return op->a > 80 ? FALLBACK : decimal_text(p, op->a, op->b, out, length);
    uint64_t u = little(p, op->size);
    int bits = op->size * 8;
    if (!op->a && u >> (bits - 1) & 1) { /* negative: its magnitude is the two's complement within its bits */
        uint64_t magnitude = (bits == 64 ? 0 : 1ULL << bits) - u;
        out[0] = '-';
        *length = 1 + unsigned_text(magnitude, out + 1);
    } else {
        *length = unsigned_text(u, out);
    }
    return 0;
}

/* n (>= 0) with at least `width` digits at out; how many written. */
static Py_ssize_t padded(uint64_t n, int width, char *out) {
    char digits[20];
    int count = (int)unsigned_text(n, digits);
    int zeros = count < width ? width - count : 0;
    memset(out, '0', (size_t)zeros);
    memcpy(out + zeros, digits, (size_t)count);
    return zeros + count;
}

/* A DATE's or DATETIME2's text into out (room for 40 bytes), as values.date_text and values._datetime2_from_bytes
   write it; 0 where a DATETIME2's fields are out of range (the memo says what such bytes give). */
static int temporal_text(const Op *op, const unsigned char *p, char *out, Py_ssize_t *length) {
    char *w = out;
    uint64_t ymd;
    if (op->a == 0) {
        uint64_t value = little(p, 3);
        w += padded(value >> 9, 4, w);
        *w++ = '-';
        w += padded(value >> 5 & 15, 2, w);
        *w++ = '-';
        w += padded(value & 31, 2, w);
        *length = w - out;
        return 1;
    }
    uint64_t raw = big(p, 5);
    if (raw < 0x8000000000ULL) return 0;
    uint64_t packed = raw - 0x8000000000ULL, hms = packed & 0x1FFFF;
    int fsp = op->b;
    uint64_t usec = fsp == 0 ? 0 : fsp <= 2 ? (uint64_t)p[5] * 10000 : fsp <= 4 ? big(p + 5, 2) * 100 : big(p + 5, 3);
    if (hms >> 12 >= 24 || (hms >> 6 & 63) >= 60 || (hms & 63) >= 60 || usec >= 1000000) return 0;
    ymd = packed >> 17;
    w += padded((ymd >> 5) / 13, 4, w);
    *w++ = '-';
    w += padded((ymd >> 5) % 13, 2, w);
    *w++ = '-';
    w += padded(ymd & 31, 2, w);
    *w++ = ' ';
    w += padded(hms >> 12, 2, w);
    *w++ = ':';
    w += padded(hms >> 6 & 63, 2, w);
    *w++ = ':';
    w += padded(hms & 63, 2, w);
    if (fsp) {
        char digits[8];
        padded(usec, 6, digits);
        *w++ = '.';
        memcpy(w, digits, (size_t)fsp);
        w += fsp;
    }
    *length = w - out;
    return 1;
}

#define WRITTEN 2

/* The text of a value that this module writes itself (numbers, FLOAT and DOUBLE in their common notation, DATE and
   DATETIME2 in range) into out (room for 98 bytes): WRITTEN, 0 when the op's Python helper or memo must give it,
   FALLBACK for the Python decoder, -1 with an exception. */
static int direct_text(const Op *op, const unsigned char *p, char *out, Py_ssize_t *length) {
    int written;
    switch (op->op) {
    case OP_INT:
    case OP_DECIMAL:
        return number_text(op, p, out, length) ? FALLBACK : WRITTEN;
    case OP_FLOAT:
        written = float_text(p, out, length);
        break;
    case OP_DOUBLE:
        written = double_text(p, out, length);
        break;
    case OP_TEMPORAL:
        written = temporal_text(op, p, out, length);
        break;
    default:
        return 0;
    }
    return written > 0 ? WRITTEN : written;
}

/* One fixed-size value at p (the op's size bytes are there). */
static PyObject *fixed_value(const Op *op, const unsigned char *p, int *fallback) {
    char text[98];
    Py_ssize_t n;
    switch (direct_text(op, p, text, &n)) {
    case WRITTEN:
        return ascii_text(text, n);
    case FALLBACK:
        *fallback = 1;
        return NULL;
    case -1:
        return NULL;
    }
    switch (op->op) {
    case OP_FLOAT:
    case OP_DOUBLE:
        return call_with_bytes(op->obj, p, op->size);
    case OP_TEMPORAL: {
        PyObject *key = PyBytes_FromStringAndSize((const char *)p, op->size);
        if (key == NULL) return NULL;
        PyObject *v = PyObject_GetItem(op->obj, key);
        Py_DECREF(key);
        return v;
    }
    case OP_TABLE_INT:
        return table_item(op->obj, little(p, op->size));
    case OP_TIMESTAMP: {
        uint64_t seconds = big(p, 4);
        if (seconds == 0) return ascii_text("0000-00-00 00:00:00", 19);
        PyObject *day = table_item(op->obj, seconds / 86400);
        if (day == NULL) return NULL;
        PyObject *time = table_item(op->obj2, seconds % 86400);
        if (time == NULL) {
            Py_DECREF(day);
            return NULL;
        }
        PyObject *v = PyUnicode_Concat(day, time);
        Py_DECREF(day);
        Py_DECREF(time);
        return v;
    }
    case OP_CALL:
        return call_with_bytes(op->obj, p, op->size);
    case OP_TIME2: {
        int64_t value = (int64_t)big(p, 3) - 8388608;
        if (value >= 0 && value < 98304) return table_item(op->obj, (uint64_t)value);
        if (value < 0) return call_with_bytes(op->obj2, p, 3);
        char text[16]; /* a duration of 24 hours or more: its fields as they are */
        return ascii_text(text, sprintf(text, "%02d:%02d:%02d", (int)(value >> 12 & 1023), (int)(value >> 6 & 63),
                                        (int)(value & 63)));
    }
    }
    PyErr_SetString(PyExc_SystemError, "unknown row image operation");
    return NULL;
}

/* The value of a present column that is not NULL, at *pp: 0 (*value set, *pp past it), -1 with an exception, or
   FALLBACK. */
static int read_value(const Op *op, const unsigned char *buf, Py_ssize_t length, Py_ssize_t *pp, PyObject **value) {
    Py_ssize_t p = *pp;
    PyObject *v;
    if (p + op->size > length) return FALLBACK;
    if (fixed_op(op->op)) {
        int fallback = 0;
        v = fixed_value(op, buf + p, &fallback);
        if (fallback) return FALLBACK;
        p += op->size;
    } else {
        Py_ssize_t n = (Py_ssize_t)little(buf + p, op->size);
        if (n > length - p - op->size) return FALLBACK;
        const unsigned char *data = buf + p + op->size;
        if (op->op == OP_VAR_TEXT) {
            v = op->utf8_replace ? PyUnicode_DecodeUTF8((const char *)data, n, "replace")
                                 : PyUnicode_Decode((const char *)data, n, op->codec, op->errors);
        } else if (op->op == OP_VAR_BYTES) {
            if (n < op->a) {
                v = PyBytes_FromStringAndSize(NULL, op->a);
                if (v != NULL) {
                    memcpy(PyBytes_AS_STRING(v), data, (size_t)n);
                    memset(PyBytes_AS_STRING(v) + n, 0, (size_t)(op->a - n));
                }
            } else {
                v = PyBytes_FromStringAndSize((const char *)data, n);
            }
        } else {
            v = call_with_bytes(op->obj, data, n);
        }
        p += op->size + n;
    }
    if (v == NULL) return -1;
    *value = v;
    *pp = p;
    return 0;
}

static int is_null(const Op *op, const unsigned char *nulls, Py_ssize_t i) {
    return op->nullable && (nulls[i >> 3] >> (i & 7) & 1);
}

/* The values of one row image into values[0..ncolumns) (NOT_PRESENT where the image has no column), from *pp;
   0, -1 with an exception, or FALLBACK. values must hold NULLs on entry; on failure the caller releases them. */
static int decode_image(const Image *image, const unsigned char *buf, Py_ssize_t length, Py_ssize_t *pp,
                        PyObject **values) {
    Py_ssize_t p = *pp;
    const unsigned char *nulls = buf + p;
    if (p + image->null_bytes > length) return FALLBACK;
    p += image->null_bytes;
    for (Py_ssize_t i = 0; i < image->nops; i++) {
        const Op *op = &image->ops[i];
        if (is_null(op, nulls, i)) {
            values[op->index] = Py_NewRef(Py_None);
            continue;
        }
        int status = read_value(op, buf, length, &p, &values[op->index]);
        if (status) return status;
    }
    for (Py_ssize_t i = 0; i < image->ncolumns; i++)
        if (values[i] == NULL) values[i] = Py_NewRef(NotPresent);
    *pp = p;
    return 0;
}

static PyObject *image_tuple(const Image *image, const unsigned char *buf, Py_ssize_t length, Py_ssize_t *pp,
                             int *status) {
    PyObject *tuple = PyTuple_New(image->ncolumns);
    if (tuple == NULL) {
        *status = -1;
        return NULL;
    }
    *status = decode_image(image, buf, length, pp, &PyTuple_GET_ITEM(tuple, 0));
    if (*status) {
        Py_DECREF(tuple); /* its NULL items are skipped */
        return NULL;
    }
    return tuple;
}

/* -- the events' rows ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject *first, *second; /* capsules: the images of a row (second: an UPDATE's after image) or None */
    int kind;
    PyObject *fallback;       /* the Python decoder, called with the event's arguments for an event handed back */
    PyObject *args;
    PyObject *buf;
    Py_ssize_t p, end;
    PyObject *schema, *table, *names, *file, *pos, *timestamp, *gtid, *info;
    Py_ssize_t row;
} Event;

static int parse_event(PyObject *args, Event *e) {
    e->args = args;
    if (!PyArg_ParseTuple(args, "OOiOOnnOOOOOOOOn", &e->first, &e->second, &e->kind, &e->fallback, &e->buf, &e->p,
                          &e->end, &e->schema, &e->table, &e->names, &e->file, &e->pos, &e->timestamp, &e->gtid,
                          &e->info, &e->row))
        return -1;
    if (!PyBytes_CheckExact(e->buf) || !PyTuple_Check(e->names) || e->p < 0) return FALLBACK;
    return 0;
}

/* The event decoded by the Python decoder: its arguments after the compiled decoder's own four. */
static PyObject *hand_back(const Event *e) {
    PyObject *rest = PyTuple_GetSlice(e->args, 4, PyTuple_GET_SIZE(e->args));
    if (rest == NULL) return NULL;
    PyObject *result = PyObject_Call(e->fallback, rest, NULL);
    Py_DECREF(rest);
    return result;
}

static const Image *image_of(PyObject *capsule) {
    return capsule == Py_None ? NULL : PyCapsule_GetPointer(capsule, "binlog._rows.Image");
}

static void set_slot(PyObject *object, int slot, PyObject *value) {
    PyObject **place = (PyObject **)((char *)object + slot_offsets[slot]);
    Py_XSETREF(*place, value);
}

/* decode_rows(first, second, kind, fallback, buf, p, end, schema, table, names, file, pos, timestamp, gtid, info,
   row): ([RowChange], p), or what fallback (the Python decoder) gives for an event handed back. */
static PyObject *decode_rows(PyObject *self, PyObject *args) {
    Event e;
    int status = parse_event(args, &e);
    if (status < 0) return NULL;
    if (status == FALLBACK || RowChangeType == NULL) return hand_back(&e);
    const Image *first = image_of(e.first), *second = image_of(e.second);
    if ((first == NULL && e.first != Py_None) || (second == NULL && e.second != Py_None)) return NULL;
    if (first == NULL || (second != NULL && second->ncolumns != first->ncolumns)) return hand_back(&e);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(e.buf);
    Py_ssize_t length = PyBytes_GET_SIZE(e.buf), p = e.p;
    PyObject *out = PyList_New(0), *kind = PyLong_FromLong(e.kind);
    if (out == NULL || kind == NULL) goto error;
    for (Py_ssize_t row = e.row; p < e.end; row++) {
        Py_ssize_t start = p;
        PyObject *a = image_tuple(first, buf, length, &p, &status), *b = NULL;
        if (a == NULL) goto failed;
        if (second != NULL) {
            b = image_tuple(second, buf, length, &p, &status);
            if (b == NULL) {
                Py_DECREF(a);
                goto failed;
            }
        }
        if (p == start) { /* a row of no bytes: the rows would never end (the parser refuses such events) */
            Py_DECREF(a);
            Py_XDECREF(b);
            status = FALLBACK;
            goto failed;
        }
        PyObject *change = RowChangeType->tp_alloc(RowChangeType, 0);
        PyObject *number = PyLong_FromSsize_t(row);
        if (change == NULL || number == NULL) {
            Py_XDECREF(change);
            Py_XDECREF(number);
            Py_DECREF(a);
            Py_XDECREF(b);
            goto error;
        }
        set_slot(change, S_SCHEMA, Py_NewRef(e.schema));
        set_slot(change, S_TABLE, Py_NewRef(e.table));
        set_slot(change, S_KIND, Py_NewRef(kind));
        set_slot(change, S_COLUMNS, Py_NewRef(e.names));
        if (second != NULL) {
            set_slot(change, S_BEFORE, a);
            set_slot(change, S_AFTER, b);
        } else if (e.kind == 4) { /* KIND_DELETE */
            set_slot(change, S_BEFORE, a);
            set_slot(change, S_AFTER, Py_NewRef(Py_None));
        } else {
            set_slot(change, S_BEFORE, Py_NewRef(Py_None));
            set_slot(change, S_AFTER, a);
        }
        set_slot(change, S_FILE, Py_NewRef(e.file));
        set_slot(change, S_POS, Py_NewRef(e.pos));
        set_slot(change, S_ROW, number);
        set_slot(change, S_TIMESTAMP, Py_NewRef(e.timestamp));
        set_slot(change, S_GTID, Py_NewRef(e.gtid));
        set_slot(change, S_INFO, Py_NewRef(e.info));
        int appended = PyList_Append(out, change);
        Py_DECREF(change);
        if (appended < 0) goto error;
    }
    Py_DECREF(kind);
    return Py_BuildValue("(Nn)", out, p);
failed:
    if (status == FALLBACK) {
        Py_XDECREF(out);
        Py_XDECREF(kind);
        return hand_back(&e);
    }
error:
    Py_XDECREF(out);
    Py_XDECREF(kind);
    return NULL;
}

/* -- dump's lines ----------------------------------------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t length, room;
    int ascii;
} Text;

/* Room in the text for n more bytes. */
static int text_room(Text *t, Py_ssize_t n) {
    if (t->length + n <= t->room) return 0;
    Py_ssize_t room = (t->length + n) * 2 + 64;
    char *data = PyMem_Realloc(t->data, (size_t)room);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->data = data;
    t->room = room;
    return 0;
}

static int text_add(Text *t, const char *s, Py_ssize_t n) {
    if (text_room(t, n) < 0) return -1;
    memcpy(t->data + t->length, s, (size_t)n);
    t->length += n;
    return 0;
}

/* A str's UTF-8 (ASCII: its own bytes) added to the text; -1 with an exception if it has none (lone surrogates). */
static int text_add_str(Text *t, PyObject *s) {
    if (PyUnicode_IS_ASCII(s)) return text_add(t, (const char *)PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s));
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) return -1;
    t->ascii = 0;
    return text_add(t, utf8, n);
}

/* Whether text of these bytes is its own repr between single quotes: printable ASCII without a quote or a
   backslash. */
static int plain_ascii(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] >= 0x7f || s[i] == '\'' || s[i] == '\\') return 0;
    return 1;
}

/* A value as change_as_text shows it: NULL, 0x and the hex of bytes, a str's repr. */
static int text_add_value(Text *t, PyObject *v) {
    if (v == Py_None) return text_add(t, "NULL", 4);
    if (PyBytes_Check(v)) {
        static const char hex[] = "0123456789abcdef";
        Py_ssize_t n = PyBytes_GET_SIZE(v);
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(v);
        if (text_add(t, "0x", 2) < 0 || text_room(t, 2 * n) < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            t->data[t->length++] = hex[s[i] >> 4];
            t->data[t->length++] = hex[s[i] & 15];
        }
        return 0;
    }
    if (PyUnicode_CheckExact(v) && PyUnicode_IS_ASCII(v)) {
        const unsigned char *s = PyUnicode_1BYTE_DATA(v);
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        if (plain_ascii(s, n)) {
            if (text_add(t, "'", 1) < 0 || text_add(t, (const char *)s, n) < 0) return -1;
            return text_add(t, "'", 1);
        }
    }
    PyObject *r = PyObject_Repr(v);
    if (r == NULL) return -1;
    int status = text_add_str(t, r);
    Py_DECREF(r);
    return status;
}

/* One row image as change_as_text writes it (label, then name=value for each column present), from *pp. */
static int render_image(const Image *image, const unsigned char *buf, Py_ssize_t length, Py_ssize_t *pp,
                        PyObject *names, Text *t, const char *label) {
    Py_ssize_t p = *pp;
    const unsigned char *nulls = buf + p;
    if (p + image->null_bytes > length) return FALLBACK;
    p += image->null_bytes;
    if (text_add(t, label, (Py_ssize_t)strlen(label)) < 0) return -1;
    for (Py_ssize_t i = 0; i < image->nops; i++) {
        const Op *op = &image->ops[i];
        if ((i && text_add(t, ", ", 2) < 0) || text_add_str(t, PyTuple_GET_ITEM(names, op->index)) < 0 ||
            text_add(t, "=", 1) < 0)
            return -1;
        if (is_null(op, nulls, i)) {
            if (text_add(t, "NULL", 4) < 0) return -1;
            continue;
        }
        /* Numbers, and printable ASCII text without quotes or backslashes, are their own repr between quotes: no
           object in between. */
        if (fixed_op(op->op)) {
            char text[100];
            Py_ssize_t n;
            if (p + op->size > length) return FALLBACK;
            int written = direct_text(op, buf + p, text + 1, &n);
            if (written < 0 || written == FALLBACK) return written;
            if (written == WRITTEN) {
                text[0] = text[n + 1] = '\'';
                if (text_add(t, text, n + 2) < 0) return -1;
                p += op->size;
                continue;
            }        } else if (op->op == OP_VAR_TEXT && op->utf8_replace && p + op->size <= length) {
            Py_ssize_t n = (Py_ssize_t)little(buf + p, op->size);
            const unsigned char *data = buf + p + op->size;
            if (n <= length - p - op->size && plain_ascii(data, n)) {
                if (text_room(t, n + 2) < 0) return -1;
                t->data[t->length] = '\'';
                memcpy(t->data + t->length + 1, data, (size_t)n);
                t->data[t->length + n + 1] = '\'';
                t->length += n + 2;
                p += op->size + n;
                continue;
            }
        }
        PyObject *v;
        int status = read_value(op, buf, length, &p, &v);
        if (status) return status;
        status = text_add_value(t, v);
        Py_DECREF(v);
        if (status < 0) return -1;
    }
    *pp = p;
    return 0;
}

/* text_rows(first, second, kind, fallback, buf, p, ...): each row's line as change_as_text writes it, and p; or what
   fallback (the Python text decoder) gives for an event handed back. */
static PyObject *text_rows(PyObject *self, PyObject *args) {
    Event e;
    int status = parse_event(args, &e);
    if (status < 0) return NULL;
    if (status == FALLBACK) return hand_back(&e);
    const Image *first = image_of(e.first), *second = image_of(e.second);
    if ((first == NULL && e.first != Py_None) || (second == NULL && e.second != Py_None)) return NULL;
    const char *kind_name = e.kind == 1 ? "insert" : e.kind == 2 ? "update" : e.kind == 4 ? "delete" : NULL;
    if (first == NULL || kind_name == NULL || PyTuple_GET_SIZE(e.names) < first->ncolumns ||
        (second != NULL && second->ncolumns != first->ncolumns) || !PyUnicode_Check(e.file) ||
        !PyUnicode_Check(e.gtid) || !PyUnicode_Check(e.schema) || !PyUnicode_Check(e.table))
        return hand_back(&e);
    for (Py_ssize_t i = 0; i < first->ncolumns; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(e.names, i))) return hand_back(&e);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(e.buf);
    Py_ssize_t length = PyBytes_GET_SIZE(e.buf), p = e.p;
    const char *label = second != NULL || e.kind == 4 ? " before: " : " after: ";
    Text head = {NULL, 0, 0, 1}, line = {NULL, 0, 0, 1};
    PyObject *out = PyList_New(0), *pos_text = PyObject_Str(e.pos), *result = NULL;
    if (out == NULL || pos_text == NULL) goto done;
    /* "{file}:{pos}#", the row number's place, then " {gtid or '-'} {kind} {schema}.{table}" */
    Py_ssize_t number_at;
    if (text_add_str(&head, e.file) < 0 || text_add(&head, ":", 1) < 0 || text_add_str(&head, pos_text) < 0 ||
        text_add(&head, "#", 1) < 0)
        goto done;
    number_at = head.length;
    if (text_add(&head, " ", 1) < 0 ||
        (PyUnicode_GET_LENGTH(e.gtid) ? text_add_str(&head, e.gtid) : text_add(&head, "-", 1)) < 0 ||
        text_add(&head, " ", 1) < 0 || text_add(&head, kind_name, (Py_ssize_t)strlen(kind_name)) < 0 ||
        text_add(&head, " ", 1) < 0 || text_add_str(&head, e.schema) < 0 || text_add(&head, ".", 1) < 0 ||
        text_add_str(&head, e.table) < 0)
        goto done;
    for (Py_ssize_t row = e.row; p < e.end; row++) {
        char number[32];
        Py_ssize_t n = row < 0 ? sprintf(number, "%zd", row) : unsigned_text((uint64_t)row, number);
        line.length = 0;
        line.ascii = head.ascii;
        if (text_add(&line, head.data, number_at) < 0 || text_add(&line, number, n) < 0 ||
            text_add(&line, head.data + number_at, head.length - number_at) < 0)
            goto done;
        Py_ssize_t start = p;
        status = render_image(first, buf, length, &p, e.names, &line, label);
        if (status == 0 && second != NULL) status = render_image(second, buf, length, &p, e.names, &line, " after: ");
        if (status == 0 && p == start) status = FALLBACK; /* a row of no bytes, as in decode_rows */
        if (status) goto done;
        PyObject *s = line.ascii ? ascii_text(line.data, line.length)
                                 : PyUnicode_DecodeUTF8(line.data, line.length, NULL);
        if (s == NULL) goto done;
        int appended = PyList_Append(out, s);
        Py_DECREF(s);
        if (appended < 0) goto done;
    }
    result = Py_BuildValue("(On)", out, p);
done:
    PyMem_Free(head.data);
    PyMem_Free(line.data);
    Py_XDECREF(out);
    Py_XDECREF(pos_text);
    if (result != NULL) return result;
    /* A row the Python decoder must read (status FALLBACK), or a name or value without UTF-8 (lone surrogates,
       which the Python path writes as it can): the caller decodes the event in Python. */
    if (status == FALLBACK || (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))) {
        PyErr_Clear();
        return hand_back(&e);
    }
    return NULL;
}

/* configure(RowChange, NOT_PRESENT): the class decode_rows builds (its slots' places) and the absent value. */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *not_present;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &not_present)) return NULL;
    for (int i = 0; i < S_COUNT; i++) {
        PyObject *descriptor = PyObject_GetAttrString(type, slot_names[i]);
        if (descriptor == NULL) return NULL;
        int ok = Py_IS_TYPE(descriptor, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descriptor)->d_member->type == T_OBJECT_EX;
        if (ok) slot_offsets[i] = ((PyMemberDescrObject *)descriptor)->d_member->offset;
        Py_DECREF(descriptor);
        if (!ok) return PyErr_Format(PyExc_TypeError, "%s is not a slot of the row change class", slot_names[i]);
    }
    Py_XSETREF(RowChangeType, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(NotPresent, Py_NewRef(not_present));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Set the row change class and the value of a column left out."},
    {"compile_image", compile_image, METH_VARARGS, "A row image's operations, compiled."},
    {"decode_rows", decode_rows, METH_VARARGS, "An event's rows as RowChange objects."},
    {"text_rows", text_rows, METH_VARARGS, "An event's rows as dump's lines."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "binlog._rows", NULL, -1, methods};

#ifndef SOURCE_SHA1
#define SOURCE_SHA1 ""
#endif

/* The module, with the SHA-1 of the source it was built from (devtools/native.py defines it): a build older than
   its source is not used. */
PyMODINIT_FUNC PyInit__rows(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA1", SOURCE_SHA1) < 0) Py_CLEAR(m);
    return m;
}
