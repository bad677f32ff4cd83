/* Planned mode: the packer and its checker on random requests, then steps
   served from a plan, with departures of every kind injected (another
   size, an extra request, a missing free, a request on another stream),
   gm_check after every operation, and every live block filled with its
   own byte and checked before it is freed, so an overlap cannot hide. */
#define GPUMEM_PLAN_SEARCH 30000000 /* the packer's search, cut short: many packings here */
#include "gm_test.h"

#define KiB ((size_t)1 << 10)

/* >>packer ----------------------------------------------------------------*/
static void test_pack_random(void) {
    int round;
    for (round = 0; round < 40; round++) {
        size_t n = 1 + (size_t)(t_rand() % 400), i;
        gm_plan_req* q = (gm_plan_req*)calloc(n, sizeof *q);
        uint64_t region = 0, peak;
        for (i = 0; i < n; i++) {
            q[i].start = t_rand() % 1000;
            q[i].end = q[i].start + 1 + t_rand() % (round % 2 ? 50 : 600);
            q[i].size = 1 + t_rand() % (round % 3 ? 100000 : 5000000);
        }
        T_OK(gm_plan_pack(q, n, 0, &region));
        T_EQ(gm_plan_check(q, n, region), 0);
        peak = gm_plan_peak_live(q, n);
        T_CHECK(region >= peak);
        for (i = 0; i < n; i++) T_EQ(q[i].offset % 512, 0);
        /* the checker sees a forced overlap */
        if (n > 1) {
            size_t a = 0, b = 1;
            q[b].start = q[a].start, q[b].end = q[a].end, q[b].offset = q[a].offset;
            T_CHECK(gm_plan_check(q, n, region) > 0);
        }
        free(q);
    }
}

/* Packings with no slack: a rectangle of time x bytes cut at random, time
   or bytes, into pieces; each piece is a request. Every instant is fully
   covered, so the optimum is the rectangle's height. gm_plan_pack must
   reach it, and so must the exact search alone, started from the worst
   packing (everything stacked). */
static size_t pieces; /* leaves so far, counting those still to be cut */
static size_t cut(gm_plan_req* q, size_t n, size_t max, uint64_t t0, uint64_t t1, uint64_t b0, uint64_t b1) {
    int by_time = (int)(t_rand() % 2);
    if (pieces >= max || (t1 - t0 < 2 && b1 - b0 < 1024) || t_rand() % 8 == 0) {
        q[n].start = t0, q[n].end = t1, q[n].size = b1 - b0;
        return n + 1;
    }
    if (t1 - t0 < 2) by_time = 0;
    if (b1 - b0 < 1024) by_time = 1;
    pieces++;
    if (by_time) {
        uint64_t m = t0 + 1 + t_rand() % (t1 - t0 - 1);
        n = cut(q, n, max, t0, m, b0, b1);
        return cut(q, n, max, m, t1, b0, b1);
    } else {
        uint64_t m = b0 + 512 * (1 + t_rand() % ((b1 - b0) / 512 - 1));
        n = cut(q, n, max, t0, t1, b0, m);
        return cut(q, n, max, t0, t1, m, b1);
    }
}

static void test_pack_exact(void) {
    int round, exact = 0;
    for (round = 0; round < 20; round++) {
        gm_plan_req q[60];
        uint64_t region = 0, height = 512 * (uint64_t)(8 + t_rand() % 64);
        size_t n;
        pieces = 1;
        n = cut(q, 0, 60, 0, 20 + t_rand() % 50, 0, height);
        T_OK(gm_plan_pack(q, n, 512, &region));
        T_EQ(gm_plan_check(q, n, region), 0);
        T_EQ(gm_plan_peak_live(q, n), height);
        exact += region == height;
        /* the search alone (white box), from the worst start: all stacked */
        {
            uint64_t rs[60], off[60], top = 0;
            uint32_t ord[60];
            size_t i;
            gm__pack pk;
            for (i = 0; i < n; i++) rs[i] = q[i].size, off[i] = top, top += rs[i];
            memset(&pk, 0, sizeof pk);
            pk.r = q, pk.n = n, pk.rs = rs;
            gm__pack_overlaps(&pk, ord, 1);
            T_CHECK(pk.ovs != NULL);
            gm__pack_search(&pk, ord, 512, gm__peak_live(q, rs, n), off, &top);
            GPUMEM_FREE(pk.ovs), GPUMEM_FREE(pk.ov);
            for (i = 0; i < n; i++) q[i].offset = off[i];
            T_EQ(top, height);
            T_EQ(gm_plan_check(q, n, top), 0);
        }
    }
    T_EQ(exact, 20);
}

