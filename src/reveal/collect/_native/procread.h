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

int add_local_reader(PyObject *module); /* localread.c */
int add_ticker(PyObject *module);       /* ticker.c */

#endif
