// SPDX-License-Identifier: Apache-2.0
// A CPU hog for bench/sched_probe: busy busy_us, then sleeps a uniform [0, sleep_max_us) and
// again, until killed; sleep_max_us 0 is a pure hog (a BE job), above 0 a daemon's bursts.
// Usage: hog <busy_us> <sleep_max_us>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hog <busy_us> <sleep_max_us>\n");
        return 2;
    }
    long busy = atol(argv[1]) * 1000, sleep_max = atol(argv[2]);
    srand(getpid());
    for (;;) {
        long end = ns() + busy;
        while (ns() < end) {
        }
        if (sleep_max > 0) usleep(rand() % sleep_max);
    }
}
