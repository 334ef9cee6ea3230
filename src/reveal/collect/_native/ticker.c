/*
 * reveal.collect._procread.Ticker and PerfGroups: a whole sampler tick in C.
 *
 * With ~900 channels at 100 ms, waking the Python interpreter ten times a second costs
 * more than the reads themselves: after 100 ms asleep its code and data are cold. A Ticker
 * runs one thread that sleeps until each tick of the grid (start + k * interval,
 * CLOCK_MONOTONIC), reads every item into one row of a ring of rows and records the
 * tick's time, read latency, lag behind its deadline and the missed-tick count. Python
 * wakes a few times a second, drains the ring and writes the rows.
 *
 * Items are (reader, offset) pairs, each filling row[offset : offset + n]:
 *   - a Plan (procread.c): the group's files, parsed; a Plan that does not fit (a file
 *     unreadable, a count changed) leaves NaN there and is reported by drain() so that
 *     Python can re-discover its layout;
 *   - a PerfGroups: perf_event group reads, raw counts and group times as read;
 *   - a contiguous float64 buffer: values that change only when Python refreshes them.
 * A tick whose deadline passed by more than half an interval is skipped and counted, and
 * so is a tick that finds the ring full (Python not draining). hold() keeps the thread
 * between ticks while Python changes items (set_items) or re-reads a file group. With
 * priority > 0 the thread asks for SCHED_FIFO, so that no ordinary task delays a tick
 * (refused without CAP_SYS_NICE: it then runs as an ordinary thread; realtime() says).
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procread.h"

#define NS_PER_S 1000000000LL

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ */
/* PerfGroups                                                                            */
/* ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t ngroups;
    int *fds;
    Py_ssize_t *sizes;    /* bytes one group read returns */
    Py_ssize_t *offsets;  /* in 64-bit words of buf */
    char *ok;             /* per group: its last read was complete */
    uint64_t *buf;
    Py_ssize_t nwords;
    Py_ssize_t nout;
    Py_ssize_t *word_idx;  /* per output channel: its word of buf */
    Py_ssize_t *group_of;  /* per output channel: the group that word belongs to */
} PerfGroups;

/* Read every group; each channel is its word as read (a raw count, time_enabled or
 * time_running, never scaled here: analysis scales per interval), NaN when its group's
 * read failed or came back short. */
int perf_groups_fill(PerfGroups *p, double *out) {
    for (Py_ssize_t g = 0; g < p->ngroups; g++) {
        ssize_t n = read(p->fds[g], p->buf + p->offsets[g], (size_t)p->sizes[g]);
        p->ok[g] = n == p->sizes[g];
    }
    for (Py_ssize_t i = 0; i < p->nout; i++)
        out[i] = p->ok[p->group_of[i]] ? (double)p->buf[p->word_idx[i]] : NAN;
    return 0;
}

