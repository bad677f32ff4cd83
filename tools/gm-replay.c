/* gm-replay: replays allocation traces through gpumem on the sim backend,
   touching no memory, and reports per trace: operations, peak live bytes,
   peak reserved bytes, fragmentation = 1 - peak live / peak reserved,
   segments created, backend allocations (page mappings, with expandable
   segments), backend calls (allocations and frees, or maps and unmaps) per
   operation, with expandable segments the pages mapped and unmapped per
   operation (each a driver call or two on CUDA), and nanoseconds per
   operation.

   usage: gm-replay [--conf key:value,...] [--format rmm|lifetimes|packing]
                    [--scale N] [--check N] [--csv FILE] TRACE...
   --conf takes the GPUMEM_CONF syntax (budget, max_split_size, ...);
   --scale multiplies sizes of lifetime and packing traces (default 512 for
   packing, 1 otherwise); --check N runs gm_check every N events.
   --plan replays each trace twice more, as one step of planned mode:
   recorded (gm_plan_begin, the trace, gm_plan_end), then served from the
   plan (gm_plan_step, the trace), and reports the plan's region against
   the peak live bytes (and the packing problems' known optimum, 1 MiB times
   the scale), the time to build it, gm_plan_check's verdict on the packing,
   and each pass's peak reserved and ns per operation with the plan's hits
   and departures. Where the trace has times (every packing or lifetime
   problem, and RMM logs), the recording marks each event with its time
   (gm_plan_mark), so the plan measures lifetimes in the trace's clock; the
   packing a recording without marks gets (event order) is reported beside
   it, checked pair by pair. The plan is then served once more with
   gm_check after every event. */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "gm_trace.h"
#include "gm_replay.h"

static void usage(void) {
    fprintf(stderr, "usage: gm-replay [--conf key:value,...] [--format rmm|lifetimes|packing] [--scale N]\n"
                    "                 [--check N] [--csv FILE] [--plan] TRACE...\n");
}

/* Packs the trace's requests alone, lifetimes in event order; returns
   gm_plan_check's count (-1: the packing failed). */
static long long pack_checked(const gmt_trace* t, gm_plan_req* q, uint64_t* region, double* ms) {
    size_t i;
    double t0;
    for (i = 0; i < t->nids; i++) q[i].end = t->n + 1, q[i].offset = 0; /* never freed: live to the end */
    for (i = 0; i < t->n; i++) {
        const gmt_event* e = &t->ev[i];
        if (e->is_free) q[e->id].end = i;
        else q[e->id].start = i, q[e->id].size = e->size ? e->size : 1;
    }
    t0 = gmr_now_ns();
    if (gm_plan_pack(q, t->nids, 0, region) != GM_OK) return -1;
    *ms = (gmr_now_ns() - t0) / 1e6;
    return gm_plan_check(q, t->nids, *region);
}

/* --plan: the trace as one step, twice through a fresh context: recorded
   (gm_plan_begin ... gm_plan_end, marked with the trace's times where it
   has them), then served from the plan (gm_plan_step); beside a marked
   one the packing alone in event order, checked by gm_plan_check (what a
   recording without marks packs, but with every request: a recording
   leaves out those not freed in the step or on another stream). */
