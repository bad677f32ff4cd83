/* The arena on its own (white box): fixed pools with no growth, best fit,
   split and coalesce, owner keys, a random walk against a byte-map model;
   and gm_check catching each kind of damage done to a context on purpose. */
#include "gm_test.h"

static gm_context* quiet_ctx(void) {
    gm_desc d = t_desc();
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    gm_context* c = NULL;
    gm_setup(&c, &d); /* no log: damage below is reported by count */
    return c;
}

static gm_context* g_quiet; /* only for the checker's log calls */
static int check_arena(const gm__arena* a) {
    int64_t un = 0, ub = 0, pn = 0, pb = 0, rb = 0;
    gm__ck ck;
    memset(&ck, 0, sizeof ck);
    ck.ctx = g_quiet;
    gm__arena_check(&ck, a, "arena", &un, &ub, &pn, &pb, &rb);
    return gm__ck_end(&ck);
}

/* The classic: a 2048-byte pool with no growth serves four 512-byte blocks
   and refuses a fifth; freed blocks coalesce back into one. */
static void test_fixed_pool(void) {
    gm__arena a;
    gm__block* b[5];
    int i;
    gm__arena_init(&a, 512, NULL, 0);
    T_CHECK(gm__arena_add(&a, 0x10000, 2048, 1) != NULL);
    for (i = 0; i < 4; i++) {
        b[i] = gm__arena_find(&a, 1, 512);
        T_CHECK(b[i] != NULL);
        if (b[i]) gm__arena_take(&a, b[i], 512, 512);
        T_EQ(check_arena(&a), 0);
    }
    T_EQ(b[0]->addr, 0x10000);
    T_EQ(b[3]->addr, 0x10000 + 1536);
    T_CHECK(gm__arena_find(&a, 1, 512) == NULL); /* the fifth */
    T_CHECK(gm__arena_find(&a, 1, 1) == NULL);
    gm__arena_give(&a, b[1]);
    gm__arena_give(&a, b[2]);
    T_EQ(a.nfree, 1); /* 1 and 2 coalesced */
    T_CHECK(gm__arena_find(&a, 1, 1024) != NULL);
    T_CHECK(gm__arena_find(&a, 1, 1536) == NULL);
    gm__arena_give(&a, b[0]);
    gm__arena_give(&a, b[3]);
    T_EQ(a.nfree, 1);
    T_CHECK(gm__seg_whole_free(a.segs));
    T_EQ(check_arena(&a), 0);
    /* other keys do not see it; rekey moves the whole segment */
    T_CHECK(gm__arena_find(&a, 2, 512) == NULL);
    gm__arena_rekey(&a, a.segs, 2);
    T_CHECK(gm__arena_find(&a, 2, 2048) != NULL);
    T_CHECK(gm__arena_find(&a, 1, 512) == NULL);
    T_EQ(check_arena(&a), 0);
    gm__arena_drop(&a, a.segs);
    T_EQ(a.nsegs, 0);
    T_EQ(a.nfree, 0);
    gm__arena_destroy(&a);
}

/* Best fit over several segments and a 4 KiB alignment, as a file's extents
   would use. */
static void test_best_fit(void) {
    gm__arena a;
    gm__block* b;
    gm__arena_init(&a, 4096, NULL, 0);
    gm__arena_add(&a, 0, 64 * 4096, 7);
    gm__arena_add(&a, 1 << 30, 8 * 4096, 7);
    gm__arena_add(&a, 2u << 30, 16 * 4096, 7);
    b = gm__arena_find(&a, 7, 5 * 4096);
    T_CHECK(b && b->addr == (1u << 30)); /* the smallest that fits */
    b = gm__arena_find(&a, 7, 9 * 4096);
    T_CHECK(b && b->addr == (2u << 30));
    b = gm__arena_find(&a, 7, 17 * 4096);
    T_CHECK(b && b->addr == 0);
    T_CHECK(gm__arena_find(&a, 7, 65 * 4096) == NULL);
    T_EQ(check_arena(&a), 0);
    gm__arena_destroy(&a);
}

/* A random walk against a byte-map model of one 1 MiB segment. */
static void test_random_walk(void) {
    enum { UNIT = 512, UNITS = 2048, N = 20000 };
    gm__arena a;
    static unsigned char owner[UNITS]; /* 0 free, else index + 1 of the holder */
    gm__block* held[256];
    int nheld = 0, i, bad = 0, refused_wrongly = 0;
    gm_stats stats;
    memset(&stats, 0, sizeof stats);
    gm__arena_init(&a, UNIT, &stats, GM_STAT_SMALL_POOL);
    gm__arena_add(&a, 0x100000, (size_t)UNITS * UNIT, 1);
    for (i = 0; i < N; i++) {
        unsigned long long r = t_rand();
        if (nheld < 256 && (r % 2)) {
            size_t units = 1 + (size_t)((r >> 8) % 64), u, run = 0, best = (size_t)-1;
            gm__block* b = gm__arena_find(&a, 1, units * UNIT);
            /* the model: is there a free run this long, and what is the smallest? */
            for (u = 0; u <= UNITS; u++) {
                if (u < UNITS && !owner[u]) run++;
                else {
                    if (run >= units && run < best) best = run;
                    run = 0;
                }
            }
            if (!b) {
                if (best != (size_t)-1) refused_wrongly++;
                continue;
            }
            if (b->size / UNIT != best) bad++; /* best fit */
            gm__arena_take(&a, b, units * UNIT, UNIT);
            for (u = 0; u < units; u++) {
                size_t k = (b->addr - 0x100000) / UNIT + u;
                if (owner[k]) bad++;
                owner[k] = 1;
            }
            held[nheld++] = b;
        } else if (nheld) {
            int k = (int)((r >> 8) % (unsigned)nheld);
            size_t u, first = (held[k]->addr - 0x100000) / UNIT, n = held[k]->size / UNIT;
            for (u = 0; u < n; u++) owner[first + u] = 0;
            gm__arena_give(&a, held[k]);
            held[k] = held[--nheld];
        }
        if (check_arena(&a)) bad++;
    }
    T_EQ(bad, 0);
    T_EQ(refused_wrongly, 0);
    while (nheld) gm__arena_give(&a, held[--nheld]);
    T_EQ(a.nfree, 1);
    T_EQ(stats.inactive_split[GM_STAT_ALL].current, 0);
    T_EQ(stats.segment[GM_STAT_ALL].current, 1);
    T_EQ(check_arena(&a), 0);
    gm__arena_destroy(&a);
}

