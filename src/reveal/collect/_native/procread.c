/*
 * reveal.collect._procread: the hot path of the file-based probes in C.
 *
 * A Plan holds the open descriptors of one file group and the layout worked out in Python
 * (reveal.collect._procfs.NumberParser): how many numbers the group's text holds and which
 * of them go to which output slot. Plan.read(out) preads every file from offset 0 to end of
 * file (without the GIL), reduces the text to numbers exactly as the Python fast path does
 * (bytes that are neither digits nor blanks are deleted; a per-file "split" byte counts as a
 * blank; the "intr" line of /proc/stat is cut to its total), checks that the count of
 * numbers is the expected one, and writes the picked values (times their decimal places and
 * scale) into the float64 output (mode 2: every token a hex number, /proc/net/softnet_stat).
 * It returns False, writing nothing, when a file cannot be read, a number does not parse, or
 * the count differs: the caller then takes the Python path, which re-discovers the layout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procread.h"

enum { MODE_UINT = 0, MODE_INT = 1, MODE_HEX = 2 };
enum { PREP_NONE = 0, PREP_COMPACT_STAT = 1 };

/* Byte classes of the tokenizer (one table per file: its mode and split byte). */
enum { C_DELETED = 0, C_DIGIT = 1, C_BLANK = 2, C_MINUS = 3, C_BAD = 4 };

typedef struct {
    int fd;
    int prep;          /* PREP_* */
    unsigned char split; /* an extra blank byte, 0 for none */
    size_t size;       /* buffer size; grows when the file fills it */
    char *buf;
    unsigned char cls[256];   /* C_* of every byte */
    unsigned char digit[256]; /* value of a C_DIGIT byte */
} File;

typedef struct {
    PyObject_HEAD
    File *files;
    Py_ssize_t nfiles;
    int mode;
    Py_ssize_t total;   /* numbers the text must hold */
    Py_ssize_t nout;    /* output length */
    Py_ssize_t npick;   /* values picked */
    Py_ssize_t *index;  /* number index of each picked value */
    Py_ssize_t *dst;    /* output slot of each picked value */
    double *places;     /* per picked value, or NULL */
    double *scale;      /* per picked value, or NULL */
    Py_ssize_t *nan;    /* output slots always NaN */
    Py_ssize_t nnan;
    int accumulate;     /* 1: slots are sums: zeroed, then every picked value is added */
    int64_t *numbers;   /* scratch: every number of the text */
} Plan;

static int is_blank(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* /proc/stat with the intr line cut to its total, in place; returns the new length. */
static size_t compact_stat(char *buf, size_t len) {
    static const char key[] = "\nintr ";
    char *start = NULL;
    for (size_t i = 0; i + 6 <= len; i++) {
        if (buf[i] == '\n' && memcmp(buf + i, key, 6) == 0) { start = buf + i; break; }
    }
    if (start == NULL) return len;
    char *from = start + 6, *endp = buf + len;
    char *first = memchr(from, ' ', (size_t)(endp - from));
    char *eol = memchr(from, '\n', (size_t)(endp - from));
    if (first == NULL || eol == NULL || first > eol) return len;
    size_t tail = (size_t)(endp - eol);
    memmove(first, eol, tail);
    return (size_t)(first - buf) + tail;
}

/* Read one file whole, to end of file; -1 on error. A short read is not the end: files made
 * with the kernel's seq_file hand out about one page per read whatever the buffer, so pread
 * goes on at the running offset until it returns 0 (the buffer grows when it fills). */
static ssize_t read_file(File *f) {
    size_t have = 0;
    for (;;) {
        if (have == f->size) {
            char *bigger = realloc(f->buf, f->size * 4);
            if (bigger == NULL) return -1;
            f->buf = bigger;
            f->size *= 4;
        }
        ssize_t n = pread(f->fd, f->buf + have, f->size - have, (off_t)have);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) return (ssize_t)have;
        have += (size_t)n;
    }
}

