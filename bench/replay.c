/* bench/replay: every shared trace through gpumem (classic and expandable
   segments, sim backend, no memory touched) and, in the same run, the same
   request stream through glibc malloc/free and through jemalloc (the
   program runs itself again with LD_PRELOAD). Prints a table and writes
   CSV.

   usage: replay [TRACES_DIR] [CSV]     (defaults: ../shared/traces,
                                         build/bench-replay.csv)
          replay --host FILE...         (internal: malloc/free ns per op)

   Figures per trace: operations, peak live bytes, fragmentation
   1 - peak live / peak reserved for each policy, PyTorch's own figure from
   the trace's meta file, for packing problems peak reserved over the known
   optimum (1,048,576 x 512 bytes), and nanoseconds per operation. The
   nanoseconds are the median of nine replays, each from an empty context;
   for gpumem also the same trace replayed again on that context (a second
   step of a training loop: the pages or segments are in place), and the
   backend calls (allocations and frees, or with expandable segments maps
   and unmaps of page runs) per operation of each. */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "../tools/gm_trace.h"
#include "../tools/gm_replay.h"
#include "bench.h"
#include <dirent.h>

#define RUNS 9
#define PACK_OPT (1048576.0 * 512.0)

#define median bench_median

static int load(const char* path, gmt_trace* t) {
    uint64_t scale = strstr(path, "minimalloc") ? 512 : 1;
    if (!gmt_load(path, NULL, scale, t)) {
        fprintf(stderr, "replay: %s: %s\n", path, t->error);
        return 0;
    }
    return 1;
}

/* malloc/free of the same stream; the memory is not touched either. */
static double host_ns(const gmt_trace* t) {
    double r[RUNS];
    void** p = (void**)calloc(t->nids ? t->nids : 1, sizeof *p);
    int k;
    for (k = 0; k < RUNS; k++) {
        size_t i;
        double t0 = gmr_now_ns();
        for (i = 0; i < t->n; i++) {
            const gmt_event* e = &t->ev[i];
            if (!e->is_free) p[e->id] = malloc(e->size ? (size_t)e->size : 1);
            else {
                free(p[e->id]);
                p[e->id] = NULL;
            }
        }
        r[k] = (gmr_now_ns() - t0) / (double)t->n;
        for (i = 0; i < t->nids; i++) {
            free(p[i]);
            p[i] = NULL;
        }
    }
    free(p);
    return median(r, RUNS);
}

static gmr_result gm_run(const gmt_trace* t, int expandable, gmr_twice* g) {
    gm_desc d;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.log_fn = gm_log_stderr;
    d.sim.capacity = (size_t)1 << 40;
    d.expandable = expandable ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    if (!gmr_run_twice(&d, t, RUNS, g)) {
        fprintf(stderr, "replay: gpumem failed on a trace: %s%s\n", g->first.error_msg, g->again.error_msg);
        exit(1);
    }
    return g->first;
}

static double meta_frag(const char* csv_path) {
    char path[1024], buf[8192];
    const char* key = "\"pytorch_frag_ratio_if_no_empty_cache\":";
    char* at;
    FILE* f;
    size_t n;
    snprintf(path, sizeof path, "%s", csv_path);
    at = strstr(path, ".rmm.csv");
    if (!at) return -1;
    strcpy(at, ".meta.json");
    f = fopen(path, "r");
    if (!f) return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    at = strstr(buf, key);
    return at ? strtod(at + strlen(key), NULL) : -1;
}

static int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* The trace files under dir/pytorch, dir/minimalloc, dir/lifetimes. */
static int list_traces(const char* dir, char** out, int max) {
    static const char* sub[] = {"pytorch", "minimalloc", "lifetimes"};
    int n = 0, k;
    for (k = 0; k < 3; k++) {
        char path[1024];
        DIR* d;
        struct dirent* e;
        int first = n;
        snprintf(path, sizeof path, "%s/%s", dir, sub[k]);
        d = opendir(path);
        if (!d) continue;
        while ((e = readdir(d)) != NULL && n < max) {
            const char* nm = e->d_name;
            size_t l = strlen(nm);
            if ((l > 8 && !strcmp(nm + l - 8, ".rmm.csv")) || (k == 1 && l > 4 && !strcmp(nm + l - 4, ".csv")) ||
                (k == 2 && l > 4 && !strcmp(nm + l - 4, ".log"))) {
                out[n] = (char*)malloc(strlen(path) + l + 2);
                sprintf(out[n], "%s/%s", path, nm);
                n++;
            }
        }
        closedir(d);
        qsort(out + first, (size_t)(n - first), sizeof *out, by_name);
    }
    return n;
}

