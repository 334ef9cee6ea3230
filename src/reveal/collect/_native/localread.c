/*
 * reveal.collect._procread.LocalReader: read per-CPU descriptors on their own CPU.
 *
 * Reading a system-wide perf event that is active on another CPU makes the kernel send an
 * inter-processor interrupt and spin until that CPU answers; in a virtual machine whose
 * other vCPU is halted the reader spins for as long as the host takes to wake it (hundreds
 * of microseconds). A LocalReader instead runs one thread per CPU, pinned to it, that
 * sleeps on its own timer until each tick of the sampler's grid (start + k * interval,
 * CLOCK_MONOTONIC), reads that CPU's descriptors locally (no interrupt) into a staging
 * buffer, and posts the tick number. collect(buffer, now_ns, timeout_ns) waits (asleep,
 * at most timeout_ns) until every thread has posted the tick that holds now_ns, copies the
 * staged bytes of the fresh groups into buffer and returns the indices of the groups it
 * could not provide (a thread that could not pin itself, a failed or short read, a tick
 * not posted in time): the caller reads those the ordinary way.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "procread.h"

#define NS_PER_S 1000000000LL
#define MAX_SLEEP_NS 100000000LL /* threads look at the stop flag at least this often */

typedef struct {
    int fd;
    int cpu;
    Py_ssize_t offset; /* bytes into the buffer */
    Py_ssize_t size;   /* bytes one read returns */
    Py_ssize_t thread; /* index of the thread of its CPU */
    int fresh;         /* last read complete (under lock) */
} LGroup;

struct LocalReader;

typedef struct {
    struct LocalReader *owner;
    int cpu;
    pthread_t thread;
    int created;
    int pinned;          /* -1 not yet known, 0 failed, 1 pinned (under lock) */
    int64_t first_tick;  /* first tick it will post (under lock) */
    int64_t done_tick;   /* last tick posted, -1 none (under lock) */
} LThread;

typedef struct LocalReader {
    PyObject_HEAD
    LGroup *groups;
    Py_ssize_t ngroups;
    LThread *threads;
    Py_ssize_t nthreads;
    char *staging;
    Py_ssize_t nbytes;
    int64_t start_ns;
    int64_t interval_ns;
    int stop;  /* atomic */
    int sync_ready;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} LocalReader;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static struct timespec to_timespec(int64_t ns) {
    struct timespec ts = {(time_t)(ns / NS_PER_S), (long)(ns % NS_PER_S)};
    return ts;
}

/* First tick whose deadline is not before now. */
static int64_t tick_at_or_after(const LocalReader *r, int64_t now) {
    if (now <= r->start_ns) return 0;
    return (now - r->start_ns + r->interval_ns - 1) / r->interval_ns;
}

static void *reader_main(void *arg) {
    LThread *t = (LThread *)arg;
    LocalReader *r = t->owner;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    int pinned = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0 &&
                 sched_getcpu() == t->cpu;
    Py_ssize_t biggest = 8;
    for (Py_ssize_t i = 0; i < r->ngroups; i++)
        if (r->groups[i].cpu == t->cpu && r->groups[i].size > biggest) biggest = r->groups[i].size;
    char *scratch = pinned ? malloc((size_t)biggest) : NULL;
    int64_t k = tick_at_or_after(r, mono_ns());
    pthread_mutex_lock(&r->lock);
    t->pinned = pinned && scratch != NULL;
    t->first_tick = k;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (!t->pinned) {
        free(scratch);
        return NULL;
    }
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        int64_t due = r->start_ns + k * r->interval_ns;
        int64_t now = mono_ns();
        if (now < due) {
            int64_t until = due - now > MAX_SLEEP_NS ? now + MAX_SLEEP_NS : due;
            struct timespec ts = to_timespec(until);
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            continue;
        }
        for (Py_ssize_t i = 0; i < r->ngroups; i++) {
            LGroup *g = &r->groups[i];
            if (g->cpu != t->cpu) continue;
            ssize_t n = read(g->fd, scratch, (size_t)g->size);
            pthread_mutex_lock(&r->lock);
            g->fresh = n == g->size;
            if (g->fresh) memcpy(r->staging + g->offset, scratch, (size_t)g->size);
            pthread_mutex_unlock(&r->lock);
        }
        pthread_mutex_lock(&r->lock);
        t->done_tick = k;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
        /* next tick not yet due: a late wake-up skips ticks, never bursts */
        int64_t next = tick_at_or_after(r, mono_ns());
        k = next > k ? next : k + 1;
    }
    free(scratch);
    return NULL;
}

static void stop_threads(LocalReader *r) {
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    for (Py_ssize_t i = 0; i < r->nthreads; i++) {
        if (r->threads[i].created) {
            pthread_join(r->threads[i].thread, NULL);
            r->threads[i].created = 0;
        }
    }
}

