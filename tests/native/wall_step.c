/* LD_PRELOAD shim: steps the wall clock of the process it is loaded into.
 *
 * CLOCK_REALTIME (and its coarse variant, gettimeofday, time) reads
 * REVEAL_TEST_WALL_STEP_S seconds off from the moment the file named by
 * REVEAL_TEST_WALL_STEP_FILE exists (looked for at most every 100 ms); every other clock is
 * left alone. Used by tests/test_watch_clock_step.py to step a watch's wall clock, in all
 * its processes at once, without touching the host's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static long long step_ns;
static const char *step_file;
static long long looked_ns = -1;
static int has_stepped;

static void setup(void) {
    if (real_clock_gettime != NULL)
        return;
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const char *step = getenv("REVEAL_TEST_WALL_STEP_S");
    step_file = getenv("REVEAL_TEST_WALL_STEP_FILE");
    if (step != NULL)
        step_ns = (long long)(atof(step) * 1e9);
}

static int stepped(void) {
    struct timespec now;
    if (has_stepped || step_file == NULL || real_clock_gettime(CLOCK_MONOTONIC, &now) != 0)
        return has_stepped;
    long long now_ns = now.tv_sec * 1000000000LL + now.tv_nsec;
    if (looked_ns < 0 || now_ns - looked_ns >= 100000000LL) {
        looked_ns = now_ns;
        has_stepped = access(step_file, F_OK) == 0;
    }
    return has_stepped;
}

static void shift(struct timespec *ts) {
    long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + step_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    setup();
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) && stepped())
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