static int plan_trace(const gmt_trace* t, gm_desc d, const char* name, int packing, uint64_t scale, FILE* csv) {
    gm_plan_req* q = (gm_plan_req*)calloc(t->nids ? t->nids : 1, sizeof *q);
    gm_context* ctx = NULL;
    gm_plan_stats ps, ps3;
    size_t every;
    gmr_result r1, r2, r3;
    uint64_t region = 0, opt = (uint64_t)1048576 * scale, live;
    long long bad = 0;
    double t0, ms, ev_ms = 0;
    gm_result r;
    int failed = 0, timed = 0;
    size_t i;
    for (i = 0; i < t->n && !timed; i++) timed = t->ev[i].time_us > 0;
    if (!q || gm_setup(&ctx, &d) != GM_OK) {
        free(q);
        return 1;
    }
    if (timed) { /* what an unmarked recording would pack (else it is the recorded plan) */
        bad = pack_checked(t, q, &region, &ev_ms);
        live = gm_plan_peak_live(q, t->nids);
        printf("  every request, event order: region %.4fx peak live", live ? (double)region / (double)live : 0);
        if (packing) printf(" (%.4fx the known optimum)", (double)region / (double)opt);
        printf(", built in %.1f ms, %s\n", ev_ms, bad < 0 ? "failed" : bad ? "OVERLAPS" : "checked: no overlap");
    }
    /* recorded, then planned (gm_plan_end gives the cache back first) */
    gm_plan_begin(ctx);
    r1 = gmr_run(ctx, t, 0, 0, timed ? GMR_MARK : 0, NULL, NULL);
    t0 = gmr_now_ns();
    r = gm_plan_end(ctx);
    ms = (gmr_now_ns() - t0) / 1e6;
    gm_reset_peak_stats(ctx);
    gm_plan_step(ctx);
    r2 = gmr_run(ctx, t, 0, 0, 0, NULL, NULL);
    gm_plan_get_stats(ctx, &ps);
    /* once more, with gm_check (no two live planned blocks overlap) after
       every event, or every few where a check costs much (it looks at the
       whole plan): the plan is sound for this step */
    gm_plan_step(ctx);
    every = 1 + (size_t)((double)t->n * (double)t->nids / 4e8);
    r3 = gmr_run(ctx, t, 0, every, 0, NULL, NULL);
    gm_plan_get_stats(ctx, &ps3);
    if (gm_check(ctx) != 0 || r != GM_OK || bad != 0 || r2.error != GM_OK || r2.ooms || r3.checks_failed ||
        r3.error != GM_OK || ps.hits != ps.planned || ps.departures || ps3.hits != 2 * ps.hits ||
        ps3.departures != ps.departures)
        failed = 1;
    printf("  recorded plan%s: %u requests, region %.4fx peak live", timed ? " (marked with the trace's times)" : "",
           t->nids, ps.peak_live ? (double)ps.region / (double)ps.peak_live : 0);
    if (packing) printf(" (%.4fx the known optimum)", (double)ps.region / (double)opt);
    printf(", built in %.1f ms, %s\n", ms, r != GM_OK ? gm_result_string(r) : r3.checks_failed ? "OVERLAPS" : every == 1 ? "checked at every event: no overlap" : "checked every few events: no overlap");
    printf("  recorded: peak reserved %.4e, %.1f ns/op; planned: peak reserved %.4e (%.4fx peak live), %.1f ns/op, "
           "%lld hits, %lld departures, %lld online\n",
           (double)r1.peak_reserved, r1.ns_per_op, (double)r2.peak_reserved,
           r2.peak_live ? (double)r2.peak_reserved / (double)r2.peak_live : 0, r2.ns_per_op, (long long)ps.hits,
           (long long)ps.departures, (long long)ps.online);
    if (csv)
        fprintf(csv, "%s,plan,%u,%llu,%lld,%.6f,%.6f,%.3f,%lld,%lld,%.1f,%.1f,%lld,%lld,%lld,%.6f,%.3f\n", name, t->nids,
                (unsigned long long)r2.peak_live, (long long)ps.region,
                ps.peak_live ? (double)ps.region / (double)ps.peak_live : 0,
                packing ? (double)ps.region / (double)((uint64_t)1048576 * scale) : 0, ms, bad,
                (long long)r2.peak_reserved, r1.ns_per_op, r2.ns_per_op, (long long)ps.hits, (long long)ps.departures,
                (long long)(timed ? region : (uint64_t)ps.region),
                packing ? (double)(timed ? region : (uint64_t)ps.region) / (double)opt : 0, timed ? ev_ms : ms);
    gm_shutdown(ctx);
    free(q);
    return failed;
}