/* greedy's four plain orders alone (white box): the smallest top */
static uint64_t greedy_only(gm_plan_req* q, size_t n) {
    uint64_t rs[200], off[200], best = UINT64_MAX;
    uint32_t placed[200], ord[200];
    gm__span sp[200];
    gm__pack pk;
    size_t i;
    int key;
    memset(&pk, 0, sizeof pk);
    for (i = 0; i < n; i++) rs[i] = q[i].size;
    pk.r = q, pk.n = n, pk.rs = rs, pk.off = off, pk.placed = placed, pk.sp = sp;
    gm__pack_overlaps(&pk, ord, 0);
    for (key = 0; key < 4; key++) {
        uint64_t top;
        for (i = 0; i < n; i++) ord[i] = (uint32_t)i;
        gm__pack_reqs = q, gm__pack_key = key;
        qsort(ord, n, sizeof(uint32_t), gm__pack_cmp);
        top = gm__pack_order(&pk, ord);
        if (top < best) best = top;
    }
    GPUMEM_FREE(pk.ovs), GPUMEM_FREE(pk.ov);
    return best;
}

/* Rectangles cut into up to 200 pieces, where greedy's plain orders miss
   the height: gm_plan_pack must still reach it (its later stages are not
   cut short by the stop at the bound). */
static void test_pack_beyond_greedy(void) {
    int round, beyond = 0, exact = 0;
    for (round = 0; round < 400 && beyond < 8; round++) {
        gm_plan_req q[200];
        uint64_t region = 0, height = 512 * (uint64_t)(64 + t_rand() % 512);
        size_t n;
        pieces = 1;
        n = cut(q, 0, 200, 0, 100 + t_rand() % 200, 0, height);
        if (greedy_only(q, n) == height) continue;
        beyond++;
        T_OK(gm_plan_pack(q, n, 512, &region));
        T_EQ(gm_plan_check(q, n, region), 0);
        exact += region == height;
    }
    T_CHECK(beyond > 0);
    T_EQ(exact, beyond);
    printf("note: %d of %d cut rectangles beyond greedy's plain orders, all packed to the height\n", beyond, round);
}

/* Greedy from the overlap lists and greedy scanning every placed request
   are the same packer: on sparse random steps they agree offset for offset. */
static void test_pack_lists(void) {
    enum { N = 600 };
    static gm_plan_req q[N];
    static uint64_t rs[N], off1[N];
    static uint32_t ord[N];
    int round;
    for (round = 0; round < 5; round++) {
        gm__pack pk;
        uint64_t top1, top2;
        size_t i, same = 0;
        for (i = 0; i < N; i++) {
            q[i].start = t_rand() % (16 * N);
            q[i].end = q[i].start + 1 + t_rand() % 40;
            q[i].size = 512 * (1 + t_rand() % 64);
            rs[i] = q[i].size;
        }
        memset(&pk, 0, sizeof pk);
        pk.r = q, pk.n = N, pk.rs = rs;
        pk.off = (uint64_t*)malloc(N * sizeof(uint64_t));
        pk.placed = (uint32_t*)malloc(N * sizeof(uint32_t));
        pk.sp = (gm__span*)malloc(N * sizeof(gm__span));
        gm__pack_overlaps(&pk, ord, 0);
        T_CHECK(pk.ovs != NULL && !pk.scan); /* sparse: the lists are used */
        for (i = 0; i < N; i++) ord[i] = (uint32_t)(N - 1 - i);
        top1 = gm__pack_order(&pk, ord);
        memcpy(off1, pk.off, sizeof off1);
        pk.scan = 1;
        top2 = gm__pack_order(&pk, ord);
        T_EQ(top1, top2);
        for (i = 0; i < N; i++) same += off1[i] == pk.off[i], q[i].offset = off1[i];
        T_EQ(same, N);
        T_EQ(gm_plan_check(q, N, top1), 0);
        free(pk.off), free(pk.placed), free(pk.sp);
        GPUMEM_FREE(pk.ovs), GPUMEM_FREE(pk.ov);
    }
}