static void PerfGroups_dealloc(PerfGroups *self) {
    PyMem_RawFree(self->fds);
    PyMem_RawFree(self->sizes);
    PyMem_RawFree(self->offsets);
    PyMem_RawFree(self->ok);
    PyMem_RawFree(self->buf);
    free(self->word_idx);
    PyMem_RawFree(self->group_of);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int PerfGroups_init(PerfGroups *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"groups", "word_idx", NULL};
    PyObject *groups, *widx;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &groups, &widx))
        return -1;
    if (self->fds != NULL) { PyErr_SetString(PyExc_RuntimeError, "already initialised"); return -1; }
    PyObject *fast = PySequence_Fast(groups, "groups: a sequence of (fd, nbytes)");
    if (fast == NULL) return -1;
    Py_ssize_t ng = PySequence_Fast_GET_SIZE(fast);
    self->fds = PyMem_RawCalloc(ng ? (size_t)ng : 1, sizeof(int));
    self->sizes = PyMem_RawCalloc(ng ? (size_t)ng : 1, sizeof(Py_ssize_t));
    self->offsets = PyMem_RawCalloc(ng ? (size_t)ng : 1, sizeof(Py_ssize_t));
    self->ok = PyMem_RawCalloc(ng ? (size_t)ng : 1, 1);
    if (!self->fds || !self->sizes || !self->offsets || !self->ok) {
        Py_DECREF(fast); PyErr_NoMemory(); return -1;
    }
    Py_ssize_t words = 0;
    for (Py_ssize_t g = 0; g < ng; g++) {
        int fd;
        Py_ssize_t size;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, g), "in", &fd, &size)) {
            Py_DECREF(fast); return -1;
        }
        if (size < 24 || size % 8) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "a group read is nr, enabled, running, values: "
                                              "a multiple of 8 bytes, at least 24");
            return -1;
        }
        self->fds[g] = fd;
        self->sizes[g] = size;
        self->offsets[g] = words;
        words += size / 8;
    }
    Py_DECREF(fast);
    self->ngroups = ng;
    self->nwords = words;
    self->buf = PyMem_RawCalloc(words ? (size_t)words : 1, sizeof(uint64_t));
    if (self->buf == NULL) { PyErr_NoMemory(); return -1; }
    Py_ssize_t nv;
    if (!(self->word_idx = ssize_array(widx, &nv))) return -1;
    self->group_of = PyMem_RawCalloc(nv ? (size_t)nv : 1, sizeof(Py_ssize_t));
    if (self->group_of == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < nv; i++) {
        Py_ssize_t w = self->word_idx[i];
        if (w < 0 || w >= words) {
            PyErr_SetString(PyExc_IndexError, "a word index is outside the group reads");
            return -1;
        }
        Py_ssize_t lo = 0, hi = ng - 1; /* the last group whose offset is <= w */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi + 1) / 2;
            if (self->offsets[mid] <= w) lo = mid; else hi = mid - 1;
        }
        self->group_of[i] = lo;
    }
    self->nout = nv;
    return 0;
}

static PyObject *PerfGroups_read(PerfGroups *self, PyObject *arg) {
    Py_buffer view;
    if (float64_out(arg, self->nout, &view) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    perf_groups_fill(self, (double *)view.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *PerfGroups_len(PerfGroups *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->nout);
}

static PyMethodDef PerfGroups_methods[] = {
    {"read", (PyCFunction)PerfGroups_read, METH_O,
     "read(out): fill out (float64, one per channel) with the words as read"},
    {"nout", (PyCFunction)PerfGroups_len, METH_NOARGS, "number of output channels"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PerfGroupsType = PROCREAD_TYPE(
    PerfGroups,
    "PerfGroups(groups=[(fd, nbytes)], word_idx): perf_event group reads "
    "(PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING); channel i is "
    "64-bit word word_idx[i] of the groups' reads laid end to end, unscaled "
    "(raw counts, time_enabled, time_running), NaN when its group's read failed.");

/* ------------------------------------------------------------------------------------ */
/* Ticker                                                                                */
/* ------------------------------------------------------------------------------------ */

enum { ITEM_PLAN = 0, ITEM_PERF = 1, ITEM_CONST = 2 };

typedef struct {
    int kind;
    PyObject *obj;      /* owned reference (released with the GIL held) */
    Py_buffer view;     /* ITEM_CONST only */
    Py_ssize_t offset;  /* into the row */
    Py_ssize_t n;       /* values it fills */
    int64_t every;      /* read on ticks k with k % every == phase; the others repeat them */
    int64_t phase;
    int64_t last_k;     /* the tick of its last read, -1 before the first */
    double *held;       /* every > 1: the values of its last read */
} Item;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* CLOCK_MONOTONIC: wakes the thread early on close */
    int sync_ready;
    int stop;              /* under lock */
    int finished;          /* under lock: the thread has returned */
    int held;              /* Python holds the lock (only the GIL holder touches this) */
    Item *items;
    Py_ssize_t nitems;
    Py_ssize_t width;
    int64_t start, interval, end; /* end 0: no end */
    int64_t next_k;        /* the tick the thread waits for (under lock) */
    Py_ssize_t cap;        /* ring rows */
    Py_ssize_t head, count;
    double *rows;          /* cap × width */
    int64_t *ts, *missed_at;
    double *latency, *lag; /* seconds */
    unsigned char *failed; /* per item, since the last drain */
    int64_t missed;
    int priority;          /* SCHED_FIFO priority asked for, 0 for none */
    int realtime;          /* under lock: -1 not yet known, 0 refused or not asked, 1 got it */
} Ticker;

static void free_items(Item *items, Py_ssize_t n) {
    /* with the GIL held */
    if (items == NULL) return;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i].kind == ITEM_CONST && items[i].obj != NULL) PyBuffer_Release(&items[i].view);
        Py_XDECREF(items[i].obj);
        PyMem_RawFree(items[i].held);
    }
    PyMem_RawFree(items);
}

