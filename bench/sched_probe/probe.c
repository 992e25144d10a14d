// SPDX-License-Identifier: Apache-2.0
// An online task for bench/sched_probe: wakes every period_us (absolute timer), works work_us,
// records how late each wake-up ran; prints the p50, p99 and p99.9 of that lateness in µs.
// With slice_us > 0 it first asks for that EEVDF slice (sched_setattr sched_runtime, Linux >= 6.12).
// Usage: probe <seconds> <period_us> <work_us> [slice_us]
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/syscall.h>

// struct sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0)
struct sched_attr_v0 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

static long ns(struct timespec t) { return t.tv_sec * 1000000000L + t.tv_nsec; }

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: probe <seconds> <period_us> <work_us> [slice_us]\n");
        return 2;
    }
    if (argc == 5 && atol(argv[4]) > 0) {
        struct sched_attr_v0 attr = {sizeof attr, 0, 0, 0, 0, (uint64_t)atol(argv[4]) * 1000, 0, 0};
        if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) {
            perror("sched_setattr");
            return 3;
        }
    }
    double seconds = atof(argv[1]);
    long period = atol(argv[2]) * 1000, work = atol(argv[3]) * 1000;
    long n = (long)(seconds * 1e9 / period);
    long *late = malloc(n * sizeof(long));
    struct timespec next, now;
    if (n <= 0 || !late) return 2;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i < n; i++) {
        long due = ns(next) + period;
        next.tv_sec = due / 1000000000L;
        next.tv_nsec = due % 1000000000L;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        late[i] = ns(now) - ns(next);
        long end = ns(now) + work;
        do clock_gettime(CLOCK_MONOTONIC, &now); while (ns(now) < end);
        if (ns(now) > ns(next) + period) next = now;  // overran the period: restart from now
    }
    qsort(late, n, sizeof(long), cmp);
    printf("%.1f %.1f %.1f\n", late[n / 2] / 1e3, late[n * 99 / 100] / 1e3, late[n * 999 / 1000] / 1e3);
    return 0;
}