static void test_pack_edges(void) {
    gm_plan_req q[60];
    uint64_t region = 7;
    memset(q, 0, sizeof q);
    T_OK(gm_plan_pack(q, 0, 0, &region));
    T_EQ(region, 0);
    q[0].size = 100, q[0].start = 5, q[0].end = 5; /* empty lifetime */
    T_EQ(gm_plan_pack(q, 1, 0, &region), GM_ERR_INVALID_ARGUMENT);
    q[0].end = 6, q[0].size = 0;
    T_EQ(gm_plan_pack(q, 1, 0, &region), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_plan_pack(NULL, 1, 0, &region), GM_ERR_INVALID_ARGUMENT);
    /* back to back lifetimes share bytes; overlapping ones do not */
    q[0].size = 1000, q[0].start = 0, q[0].end = 10;
    q[1].size = 1000, q[1].start = 10, q[1].end = 20;
    q[2].size = 1000, q[2].start = 5, q[2].end = 15;
    T_OK(gm_plan_pack(q, 3, 4096, &region));
    T_EQ(region, 2 * 4096);
    T_EQ(gm_plan_check(q, 3, region), 0);
    T_EQ(gm_plan_peak_live(q, 3), 2000);
    T_EQ(gm_plan_check(q, 3, 4096 + 999), (q[0].offset == 4096) + (q[1].offset == 4096) + (q[2].offset == 4096));
    T_EQ(gm_plan_check(NULL, 3, 0), -1);
}

/* >>steps -----------------------------------------------------------------
   A training-like step: forward allocations with temporaries freed at
   once, then backward frees in reverse. Departures are injected per step. */
enum { SLOTS = 64, L = 12 };
static void* live[SLOTS];
static size_t live_size[SLOTS];
static unsigned char live_byte[SLOTS];
static int bad_bytes;

static void fill(int slot) {
    if (!t_sim) return; /* sim memory is host memory */
    live_byte[slot] = (unsigned char)(t_rand() | 1);
    memset(live[slot], live_byte[slot], live_size[slot]);
}
static void verify(int slot) {
    size_t i;
    const unsigned char* p = (const unsigned char*)live[slot];
    if (!t_sim) return;
    for (i = 0; i < live_size[slot]; i++)
        if (p[i] != live_byte[slot]) {
            bad_bytes++;
            return;
        }
}

static void do_alloc(gm_context* ctx, int slot, size_t size, gm_stream s) {
    T_OK(gm_alloc(ctx, &live[slot], size, s));
    live_size[slot] = size;
    fill(slot);
    T_EQ(gm_check(ctx), 0);
}
static void do_free(gm_context* ctx, int slot) {
    int i;
    if (!live[slot]) return;
    for (i = 0; i < SLOTS; i++) /* every live block still holds its own byte */
        if (live[i]) verify(i);
    T_OK(gm_free(ctx, live[slot]));
    live[slot] = NULL;
    T_EQ(gm_check(ctx), 0);
}

typedef struct variant {
    int bigger_at;   /* layer whose activation is larger this step, or -1 */
    int extra_at;    /* layer after which one extra request is made, or -1 */
    int keep_at;     /* layer whose activation is not freed in this step, or -1 */
    int stream_at;   /* layer whose temporary goes to another stream, or -1 */
} variant;

