/*
 * The kernel's floor under any collector of these sources: pread every file named on
 * stdin (one path per line) from offset 0 to end of file every INTERVAL_MS on the grid for
 * SECONDS, and do nothing else (no parsing). Prints JSON: user and system CPU seconds of
 * the loop (getrusage), per-file system time per read (CLOCK_THREAD_CPUTIME_ID around
 * each pread) and the loop's CPU as % of one core. Built and run by bench_kernel_floor.py.
 * A line "fd:N" names an inherited descriptor read with read() instead: a perf_event group
 * leader the caller opened (a group read returns every member's count, as the collector's
 * reads do). "PATH<TAB>N" reads PATH on one tick in N only, as the collector reads a part
 * with a period (the files with a period take the N phases in turn).
 *
 *     kernel_floor SECONDS INTERVAL_MS < files.txt
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 4096
static char buf[1 << 20];

static void json_string(const char *text) {
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else putchar(*c);
    }
    putchar('"');
}

static long long ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: kernel_floor SECONDS INTERVAL_MS < files.txt\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    long long interval = atoll(argv[2]) * 1000000LL;
    static char names[MAX_FILES][256];
    static int fds[MAX_FILES];
    static long long spent[MAX_FILES];
    static long long bytes[MAX_FILES];
    static long long every[MAX_FILES], phase[MAX_FILES], reads[MAX_FILES];
    long long spread = 0;
    int n = 0;
    char line[512];
    while (n < MAX_FILES && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) continue;
        char *tab = strchr(line, '\t');
        long long k_every = 1;
        if (tab) {
            *tab = 0;
            k_every = atoll(tab + 1) > 1 ? atoll(tab + 1) : 1;
        }
        int fd = strncmp(line, "fd:", 3) == 0 ? atoi(line + 3) : open(line, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        snprintf(names[n], sizeof names[n], "%s", line);
        every[n] = k_every;
        phase[n] = k_every > 1 ? spread++ % k_every : 0;
        fds[n++] = fd;
    }
    long long start = ns(CLOCK_MONOTONIC) + interval;
    long long ticks = (long long)(seconds * 1e9 / interval);
    for (long long k = 0; k < ticks; k++) {
        long long d = start + k * interval;
        struct timespec ts = {(time_t)(d / 1000000000LL), (long)(d % 1000000000LL)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        for (int i = 0; i < n; i++) {
            if (k % every[i] != phase[i]) continue;
            reads[i]++;
            long long t0 = ns(CLOCK_THREAD_CPUTIME_ID);
            /* to end of file, as the collector reads: seq_file gives a page per read */
            ssize_t got = 0, n;
            if (strncmp(names[i], "fd:", 3) == 0) got = read(fds[i], buf, sizeof buf);
            else
                while ((n = pread(fds[i], buf, sizeof buf, got)) > 0) got += n;
            spent[i] += ns(CLOCK_THREAD_CPUTIME_ID) - t0;
            if (got > 0) bytes[i] = got;
        }
    }
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    double user = u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6;
    double sys = u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
    printf("{\"files\": %d, \"ticks\": %lld, \"seconds\": %.3f, \"user_s\": %.4f, "
           "\"system_s\": %.4f, \"pct_core\": %.4f, \"per_file_us\": {", n, ticks, seconds,
           user, sys, 100.0 * (user + sys) / seconds);
    for (int i = 0; i < n; i++) {
        printf("%s", i ? ", " : "");
        json_string(names[i]);
        printf(": [%.1f, %lld, %lld]", reads[i] ? spent[i] / 1e3 / reads[i] : 0.0, bytes[i],
               every[i]);
    }
    printf("}}\n");
    return 0;
}