/* The byte classes of one file, exactly the rules of the Python fast path: digits (hex
 * digits in hex mode) build numbers; blanks and the split byte end them; '-' starts a
 * negative number in signed mode; in hex mode any other byte is an error; otherwise a byte
 * is deleted (it neither ends nor starts a number). */
static void build_classes(File *f, int mode) {
    for (int c = 0; c < 256; c++) {
        unsigned char k = mode == MODE_HEX ? C_BAD : C_DELETED;
        if (c >= '0' && c <= '9') { k = C_DIGIT; f->digit[c] = (unsigned char)(c - '0'); }
        else if (mode == MODE_HEX && c >= 'a' && c <= 'f') {
            k = C_DIGIT; f->digit[c] = (unsigned char)(c - 'a' + 10);
        } else if (mode == MODE_HEX && c >= 'A' && c <= 'F') {
            k = C_DIGIT; f->digit[c] = (unsigned char)(c - 'A' + 10);
        } else if (is_blank((unsigned char)c)) k = C_BLANK;
        else if (mode != MODE_HEX && f->split && c == f->split) k = C_BLANK;
        else if (c == '-' && mode == MODE_INT) k = C_MINUS;
        f->cls[c] = k;
    }
}

/* Append the numbers of one text to plan->numbers from *count; 0 ok, -1 no fit.
 * Between tokens, blanks and deleted bytes are skipped in one tight loop; a token starts at
 * a digit (or '-' in signed mode), goes on through digits and deleted bytes, and ends at a
 * blank or the end of the text. */
static int tokenize(Plan *p, const File *f, const char *text, size_t len, Py_ssize_t *count) {
    const int signed_ok = p->mode == MODE_INT;
    const int hex = p->mode == MODE_HEX;
    const unsigned char *cls = f->cls, *digit = f->digit;
    const unsigned char *s = (const unsigned char *)text, *const end = s + len;
    int64_t *numbers = p->numbers;
    const Py_ssize_t total = p->total;
    Py_ssize_t n = *count;
    for (;;) {
        unsigned char kind = C_BLANK;
        while (s < end && ((kind = cls[*s]) == C_BLANK || kind == C_DELETED)) s++;
        if (s == end) break;
        if (kind == C_BAD) return -1;  /* hex text holds nothing but hex numbers and blanks */
        int negative = 0;
        if (kind == C_MINUS) { negative = 1; s++; }
        uint64_t value = 0;
        int has_digit = 0;
        for (; s < end; s++) {
            kind = cls[*s];
            if (kind == C_DIGIT) {
                unsigned d = digit[*s];
                if (hex) {
                    if (value > (UINT64_MAX >> 4)) return -1;
                    value = (value << 4) | d;
                } else {
                    if (value > (UINT64_MAX - 9) / 10) return -1; /* overflow: Python's */
                    value = value * 10 + d;
                }
                has_digit = 1;
            } else if (kind != C_DELETED) {
                break;
            }
        }
        /* '-' inside a number is not a plain integer; a token needs a digit */
        if ((s < end && kind != C_BLANK) || !has_digit || n >= total) return -1;
        if (negative) {
            if (value > (uint64_t)INT64_MAX) return -1;
            numbers[n++] = -(int64_t)value;
        } else {
            if (signed_ok && value > (uint64_t)INT64_MAX) return -1;
            numbers[n++] = (int64_t)value;  /* bits of the uint64 */
        }
    }
    *count = n;
    return 0;
}

