/* gm_check's report (white box): damage done on purpose to each structure
   it walks (the device pools and their statistics, an expandable
   segment's pages, unified memory, the plan, the tiered manager's
   tensors, lists and figures, the host pool and the spill file) is named
   in the report, one line per broken invariant counted, the same lines in
   the log and in gm_check_report's buffer, capped at 20 and a count; each
   is undone, and the healthy context reports 0 and an empty buffer. The
   spill directory is made under $GM_TEST_DISK_DIR (default /var/tmp). */
#include "gm_tier_test.h"
#include <unistd.h>

static char dir[512];
static char rep[16384];
static int log_lines; /* "check: " lines logged at error */
static void check_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level == GM_LOG_ERROR && strncmp(msg, "check: ", 7) == 0) log_lines++;
    t_log(level, msg, NULL);
}

static gm_context* ctx_with(gm_desc d) {
    d.log_fn = check_log;
    return t_setup(d);
}

/* The report now: its count. Every line starts "check: ", there is one a
   broken invariant up to 20 and then one more, and the log saw as many. */
static int report(gm_context* ctx) {
    int n, lines = 0, logged = log_lines;
    const char* p;
    memset(rep, 'x', sizeof rep);
    n = gm_check_report(ctx, rep, sizeof rep);
    T_CHECK(memchr(rep, 0, sizeof rep) != NULL);
    for (p = rep; *p; p = strchr(p, '\n') + 1) {
        T_CHECK(strncmp(p, "check: ", 7) == 0);
        if (!T_CHECK(strchr(p, '\n') != NULL)) break;
        lines++;
    }
    T_EQ(lines, n > 20 ? 21 : n);
    T_EQ(log_lines - logged, lines);
    return n;
}

/* The report names what is wrong: `what` is in it (and printed if not). */
static void expect(gm_context* ctx, const char* what) {
    int n = report(ctx);
    T_CHECK(n > 0);
    if (!T_CHECK(strstr(rep, what) != NULL)) printf("expected \"%s\" in:\n%s", what, rep);
}

static void healthy(gm_context* ctx) {
    T_EQ(report(ctx), 0);
    T_EQ(rep[0], 0);
    T_EQ(gm_check(ctx), 0);
}

/* The caching allocator: statistics, the tiling, the free tree, the map,
   the pending list, the budget, a stream's epochs. */
