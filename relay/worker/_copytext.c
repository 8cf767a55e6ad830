/* The compiled path of relay.worker.bulk's COPY text: rows of plain ints and strs as the lines PostgreSQL's COPY
   reads, in one call, as the UTF-8 bytes the driver sends (the Python line formatter gives the same text).

   copy_text(rows, kinds): one line per row, its fields joined by tabs; kinds has one letter per column, "i" an int
   written in decimal, "s" a str with backslash, tab, newline and carriage return escaped as \\, \t, \n and \r. It
   gives None, and the Python formatter runs instead, for anything else: a row that is not a tuple of that many
   fields, a field not exactly an int or a str, an int past 64 bits, a str that is not valid UTF-8 (a lone
   surrogate). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

enum { DONE = 0, NOT_PLAIN = 1, FAILED = -1 };

/* A field's value: an int's, or a str's UTF-8 bytes (cached by the str; ASCII text is its own). */
static int field_int(PyObject *v, long long *n) {
    if (!PyLong_CheckExact(v)) return NOT_PLAIN;
    int overflow;
    *n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return NOT_PLAIN;
    return *n == -1 && PyErr_Occurred() ? FAILED : DONE;
}

static int field_str(PyObject *v, const char **s, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(v)) return NOT_PLAIN;
    *s = PyUnicode_AsUTF8AndSize(v, n);
    if (*s != NULL) return DONE;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return FAILED;
    PyErr_Clear();
    return NOT_PLAIN;
}

static inline int escaped(char c) { return c == '\\' || c == '\t' || c == '\n' || c == '\r'; }

static int digits(long long n) {
    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    int len = n < 0;
    do {
        len++;
        u /= 10;
    } while (u);
    return len;
}

/* The rows' fields one after the other: counting their text's length (out NULL), then writing it. */
static int lines(PyObject *fast, const char *kinds, Py_ssize_t width, char *out, Py_ssize_t *length) {
    Py_ssize_t total = 0, count = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t r = 0; r < count; r++) {
        PyObject *row = PySequence_Fast_GET_ITEM(fast, r);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != width) return NOT_PLAIN;
        for (Py_ssize_t k = 0; k < width; k++) {
            PyObject *v = PyTuple_GET_ITEM(row, k);
            int status;
            if (kinds[k] == 'i') {
                long long n;
                if ((status = field_int(v, &n)) != DONE) return status;
                int len = digits(n);
                if (out != NULL) {
                    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
                    char *end = out + total + len;
                    do {
                        *--end = (char)('0' + u % 10);
                        u /= 10;
                    } while (u);
                    if (n < 0) *--end = '-';
                }
                total += len;
            } else {
                const char *s;
                Py_ssize_t n;
                if ((status = field_str(v, &s, &n)) != DONE) return status;
                /* Runs of bytes that need no escape, found by strcspn (the UTF-8 ends in a NUL; a NUL inside the
                   text ends a run early and is copied as it is, as the Python formatter writes it). */
                for (Py_ssize_t i = 0; i < n;) {
                    Py_ssize_t run = (Py_ssize_t)strcspn(s + i, "\\\t\n\r");
                    if (run > n - i) run = n - i;
                    if (out != NULL) memcpy(out + total, s + i, (size_t)run);
                    total += run;
                    i += run;
                    if (i >= n) break;
                    char c = s[i++];
                    if (!escaped(c)) { /* a NUL inside the text */
                        if (out != NULL) out[total] = c;
                        total++;
                        continue;
                    }
                    if (out != NULL) {
                        out[total] = '\\';
                        out[total + 1] = c == '\\' ? '\\' : c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
                    }
                    total += 2;
                }
            }
            if (out != NULL) out[total] = k + 1 < width ? '\t' : '\n';
            total++;
        }
    }
    *length = total;
    return DONE;
}

/* copy_text(rows, kinds) -> bytes, or None (see above). */
static PyObject *copy_text(PyObject *self, PyObject *args) {
    PyObject *rows;
    const char *kinds;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "Os#", &rows, &kinds, &width)) return NULL;
    for (Py_ssize_t k = 0; k < width; k++) {
        if (kinds[k] != 'i' && kinds[k] != 's')
            return PyErr_Format(PyExc_ValueError, "kinds: '%c' is not a column kind (i, s)", kinds[k]);
    }
    if (width == 0) return PyErr_Format(PyExc_ValueError, "kinds: no column");
    PyObject *fast = PySequence_Fast(rows, "rows must be a sequence");
    if (fast == NULL) return NULL;
    PyObject *result = NULL;
    Py_ssize_t length;
    /* Counted first, then written into bytes of that size: a row of tens of MB costs its text once, no more. */
    int status = lines(fast, kinds, width, NULL, &length);
    if (status == DONE && (result = PyBytes_FromStringAndSize(NULL, length)) != NULL) {
        /* The same rows again, with no Python code run between the passes: the same fields and length. */
        status = lines(fast, kinds, width, PyBytes_AS_STRING(result), &length);
    }
    if (status == NOT_PLAIN) result = Py_NewRef(Py_None);
    Py_DECREF(fast);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_text", copy_text, METH_VARARGS, "Rows of plain ints and strs as COPY text (UTF-8), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "relay.worker._copytext", NULL, -1, methods};

#ifndef SOURCE_SHA1
#define SOURCE_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__copytext(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA1", SOURCE_SHA1) < 0) Py_CLEAR(m);
    return m;
}