static int plan_fill(Plan *p, double *out) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < p->nfiles; i++) {
        File *f = &p->files[i];
        ssize_t n = read_file(f);
        if (n < 0) return -1;
        size_t len = (size_t)n;
        if (f->prep == PREP_COMPACT_STAT) len = compact_stat(f->buf, len);
        if (tokenize(p, f, f->buf, len, &count) < 0) return -1;
    }
    if (count != p->total) return -1;
    const int is_unsigned = p->mode != MODE_INT;
    if (p->accumulate) {
        for (Py_ssize_t i = 0; i < p->nout; i++) out[i] = 0.0;
    }
    for (Py_ssize_t i = 0; i < p->npick; i++) {
        int64_t raw = p->numbers[p->index[i]];
        double v = is_unsigned ? (double)(uint64_t)raw : (double)raw;
        if (p->places) v *= p->places[i];
        if (p->scale) v *= p->scale[i];
        if (p->accumulate) out[p->dst[i]] += v;
        else out[p->dst[i]] = v;
    }
    for (Py_ssize_t i = 0; i < p->nnan; i++) out[p->nan[i]] = Py_NAN;
    return 0;
}

static PyTypeObject PlanType;

PyTypeObject *procread_plan_type(void) { return &PlanType; }

int procread_plan_fill(PyObject *plan, double *out) { return plan_fill((Plan *)plan, out); }

Py_ssize_t procread_plan_nout(PyObject *plan) { return ((Plan *)plan)->nout; }

int float64_out(PyObject *arg, Py_ssize_t n, Py_buffer *view) {
    if (PyObject_GetBuffer(arg, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "d") != 0 ||
        view->len != n * 8) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "expected a contiguous float64 array of length %zd", n);
        return -1;
    }
    return 0;
}