/* Runs `replay --host` on every trace, under an LD_PRELOAD or not. */
static void host_column(const char* self, char** traces, int n, const char* preload, double* out) {
    char cmd[16384];
    size_t len;
    int i;
    len = (size_t)snprintf(cmd, sizeof cmd, "%s%s%s '%s' --host", preload ? "LD_PRELOAD='" : "", preload ? preload : "",
                           preload ? "'" : "", self);
    for (i = 0; i < n && len < sizeof cmd - 1100; i++) len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s'", traces[i]);
    bench_read_numbers(cmd, out, (size_t)n);
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-replay [TRACES_DIR] [CSV]", "--host");
    if (args_rc >= 0) return args_rc;
    const char *dir = "../shared/traces", *csv_path = "build/bench-replay.csv", *jp = bench_jemalloc();
    char* traces[64];
    double glibc[64], jem[64];
    int n, i;
    FILE* csv;
    if (argc > 1 && !strcmp(argv[1], "--host")) {
        for (i = 2; i < argc; i++) {
            gmt_trace t;
            if (!load(argv[i], &t)) {
                printf("-1\n");
                continue;
            }
            printf("%.1f\n", host_ns(&t));
            fflush(stdout);
            gmt_free(&t);
        }
        return 0;
    }
    if (argc > 1) dir = argv[1];
    if (argc > 2) csv_path = argv[2];
    n = list_traces(dir, traces, 64);
    if (!n) {
        fprintf(stderr, "replay: no traces under %s\n", dir);
        return 1;
    }
    host_column(argv[0], traces, n, NULL, glibc);
    if (jp) host_column(argv[0], traces, n, jp, jem);
    else {
        for (i = 0; i < n; i++) jem[i] = -1;
        printf("jemalloc is not installed (Debian: apt-get install libjemalloc2): no jemalloc column, and no cl/jem "
               "ratio\n");
    }
    csv = fopen(csv_path, "w");
    if (csv)
        fprintf(csv, "trace,ops,peak_live,pytorch_frag,frag_classic,frag_expandable,reserved_over_optimum_classic,"
                     "reserved_over_optimum_expandable,segments_classic,segments_expandable,ns_classic,ns_expandable,"
                     "ns_glibc,ns_jemalloc,ns_classic_again,ns_expandable_again,calls_classic,calls_expandable,"
                     "calls_classic_again,calls_expandable_again\n");
    printf("sim backend, nothing touched; fragmentation = 1 - peak live / peak reserved; ns per operation, median of %d\n\n",
           RUNS);
    printf("%-32s %6s %10s | %8s %8s %8s | %7s %7s | %7s %7s %7s %7s | %7s | again: %7s %7s | calls/op: %6s %6s\n",
           "trace", "ops", "peak live", "PyTorch", "classic", "expand.", "cl/opt", "ex/opt", "classic", "expand.",
           "glibc", "jemalloc", "cl/jem", "classic", "expand.", "expand.", "again");
    for (i = 0; i < n; i++) {
        gmt_trace t;
        gmr_result c, e;
        gmr_twice gc, ge;
        double nc, ne, pf = meta_frag(traces[i]), oc = -1, oe = -1;
        const char* name = strrchr(traces[i], '/') + 1;
        char pfs[16] = "-", ocs[16] = "-", oes[16] = "-", lv[16];
        if (!load(traces[i], &t)) return 1;
        c = gm_run(&t, 0, &gc);
        e = gm_run(&t, 1, &ge);
        nc = gc.ns;
        ne = ge.ns;
        if (strstr(traces[i], "minimalloc")) {
            oc = (double)c.peak_reserved / PACK_OPT;
            oe = (double)e.peak_reserved / PACK_OPT;
            snprintf(ocs, sizeof ocs, "%.2fx", oc);
            snprintf(oes, sizeof oes, "%.2fx", oe);
        }
        if (pf >= 0) snprintf(pfs, sizeof pfs, "%.2f%%", 100 * pf);
        snprintf(lv, sizeof lv, "%.2f GB", (double)t.peak_live / 1e9);
        {
            char c1[32], c2[32], f1[32];
            printf("%-32.32s %6zu %10s | %8s %7.2f%% %7.2f%% | %7s %7s | %7.0f %7.0f %7.0f %7s | %7s |        %7.0f %7.0f "
                   "|           %6.3f %6.3f\n",
                   name, t.n, lv, pfs, 100 * c.frag, 100 * e.frag, ocs, oes, nc, ne, glibc[i],
                   bench_cell(c1, sizeof c1, "%.0f", jem[i]), bench_cell(c2, sizeof c2, "%.2fx", jem[i] > 0 ? nc / jem[i] : -1),
                   gc.ns_again, ge.ns_again, ge.calls, ge.calls_again);
            if (csv)
                fprintf(csv, "%s,%zu,%llu,%.6f,%.6f,%.6f,%.4f,%.4f,%lld,%lld,%.1f,%.1f,%.1f,%s,%.1f,%.1f,%.4f,%.4f,%.4f,%.4f\n",
                        name, t.n, (unsigned long long)t.peak_live, pf, c.frag, e.frag, oc, oe, (long long)c.segments,
                        (long long)e.segments, nc, ne, glibc[i], bench_field(f1, sizeof f1, "%.1f", jem[i]), gc.ns_again,
                        ge.ns_again, gc.calls, ge.calls, gc.calls_again, ge.calls_again);
        }
        gmt_free(&t);
        free(traces[i]);
    }
    if (csv) {
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    return 0;
}