/* Items from a Python list of (reader, offset[, every]); NULL + exception on error. An item
 * with every = N > 1 is read on one tick in N (items spread over the N phases in turn) and
 * repeats its last values on the others. */
static Item *parse_items(PyObject *seq, Py_ssize_t width, Py_ssize_t *nitems) {
    PyObject *fast = PySequence_Fast(seq, "items: a sequence of (reader, offset[, every])");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Item *items = PyMem_RawCalloc(n ? (size_t)n : 1, sizeof(Item));
    if (items == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    int64_t spread = 0; /* phases handed out so far, over the items read one tick in N */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *reader;
        Py_ssize_t offset;
        long long every = 1;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "On|L", &reader, &offset,
                              &every))
            goto fail;
        if (every < 1) {
            PyErr_Format(PyExc_ValueError, "item %zd: every must be >= 1", i);
            goto fail;
        }
        Item *it = &items[i];
        it->every = every;
        it->phase = every > 1 ? spread++ % every : 0;
        it->last_k = -1;
        if (PyObject_TypeCheck(reader, procread_plan_type())) {
            it->kind = ITEM_PLAN;
            it->n = procread_plan_nout(reader);
        } else if (PyObject_TypeCheck(reader, &PerfGroupsType)) {
            it->kind = ITEM_PERF;
            it->n = ((PerfGroups *)reader)->nout;
        } else {
            it->kind = ITEM_CONST;
            if (PyObject_GetBuffer(reader, &it->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
                goto fail;
            if (it->view.itemsize != 8 || it->view.format == NULL ||
                strcmp(it->view.format, "d") != 0) {
                PyBuffer_Release(&it->view);
                PyErr_SetString(PyExc_TypeError, "an item reader is a Plan, a PerfGroups or a "
                                                 "contiguous float64 array");
                goto fail;
            }
            it->n = it->view.len / 8;
        }
        Py_INCREF(reader);
        it->obj = reader;
        it->offset = offset;
        if (every > 1) {
            it->held = PyMem_RawMalloc((it->n ? (size_t)it->n : 1) * sizeof(double));
            if (it->held == NULL) { PyErr_NoMemory(); goto fail; }
        }
        if (offset < 0 || offset + it->n > width) {
            PyErr_Format(PyExc_ValueError, "item %zd (%zd values at %zd) is outside the row "
                                           "of %zd", i, it->n, offset, width);
            goto fail;
        }
    }
    Py_DECREF(fast);
    *nitems = n;
    return items;
fail:
    Py_DECREF(fast);
    free_items(items, n);
    return NULL;
}

/* One tick (grid slot k) into ring row `slot` (lock held, GIL not needed). */
static void take_tick(Ticker *t, Py_ssize_t slot, int64_t k, int64_t deadline, int64_t t0) {
    double *row = t->rows + slot * t->width;
    for (Py_ssize_t i = 0; i < t->width; i++) row[i] = NAN;
    for (Py_ssize_t i = 0; i < t->nitems; i++) {
        Item *it = &t->items[i];
        double *out = row + it->offset;
        if (it->held != NULL && it->last_k >= 0 && k % it->every != it->phase &&
            k - it->last_k < it->every) {
            memcpy(out, it->held, (size_t)it->n * sizeof(double)); /* not its tick */
            continue;
        }
        it->last_k = k;
        if (it->kind == ITEM_PLAN) {
            if (procread_plan_fill(it->obj, out) != 0) {
                for (Py_ssize_t j = 0; j < it->n; j++) out[j] = NAN;
                t->failed[i] = 1;
            }
        } else if (it->kind == ITEM_PERF) {
            perf_groups_fill((PerfGroups *)it->obj, out);
        } else {
            memcpy(out, it->view.buf, (size_t)it->n * sizeof(double));
        }
        if (it->held != NULL) memcpy(it->held, out, (size_t)it->n * sizeof(double));
    }
    int64_t t1 = now_ns();
    t->ts[slot] = t0;
    t->latency[slot] = (double)(t1 - t0) / 1e9;
    t->lag[slot] = (double)(t0 - deadline) / 1e9;
}