/* Each kind of damage is seen by gm_check, and repairing it makes the
   count go back to zero: the checker is not a rubber stamp. */
static void test_checker_catches_damage(void) {
    gm_context* ctx = quiet_ctx();
    void *p, *q, *r;
    gm__block* b;
    size_t saved;
    int64_t saved_stat;
    gm_alloc(ctx, &p, 4096, NULL);
    gm_alloc(ctx, &q, 8192, NULL);
    gm_alloc(ctx, &r, 3 << 20, NULL);
    gm_free(ctx, q);
    T_EQ(gm_check(ctx), 0);
    b = gm__map_get(&ctx->map, (uintptr_t)p);
    /* a block size that breaks the tiling */
    saved = b->size;
    b->size += 512;
    T_CHECK(gm_check(ctx) > 0);
    b->size = saved;
    T_EQ(gm_check(ctx), 0);
    /* statistics that disagree with the walk */
    saved_stat = ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL].current;
    ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL].current += 512;
    T_CHECK(gm_check(ctx) > 0);
    ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL].current = saved_stat;
    saved_stat = ctx->stats.inactive_split_bytes[GM_STAT_SMALL_POOL].current;
    ctx->stats.inactive_split_bytes[GM_STAT_SMALL_POOL].current = 0;
    T_CHECK(gm_check(ctx) > 0);
    ctx->stats.inactive_split_bytes[GM_STAT_SMALL_POOL].current = saved_stat;
    T_EQ(gm_check(ctx), 0);
    /* a used block missing from the map */
    gm__map_del(&ctx->map, (uintptr_t)p);
    T_CHECK(gm_check(ctx) > 0);
    gm__map_put(&ctx->map, (uintptr_t)p, b);
    T_EQ(gm_check(ctx), 0);
    /* a free block that left the tree */
    {
        gm__block* f = b->next; /* q's old block, free */
        T_CHECK(f && f->state == GM__FREE);
        gm__arena_tree_del(&ctx->pool[0], f);
        T_CHECK(gm_check(ctx) > 0);
        gm__arena_tree_add(&ctx->pool[0], f);
        T_EQ(gm_check(ctx), 0);
        /* a heap order broken in the treap */
        if (ctx->pool[0].root && (ctx->pool[0].root->l || ctx->pool[0].root->r)) {
            gm__block* child = ctx->pool[0].root->l ? ctx->pool[0].root->l : ctx->pool[0].root->r;
            uint32_t sp = child->prio;
            child->prio = ctx->pool[0].root->prio + 1;
            T_CHECK(gm_check(ctx) > 0);
            child->prio = sp;
        }
        /* two free neighbours left uncoalesced */
        f->state = GM__USED;
        T_CHECK(gm_check(ctx) > 0);
        f->state = GM__FREE;
    }
    T_EQ(gm_check(ctx), 0);
    /* reserved past the budget */
    {
        size_t sb = ctx->budget;
        ctx->budget = 1024;
        T_CHECK(gm_check(ctx) > 0);
        ctx->budget = sb;
    }
    T_EQ(gm_check(ctx), 0);
    gm_free(ctx, p);
    gm_free(ctx, r);
    T_EQ(gm_check(ctx), 0);
    gm_shutdown(ctx);
}

/* The pointer map under churn: every key found until deleted. */
static void test_ptrmap(void) {
    gm__ptrmap m;
    static gm__block blocks[5000];
    int i, bad = 0;
    memset(&m, 0, sizeof m);
    for (i = 0; i < 5000; i++) gm__map_put(&m, (uintptr_t)(i + 1) * 512, &blocks[i]);
    for (i = 0; i < 5000; i += 3) gm__map_del(&m, (uintptr_t)(i + 1) * 512);
    for (i = 0; i < 5000; i++) {
        gm__block* v = gm__map_get(&m, (uintptr_t)(i + 1) * 512);
        if ((i % 3 == 0) != (v == NULL) || (v && v != &blocks[i])) bad++;
    }
    T_EQ(bad, 0);
    T_EQ(m.count, 5000 - 1667);
    T_CHECK(gm__map_get(&m, 12345) == NULL);
    GPUMEM_FREE(m.e);
}

int main(void) {
    g_quiet = quiet_ctx();
    test_fixed_pool();
    test_best_fit();
    test_random_walk();
    test_checker_catches_damage();
    test_ptrmap();
    gm_shutdown(g_quiet);
    return t_done();
}