static void test_device(void) {
    gm_context* ctx = ctx_with(t_desc());
    void *p, *q, *r;
    gm__block* b;
    gm_stat saved;
    char want[256];
    size_t sz;
    T_OK(gm_alloc(ctx, &p, 4096, NULL));
    T_OK(gm_alloc(ctx, &q, 8192, NULL));
    T_OK(gm_alloc(ctx, &r, 3 << 20, NULL));
    T_OK(gm_free(ctx, q));
    healthy(ctx);
    /* a statistic: the pool's line, and the sum over the pools */
    saved = ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL];
    ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL].current += 512;
    snprintf(want, sizeof want, "check: device: stat allocated_bytes[small] is %lld, blocks sum to %lld\n",
             (long long)saved.current + 512, (long long)saved.current);
    T_EQ(report(ctx), 2);
    T_CHECK(strstr(rep, want) != NULL);
    T_CHECK(strstr(rep, "check: device: stat allocated_bytes[all] is ") != NULL);
    ctx->stats.allocated_bytes[GM_STAT_SMALL_POOL] = saved;
    healthy(ctx);
    /* a block's size that is not the tiling's */
    b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)p);
    sz = b->size;
    b->size = sz + 100;
    expect(ctx, "check: device small pool: block at offset 0 breaks the tiling of segment 0");
    T_CHECK(strstr(rep, "its size 4196 is not a multiple of 512") != NULL);
    b->size = sz + 512; /* now its neighbour starts in the wrong place */
    expect(ctx, "check: device small pool: block at offset 4096 breaks the tiling of segment 0");
    T_CHECK(strstr(rep, "the block before it ends at offset 4608") != NULL);
    b->size = sz;
    healthy(ctx);
    { /* a free block that left the tree, a heap order broken, free neighbours */
        gm__block* f = b->next;
        T_CHECK(f && f->state == GM__FREE);
        gm__arena_tree_del(&ctx->pool[0], f);
        expect(ctx, "check: device small pool: 1 free blocks, 0 in the free tree, 0 counted");
        gm__arena_tree_add(&ctx->pool[0], f);
        healthy(ctx);
        f->state = GM__USED;
        expect(ctx, "device small pool: ");
        f->state = GM__FREE;
        b->state = GM__FREE; /* p's block, beside the free one */
        expect(ctx, "check: device small pool: free blocks at offsets 0 and 4096 of segment 0");
        b->state = GM__USED;
        healthy(ctx);
    }
    /* the map */
    gm__map_del(&ctx->map, (uintptr_t)p);
    expect(ctx, "check: device: 1 pointers mapped, 2 blocks in use");
    gm__map_put(&ctx->map, (uintptr_t)p, b);
    healthy(ctx);
    b->owner = GM__OWN_TENSOR; /* held for a tensor with no manager */
    b->tag = 0x100001;
    snprintf(want, sizeof want, "check: device: block %#lx (4096 bytes) is held for tensor 0x100001, and there is no "
             "tiered manager\n", (unsigned long)b->addr);
    T_EQ(report(ctx), 1);
    T_CHECK(strstr(rep, want) != NULL);
    b->owner = GM__OWN_USER;
    b->tag = 0;
    healthy(ctx);
    /* the pending list, the budget, a stream's epochs */
    ctx->npending++;
    expect(ctx, "check: device: the pending list holds 0 blocks, 1 counted");
    ctx->npending--;
    {
        size_t budget = ctx->budget;
        ctx->budget = 1024;
        expect(ctx, "bytes reserved, past the budget of 1024");
        ctx->budget = budget;
    }
    {
        uint64_t e = ctx->ss[0].safe_epoch;
        ctx->ss[0].safe_epoch = ctx->ss[0].epoch;
        expect(ctx, "check: device: stream 0: epochs out of order");
        ctx->ss[0].safe_epoch = e;
    }
    healthy(ctx);
    T_OK(gm_free(ctx, p));
    T_OK(gm_free(ctx, r));
    healthy(ctx);
    T_OK(gm_shutdown(ctx));
}

/* An expandable segment's pages. */
static void test_expandable(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__seg* sg = NULL;
    void* p;
    int pl;
    d.expandable = GM_TOGGLE_ON;
    ctx = ctx_with(d);
    T_OK(gm_alloc(ctx, &p, 5 << 20, NULL));
    healthy(ctx);
    for (pl = 0; pl < 2 && !sg; pl++)
        for (sg = ctx->pool[pl].segs; sg && !sg->va; sg = sg->next) {}
    T_CHECK(sg != NULL);
    if (sg) {
        gm__vseg* v = sg->va;
        (*gm__vref(v, 0))++;
        expect(ctx, "pages disagree with its blocks; page 0 has 1 users, 2 counted, mapped");
        (*gm__vref(v, 0))--;
        v->nmapped++;
        expect(ctx, "pages mapped, ");
        v->nmapped--;
        v->nused++;
        expect(ctx, "pages in use, ");
        v->nused--;
        v->pg.made++;
        expect(ctx, "page-table leaves");
        v->pg.made--;
    }
    healthy(ctx);
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
}

