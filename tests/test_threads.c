/* Eight threads hammer one context: allocations on the default stream and
   their own, frees of their own blocks and of blocks handed over by other
   threads, while a ninth thread reads statistics, summaries and runs
   gm_check. No block may be handed out twice (tags survive), and at the end
   everything adds up. */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)
#define NTHREADS 8
#define OPS 20000
#define HOLD 24

typedef struct handoff {
    pthread_mutex_t mu;
    void* items[4096];
    unsigned long long tags[4096];
    size_t sizes[4096];
    int n;
} handoff;

static gm_context* ctx;
static handoff box;
static int errors, tag_errors;
static int done; /* under err_mu */
static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;

static void count_error(int* e) {
    pthread_mutex_lock(&err_mu);
    (*e)++;
    pthread_mutex_unlock(&err_mu);
}

typedef struct worker_arg {
    int id;
    unsigned long long rng;
} worker_arg;


static void* worker(void* argp) {
    worker_arg* a = (worker_arg*)argp;
    gm_stream own = NULL;
    void* p[HOLD];
    size_t sz[HOLD];
    unsigned long long tg[HOLD];
    int n = 0, i;
    if (gm_stream_create(ctx, &own) != GM_OK) count_error(&errors);
    for (i = 0; i < OPS; i++) {
        unsigned long long r = t_rand_r(&a->rng);
        if (n < HOLD && (r % 3) != 0) {
            size_t size = (r >> 8) % 100 < 90 ? 1 + (size_t)((r >> 16) % (256 * 1024)) : MiB + (size_t)((r >> 16) % (8 * MiB));
            gm_stream s = (r >> 40) & 1 ? own : NULL;
            void* q;
            gm_result res = gm_alloc(ctx, &q, size, s);
            if (res != GM_OK) {
                count_error(&errors);
                continue;
            }
            p[n] = q;
            sz[n] = size;
            tg[n] = (r << 8) | (unsigned)a->id;
            t_tag_put(q, size, tg[n]);
            n++;
        } else if (n) {
            int k = (int)((r >> 8) % (unsigned)n);
            if (!t_tag_ok(p[k], sz[k], tg[k])) count_error(&tag_errors);
            if ((r >> 20) % 8 == 0) { /* hand it to whoever comes next */
                pthread_mutex_lock(&box.mu);
                if (box.n < 4096) {
                    box.items[box.n] = p[k];
                    box.tags[box.n] = tg[k];
                    box.sizes[box.n] = sz[k];
                    box.n++;
                    p[k] = NULL;
                }
                pthread_mutex_unlock(&box.mu);
            }
            if (p[k] && gm_free(ctx, p[k]) != GM_OK) count_error(&errors);
            p[k] = p[n - 1];
            sz[k] = sz[n - 1];
            tg[k] = tg[n - 1];
            n--;
        }
        if ((r >> 32) % 16 == 0) { /* free something another thread allocated */
            void* q = NULL;
            unsigned long long t = 0;
            size_t s = 0;
            pthread_mutex_lock(&box.mu);
            if (box.n) {
                box.n--;
                q = box.items[box.n];
                t = box.tags[box.n];
                s = box.sizes[box.n];
            }
            pthread_mutex_unlock(&box.mu);
            if (q) {
                if (!t_tag_ok(q, s, t)) count_error(&tag_errors);
                if (gm_free(ctx, q) != GM_OK) count_error(&errors);
            }
        }
    }
    while (n) {
        n--;
        if (!t_tag_ok(p[n], sz[n], tg[n])) count_error(&tag_errors);
        if (gm_free(ctx, p[n]) != GM_OK) count_error(&errors);
    }
    if (gm_stream_destroy(ctx, own) != GM_OK) count_error(&errors);
    return NULL;
}

static void* observer(void* arg) {
    char buf[8192];
    int checks = 0;
    (void)arg;
    for (;;) {
        int stop;
        pthread_mutex_lock(&err_mu);
        stop = done;
        pthread_mutex_unlock(&err_mu);
        if (stop) break;
        gm_stats s;
        if (gm_get_stats(ctx, &s) != GM_OK) count_error(&errors);
        gm_summary(ctx, buf, sizeof buf);
        if (gm_check(ctx) != 0) count_error(&errors);
        checks++;
    }
    return (void*)(intptr_t)checks;
}

int main(void) {
    pthread_t th[NTHREADS], obs;
    worker_arg args[NTHREADS];
    gm_desc d = t_desc();
    gm_stats s;
    void* ret;
    int i;
    d.device_budget = 4096 * MiB;
    ctx = t_setup(d);
    pthread_mutex_init(&box.mu, NULL);
    pthread_create(&obs, NULL, observer, NULL);
    for (i = 0; i < NTHREADS; i++) {
        args[i].id = i;
        args[i].rng = 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    for (i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_mutex_lock(&err_mu);
    done = 1;
    pthread_mutex_unlock(&err_mu);
    pthread_join(obs, &ret);
    T_CHECK((intptr_t)ret > 0);
    while (box.n) { /* what is left in the box is freed by the main thread */
        box.n--;
        T_CHECK(t_tag_ok(box.items[box.n], box.sizes[box.n], box.tags[box.n]));
        T_OK(gm_free(ctx, box.items[box.n]));
    }
    T_EQ(errors, 0);
    T_EQ(tag_errors, 0);
    T_EQ(gm_check(ctx), 0);
    memset(&s, 0, sizeof s);
    T_OK(gm_get_stats(ctx, &s));
    T_EQ(s.allocation[GM_STAT_ALL].current, 0);
    T_EQ(s.active[GM_STAT_ALL].current, 0);
    T_EQ(s.allocated_bytes[GM_STAT_ALL].current, 0);
    T_EQ(s.allocation[GM_STAT_ALL].allocated, s.allocation[GM_STAT_ALL].freed);
    T_CHECK(s.allocation[GM_STAT_ALL].allocated > NTHREADS * OPS / 2);
    printf("%lld allocations by %d threads, %lld segments, %d observer passes\n",
           (long long)s.allocation[GM_STAT_ALL].allocated, NTHREADS, (long long)s.num_device_alloc, (int)(intptr_t)ret);
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_shutdown(ctx));
    pthread_mutex_destroy(&box.mu);
    return t_done();
}
