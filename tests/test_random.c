/* A random walk of 100,000 operations on three streams under a budget:
   alloc, free, record_stream, host work, synchronize, empty_cache, stream
   re-creation. After every step gm_check must find nothing broken and the
   statistics must equal a model kept here; live blocks must never overlap,
   and (on sim) the tag bytes written into each block must survive. */
#include "gm_test.h"
#include <math.h>

#define MiB ((size_t)1 << 20)
#define MAXLIVE 256
#define NSTREAMS 3

typedef struct live_t {
    unsigned char* p;
    size_t req, size;
    unsigned long long tag;
} live_t;

static live_t live[MAXLIVE];
static int nlive;
static const char* mode;

/* log-uniform: three quarters up to 1 MiB, the rest up to 40 MiB */
static size_t rand_size(void) {
    unsigned long long r = t_rand();
    double u = (double)((r >> 8) % 1000000) / 1000000.0;
    double lg = (r % 100) < 25 ? 20.0 + 5.3 * u : 20.0 * u;
    size_t n = (size_t)pow(2.0, lg);
    return n ? n : 1;
}

static void tag_write(live_t* l) {
    if (!t_sim) return;
    memcpy(l->p, &l->tag, l->req < 8 ? l->req : 8);
    if (l->req >= 16) memcpy(l->p + l->req - 8, &l->tag, 8);
}

static int tag_ok(const live_t* l) {
    unsigned long long a = 0, b = 0;
    if (!t_sim) return 1;
    memcpy(&a, l->p, l->req < 8 ? l->req : 8);
    if (l->req >= 16) memcpy(&b, l->p + l->req - 8, 8);
    else b = l->tag;
    if (l->req < 8) {
        unsigned long long t = 0;
        memcpy(&t, &l->tag, l->req);
        return a == t;
    }
    return a == l->tag && b == l->tag;
}

static void spin(void* arg) {
    volatile int i;
    (void)arg;
    for (i = 0; i < 2000; i++) {}
}

static void walk(int expandable, long steps) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream streams[NSTREAMS];
    long step;
    int i, bad_steps = 0, overlaps = 0, tag_fail = 0, ooms = 0, other_err = 0;
    int64_t model_alloc = 0, model_req = 0;
    d.device_budget = 384 * MiB;
    d.expandable = expandable ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    mode = expandable ? "expandable" : "classic";
    nlive = 0;
    ctx = t_setup(d);
    streams[0] = NULL;
    for (i = 1; i < NSTREAMS; i++) T_OK(gm_stream_create(ctx, &streams[i]));
    for (step = 0; step < steps; step++) {
        unsigned long long r = t_rand() % 1000;
        gm_stream s = streams[t_rand() % NSTREAMS];
        gm_result res = GM_OK;
        if (r < 450 && nlive < MAXLIVE) {
            live_t l;
            void* p;
            l.req = rand_size();
            res = gm_alloc(ctx, &p, l.req, s);
            if (res == GM_OK) {
                l.p = (unsigned char*)p;
                gm_block_size(ctx, p, &l.size);
                l.tag = t_rand() | 1;
                for (i = 0; i < nlive; i++)
                    if (l.p < live[i].p + live[i].size && live[i].p < l.p + l.size) overlaps++;
                tag_write(&l);
                live[nlive++] = l;
                model_alloc += (int64_t)l.size;
                model_req += (int64_t)l.req;
            } else if (res == GM_ERR_OUT_OF_MEMORY) {
                ooms++;
                res = GM_OK;
            }
        } else if (r < 880 && nlive) {
            int k = (int)(t_rand() % (unsigned)nlive);
            if (!tag_ok(&live[k])) tag_fail++;
            res = gm_free(ctx, live[k].p);
            model_alloc -= (int64_t)live[k].size;
            model_req -= (int64_t)live[k].req;
            live[k] = live[--nlive];
        } else if (r < 930 && nlive) {
            res = gm_record_stream(ctx, live[t_rand() % (unsigned)nlive].p, s);
        } else if (r < 980) {
            res = gm_launch_host(ctx, s, spin, NULL);
        } else if (r < 990) {
            res = gm_stream_synchronize(ctx, s);
        } else if (r < 995) {
            res = gm_empty_cache(ctx);
        } else if (r < 996) {
            /* replace a stream: blocks allocated on it stay valid */
            int k = 1 + (int)(t_rand() % (NSTREAMS - 1));
            res = gm_stream_destroy(ctx, streams[k]);
            if (res == GM_OK) res = gm_stream_create(ctx, &streams[k]);
        }
        if (res != GM_OK && other_err++ < 5) printf("step %ld: %s\n", step, gm_result_string(res));
        if (gm_check(ctx) != 0) {
            if (bad_steps++ < 5) printf("step %ld: gm_check found broken invariants\n", step);
        }
        {
            gm_stats s2;
            memset(&s2, 0, sizeof s2);
            gm_get_stats(ctx, &s2);
            if (s2.allocation[GM_STAT_ALL].current != nlive || s2.allocated_bytes[GM_STAT_ALL].current != model_alloc ||
                s2.requested_bytes[GM_STAT_ALL].current != model_req ||
                s2.reserved_bytes[GM_STAT_ALL].current > (int64_t)(384 * MiB)) {
                if (bad_steps++ < 5) printf("step %ld: statistics differ from the model\n", step);
            }
        }
    }
    T_EQ(bad_steps, 0);
    T_EQ(overlaps, 0);
    T_EQ(tag_fail, 0);
    T_EQ(other_err, 0);
    T_CHECK(ooms > 0 || steps < 50000); /* the budget was felt */
    {
        gm_stats s2;
        memset(&s2, 0, sizeof s2);
        gm_get_stats(ctx, &s2);
        printf("%s: %ld steps, %d out-of-memory answers, peak reserved %.1f MiB, %lld device allocations\n", mode, steps, ooms,
               (double)s2.reserved_bytes[GM_STAT_ALL].peak / (double)MiB, (long long)s2.num_device_alloc);
    }
    while (nlive) {
        T_CHECK(tag_ok(&live[nlive - 1]));
        T_OK(gm_free(ctx, live[--nlive].p));
    }
    T_OK(gm_empty_cache(ctx));
    {
        gm_stats s2;
        memset(&s2, 0, sizeof s2);
        gm_get_stats(ctx, &s2);
        T_EQ(s2.reserved_bytes[GM_STAT_ALL].current, 0);
        T_EQ(s2.active[GM_STAT_ALL].current, 0);
    }
    T_EQ(gm_check(ctx), 0);
    for (i = 1; i < NSTREAMS; i++) T_OK(gm_stream_destroy(ctx, streams[i]));
    T_OK(gm_shutdown(ctx));
}

int main(int argc, char** argv) {
    long steps = argc > 1 ? atol(argv[1]) : 100000;
    walk(0, steps);
    if (t_sim) walk(1, steps / 2); /* expandable segments need the sim's virtual memory */
    return t_done();
}