static PyObject *LocalReader_collect(LocalReader *self, PyObject *args) {
    Py_buffer view;
    long long now_ns, timeout_ns;
    if (!PyArg_ParseTuple(args, "w*LL", &view, &now_ns, &timeout_ns)) return NULL;
    if (view.len < self->nbytes || self->threads == NULL ||
        __atomic_load_n(&self->stop, __ATOMIC_ACQUIRE)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "buffer smaller than the groups, or reader stopped");
        return NULL;
    }
    int64_t tick = now_ns <= self->start_ns ? 0 : (now_ns - self->start_ns) / self->interval_ns;
    char *stale = calloc((size_t)(self->ngroups > 0 ? self->ngroups : 1), 1);
    if (stale == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    struct timespec limit = to_timespec(mono_ns() + (timeout_ns > 0 ? timeout_ns : 0));
    pthread_mutex_lock(&self->lock);
    for (;;) {
        int waiting = 0;
        for (Py_ssize_t i = 0; i < self->nthreads; i++) {
            LThread *t = &self->threads[i];
            if (t->pinned == -1 || (t->pinned == 1 && t->first_tick <= tick &&
                                    t->done_tick < tick)) waiting = 1;
        }
        if (!waiting) break;
        if (pthread_cond_timedwait(&self->cond, &self->lock, &limit) == ETIMEDOUT) break;
    }
    for (Py_ssize_t i = 0; i < self->ngroups; i++) {
        LGroup *g = &self->groups[i];
        const LThread *owner = &self->threads[g->thread];
        if (owner->pinned == 1 && owner->done_tick >= tick && g->fresh)
            memcpy((char *)view.buf + g->offset, self->staging + g->offset, (size_t)g->size);
        else
            stale[i] = 1;
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < self->ngroups; i++) {
        if (!stale[i]) continue;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(out, index) < 0) Py_CLEAR(out);
        Py_XDECREF(index);
    }
    free(stale);
    return out;
}

static PyObject *LocalReader_close(LocalReader *self, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS
    stop_threads(self);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *LocalReader_pinned(LocalReader *self, PyObject *Py_UNUSED(ignored)) {
    /* CPUs whose thread runs pinned (waits until every thread has tried). */
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    for (;;) {
        int unknown = 0;
        for (Py_ssize_t i = 0; i < self->nthreads; i++)
            if (self->threads[i].created && self->threads[i].pinned == -1) unknown = 1;
        if (!unknown) break;
        pthread_cond_wait(&self->cond, &self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        if (self->threads[i].pinned != 1) continue;
        PyObject *cpu = PyLong_FromLong(self->threads[i].cpu);
        if (cpu == NULL || PyList_Append(out, cpu) < 0) {
            Py_XDECREF(cpu);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(cpu);
    }
    return out;
}

static void LocalReader_dealloc(LocalReader *self) {
    if (self->threads) {
        stop_threads(self);
        free(self->threads);
    }
    if (self->sync_ready) {
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->cond);
    }
    free(self->groups);
    free(self->staging);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* LocalReader(groups, start_ns, interval_ns); groups: sequence of (fd, cpu, offset, size). */
static int LocalReader_init(LocalReader *self, PyObject *args, PyObject *kwds) {
    PyObject *groups;
    long long start_ns, interval_ns;
    static char *kwlist[] = {"groups", "start_ns", "interval_ns", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OLL", kwlist, &groups, &start_ns,
                                     &interval_ns))
        return -1;
    if (self->groups != NULL || self->threads != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LocalReader already initialised");
        return -1;
    }
    if (interval_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "interval_ns must be positive");
        return -1;
    }
    PyObject *fast = PySequence_Fast(groups, "groups must be a sequence");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    self->groups = calloc((size_t)(n > 0 ? n : 1), sizeof(LGroup));
    self->threads = calloc((size_t)(n > 0 ? n : 1), sizeof(LThread));
    if (self->groups == NULL || self->threads == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    self->ngroups = n;
    Py_ssize_t end = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        LGroup *g = &self->groups[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "iinn", &g->fd, &g->cpu,
                              &g->offset, &g->size)) {
            Py_DECREF(fast);
            return -1;
        }
        if (g->offset < 0 || g->size <= 0 || g->cpu < 0 || g->cpu >= CPU_SETSIZE) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "bad group (offset, size or cpu)");
            return -1;
        }
        if (g->offset + g->size > end) end = g->offset + g->size;
        g->thread = -1;
        for (Py_ssize_t j = 0; j < self->nthreads; j++)
            if (self->threads[j].cpu == g->cpu) g->thread = j;
        if (g->thread < 0) {
            g->thread = self->nthreads;
            LThread *t = &self->threads[self->nthreads++];
            t->owner = self;
            t->cpu = g->cpu;
            t->pinned = -1;
            t->done_tick = -1;
        }
    }
    Py_DECREF(fast);
    self->nbytes = end;
    self->staging = calloc((size_t)(end > 0 ? end : 1), 1);
    if (self->staging == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->start_ns = start_ns;
    self->interval_ns = interval_ns;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    self->sync_ready = 1;
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        LThread *t = &self->threads[i];
        if (pthread_create(&t->thread, NULL, reader_main, t) == 0)
            t->created = 1;
        else
            t->pinned = 0; /* read the ordinary way */
    }
    return 0;
}

static PyMethodDef LocalReader_methods[] = {
    {"collect", (PyCFunction)LocalReader_collect, METH_VARARGS,
     "collect(buffer, now_ns, timeout_ns) -> list of group indices not provided"},
    {"pinned", (PyCFunction)LocalReader_pinned, METH_NOARGS,
     "pinned() -> CPUs whose reader thread runs on that CPU"},
    {"close", (PyCFunction)LocalReader_close, METH_NOARGS, "stop and join the threads"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LocalReaderType = PROCREAD_TYPE(
    LocalReader,
    "Per-CPU descriptors read on their own CPU by pinned threads, on a tick grid.");

int add_local_reader(PyObject *module) {
    return PyModule_AddType(module, &LocalReaderType);
}