static void *ticker_main(void *arg) {
    Ticker *t = arg;
    const int64_t half = t->interval / 2;
    pthread_setname_np(pthread_self(), "reveal-ticks"); /* as top -H and /proc show it */
    int realtime = 0;
    if (t->priority > 0) {
        /* ahead of every ordinary task, so that none delays a tick; a tick is ~1 ms of
         * work per interval, far below the kernel's real-time throttling */
        struct sched_param param = {.sched_priority = t->priority};
        realtime = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
    }
    pthread_mutex_lock(&t->lock);
    t->realtime = realtime;
    for (;;) {
        int64_t deadline = t->start + t->next_k * t->interval;
        if (t->end && deadline >= t->end) break;
        struct timespec ts = {(time_t)(deadline / NS_PER_S), (long)(deadline % NS_PER_S)};
        while (!t->stop && now_ns() < deadline)
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
        if (t->stop) break;
        /* The read stands for the grid slot nearest its start; the slots before it that
         * passed unread are missed (never replayed), and the next read waits for the slot
         * after it, so no two reads share a slot or come less than half an interval apart. */
        int64_t t0 = now_ns();
        int64_t slot_k = (t0 - t->start + half) / t->interval;
        if (slot_k < t->next_k) slot_k = t->next_k;
        if (t->end) {
            int64_t last = (t->end - t->start + t->interval - 1) / t->interval - 1;
            if (slot_k > last) slot_k = last; /* slots after the end are not missed */
        }
        if (slot_k > t->next_k) t->missed += slot_k - t->next_k;
        if (t->count < t->cap) {
            Py_ssize_t slot = (t->head + t->count) % t->cap;
            take_tick(t, slot, slot_k, deadline, t0);
            t->missed_at[slot] = t->missed;
            t->count++;
        } else {
            t->missed++; /* ring full: Python is not draining */
        }
        t->next_k = slot_k + 1;
    }
    t->finished = 1;
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static void lock_released_gil(Ticker *t) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&t->lock);
    Py_END_ALLOW_THREADS
}

static void stop_thread(Ticker *t) {
    if (!t->started) return;
    if (t->held) { t->held = 0; pthread_mutex_unlock(&t->lock); }
    lock_released_gil(t);
    t->stop = 1;
    if (t->sync_ready) pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(t->thread, NULL);
    Py_END_ALLOW_THREADS
    t->started = 0;
}

