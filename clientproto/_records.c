/* The compiled path of clientproto.records.encode_images: a row change's FETCH column bytes (ColumnCount, then Name,
   Flags, Before, After per column), byte for byte what the Python encoder writes, for the worker, which encodes every
   stored change once; and of the record form the store keeps them in (record_text: a prefix and their base64, for
   images of text and NULLs). records.py passes each column's Name as the bytes its layout cache holds. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *Absent = NULL; /* clientproto.ABSENT */
static int BeforeNull, AfterNull, BeforeAbsent, AfterAbsent;

typedef struct {
    char *data;
    Py_ssize_t length, room;
} Out;

static int room(Out *o, Py_ssize_t n) {
    if (o->length + n <= o->room) return 0;
    Py_ssize_t size = (o->length + n) * 2 + 256;
    char *data = PyMem_Realloc(o->data, (size_t)size);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->data = data;
    o->room = size;
    return 0;
}

static int add(Out *o, const void *s, Py_ssize_t n) {
    if (room(o, n) < 0) return -1;
    memcpy(o->data + o->length, s, (size_t)n);
    o->length += n;
    return 0;
}

static void put_u32(char *at, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    memcpy(at, b, 4);
}

/* The value bytes of a present value: a str's strict UTF-8, or a bytes-like object's bytes (view released by the
   caller when *view_used). */
static int value_bytes(PyObject *v, const char **data, Py_ssize_t *n, Py_buffer *view, int *view_used) {
    *view_used = 0;
    if (PyUnicode_Check(v)) {
        *data = PyUnicode_AsUTF8AndSize(v, n);
        return *data == NULL ? -1 : 0;
    }
    if (PyBytes_CheckExact(v)) {
        *data = PyBytes_AS_STRING(v);
        *n = PyBytes_GET_SIZE(v);
        return 0;
    }
    if (PyObject_GetBuffer(v, view, PyBUF_SIMPLE) < 0) return -1;
    *view_used = 1;
    *data = view->buf;
    *n = view->len;
    return 0;
}

/* Length (u32, counting the NUL), the bytes, a NUL. */
static int add_value(Out *o, PyObject *v) {
    const char *data;
    Py_ssize_t n;
    Py_buffer view;
    int view_used, status = -1;
    if (value_bytes(v, &data, &n, &view, &view_used) < 0) return -1;
    if (n >= 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_OverflowError, "a value of 4 GiB or more does not fit a record");
    } else if (room(o, n + 5) == 0) {
        put_u32(o->data + o->length, (uint32_t)(n + 1));
        memcpy(o->data + o->length + 4, data, (size_t)n);
        o->data[o->length + 4 + n] = 0;
        o->length += n + 5;
        status = 0;
    }
    if (view_used) PyBuffer_Release(&view);
    return status;
}

static int add_name(Out *o, PyObject *name, int flags) {
    if (!PyBytes_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "a column name must be given as its encoded bytes");
        return -1;
    }
    unsigned char flag = (unsigned char)flags;
    if (add(o, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)) < 0) return -1;
    return add(o, &flag, 1);
}

/* The column bytes of the images b and a (each a PySequence_Fast or NULL when absent) into o. */
static int encode_into(Out *o, PyObject *names, PyObject *b, PyObject *a) {
    if (room(o, 4) < 0) return -1;
    o->length = 4; /* ColumnCount, once known */
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (b == NULL || a == NULL) {
        PyObject *image = a != NULL ? a : b;
        /* An image alone: the other's flag on every column. */
        int other = b == NULL ? BeforeAbsent : AfterAbsent, null = b == NULL ? AfterNull : BeforeNull,
            absent = b == NULL ? AfterAbsent : BeforeAbsent;
        count = image == NULL ? 0 : Py_MIN(count, PySequence_Fast_GET_SIZE(image));
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(image, i), *name = PyTuple_GET_ITEM(names, i);
            if (v == Py_None) {
                if (add_name(o, name, other | null) < 0) return -1;
            } else if (v == Absent) {
                if (add_name(o, name, other | absent) < 0) return -1;
            } else if (add_name(o, name, other) < 0 || add_value(o, v) < 0) {
                return -1;
            }
        }
    } else {
        count = Py_MIN(count, Py_MIN(PySequence_Fast_GET_SIZE(b), PySequence_Fast_GET_SIZE(a)));
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *bv = PySequence_Fast_GET_ITEM(b, i), *av = PySequence_Fast_GET_ITEM(a, i);
            int flags = (bv == Py_None ? BeforeNull : bv == Absent ? BeforeAbsent : 0) |
                        (av == Py_None ? AfterNull : av == Absent ? AfterAbsent : 0);
            if (add_name(o, PyTuple_GET_ITEM(names, i), flags) < 0) return -1;
            if (bv != Py_None && bv != Absent && add_value(o, bv) < 0) return -1;
            if (av != Py_None && av != Absent && add_value(o, av) < 0) return -1;
        }
    }
    put_u32(o->data, (uint32_t)count);
    return 0;
}