static const variant plain = {-1, -1, -1, -1};

static void step(gm_context* ctx, const variant* v, gm_stream other) {
    int l;
    for (l = 0; l < L; l++) {
        size_t act = (size_t)(64 + 16 * (l % 5)) * KiB;
        if (l == v->bigger_at) act += 4 * KiB;
        do_alloc(ctx, l, act, NULL);                                  /* activation, saved */
        do_alloc(ctx, 40, (size_t)(32 + l) * KiB, l == v->stream_at ? other : NULL); /* temporary */
        if (l == v->stream_at) gm_stream_synchronize(ctx, other);
        do_free(ctx, 40);
        if (l == v->extra_at) {
            do_alloc(ctx, 41, 8 * KiB, NULL);
            do_free(ctx, 41);
        }
    }
    for (l = L - 1; l >= 0; l--) {
        do_alloc(ctx, 20 + l, (size_t)(16 + l) * KiB, NULL); /* gradient */
        if (l != v->keep_at) do_free(ctx, l);
        do_free(ctx, 20 + l);
    }
}

static gm_plan_stats pstats(gm_context* ctx) {
    gm_plan_stats s;
    memset(&s, 0, sizeof s);
    gm_plan_get_stats(ctx, &s);
    return s;
}

static void free_all(gm_context* ctx) {
    int i;
    for (i = 0; i < SLOTS; i++) do_free(ctx, i);
}

/* The plan's conflict lists hold exactly the planned pairs whose bytes
   overlap: returns the pairs where they do not. */
static size_t conflicts_exact(gm_context* ctx) {
    const gm__plan* pl = (const gm__plan*)ctx->plan;
    size_t k, j, wrong = 0;
    uint32_t c;
    for (k = 0; k < pl->n; k++)
        for (j = 0; j < pl->n; j++) {
            int listed = 0, over = j != k && !pl->online[k] && !pl->online[j] && pl->off[k] < pl->off[j] + pl->size[j] &&
                                   pl->off[j] < pl->off[k] + pl->size[k];
            for (c = pl->cstart[k]; c < pl->cstart[k + 1]; c++) listed += pl->conf[c] == j;
            wrong += listed != over;
        }
    return wrong;
}