/* Unified memory's figures and the planned mode's. */
static void test_managed_and_plan(void) {
    gm_context* ctx = ctx_with(t_desc());
    void *a, *b;
    ctx->stats.managed_bytes += 4096;
    T_EQ(report(ctx), 1);
    T_CHECK(strstr(rep, "check: unified memory: stat managed_bytes is 4096, the user's blocks sum to 0\n") != NULL);
    ctx->stats.managed_bytes -= 4096;
    ctx->mcached += 512;
    expect(ctx, "check: unified memory: the cache holds 0 bytes, 512 counted");
    ctx->mcached -= 512;
    healthy(ctx);
    T_OK(gm_plan_begin(ctx));
    T_OK(gm_alloc(ctx, &a, 4096, NULL));
    T_OK(gm_alloc(ctx, &b, 8192, NULL));
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    T_OK(gm_plan_end(ctx));
    T_OK(gm_plan_enable(ctx, 1));
    T_OK(gm_plan_step(ctx));
    T_OK(gm_alloc(ctx, &a, 4096, NULL));
    healthy(ctx);
    if (ctx->plan) {
        gm__plan* pl = (gm__plan*)ctx->plan;
        pl->nlive++;
        expect(ctx, "check: plan: 1 blocks live, 2 counted, 1 mapped");
        pl->nlive--;
    }
    healthy(ctx);
    T_OK(gm_free(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* The tiered manager over a disk tier: a tensor's fields, the LRU list,
   the tier's figures, the host pool, the spill file; and the cap. */
static void test_tier(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t[32], h, k;
    gm__tensor *x, *xh, *xk;
    gm__tier* tm;
    gm__disk* dk;
    char want[256];
    const size_t n = 65536;
    int i;
    d.device_budget = 64 * MiB;
    d.host_budget = 16 * MiB;
    d.disk_dir = dir;
    ctx = ctx_with(d);
    for (i = 0; i < 32; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], n));
        fill(ctx, t[i], n, (unsigned)i + 1, NULL);
    }
    T_OK(gm_tensor_create(ctx, &h, n)); /* one on the host, one on disk */
    fill(ctx, h, n, 100, NULL);
    T_OK(gm_tensor_evict(ctx, h));
    T_OK(gm_tensor_create(ctx, &k, n));
    fill(ctx, k, n, 101, NULL);
    T_OK(gm_tensor_evict_to(ctx, k, GM_TIER_DISK));
    T_EQ(where(ctx, h), GM_TIER_HOST);
    T_EQ(where(ctx, k), GM_TIER_DISK);
    healthy(ctx);
    tm = (gm__tier*)ctx->tier;
    dk = (gm__disk*)ctx->disk;
    x = gm__tensor_get(ctx, t[0]);
    xh = gm__tensor_get(ctx, h);
    xk = gm__tensor_get(ctx, k);
    /* on the LRU list but acquired */
    x->acquired = 1;
    snprintf(want, sizeof want, "check: tier: tensor %#x (%zu bytes) on the LRU list but acquired\n", t[0].id, n);
    T_EQ(report(ctx), 2);
    T_CHECK(strstr(rep, want) != NULL);
    T_CHECK(strstr(rep, "check: tier: 32 tensors on the LRU list, 31 on the device and released\n") != NULL);
    x->acquired = 0;
    healthy(ctx);
    /* the list's tail */
    {
        uint32_t tail = tm->lru_tail;
        tm->lru_tail = 0;
        expect(ctx, "check: tier: the LRU list's tail names 0");
        tm->lru_tail = tail;
    }
    /* a mark never made */
    x->ready_seq = (uint32_t)(tm->tk[GM__TK_IN].seq + 5);
    snprintf(want, sizeof want, "check: tier: tensor %#x (%zu bytes) waits for a mark never made\n", t[0].id, n);
    T_EQ(report(ctx), 1);
    T_CHECK(strstr(rep, want) != NULL);
    x->ready_seq = 0;
    /* a tensor in no tier (its figure then differs too) */
    xh->host_valid = 0;
    snprintf(want, sizeof want, "check: tier: tensor %#x (%zu bytes) is in no tier\n", h.id, n);
    expect(ctx, want);
    T_CHECK(strstr(rep, "check: tier: stat host_bytes is 65536, valid host copies sum to 0\n") != NULL);
    xh->host_valid = 1;
    healthy(ctx);
    /* the device copy's block held for another tensor */
    {
        gm__block* b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)x->dev);
        b->tag = t[1].id;
        snprintf(want, sizeof want, "check: tier: the device copy of tensor %#x (%zu bytes) at %p is a block held by "
                 "someone else\n", t[0].id, n, x->dev);
        expect(ctx, want);
        b->tag = t[0].id;
    }
    healthy(ctx);
    /* a figure of the tier */
    tm->st.disk_bytes += 1;
    T_EQ(report(ctx), 1);
    T_CHECK(strstr(rep, "check: tier: stat disk_bytes is 65537, valid disk copies sum to 65536\n") != NULL);
    tm->st.disk_bytes -= 1;
    /* the host pool: a block off its granularity, its counts */
    {
        size_t sz = xh->host->size;
        xh->host->size = sz + 1000;
        expect(ctx, "check: host pool: block at offset ");
        T_CHECK(strstr(rep, "breaks the tiling of segment 0") != NULL);
        snprintf(want, sizeof want, "its size %zu is not a multiple of 4096", sz + 1000);
        T_CHECK(strstr(rep, want) != NULL);
        xh->host->size = sz;
        tm->host_used += 4096;
        expect(ctx, "check: host pool: tensors hold 65536 bytes, 69632 counted\n");
        tm->host_used -= 4096;
    }
    healthy(ctx);
    /* the spill file: an extent's size, the reservation */
    {
        size_t sz = xk->disk->size;
        xk->disk->size = sz + dk->ar.align;
        expect(ctx, "check: spill file: ");
        xk->disk->size = sz;
        dk->reserved += dk->ar.align;
        expect(ctx, "check: spill file: segments sum to ");
        dk->reserved -= dk->ar.align;
    }
    healthy(ctx);
    /* past 20 lines: the first 20, then how many more */
    for (i = 0; i < 32; i++) gm__tensor_get(ctx, t[i])->acquired = 1;
    T_EQ(report(ctx), 33);
    T_CHECK(strstr(rep, "\ncheck: 13 more\n") != NULL);
    T_EQ(strlen(strstr(rep, "\ncheck: 13 more\n")), strlen("\ncheck: 13 more\n")); /* the last line */
    T_EQ(gm_check(ctx), 33);
    { /* the buffer truncated, always terminated */
        char small[40];
        memset(small, 'x', sizeof small);
        T_EQ(gm_check_report(ctx, small, sizeof small), 33);
        T_EQ(strlen(small), sizeof small - 1);
        T_CHECK(strncmp(small, rep, sizeof small - 1) == 0);
        small[0] = 'x';
        T_EQ(gm_check_report(ctx, small, 1), 33);
        T_EQ(small[0], 0);
        T_EQ(gm_check_report(ctx, NULL, 0), 33);
    }
    for (i = 0; i < 32; i++) gm__tensor_get(ctx, t[i])->acquired = 0;
    healthy(ctx);
    for (i = 0; i < 32; i++) verify(ctx, t[i], n, (unsigned)i + 1, NULL);
    verify(ctx, h, n, 100, NULL);
    verify(ctx, k, n, 101, NULL);
    T_EQ(errors_now(ctx), 0);
    healthy(ctx);
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    const char* base = getenv("GM_TEST_DISK_DIR");
    char buf[8] = "x";
    (void)t_walk; /* the tier helpers' walk: not used here */
    snprintf(dir, sizeof dir, "%s/gpumem-test-XXXXXX", base ? base : "/var/tmp");
    if (!mkdtemp(dir)) {
        printf("FAIL: cannot make a directory %s\n", dir);
        return 1;
    }
    T_EQ(gm_check_report(NULL, buf, sizeof buf), -1);
    T_EQ(buf[0], 0);
    test_device();
    test_expandable();
    test_managed_and_plan();
    test_tier();
    T_EQ(rmdir(dir), 0);
    return t_done();
}