/* The images of before and after (None: absent) as PySequence_Fast objects in *b and *a. */
static int images(PyObject *before, PyObject *after, PyObject **b, PyObject **a) {
    if (Absent == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return -1;
    }
    *b = before == Py_None ? NULL : PySequence_Fast(before, "an image must be a sequence or None");
    *a = after == Py_None ? NULL : PySequence_Fast(after, "an image must be a sequence or None");
    return (before != Py_None && *b == NULL) || (after != Py_None && *a == NULL) ? -1 : 0;
}

/* encode_images(names, before, after): names are the columns' Name bytes; an image is a sequence or None. */
static PyObject *encode_images(PyObject *self, PyObject *args) {
    PyObject *names, *before, *after, *b = NULL, *a = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &names, &before, &after)) return NULL;
    Out o = {NULL, 0, 0};
    if (images(before, after, &b, &a) == 0 && encode_into(&o, names, b, a) == 0)
        result = PyBytes_FromStringAndSize(o.data, o.length);
    PyMem_Free(o.data);
    Py_XDECREF(b);
    Py_XDECREF(a);
    return result;
}

/* Only text (str itself) and NULLs: the images the record form takes as they are (relay/store/rowcodec.py). */
static int plain(PyObject *image) {
    if (image == NULL) return 1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(image); i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(image, i);
        if (v != Py_None && !PyUnicode_CheckExact(v)) return 0;
    }
    return 1;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* record_text(prefix, names, before, after): prefix, then the base64 (standard, padded) of encode_images' bytes,
   as one ASCII str; None where an image holds anything but text and NULLs, or text that is not valid UTF-8 (the
   caller's Python code then says what it gives). */
static PyObject *record_text(PyObject *self, PyObject *args) {
    PyObject *prefix, *names, *before, *after, *b = NULL, *a = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "UO!OO", &prefix, &PyTuple_Type, &names, &before, &after)) return NULL;
    Out o = {NULL, 0, 0};
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "the prefix must be ASCII");
        goto done;
    }
    if (images(before, after, &b, &a) < 0) goto done;
    if (!plain(b) || !plain(a)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (encode_into(&o, names, b, a) < 0) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    Py_ssize_t head = PyUnicode_GET_LENGTH(prefix), n = o.length, size = head + (n + 2) / 3 * 4;
    if ((result = PyUnicode_New(size, 127)) == NULL) goto done;
    unsigned char *out = PyUnicode_1BYTE_DATA(result);
    memcpy(out, PyUnicode_1BYTE_DATA(prefix), (size_t)head);
    out += head;
    const unsigned char *in = (const unsigned char *)o.data;
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *out++ = b64[v >> 18];
        *out++ = b64[v >> 12 & 63];
        *out++ = b64[v >> 6 & 63];
        *out++ = b64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        *out++ = b64[v >> 18];
        *out++ = b64[v >> 12 & 63];
        *out++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
        *out++ = '=';
    }
done:
    PyMem_Free(o.data);
    Py_XDECREF(b);
    Py_XDECREF(a);
    return result;
}

/* configure(ABSENT, BEFORE_NULL, AFTER_NULL, BEFORE_ABSENT, AFTER_ABSENT) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *absent;
    if (!PyArg_ParseTuple(args, "Oiiii", &absent, &BeforeNull, &AfterNull, &BeforeAbsent, &AfterAbsent)) return NULL;
    Py_XSETREF(Absent, Py_NewRef(absent));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Set the absent value and the column flags."},
    {"encode_images", encode_images, METH_VARARGS, "A change's FETCH column bytes."},
    {"record_text", record_text, METH_VARARGS, "A prefix and the base64 of a change's column bytes, as one str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "clientproto._records", NULL, -1, methods};

#ifndef SOURCE_SHA1
#define SOURCE_SHA1 ""
#endif

/* The module, with the SHA-1 of the source it was built from (devtools/native.py defines it): a build older than
   its source is not used. */
PyMODINIT_FUNC PyInit__records(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA1", SOURCE_SHA1) < 0) Py_CLEAR(m);
    return m;
}