static void test_planned_steps(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_plan_stats s0, s;
    gm_stream other;
    variant v;
    int k;
    T_OK(gm_stream_create(ctx, &other));
    T_EQ(gm_plan_end(ctx), GM_ERR_BAD_STATE);      /* nothing recorded */
    T_EQ(gm_plan_enable(ctx, 1), GM_ERR_BAD_STATE); /* no plan */
    T_OK(gm_plan_begin(ctx));
    step(ctx, &plain, other);
    T_OK(gm_plan_end(ctx));
    s = pstats(ctx);
    T_EQ(s.requests, 3 * L);
    T_EQ(s.planned, 3 * L);
    T_CHECK(s.region >= s.peak_live);
    T_CHECK((double)s.region <= 1.01 * (double)s.peak_live + 512.0 * L);
    /* steps from the plan: every request a hit */
    for (k = 0; k < 5; k++) {
        T_OK(gm_plan_step(ctx));
        step(ctx, &plain, other);
    }
    s = pstats(ctx);
    T_EQ(s.hits, 5 * 3 * L);
    T_EQ(s.departures, 0);
    {   /* a planned pointer: in the region, sized, recorded on a stream */
        void* p;
        size_t n = 0;
        T_OK(gm_plan_step(ctx));
        T_OK(gm_alloc(ctx, &p, 64 * KiB, NULL)); /* the first request of the step */
        T_OK(gm_block_size(ctx, p, &n));
        T_EQ(n, 64 * KiB);
        T_OK(gm_record_stream(ctx, p, other));
        T_OK(gm_free(ctx, p)); /* waits for the device: another stream used it */
        T_EQ(gm_free(ctx, p), GM_ERR_DOUBLE_FREE);     /* the region itself is never given back */
        T_EQ(gm_block_size(ctx, p, &n), GM_ERR_DOUBLE_FREE);     /* freed, as for the online allocator */
        T_EQ(gm_free(ctx, (char*)p + 512), GM_ERR_FOREIGN_POINTER); /* never handed out */
        T_EQ(gm_check(ctx), 0);
    }
    /* departures, one kind per step: counted, served online, no overlap */
    s0 = pstats(ctx);
    v = plain, v.bigger_at = 3;
    T_OK(gm_plan_step(ctx));
    step(ctx, &v, other);
    v = plain, v.extra_at = 5;
    T_OK(gm_plan_step(ctx));
    step(ctx, &v, other);
    v = plain, v.stream_at = 2;
    T_OK(gm_plan_step(ctx));
    step(ctx, &v, other);
    v = plain, v.keep_at = 6; /* the activation of layer 6 stays live into the next step */
    T_OK(gm_plan_step(ctx));
    step(ctx, &v, other);
    T_OK(gm_plan_step(ctx));
    step(ctx, &plain, other); /* its planned place is taken: a departure, not an overlap */
    s = pstats(ctx);
    T_CHECK(s.departures > s0.departures);
    T_CHECK(s.hits > s0.hits);
    T_EQ(bad_bytes, 0);
    free_all(ctx);
    T_OK(gm_plan_enable(ctx, 0));
    T_OK(gm_plan_step(ctx));
    s0 = pstats(ctx);
    step(ctx, &plain, other);
    T_EQ(pstats(ctx).hits, s0.hits); /* disabled: all online */
    T_OK(gm_plan_enable(ctx, 1));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, other));
    T_OK(gm_shutdown(ctx));
}

/* A step that changed for good: past the threshold, the next step is
   recorded and the one after it is planned again. */
static void test_replan(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_plan_stats s;
    int k;
    T_OK(gm_plan_begin(ctx));
    step(ctx, &plain, NULL);
    T_OK(gm_plan_end(ctx));
    for (k = 0; k < 6; k++) {
        int l;
        T_OK(gm_plan_step(ctx));
        for (l = 0; l < L; l++) do_alloc(ctx, l, 200 * KiB, NULL); /* a different step */
        for (l = L - 1; l >= 0; l--) do_free(ctx, l);
    }
    s = pstats(ctx);
    T_CHECK(s.replans >= 1);
    T_EQ(s.requests, L); /* the new plan is the new step */
    T_CHECK(s.hits >= 2 * L);
    T_EQ(bad_bytes, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A step that uses two streams: what the recording saw on the second is
   served online by design, which is neither a departure nor a reason to
   re-plan. */
static void test_two_streams(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream other;
    variant v = plain;
    gm_plan_stats s;
    int k;
    T_OK(gm_stream_create(ctx, &other));
    v.stream_at = 4;
    T_OK(gm_plan_begin(ctx));
    step(ctx, &v, other);
    T_OK(gm_plan_end(ctx));
    T_EQ(conflicts_exact(ctx), 0);
    T_EQ(gm_plan_enable(ctx, 1), GM_OK);
    for (k = 0; k < 10; k++) {
        T_OK(gm_plan_step(ctx));
        step(ctx, &v, other);
    }
    s = pstats(ctx);
    T_EQ(s.departures, 0);
    T_EQ(s.replans, 0);
    T_EQ(s.online, 10);
    T_EQ(s.hits, 10 * (3 * L - 1));
    /* the other stream detached (forgotten, not destroyed): its request still goes online in its
       place, and the plan serves the rest of the step */
    T_OK(gm_stream_detach(ctx, other));
    T_OK(gm_plan_step(ctx));
    step(ctx, &v, other);
    s = pstats(ctx);
    T_EQ(s.departures, 0);
    T_EQ(s.online, 11);
    T_EQ(s.hits, 11 * (3 * L - 1));
    /* enabling while a step is recorded is refused */
    T_OK(gm_plan_begin(ctx));
    T_EQ(gm_plan_enable(ctx, 1), GM_ERR_BAD_STATE);
    step(ctx, &v, other);
    T_OK(gm_plan_end(ctx));
    T_EQ(bad_bytes, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, other));
    T_OK(gm_shutdown(ctx));
}

/* Random steps: each step a random variant, sometimes two departures. */
static void test_random_departures(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream other;
    int k;
    T_OK(gm_stream_create(ctx, &other));
    T_OK(gm_plan_begin(ctx));
    step(ctx, &plain, other);
    T_OK(gm_plan_end(ctx));
    for (k = 0; k < 60; k++) {
        variant v = plain;
        unsigned long long r = t_rand();
        if (r % 3 == 0) v.bigger_at = (int)(t_rand() % L);
        if (r % 5 == 0) v.extra_at = (int)(t_rand() % L);
        if (r % 7 == 0) v.keep_at = (int)(t_rand() % L);
        if (r % 11 == 0) v.stream_at = (int)(t_rand() % L);
        T_OK(gm_plan_step(ctx));
        step(ctx, &v, other);
        if (t_rand() % 4 == 0) free_all(ctx); /* kept blocks go, sometimes */
    }
    free_all(ctx);
    T_EQ(bad_bytes, 0);
    T_CHECK(pstats(ctx).hits > 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, other));
    T_OK(gm_shutdown(ctx));
}

