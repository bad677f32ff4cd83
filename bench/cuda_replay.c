/* bench/cuda_replay: the PyTorch traces through gpumem on a real GPU (the
   CUDA backend: cudaMalloc for classic segments, cuMemCreate and cuMemMap
   for expandable ones), classic and expandable, from an empty context and
   the same trace again on it (a second step of a training loop). Nothing is
   touched: this is the allocator's own cost, driver calls included.
   Expandable segments run twice: with pages of the driver's granularity
   (2 MiB, the default) and with 20 MiB pages (expandable_page:20M, the
   size of PyTorch's large expandable pages).

   usage: cuda_replay TRACES_DIR [CSV] [EVENTS_DIR]

   EVENTS_DIR, when given, receives each trace's request stream as a flat
   binary file (per event: uint32 id, uint32 is_free, uint64 size), which
   bench/torch_replay.cc replays through PyTorch's CUDA caching allocator:
   the same requests, in the same order, on the same device.

   Without a CUDA device it says so and measures nothing (exit 0). */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "../tools/gm_trace.h"
#include "../tools/gm_replay.h"
#include "../examples/pick_backend.h"
#include "bench.h"
#include <dirent.h>

#define RUNS 3

typedef struct figs {
    double ns, ns_again, frag, calls, calls_again;
} figs;

static int run(const gmt_trace* t, int expandable, size_t page, figs* f) {
    gm_desc d;
    gmr_twice g;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_CUDA;
    d.ignore_env = 1;
    d.log_fn = gm_log_stderr;
    d.device_budget_fraction = 0.95;
    d.expandable = expandable ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    d.expandable_page = page;
    if (!gmr_run_twice(&d, t, RUNS, &g)) {
        fprintf(stderr, "cuda_replay: %s: %s %s (%lld and %lld out of memory)\n", expandable ? "expandable" : "classic",
                g.first.error_msg, g.again.error_msg, (long long)g.first.ooms, (long long)g.again.ooms);
        return 0;
    }
    f->ns = g.ns;
    f->ns_again = g.ns_again;
    f->frag = g.first.frag;
    f->calls = g.calls;
    f->calls_again = g.calls_again;
    return 1;
}

static void dump(const char* dir, const char* name, const gmt_trace* t) {
    char path[2048];
    FILE* f;
    size_t i;
    snprintf(path, sizeof path, "%s/%s.ev", dir, name);
    f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    for (i = 0; i < t->n; i++) {
        uint32_t w[2];
        uint64_t s = t->ev[i].size;
        w[0] = t->ev[i].id;
        w[1] = t->ev[i].is_free;
        fwrite(w, sizeof w, 1, f);
        fwrite(&s, sizeof s, 1, f);
    }
    fclose(f);
}

static int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-cuda-replay TRACES_DIR [CSV] [EVENTS_DIR]", NULL);
    if (args_rc >= 0) return args_rc;
    const char *dir = argc > 1 ? argv[1] : "../shared/traces", *csv_path = argc > 2 ? argv[2] : "build/cuda-replay.csv",
               *evdir = argc > 3 ? argv[3] : NULL;
    char path[1024], *names[64];
    int n = 0, i;
    DIR* dd;
    struct dirent* e;
    FILE* csv;
    if (pick_backend() != GM_BACKEND_CUDA) {
        printf("cuda_replay: no CUDA device: nothing measured\n");
        return 0;
    }
    snprintf(path, sizeof path, "%s/pytorch", dir);
    dd = opendir(path);
    if (!dd) {
        fprintf(stderr, "cuda_replay: no traces under %s\n", path);
        return 1;
    }
    while ((e = readdir(dd)) != NULL && n < 64) {
        size_t l = strlen(e->d_name);
        if (l > 8 && !strcmp(e->d_name + l - 8, ".rmm.csv")) {
            names[n] = (char*)malloc(l + 1);
            memcpy(names[n], e->d_name, l + 1);
            n++;
        }
    }
    closedir(dd);
    qsort(names, (size_t)n, sizeof *names, by_name);
    csv = fopen(csv_path, "w");
    if (csv)
        fprintf(csv, "trace,ops,peak_live,frag_classic,frag_expandable,ns_classic,ns_expandable,ns_classic_again,"
                     "ns_expandable_again,calls_classic,calls_expandable,calls_classic_again,calls_expandable_again,"
                     "frag_expandable20,ns_expandable20,ns_expandable20_again,calls_expandable20,calls_expandable20_again\n");
    printf("CUDA backend, nothing touched; ns per operation, median of %d; fragmentation = 1 - peak live / peak reserved\n\n",
           RUNS);
    printf("%-36s %6s %7s | %7s %7s %7s | %8s %8s %8s | again: %8s %8s %8s | calls/op: %6s %6s %6s | again: %6s %6s\n",
           "trace", "ops", "peak GB", "frag cl", "ex 2M", "ex 20M", "classic", "ex 2M", "ex 20M", "classic", "ex 2M", "ex 20M",
           "cl", "ex 2M", "ex 20M", "ex 2M", "ex 20M");
    for (i = 0; i < n; i++) {
        gmt_trace t;
        figs c, x, y;
        char* full = (char*)malloc(strlen(path) + strlen(names[i]) + 2);
        sprintf(full, "%s/%s", path, names[i]);
        if (!gmt_load(full, NULL, 1, &t)) {
            fprintf(stderr, "cuda_replay: %s: %s\n", full, t.error);
            return 1;
        }
        free(full);
        if (evdir) dump(evdir, names[i], &t);
        memset(&c, 0, sizeof c);
        memset(&x, 0, sizeof x);
        memset(&y, 0, sizeof y);
        if (!run(&t, 0, 0, &c)) c.ns = -1;
        if (!run(&t, 1, 0, &x)) x.ns = -1;
        if (!run(&t, 1, (size_t)20 << 20, &y)) y.ns = -1;
        printf("%-36.36s %6zu %7.2f | %6.2f%% %6.2f%% %6.2f%% | %8.0f %8.0f %8.0f |        %8.0f %8.0f %8.0f |           "
               "%6.3f %6.3f %6.3f |        %6.3f %6.3f\n",
               names[i], t.n, (double)t.peak_live / 1e9, 100 * c.frag, 100 * x.frag, 100 * y.frag, c.ns, x.ns, y.ns,
               c.ns_again, x.ns_again, y.ns_again, c.calls, x.calls, y.calls, x.calls_again, y.calls_again);
        fflush(stdout);
        if (csv)
            fprintf(csv, "%s,%zu,%llu,%.6f,%.6f,%.1f,%.1f,%.1f,%.1f,%.4f,%.4f,%.4f,%.4f,%.6f,%.1f,%.1f,%.4f,%.4f\n", names[i],
                    t.n, (unsigned long long)t.peak_live, c.frag, x.frag, c.ns, x.ns, c.ns_again, x.ns_again, c.calls, x.calls,
                    c.calls_again, x.calls_again, y.frag, y.ns, y.ns_again, y.calls, y.calls_again);
        gmt_free(&t);
        free(names[i]);
    }
    if (csv) {
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    return 0;
}
