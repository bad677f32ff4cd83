/* bench.h -- what the benchmark programs share: a clock, medians, and where
   jemalloc lives (for the LD_PRELOAD reference runs). */
#ifndef GM_BENCH_H
#define GM_BENCH_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Arguments are paths and figures: one that starts with '-' (but "-" and
   `internal`, a flag the program passes to itself) gets the usage line,
   on stdout and 0 for -h and --help, else on stderr and 2, for main to
   return; -1 to go on (a path "--help" would otherwise be written). */
static inline int bench_args(int argc, char** argv, const char* usage, const char* internal) {
    int i;
    for (i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || !argv[i][1] || (internal && !strcmp(argv[i], internal))) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s\n", usage);
            return 0;
        }
        fprintf(stderr, "%s: unknown option %s\nusage: %s\n", argv[0], argv[i], usage);
        return 2;
    }
    return -1;
}

static inline int bench_cmp_d(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static inline double bench_median(double* v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return v[n / 2];
}

/* Debian's libjemalloc2, or NULL. It cannot be dlopen()ed (initial-exec
   TLS), so the benchmarks run themselves again under LD_PRELOAD. */
static inline const char* bench_jemalloc(void) {
    static const char* c[] = {"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                              "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2"};
    size_t i;
    for (i = 0; i < sizeof c / sizeof c[0]; i++)
        if (access(c[i], R_OK) == 0) return c[i];
    return NULL;
}
/* Runs cmd and reads up to n numbers from its output into out; -1 for
   those it did not print. */
static inline void bench_read_numbers(const char* cmd, double* out, size_t n) {
    size_t i;
    FILE* p;
    for (i = 0; i < n; i++) out[i] = -1;
    p = popen(cmd, "r");
    if (!p) return;
    for (i = 0; i < n; i++)
        if (fscanf(p, "%lf", &out[i]) != 1) break;
    pclose(p);
}

/* A table cell: v in fmt, or "-" where its reference is missing (v < 0). */
static inline const char* bench_cell(char* buf, size_t cap, const char* fmt, double v) {
    if (v < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, fmt, v);
    return buf;
}

/* A CSV field: v in fmt, or empty where it is missing (v < 0). */
static inline const char* bench_field(char* buf, size_t cap, const char* fmt, double v) {
    if (v < 0) buf[0] = 0;
    else snprintf(buf, cap, fmt, v);
    return buf;
}
#endif