/* >>marks ------------------------------------------------------------------
   Recordings marked with the caller's time. The keys the packer gets must
   keep exactly the overlaps of the events (a missed one would let two live
   blocks share bytes), and follow the marks where nothing ties. */
static void test_mark_keys(void) {
    int round;
    for (round = 0; round < 200; round++) {
        size_t nev = 2 + (size_t)(t_rand() % 120), e, a, b, open = 0, bad = 0;
        uint64_t* t = (uint64_t*)calloc(nev + 1, sizeof *t);
        uint64_t* k = (uint64_t*)calloc(nev + 1, sizeof *k);
        uint8_t* fr = (uint8_t*)calloc(nev + 1, 1);
        uint64_t m = round % 3 == 0 ? UINT64_MAX - (1ull << 50) : t_rand() % 1000;
        size_t unmarked = round % 4 == 1 ? nev + 1 : (size_t)(t_rand() % 4); /* events before the first mark */
        int ties = 0;
        for (e = 1; e <= nev; e++) {
            fr[e] = open && (t_rand() % 2 || e == nev);
            open += fr[e] ? (size_t)-1 : 1;
            if (e > unmarked) {
                unsigned long long r = t_rand() % 10;
                if (round % 3 == 0) m += r < 5 ? 0 : (t_rand() % (1ull << 44)); /* a span past 2^40 */
                else m += r < 3 ? 0 : r < 9 ? t_rand() % 3 : 1000;
                t[e] = m;
            } else
                t[e] = UINT64_MAX;
        }
        for (e = 2; e <= nev && unmarked < nev; e++) { /* unmarked events take the first mark */
            uint64_t u = e <= unmarked ? t[unmarked + 1] : t[e], v = e - 1 <= unmarked ? t[unmarked + 1] : t[e - 1];
            ties += fr[e] && !fr[e - 1] && u == v;
        }
        if (round % 3 == 0 && m == UINT64_MAX) t[nev] = m - 1;
        for (e = 0; e <= nev; e++) k[e] = t[e];
        gm__plan_keys(k, fr, nev);
        for (e = 1; e <= nev; e++) {
            T_CHECK(k[e] < (1ull << 62));
            if (e > 1) T_CHECK(k[e] >= k[e - 1]);
        }
        for (a = 1; a <= nev; a++) /* an allocation meets a later free strictly below it, an earlier one not */
            for (b = 1; b <= nev; b++)
                bad += !fr[a] && fr[b] && !(a < b ? k[a] < k[b] : k[a] >= k[b]);
        T_EQ(bad, 0);
        if (unmarked >= nev) /* unmarked: the event's index */
            for (e = 1; e <= nev; e++) T_EQ(k[e], e);
        else if (!ties && round % 3) { /* no ties, a small span: the marks themselves */
            uint64_t first = t[unmarked + 1];
            for (e = 1; e <= nev; e++) T_EQ(k[e], e <= unmarked ? 0 : t[e] - first);
        }
        free(t), free(k), free(fr);
    }
}