static PyObject *Plan_read(Plan *self, PyObject *arg) {
    Py_buffer view;
    if (float64_out(arg, self->nout, &view) < 0) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = plan_fill(self, (double *)view.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == 0) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static void Plan_dealloc(Plan *self) {
    if (self->files) {
        for (Py_ssize_t i = 0; i < self->nfiles; i++) free(self->files[i].buf);
        free(self->files);
    }
    free(self->index);
    free(self->dst);
    free(self->places);
    free(self->scale);
    free(self->nan);
    free(self->numbers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A sequence of Python ints as a new C array, to free() (NULL + exception on error). */
Py_ssize_t *ssize_array(PyObject *seq, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (fast == NULL) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    Py_ssize_t *arr = malloc(sizeof(Py_ssize_t) * (size_t)(*n > 0 ? *n : 1));
    if (arr == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < *n; i++) {
        arr[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (arr[i] == -1 && PyErr_Occurred()) { free(arr); Py_DECREF(fast); return NULL; }
    }
    Py_DECREF(fast);
    return arr;
}

static double *double_array(PyObject *seq, Py_ssize_t expect) {
    if (seq == Py_None) return NULL;
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of floats");
    if (fast == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != expect) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "places/scale: one value per picked number");
        return NULL;
    }
    double *arr = malloc(sizeof(double) * (size_t)(expect > 0 ? expect : 1));
    if (arr == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < expect; i++) {
        arr[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (arr[i] == -1.0 && PyErr_Occurred()) { free(arr); Py_DECREF(fast); return NULL; }
    }
    Py_DECREF(fast);
    return arr;
}

/* Plan(files, mode, total, nout, index, dst, places, scale, nan, accumulate=0)
 * files: sequence of (fd, size, prep, split) with split an int byte (0: none). With
 * accumulate, a number may be picked several times and a slot named by several picks: every
 * output slot starts at 0 each read and is the sum of the values picked into it (totals of
 * a table: per-row and per-column sums in one pass). */
static int Plan_init(Plan *self, PyObject *args, PyObject *kwds) {
    PyObject *files, *index, *dst, *places, *scale, *nan;
    int mode, accumulate = 0;
    Py_ssize_t total, nout;
    static char *kwlist[] = {"files", "mode", "total", "nout", "index", "dst", "places",
                             "scale", "nan", "accumulate", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OinnOOOOO|p", kwlist, &files, &mode, &total,
                                     &nout, &index, &dst, &places, &scale, &nan, &accumulate))
        return -1;
    self->accumulate = accumulate;
    if (self->files != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Plan already initialised");
        return -1;
    }
    if (mode != MODE_UINT && mode != MODE_INT && mode != MODE_HEX) {
        PyErr_SetString(PyExc_ValueError, "mode must be 0 (uint), 1 (int) or 2 (hex)");
        return -1;
    }
    self->mode = mode;
    self->total = total;
    self->nout = nout;
    PyObject *fast = PySequence_Fast(files, "files must be a sequence");
    if (fast == NULL) return -1;
    self->nfiles = PySequence_Fast_GET_SIZE(fast);
    self->files = calloc((size_t)(self->nfiles > 0 ? self->nfiles : 1), sizeof(File));
    if (self->files == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < self->nfiles; i++) {
        File *f = &self->files[i];
        Py_ssize_t size;
        int split;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "inii", &f->fd, &size,
                              &f->prep, &split)) {
            Py_DECREF(fast);
            return -1;
        }
        f->size = (size_t)(size > 64 ? size : 64);
        f->split = (unsigned char)split;
        build_classes(f, mode);
        f->buf = malloc(f->size);
        if (f->buf == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    }
    Py_DECREF(fast);
    Py_ssize_t ndst = 0;
    if ((self->index = ssize_array(index, &self->npick)) == NULL) return -1;
    if ((self->dst = ssize_array(dst, &ndst)) == NULL) return -1;
    if ((self->nan = ssize_array(nan, &self->nnan)) == NULL) return -1;
    if (ndst != self->npick) {
        PyErr_SetString(PyExc_ValueError, "index and dst differ in length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->npick; i++) {
        if (self->index[i] < 0 || self->index[i] >= total || self->dst[i] < 0 ||
            self->dst[i] >= nout) {
            PyErr_SetString(PyExc_ValueError, "index or dst out of range");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < self->nnan; i++) {
        if (self->nan[i] < 0 || self->nan[i] >= nout) {
            PyErr_SetString(PyExc_ValueError, "nan slot out of range");
            return -1;
        }
    }
    self->places = double_array(places, self->npick);
    if (self->places == NULL && PyErr_Occurred()) return -1;
    self->scale = double_array(scale, self->npick);
    if (self->scale == NULL && PyErr_Occurred()) return -1;
    self->numbers = malloc(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
    if (self->numbers == NULL) { PyErr_NoMemory(); return -1; }
    return 0;
}

static PyMethodDef Plan_methods[] = {
    {"read", (PyCFunction)Plan_read, METH_O,
     "read(out) -> bool: fill the float64 array out; False when the layout no longer fits"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = PROCREAD_TYPE(
    Plan,
    "Descriptors and layout of one file group, read and parsed in C.");

static PyObject *read_all(PyObject *module, PyObject *pairs) {
    /* read_all([(plan, out), ...]) -> tuple of bools, one call for many plans */
    (void)module;
    PyObject *fast = PySequence_Fast(pairs, "expected a sequence of (plan, out)");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *result = PyTuple_New(n);
    if (result == NULL) { Py_DECREF(fast); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *plan, *out;
        if (!PyArg_ParseTuple(pair, "O!O", &PlanType, &plan, &out)) {
            Py_DECREF(result); Py_DECREF(fast); return NULL;
        }
        PyObject *ok = Plan_read((Plan *)plan, out);
        if (ok == NULL) { Py_DECREF(result); Py_DECREF(fast); return NULL; }
        PyTuple_SET_ITEM(result, i, ok);
    }
    Py_DECREF(fast);
    return result;
}

static PyMethodDef module_methods[] = {
    {"read_all", read_all, METH_O, "read_all([(plan, out), ...]) -> tuple of bools"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_procread",
    .m_doc = "Pread and integer parsing of procfs/sysfs file groups (see Plan).",
    .m_size = -1,
    .m_methods = module_methods,
};


PyMODINIT_FUNC PyInit__procread(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddType(m, &PlanType) < 0 || add_local_reader(m) < 0 || add_ticker(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