static void Ticker_dealloc(Ticker *self) {
    stop_thread(self);
    free_items(self->items, self->nitems);
    PyMem_RawFree(self->rows);
    PyMem_RawFree(self->ts);
    PyMem_RawFree(self->missed_at);
    PyMem_RawFree(self->latency);
    PyMem_RawFree(self->lag);
    PyMem_RawFree(self->failed);
    if (self->sync_ready) {
        pthread_cond_destroy(&self->cond);
        pthread_mutex_destroy(&self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int alloc_ring(Ticker *t) {
    PyMem_RawFree(t->rows);
    t->rows = PyMem_RawCalloc((size_t)(t->cap * (t->width ? t->width : 1)), sizeof(double));
    return t->rows ? 0 : -1;
}

static int Ticker_init(Ticker *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"items", "width", "start_ns", "interval_ns", "capacity", "end_ns",
                             "first_tick", "priority", NULL};
    PyObject *items;
    Py_ssize_t width, cap;
    long long start, interval, end = 0, first = 0;
    int priority = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnLLn|LLi", kwlist, &items, &width, &start,
                                     &interval, &cap, &end, &first, &priority))
        return -1;
    if (self->sync_ready) { PyErr_SetString(PyExc_RuntimeError, "already initialised"); return -1; }
    if (interval <= 0 || cap <= 0 || width < 0 || first < 0) {
        PyErr_SetString(PyExc_ValueError, "interval and capacity must be positive");
        return -1;
    }
    self->width = width;
    self->items = parse_items(items, width, &self->nitems);
    if (self->items == NULL) return -1;
    self->start = start;
    self->interval = interval;
    self->end = end;
    self->next_k = first;
    self->cap = cap;
    self->priority = priority;
    self->realtime = -1;
    self->ts = PyMem_RawCalloc((size_t)cap, sizeof(int64_t));
    self->missed_at = PyMem_RawCalloc((size_t)cap, sizeof(int64_t));
    self->latency = PyMem_RawCalloc((size_t)cap, sizeof(double));
    self->lag = PyMem_RawCalloc((size_t)cap, sizeof(double));
    self->failed = PyMem_RawCalloc(self->nitems ? (size_t)self->nitems : 1, 1);
    if (!self->ts || !self->missed_at || !self->latency || !self->lag || !self->failed ||
        alloc_ring(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    self->sync_ready = 1;
    if (pthread_create(&self->thread, NULL, ticker_main, self) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

static int64_t *int64_out(PyObject *arg, Py_ssize_t n, Py_buffer *view) {
    if (PyObject_GetBuffer(arg, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "q") != 0 && strcmp(view->format, "l") != 0) || view->len < n * 8) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "expected a contiguous int64 array of length >= %zd", n);
        return NULL;
    }
    return view->buf;
}

/* drain(ts, rows, latency, lag, missed) -> (n, failed item indices): move the ticks taken
 * so far, oldest first, into the given arrays (each at least capacity long; rows is
 * capacity × width). */
static PyObject *Ticker_drain(Ticker *self, PyObject *args) {
    PyObject *ts_o, *rows_o, *lat_o, *lag_o, *missed_o;
    if (!PyArg_ParseTuple(args, "OOOOO", &ts_o, &rows_o, &lat_o, &lag_o, &missed_o)) return NULL;
    Py_buffer vts, vrows, vlat, vlag, vmissed;
    int64_t *ts = int64_out(ts_o, self->cap, &vts);
    if (ts == NULL) return NULL;
    int64_t *missed = int64_out(missed_o, self->cap, &vmissed);
    if (missed == NULL) { PyBuffer_Release(&vts); return NULL; }
    if (float64_out(rows_o, self->cap * self->width, &vrows) < 0) {
        PyBuffer_Release(&vts); PyBuffer_Release(&vmissed); return NULL;
    }
    if (float64_out(lat_o, self->cap, &vlat) < 0) {
        PyBuffer_Release(&vts); PyBuffer_Release(&vmissed); PyBuffer_Release(&vrows); return NULL;
    }
    if (float64_out(lag_o, self->cap, &vlag) < 0) {
        PyBuffer_Release(&vts); PyBuffer_Release(&vmissed); PyBuffer_Release(&vrows);
        PyBuffer_Release(&vlat); return NULL;
    }
    if (!self->held) lock_released_gil(self);
    Py_ssize_t n = self->count;
    double *rows = vrows.buf, *lat = vlat.buf, *lag = vlag.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t slot = (self->head + i) % self->cap;
        memcpy(rows + i * self->width, self->rows + slot * self->width,
               (size_t)self->width * sizeof(double));
        ts[i] = self->ts[slot];
        lat[i] = self->latency[slot];
        lag[i] = self->lag[slot];
        missed[i] = self->missed_at[slot];
    }
    self->head = (self->head + n) % self->cap;
    self->count = 0;
    PyObject *failed = PyList_New(0);
    for (Py_ssize_t i = 0; failed != NULL && i < self->nitems; i++) {
        if (!self->failed[i]) continue;
        self->failed[i] = 0;
        PyObject *k = PyLong_FromSsize_t(i);
        if (k == NULL || PyList_Append(failed, k) < 0) Py_CLEAR(failed);
        Py_XDECREF(k);
    }
    if (!self->held) pthread_mutex_unlock(&self->lock);
    PyBuffer_Release(&vts); PyBuffer_Release(&vmissed); PyBuffer_Release(&vrows);
    PyBuffer_Release(&vlat); PyBuffer_Release(&vlag);
    if (failed == NULL) return NULL;
    return Py_BuildValue("(nN)", n, failed);
}