static const char* base(const char* p) {
    const char* s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int main(int argc, char** argv) {
    const char *conf = "", *format = NULL, *csv_path = NULL;
    uint64_t scale = 0;
    size_t check = 0;
    int i, first = 1, failed = 0, plan = 0;
    FILE* csv = NULL;
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--conf") && i + 1 < argc) conf = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc) check = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
        else if (!strcmp(argv[i], "--plan")) plan = 1;
        else {
            usage();
            return 2;
        }
    }
    if (i >= argc) {
        usage();
        return 2;
    }
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "gm-replay: cannot write %s\n", csv_path);
        return 2;
    }
    if (csv) fprintf(csv, "trace,format,ops,peak_live,peak_reserved,fragmentation,segments,device_allocs,ns_per_op,"
                          "pages_mapped,pages_unmapped,device_frees\n");
    for (; i < argc; i++) {
        gmt_trace t;
        gm_context* ctx;
        gm_desc d;
        gmr_result r;
        char conf_full[512];
        const char* fmt = format;
        uint64_t sc = scale;
        if (!fmt) {
            /* the packing problems are scaled by default */
            FILE* f = fopen(argv[i], "r");
            char line[64] = "";
            if (f) {
                if (!fgets(line, sizeof line, f)) line[0] = 0;
                fclose(f);
            }
            if (!strncmp(line, "id,", 3) && !sc) sc = 512;
        }
        if (!gmt_load(argv[i], fmt, sc, &t)) {
            fprintf(stderr, "gm-replay: %s: %s\n", argv[i], t.error);
            gmt_free(&t);
            failed = 1;
            continue;
        }
        memset(&d, 0, sizeof d);
        d.backend = GM_BACKEND_SIM;
        d.log_fn = gm_log_stderr;
        d.sim.capacity = (size_t)1 << 40; /* room for any trace: nothing is touched */
        snprintf(conf_full, sizeof conf_full, "%s", conf);
        d.conf = conf_full;
        if (gm_setup(&ctx, &d) != GM_OK) {
            fprintf(stderr, "gm-replay: setup failed\n");
            return 1;
        }
        r = gmr_run(ctx, &t, 0, check, 0, NULL, NULL);
        if (first) {
            printf("%-34s %-9s %8s %12s %14s %7s %8s %8s %8s %8s %7s %7s\n", "trace", "format", "ops", "peak live",
                   "peak reserved", "frag", "segments", "dev.alloc", "ns/op", "calls/op", "maps/op", "unmap/op");
            first = 0;
        }
        printf("%-34.34s %-9s %8zu %12.3e %14.3e %6.2f%% %8lld %8lld %8.1f %8.4f %7.3f %7.3f\n", base(argv[i]),
               t.format, r.ops, (double)r.peak_live, (double)r.peak_reserved, 100 * r.frag, (long long)r.segments,
               (long long)r.device_allocs, r.ns_per_op,
               r.ops ? (double)(r.device_allocs + r.device_frees) / (double)r.ops : 0.0,
               r.ops ? (double)r.pages_mapped / (double)r.ops : 0.0,
               r.ops ? (double)r.pages_unmapped / (double)r.ops : 0.0);
        if (csv)
            fprintf(csv, "%s,%s,%zu,%llu,%lld,%.6f,%lld,%lld,%.1f,%lld,%lld,%lld\n", base(argv[i]), t.format, r.ops,
                    (unsigned long long)r.peak_live, (long long)r.peak_reserved, r.frag, (long long)r.segments,
                    (long long)r.device_allocs, r.ns_per_op, (long long)r.pages_mapped, (long long)r.pages_unmapped,
                    (long long)r.device_frees);
        if (r.error != GM_OK || r.ooms || r.checks_failed) {
            fprintf(stderr, "gm-replay: %s: %s%s%lld out-of-memory, %d failed checks\n", base(argv[i]), r.error_msg,
                    r.error_msg[0] ? "; " : "", (long long)r.ooms, r.checks_failed);
            failed = 1;
        }
        if (gm_check(ctx) != 0) failed = 1;
        if (plan && plan_trace(&t, d, base(argv[i]), !strcmp(t.format, "packing"), sc ? sc : 1, csv)) failed = 1;
        gm_shutdown(ctx);
        gmt_free(&t);
    }
    if (csv) fclose(csv);
    return failed;
}
