/* What the parts of reveal.collect._procread share (procread.c, localread.c, ticker.c). */
#ifndef REVEAL_PROCREAD_H
#define REVEAL_PROCREAD_H

#include <Python.h>

/* procread.c: the Plan type and its GIL-free read (0: filled, -1: does not fit). */
PyTypeObject *procread_plan_type(void);
int procread_plan_fill(PyObject *plan, double *out);
Py_ssize_t procread_plan_nout(PyObject *plan);

/* procread.c: helpers the types share. */
Py_ssize_t *ssize_array(PyObject *seq, Py_ssize_t *n); /* ints → C array to free() */
int float64_out(PyObject *arg, Py_ssize_t n, Py_buffer *view); /* writable float64[n] */

/* The type object of NAME: its struct NAME, NAME_init, NAME_dealloc and NAME_methods,
   named reveal.collect._procread.NAME, with the docstring DOC. */
#define PROCREAD_TYPE(NAME, DOC)                                                    \
    {                                                                               \
        PyVarObject_HEAD_INIT(NULL, 0)                                              \
        .tp_name = "reveal.collect._procread." #NAME,                               \
        .tp_basicsize = sizeof(NAME),                                               \
        .tp_flags = Py_TPFLAGS_DEFAULT,                                             \
        .tp_doc = DOC,                                                              \
        .tp_new = PyType_GenericNew,                                                \
        .tp_init = (initproc)NAME##_init,                                           \
        .tp_dealloc = (destructor)NAME##_dealloc,                                   \
        .tp_methods = NAME##_methods,                                               \
    }

int add_local_reader(PyObject *module); /* localread.c */
int add_ticker(PyObject *module);       /* ticker.c */

#endif
