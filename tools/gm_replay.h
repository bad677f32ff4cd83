/* gm_replay.h -- replays a gmt_trace through a gpumem context. Include
   after gpumem.h and gm_trace.h. No device memory is touched, so a trace of
   a 55 GB workload replays on the sim backend on a small machine. */
#ifndef GM_REPLAY_H
#define GM_REPLAY_H
#include <time.h>

typedef struct gmr_result {
    size_t ops;
    uint64_t peak_live;      /* largest sum of live requested bytes */
    int64_t peak_reserved;   /* the allocator's peak reserved bytes */
    double frag;             /* 1 - peak_live / peak_reserved */
    int64_t segments;        /* segments created */
    int64_t device_allocs;   /* backend allocations (calls that map pages, when expandable) */
    int64_t device_frees;    /* backend frees (calls that unmap pages, when expandable) */
    int64_t pages_mapped;    /* expandable: pages mapped (one driver allocation and map each on CUDA) */
    int64_t pages_unmapped;  /* expandable: pages unmapped (one unmap and release each on CUDA) */
    int64_t ooms;
    double ns_per_op;
    size_t peak_event;       /* index of the event after which reserved peaked */
    int checks_failed;       /* gm_check failures, when asked to check */
    gm_result error;         /* the first unexpected result, or GM_OK */
    char error_msg[160];
} gmr_result;

/* Called after each event with the live requested and reserved bytes. */
typedef void (*gmr_step_fn)(size_t i, uint64_t live, int64_t reserved, void* user);

static inline double gmr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* gmr_run's flags */
#define GMR_KEEP_LIVE 1 /* leave the blocks live at the end */
#define GMR_MARK 2      /* gm_plan_mark each event with the trace's time (never falling) */

/* Replays events [0, stop) (stop = 0: all). check_every > 0 runs gm_check
   every that many events (the time then includes it). Live blocks are freed
   at the end unless GMR_KEEP_LIVE. */
static inline gmr_result gmr_run(gm_context* ctx, const gmt_trace* t, size_t stop, size_t check_every, int flags,
                          gmr_step_fn step, void* user) {
    gmr_result r;
    void** ptr = (void**)calloc(t->nids ? t->nids : 1, sizeof *ptr);
    uint64_t live = 0;
    int64_t best = -1;
    size_t i;
    double t0;
    uint64_t mark = 0;
    gm_stats st;
    memset(&r, 0, sizeof r);
    if (!ptr) {
        r.error = GM_ERR_HOST_OUT_OF_MEMORY;
        return r;
    }
    if (!stop || stop > t->n) stop = t->n;
    t0 = gmr_now_ns();
    for (i = 0; i < stop; i++) {
        const gmt_event* e = &t->ev[i];
        gm_result res;
        if (flags & GMR_MARK) {
            if (e->time_us > (double)mark && e->time_us < 1.8e19) mark = (uint64_t)e->time_us;
            gm_plan_mark(ctx, mark);
        }
        if (!e->is_free) {
            res = gm_alloc(ctx, &ptr[e->id], (size_t)e->size, NULL);
            if (res == GM_OK) live += e->size;
            else if (res == GM_ERR_OUT_OF_MEMORY) r.ooms++;
        } else {
            res = ptr[e->id] ? gm_free(ctx, ptr[e->id]) : GM_OK;
            if (ptr[e->id]) live -= e->size;
            ptr[e->id] = NULL;
        }
        if (res != GM_OK && res != GM_ERR_OUT_OF_MEMORY && r.error == GM_OK) {
            r.error = res;
            snprintf(r.error_msg, sizeof r.error_msg, "event %zu: %s", i, gm_result_string(res));
        }
        if (live > r.peak_live) r.peak_live = live;
        if (step || check_every) {
            if (check_every && (i % check_every) == 0 && gm_check(ctx) != 0) r.checks_failed++;
            if (step) {
                gm_get_stats(ctx, &st);
                step(i, live, st.reserved_bytes[GM_STAT_ALL].current, user);
            }
        }
    }
    r.ns_per_op = stop ? (gmr_now_ns() - t0) / (double)stop : 0;
    r.ops = stop;
    memset(&st, 0, sizeof st);
    gm_get_stats(ctx, &st);
    r.peak_reserved = st.reserved_bytes[GM_STAT_ALL].peak;
    r.segments = st.segment[GM_STAT_ALL].allocated;
    r.device_allocs = st.num_device_alloc;
    r.device_frees = st.num_device_free;
    r.pages_mapped = st.num_pages_mapped;
    r.pages_unmapped = st.num_pages_unmapped;
    r.frag = r.peak_reserved > 0 ? 1.0 - (double)r.peak_live / (double)r.peak_reserved : 0;
    (void)best;
    if (!(flags & GMR_KEEP_LIVE)) {
        for (i = 0; i < t->nids; i++)
            if (ptr[i]) gm_free(ctx, ptr[i]);
    }
    free(ptr);
    return r;
}

/* The backend calls (allocations and frees, or maps and unmaps) per
   operation of r, counting from `before` (NULL: from setup). */
static inline double gmr_calls_per_op(const gmr_result* r, const gmr_result* before) {
    int64_t c = r->device_allocs + r->device_frees - (before ? before->device_allocs + before->device_frees : 0);
    return r->ops ? (double)c / (double)r->ops : 0;
}

/* A trace replayed `runs` times (1..9), each from a context made from *d
   and then once more on it (the trace again: a training loop's second
   step): the median ns per operation of each pass, the backend calls per
   operation of the last run's two passes, and that run's first pass.
   Returns 0 when setup fails, or a replay errs, runs out of memory or
   leaves gm_check unhappy (the last one's results say which). */
typedef struct gmr_twice {
    double ns, ns_again, calls, calls_again;
    gmr_result first, again;
} gmr_twice;

static inline double gmr_median_(double* v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return v[n / 2];
}

static inline int gmr_run_twice(const gm_desc* d, const gmt_trace* t, int runs, gmr_twice* out) {
    double r[9], r2[9];
    int k;
    memset(out, 0, sizeof *out);
    if (runs < 1) runs = 1;
    if (runs > 9) runs = 9;
    for (k = 0; k < runs; k++) {
        gm_context* ctx;
        int bad;
        if (gm_setup(&ctx, d) != GM_OK) return 0;
        out->first = gmr_run(ctx, t, 0, 0, 0, NULL, NULL);
        out->again = gmr_run(ctx, t, 0, 0, 0, NULL, NULL);
        r[k] = out->first.ns_per_op;
        r2[k] = out->again.ns_per_op;
        bad = out->first.error != GM_OK || out->first.ooms || out->again.error != GM_OK || out->again.ooms ||
              gm_check(ctx) != 0;
        gm_shutdown(ctx);
        if (bad) return 0;
    }
    out->ns = gmr_median_(r, runs);
    out->ns_again = gmr_median_(r2, runs);
    out->calls = gmr_calls_per_op(&out->first, NULL);
    out->calls_again = gmr_calls_per_op(&out->again, &out->first);
    return 1;
}

/* Finds the event after which reserved memory first reached its peak. */
typedef struct gmr_peak {
    int64_t best;
    size_t at;
} gmr_peak;
static inline void gmr_peak_step(size_t i, uint64_t live, int64_t reserved, void* user) {
    gmr_peak* p = (gmr_peak*)user;
    (void)live;
    if (reserved > p->best) {
        p->best = reserved;
        p->at = i;
    }
}
#endif