static PyObject *Ticker_hold(Ticker *self, PyObject *unused) {
    (void)unused;
    if (!self->sync_ready) { PyErr_SetString(PyExc_RuntimeError, "not initialised"); return NULL; }
    if (!self->held) {
        lock_released_gil(self);
        self->held = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *Ticker_release(Ticker *self, PyObject *unused) {
    (void)unused;
    if (self->held) {
        self->held = 0;
        pthread_mutex_unlock(&self->lock);
    }
    Py_RETURN_NONE;
}

/* set_items(items, width): new readers (and row width) from the next tick on. Only while
 * held and after a drain: rows not drained would be read with the wrong width. */
static PyObject *Ticker_set_items(Ticker *self, PyObject *args) {
    PyObject *items;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "On", &items, &width)) return NULL;
    if (!self->held) { PyErr_SetString(PyExc_RuntimeError, "set_items needs hold()"); return NULL; }
    if (self->count) { PyErr_SetString(PyExc_RuntimeError, "drain() before set_items"); return NULL; }
    if (width < 0) { PyErr_SetString(PyExc_ValueError, "width must be >= 0"); return NULL; }
    Py_ssize_t n;
    Item *fresh = parse_items(items, width, &n);
    if (fresh == NULL) return NULL;
    unsigned char *failed = PyMem_RawCalloc(n ? (size_t)n : 1, 1);
    if (failed == NULL) { free_items(fresh, n); return PyErr_NoMemory(); }
    if (width != self->width) {
        Py_ssize_t old = self->width;
        self->width = width;
        if (alloc_ring(self) < 0) {
            self->width = old;
            free_items(fresh, n);
            PyMem_RawFree(failed);
            alloc_ring(self);
            return PyErr_NoMemory();
        }
    }
    free_items(self->items, self->nitems);
    PyMem_RawFree(self->failed);
    self->items = fresh;
    self->nitems = n;
    self->failed = failed;
    self->head = 0;
    Py_RETURN_NONE;
}

static PyObject *Ticker_close(Ticker *self, PyObject *unused) {
    (void)unused;
    stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *Ticker_state(Ticker *self, PyObject *unused) {
    /* (next tick index, missed ticks, thread finished) */
    (void)unused;
    if (!self->sync_ready) { PyErr_SetString(PyExc_RuntimeError, "not initialised"); return NULL; }
    if (!self->held) lock_released_gil(self);
    long long k = self->next_k, missed = self->missed;
    int done = self->finished || !self->started;
    if (!self->held) pthread_mutex_unlock(&self->lock);
    return Py_BuildValue("(LLO)", k, missed, done ? Py_True : Py_False);
}

static PyObject *Ticker_realtime(Ticker *self, PyObject *unused) {
    /* True once the thread runs SCHED_FIFO, False if refused or not asked, None if not
     * started yet */
    (void)unused;
    if (!self->sync_ready) { PyErr_SetString(PyExc_RuntimeError, "not initialised"); return NULL; }
    if (!self->held) lock_released_gil(self);
    int realtime = self->realtime;
    if (!self->held) pthread_mutex_unlock(&self->lock);
    if (realtime < 0) Py_RETURN_NONE;
    return PyBool_FromLong(realtime);
}

static PyMethodDef Ticker_methods[] = {
    {"drain", (PyCFunction)Ticker_drain, METH_VARARGS,
     "drain(ts, rows, latency, lag, missed) -> (n, failed items): move the ticks taken"},
    {"hold", (PyCFunction)Ticker_hold, METH_NOARGS, "keep the thread between ticks"},
    {"release", (PyCFunction)Ticker_release, METH_NOARGS, "let the thread go on"},
    {"set_items", (PyCFunction)Ticker_set_items, METH_VARARGS,
     "set_items(items, width): new readers from the next tick (held, drained)"},
    {"state", (PyCFunction)Ticker_state, METH_NOARGS,
     "state() -> (next tick index, missed ticks, finished)"},
    {"realtime", (PyCFunction)Ticker_realtime, METH_NOARGS,
     "realtime() -> whether the thread got SCHED_FIFO (None before it started)"},
    {"close", (PyCFunction)Ticker_close, METH_NOARGS, "stop and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TickerType = PROCREAD_TYPE(
    Ticker,
    "Ticker(items, width, start_ns, interval_ns, capacity, end_ns=0, first_tick=0, "
    "priority=0): a thread that reads every item into a ring of rows at each tick "
    "of the grid (SCHED_FIFO at that priority when > 0 and permitted).");

int add_ticker(PyObject *module) {
    return PyModule_AddType(module, &PerfGroupsType) < 0
        || PyModule_AddType(module, &TickerType) < 0 ? -1 : 0;
}