static void test_mark_api(void) {
    gm_context* ctx = t_setup(t_desc());
    T_EQ(gm_plan_mark(NULL, 1), GM_ERR_INVALID_ARGUMENT);
    T_OK(gm_plan_mark(ctx, 5)); /* no plan yet: nothing */
    T_OK(gm_plan_begin(ctx));
    T_OK(gm_plan_mark(ctx, 10));
    T_EQ(gm_plan_mark(ctx, 9), GM_ERR_INVALID_ARGUMENT); /* back in time */
    T_EQ(gm_plan_mark(ctx, 9), GM_ERR_INVALID_ARGUMENT); /* the mark is still 10 */
    T_EQ(gm_plan_mark(ctx, UINT64_MAX), GM_ERR_INVALID_ARGUMENT);
    T_OK(gm_plan_mark(ctx, 10));
    do_alloc(ctx, 0, 4 * KiB, NULL);
    do_free(ctx, 0);
    T_OK(gm_plan_end(ctx));
    T_OK(gm_plan_mark(ctx, 3)); /* serving: nothing */
    T_OK(gm_plan_begin(ctx)); /* a new recording starts afresh */
    T_OK(gm_plan_mark(ctx, 1));
    T_OK(gm_plan_end(ctx)); /* nothing recorded: an empty plan */
    T_EQ(pstats(ctx).requests, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A random stream with random marks (ties, long runs at one mark, jumps),
   recorded, then served again and again: every planned request a hit,
   gm_check after every operation, every live block's bytes intact. */
enum { MSLOTS = 40 };
static void* mptr[120];
typedef struct mev {
    int slot, is_free;
    size_t size;
    uint64_t mark;
} mev;
static void run_marked(gm_context* ctx, const mev* ev, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        T_OK(gm_plan_mark(ctx, ev[i].mark));
        if (ev[i].is_free) do_free(ctx, ev[i].slot);
        else do_alloc(ctx, ev[i].slot, ev[i].size, NULL);
    }
}
static void test_marked_steps(void) {
    int round;
    for (round = 0; round < 8; round++) {
        gm_context* ctx = t_setup(t_desc());
        mev ev[600];
        int on[MSLOTS] = {0}, k;
        size_t n = 0, i;
        uint64_t m = t_rand();
        gm_plan_stats s;
        int64_t allocs = 0;
        while (n < 560) {
            int slot = (int)(t_rand() % MSLOTS);
            unsigned long long r = t_rand() % 10;
            m += round % 2 ? (r < 6 ? 0 : 1 + t_rand() % 4) : (r < 8 ? 0 : t_rand() % (1ull << 42));
            ev[n].slot = slot, ev[n].is_free = on[slot], ev[n].mark = m;
            ev[n].size = (size_t)(1 + t_rand() % 32) * 512;
            allocs += !on[slot];
            on[slot] = !on[slot];
            n++;
        }
        for (i = 0; i < MSLOTS; i++) /* everything freed within the step */
            if (on[i]) ev[n].slot = (int)i, ev[n].is_free = 1, ev[n].mark = m, ev[n].size = 0, n++;
        T_OK(gm_plan_begin(ctx));
        run_marked(ctx, ev, n);
        T_OK(gm_plan_end(ctx));
        T_EQ(conflicts_exact(ctx), 0);
        s = pstats(ctx);
        T_EQ(s.planned, allocs);
        T_CHECK(s.region >= s.peak_live);
        for (k = 0; k < 3; k++) {
            T_OK(gm_plan_step(ctx));
            run_marked(ctx, ev, n);
        }
        s = pstats(ctx);
        T_EQ(s.hits, 3 * allocs);
        T_EQ(s.departures, 0);
        T_EQ(bad_bytes, 0);
        T_OK(gm_shutdown(ctx));
    }
}

/* A step recorded again after departures (gm_plan_step), its marks
   restarting from 0 as a per-step op counter does: they are taken. */
static void small_step(gm_context* ctx, size_t size) {
    int l;
    for (l = 0; l < 8; l++) {
        T_OK(gm_plan_mark(ctx, (uint64_t)l)); /* the step's op counter, from 0 */
        do_alloc(ctx, l, size, NULL);
    }
    for (l = 0; l < 8; l++) do_free(ctx, l);
}
static void test_marked_rerecord(void) {
    gm_context* ctx = t_setup(t_desc());
    int k;
    T_OK(gm_plan_begin(ctx));
    small_step(ctx, 4 * KiB); /* marks 0 .. 7 */
    T_OK(gm_plan_end(ctx));
    for (k = 0; k < 4; k++) { /* another size: all departures, then recorded again, then planned */
        T_OK(gm_plan_step(ctx));
        small_step(ctx, 8 * KiB);
    }
    T_EQ(pstats(ctx).replans, 1);
    T_EQ(pstats(ctx).hits, 16); /* the last two steps */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Marked with a problem's own times (frees first at each time, as a
   compiler's schedule gives them), a recording packs exactly what
   gm_plan_pack packs on those lifetimes. */
static void test_marked_own_times(void) {
    enum { N = 120 };
    gm_plan_req q[N];
    mev ev[2 * N];
    size_t i, n = 0;
    uint64_t region = 0, tt;
    gm_context* ctx = t_setup(t_desc());
    gm_plan_stats s;
    for (i = 0; i < N; i++) { /* in order of start, as a recording numbers them */
        q[i].start = i ? q[i - 1].start + t_rand() % 3 : 100;
        q[i].end = q[i].start + 1 + t_rand() % 60;
        q[i].size = (1 + t_rand() % 64) * 512;
    }
    for (tt = 100; n < 2 * N; tt++) {
        for (i = 0; i < N; i++)
            if (q[i].end == tt) ev[n].slot = (int)i, ev[n].is_free = 1, ev[n].mark = tt, ev[n].size = 0, n++;
        for (i = 0; i < N; i++)
            if (q[i].start == tt) ev[n].slot = (int)i, ev[n].is_free = 0, ev[n].mark = tt, ev[n].size = q[i].size, n++;
    }
    T_OK(gm_plan_pack(q, N, 512, &region));
    T_OK(gm_plan_begin(ctx));
    for (i = 0; i < n; i++) { /* slots above SLOTS do not fit the helpers: plain calls */
        T_OK(gm_plan_mark(ctx, ev[i].mark));
        if (ev[i].is_free) T_OK(gm_free(ctx, mptr[ev[i].slot]));
        else T_OK(gm_alloc(ctx, &mptr[ev[i].slot], ev[i].size, NULL));
    }
    T_OK(gm_plan_end(ctx));
    s = pstats(ctx);
    T_EQ(s.planned, N);
    T_EQ((uint64_t)s.region, region);
    { /* the same offsets: the i-th allocation is request i */
        const gm__plan* pl = (const gm__plan*)ctx->plan;
        size_t wrong = 0;
        for (i = 0; i < N; i++) wrong += pl->off[i] != q[i].offset;
        T_EQ(wrong, 0);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    test_pack_edges();
    test_pack_random();
    test_pack_exact();
    test_pack_beyond_greedy();
    test_pack_lists();
    test_planned_steps();
    test_replan();
    test_two_streams();
    test_random_departures();
    test_mark_keys();
    test_mark_api();
    test_marked_steps();
    test_marked_rerecord();
    test_marked_own_times();
    return t_done();
}
