/* Helpers of the tier tests: "kernels" (host functions on a stream) that
   fill or check a tensor's bytes from a seed, and the randomized
   differential walk against a model, with gm_check after every step. On
   sim the kernels read and write device memory from the host; on CUDA,
   where that faults, they copy through pinned staging on the stream. */
#ifndef GM_TIER_TEST_H
#define GM_TIER_TEST_H
#include "gm_test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* A kernel: fill or check bytes derived from a seed. */
typedef struct job {
    unsigned char* p;
    size_t n;
    unsigned seed;
    int write;
    int every;  /* t_every_byte at launch: the global changes while work runs */
} job;
static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static long byte_errors;
static int t_every_byte; /* check every byte of big tensors too, not a sieve */
static long t_walk_period; /* > 0: the walk repeats the same tensors every period steps, with
                              gm_tier_step between periods (learned order sees a plan) */
static int t_walk_faults;  /* the walk arms a disk fault now and then (failing, short and
                              out-of-space writes, failing reads): a call may then answer
                              GM_ERR_IO or GM_ERR_DISK_FULL, and nothing may be lost, also
                              when the failed transfer ran behind, asynchronously */

static int t_walk_copy_faults; /* sim: the walk arms a failing copy now and then; a call may then
                                 answer GM_ERR_COPY_FAILED, and nothing may be lost, also when the
                                 failed copy ran behind (a prefetch, a write-back, a compaction) */
static int t_walk_nt;          /* > 0: the walk's tensors are the first t_walk_nt of its model */
static int t_walk_large;       /* every tensor between big_max / 4 and big_max bytes */

/* Every knob of the walk back to its default (a macro: not every test that
   includes this header configures a walk, and an unused static function
   would not compile under -Werror). */
#define t_walk_defaults() (t_walk_period = 0, t_walk_faults = t_walk_copy_faults = t_walk_nt = t_walk_large = 0)

static unsigned char pat(unsigned seed, size_t i) { return (unsigned char)((seed * 2654435761u + (unsigned)i * 40503u) >> 13); }

static void kernel(void* arg) {
    job* j = (job*)arg;
    size_t i, bad = 0, step = j->n > 4096 && !j->every ? 61 : 1; /* every byte of small ones; a sieve of big ones */
    if (j->write) {
        for (i = 0; i < j->n; i++) j->p[i] = pat(j->seed, i);
    } else {
        for (i = 0; i < j->n; i += step) bad += j->p[i] != pat(j->seed, i);
        if (j->n) bad += j->p[j->n - 1] != pat(j->seed, j->n - 1);
    }
    if (bad) {
        pthread_mutex_lock(&err_mu);
        byte_errors += (long)bad;
        pthread_mutex_unlock(&err_mu);
    }
    free(j);
}

#ifndef GM_TEST_CUDA
static gm_result run(gm_context* ctx, gm_stream s, void* p, size_t n, unsigned seed, int write) {
    job* j = (job*)malloc(sizeof *j);
    j->p = (unsigned char*)p;
    j->n = n;
    j->seed = seed;
    j->write = write;
    j->every = t_every_byte;
    return gm_launch_host(ctx, s, kernel, j);
}
#else
/* CUDA: host code cannot touch device memory, so a "kernel" is a copy on
   the stream from or into pinned staging, and the host function checks
   the staged bytes. Staging is one registered arena, reused once the
   device is idle. */
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#define T_STAGE ((size_t)256 << 20)
static unsigned char* t_stage;
static size_t t_stage_used;
static unsigned char* t_stage_get(gm_context* ctx, size_t n) {
    unsigned char* p;
    if (!t_stage) {
        void* m = mmap(NULL, T_STAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || cudaHostRegister(m, T_STAGE, cudaHostRegisterDefault) != cudaSuccess) return NULL;
        t_stage = (unsigned char*)m;
    }
    n = (n + 255) / 256 * 256;
    if (n > T_STAGE) return NULL;
    if (t_stage_used + n > T_STAGE) { /* every copy from or into it is done */
        gm_device_synchronize(ctx);
        t_stage_used = 0;
    }
    p = t_stage + t_stage_used;
    t_stage_used += n;
    return p;
}

static gm_result run(gm_context* ctx, gm_stream s, void* p, size_t n, unsigned seed, int write) {
    unsigned char* h = t_stage_get(ctx, n);
    job* j;
    size_t i;
    gm_result r;
    if (!h) return GM_ERR_HOST_OUT_OF_MEMORY;
    if (write) {
        for (i = 0; i < n; i++) h[i] = pat(seed, i);
        return gm_memcpy_async(ctx, p, h, n, GM_COPY_HOST_TO_DEVICE, s);
    }
    r = gm_memcpy_async(ctx, h, p, n, GM_COPY_DEVICE_TO_HOST, s);
    if (r != GM_OK) return r;
    j = (job*)malloc(sizeof *j);
    j->p = h;
    j->n = n;
    j->seed = seed;
    j->write = 0;
    j->every = t_every_byte;
    return gm_launch_host(ctx, s, kernel, j);
}
#endif

static long errors_now(gm_context* ctx) {
    long e;
    gm_device_synchronize(ctx);
    pthread_mutex_lock(&err_mu);
    e = byte_errors;
    pthread_mutex_unlock(&err_mu);
    return e;
}

static gm_tier where(gm_context* ctx, gm_tensor t) {
    gm_tier w = GM_TIER_NONE;
    gm_tensor_where(ctx, t, &w);
    return w;
}

/* Write a tensor through acquire, release dirty. */
static void fill(gm_context* ctx, gm_tensor t, size_t n, unsigned seed, gm_stream s) {
    void* p;
    if (!T_OK(gm_tensor_acquire(ctx, t, s, &p))) return;
    T_OK(run(ctx, s, p, n, seed, 1));
    T_OK(gm_tensor_release(ctx, t, s, 1));
}

static void verify(gm_context* ctx, gm_tensor t, size_t n, unsigned seed, gm_stream s) {
    void* p;
    if (!T_OK(gm_tensor_acquire(ctx, t, s, &p))) return;
    T_OK(run(ctx, s, p, n, seed, 0));
    T_OK(gm_tensor_release(ctx, t, s, 0));
}

/* The differential walk: random create / write / read-and-check /
   prefetch / evict (to the host, or to disk with `to_disk`) / destroy on
   two streams, tensors up to big_max bytes; every step must succeed or be
   an honest out-of-memory, and gm_check must stay 0. Every live tensor is
   read back at the end. Returns the tier figures. */
#define NT 2500
typedef struct model {
    gm_tensor h;
    size_t n;
    unsigned seed; /* 0: never written */
    int live;
} model;
static model m[NT];

/* The host victims the heaps choose (gm__hh_pick) against a walk of every
   tensor (gm__hh_walk), for each question the manager asks: the cheapest
   of classes 0-1 and 0-2, of class 2 alone (LRU's write behind), and,
   planning, one used later than a few acquires from now. Returns how many
   answers differ. A choice also drops the stale entries it meets, so the
   heaps' invariants are checked again by the next gm_check. */
static int t_host_choices(gm_context* ctx) {
    static const int lo[3] = {0, 0, 2}, hi[3] = {1, 2, 2};
    gm__tier* tm = (gm__tier*)ctx->tier;
    int q, bad = 0;
    uint64_t after;
    if (!tm) return 0;
    gm__rmu_lock(&tm->mu);
    for (after = 0; after <= (GM__PLANNED(tm) ? 4u : 0u); after += 2)
        for (q = 0; q < 3; q++) {
            gm__tensor* h = gm__hh_pick(tm, NULL, lo[q], hi[q], after);
            gm__tensor* w = gm__hh_walk(tm, NULL, lo[q], hi[q], after);
            if (h != w && bad++ < 3)
                printf("host victims of class %d-%d (after %llu): the heaps chose slot %ld, a walk slot %ld\n", lo[q], hi[q],
                       (unsigned long long)after, h ? (long)(h - tm->t) : -1L, w ? (long)(w - tm->t) : -1L);
        }
    gm__rmu_unlock(&tm->mu);
    return bad;
}

static gm_tier_stats t_walk(gm_context* ctx, long steps, size_t big_max, int to_disk) {
    gm_stream st[2];
    long step;
    int bad_checks = 0, bad_choices = 0, errors = 0, ooms = 0, faults = 0, copy_faults = 0;
    gm_tier_stats ts;
    st[0] = NULL;
    T_OK(gm_stream_create(ctx, &st[1]));
    memset(m, 0, sizeof m);
    for (step = 0; step < steps; step++) {
        unsigned long long r = t_rand();
        unsigned long long nt = t_walk_nt > 0 && t_walk_nt < NT ? (unsigned long long)t_walk_nt : NT;
        model* x = t_walk_period ? &m[(unsigned long long)(step % t_walk_period) * 13 % nt] : &m[r % nt];
        gm_stream s = st[(r >> 12) & 1];
        unsigned op = (unsigned)((r >> 16) % 100);
        gm_result res = GM_OK;
        if (t_walk_faults && (r >> 56) % 8 == 0) {
            static const gm_sim_fault kinds[] = {GM_SIM_FAULT_DISK_WRITE, GM_SIM_FAULT_DISK_READ, GM_SIM_FAULT_DISK_SHORT,
                                                 GM_SIM_FAULT_DISK_FULL};
            T_OK(gm_sim_inject(ctx, kinds[(r >> 50) % 4], 1 + (r >> 44) % 16));
        }
        if (t_walk_copy_faults && t_sim && (r >> 56) % 16 == 1) /* one of the next few copies fails */
            T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 1 + (r >> 44) % 8));
        if (!x->live) {
            x->n = t_walk_large ? big_max / 4 + (size_t)((r >> 32) % (big_max - big_max / 4)) + 1
                   : (r >> 24) % 3 == 0 ? (size_t)((r >> 32) % big_max) + 1
                                        : (size_t)((r >> 32) % (64 * KiB)) + 1;
            res = gm_tensor_create(ctx, &x->h, x->n);
            if (res == GM_OK) {
                x->live = 1;
                x->seed = 0;
            }
            if (res == GM_OK && (r >> 60) % 4 != 0) { /* mostly written at once, as programs do */
                void* p;
                unsigned seed = (unsigned)(r >> 40) | 1;
                res = gm_tensor_acquire_as(ctx, x->h, s, GM_ACCESS_OVERWRITE, &p);
                if (res == GM_OK) {
                    res = run(ctx, s, p, x->n, seed, 1);
                    if (res == GM_OK) x->seed = seed;
                    if (res == GM_OK) res = gm_tensor_release(ctx, x->h, s, GM_AS_ACQUIRED);
                }
            }
        } else if (op < 35 && (r >> 8) % 4 == 3) { /* a batch: x overwritten, up to three others read */
            gm_use u[4];
            model* o[4];
            size_t k, nu = 1;
            unsigned seed = (unsigned)(r >> 40) | 1;
            u[0].tensor = x->h, u[0].access = GM_ACCESS_OVERWRITE, o[0] = x;
            for (k = 1; k <= (r >> 4) % 4; k++) {
                model* y = &m[(r >> (20 + 3 * k)) % nt];
                if (!y->live || y == x) continue;
                u[nu].tensor = y->h, u[nu].access = GM_ACCESS_READ, o[nu++] = y; /* twice is a nest */
            }
            res = gm_tensor_acquire_many(ctx, u, nu, s);
            if (res == GM_OK) {
                for (k = 0; k < nu && res == GM_OK; k++) {
                    if (k == 0) res = run(ctx, s, u[0].ptr, x->n, seed, 1);
                    else if (o[k]->seed) res = run(ctx, s, u[k].ptr, o[k]->n, o[k]->seed, 0);
                }
                if (res == GM_OK) x->seed = seed;
                if (res == GM_OK) res = gm_tensor_release_many(ctx, u, nu, s);
            } else {
                for (k = 0; k < nu; k++)
                    if (u[k].ptr) res = GM_ERR_BAD_STATE; /* a failed batch acquires none */
            }
        } else if (op < 35) { /* write: read-write, or overwrite (released as acquired, or with a wrong flag) */
            void* p;
            unsigned seed = (unsigned)(r >> 40) | 1, how = (unsigned)(r >> 8) % 4;
            res = how ? gm_tensor_acquire_as(ctx, x->h, s, GM_ACCESS_OVERWRITE, &p) : gm_tensor_acquire(ctx, x->h, s, &p);
            if (res == GM_OK) {
                res = run(ctx, s, p, x->n, seed, 1);
                if (res == GM_OK) x->seed = seed;
                res = gm_tensor_release(ctx, x->h, s, how == 1 ? GM_AS_ACQUIRED : how == 2 ? 0 : 1);
            }
        } else if (op < 70) { /* read and check: read-write released clean, or read released as acquired */
            void* p;
            int ro = (int)((r >> 8) & 1);
            res = ro ? gm_tensor_acquire_as(ctx, x->h, s, GM_ACCESS_READ, &p) : gm_tensor_acquire(ctx, x->h, s, &p);
            if (res == GM_OK) {
                if (x->seed) res = run(ctx, s, p, x->n, x->seed, 0);
                if (res == GM_OK) res = gm_tensor_release(ctx, x->h, s, ro ? GM_AS_ACQUIRED : 0);
            }
        } else if (op < 80) {
            res = gm_tensor_prefetch(ctx, x->h, s);
        } else if (op < 92) {
            res = to_disk && (op & 1) ? gm_tensor_evict_to(ctx, x->h, GM_TIER_DISK) : gm_tensor_evict(ctx, x->h);
        } else {
            res = gm_tensor_destroy(ctx, x->h);
            if (res == GM_OK) x->live = 0;
        }
        if (res == GM_ERR_OUT_OF_MEMORY) {
            ooms++;
            res = GM_OK;
        }
        if (t_walk_faults && (res == GM_ERR_IO || res == GM_ERR_DISK_FULL)) {
            faults++;
            res = GM_OK;
        }
        if (t_walk_copy_faults && res == GM_ERR_COPY_FAILED) {
            copy_faults++;
            res = GM_OK;
        }
        if (res != GM_OK && errors++ < 5) printf("step %ld: op %u: %s\n", step, op, gm_result_string(res));
        if (gm_check(ctx) != 0 && bad_checks++ < 3) printf("step %ld: gm_check failed\n", step);
        bad_choices += t_host_choices(ctx) != 0;
        if (t_walk_period && step % t_walk_period == t_walk_period - 1 && gm_tier_step(ctx) != GM_OK && errors++ < 5)
            printf("step %ld: gm_tier_step failed\n", step);
    }
    T_EQ(errors, 0);
    T_EQ(bad_checks, 0);
    T_EQ(bad_choices, 0);
    if (t_walk_faults) { /* disarm, and read everything back */
        gm_sim_fault k;
        for (k = GM_SIM_FAULT_DISK_WRITE; k <= GM_SIM_FAULT_DISK_FULL; k = (gm_sim_fault)(k + 1)) T_OK(gm_sim_inject(ctx, k, 0));
        printf("tier walk with disk faults: %d calls answered with an I/O error\n", faults);
    }
    if (t_walk_copy_faults && t_sim) {
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 0));
        printf("tier walk with copy faults: %d calls answered GM_ERR_COPY_FAILED\n", copy_faults);
    }
    {
        int i;
        for (i = 0; i < NT; i++) /* a last read of everything */
            if (m[i].live && m[i].seed) verify(ctx, m[i].h, m[i].n, m[i].seed, st[i & 1]);
    }
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    printf("tier walk: %ld steps, %lld tensors live, MiB on device %.1f, host %.1f, disk %.1f; %lld evictions "
           "(%lld clean), MiB to host %.1f, to device %.1f, to disk %.1f, from disk %.1f; prefetch %lld hits / %lld "
           "misses; %lld compactions (%.1f MiB); %lld host copies in pieces; %d out of memory\n",
           steps, (long long)ts.tensors, (double)ts.device_bytes / (double)MiB, (double)ts.host_bytes / (double)MiB,
           (double)ts.disk_bytes / (double)MiB, (long long)ts.evictions, (long long)ts.clean_evictions,
           (double)ts.bytes_to_host / (double)MiB, (double)ts.bytes_to_device / (double)MiB,
           (double)ts.bytes_to_disk / (double)MiB, (double)ts.bytes_from_disk / (double)MiB,
           (long long)ts.prefetch_hits, (long long)ts.prefetch_misses, (long long)ts.compactions,
           (double)ts.bytes_compacted / (double)MiB, (long long)ts.host_scattered, ooms);
    T_EQ(gm_check(ctx), 0);
    {
        int i;
        for (i = 0; i < NT; i++)
            if (m[i].live) T_OK(gm_tensor_destroy(ctx, m[i].h));
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, st[1]));
    return ts;
}
/* Belady's order as the rule says it, for the tests of the plan: two
   passes around it, each simulated eviction scanning the tensors held for
   the one used farthest ahead. left[u] (when given) is 1 when the tensor of
   use u (as use_at) leaves the cache of `cap` bytes before its next use;
   gone[u] (when given) the position of the second pass at which it left,
   else UINT32_MAX. */
static inline void t_belady_scan(const gm__tier* tm, size_t cap, uint8_t* left, uint32_t* gone) {
    uint32_t n = tm->nplan, nt = tm->n, p, pass, t, nheld = 0;
    uint32_t* held = (uint32_t*)calloc(nt, sizeof *held);
    uint32_t* slot = (uint32_t*)calloc(nt, sizeof *slot); /* place in held + 1 */
    uint32_t* curk = (uint32_t*)calloc(nt, sizeof *curk);
    uint32_t* occ = (uint32_t*)calloc(nt, sizeof *occ);
    uint64_t* next = (uint64_t*)calloc(nt, sizeof *next);
    size_t used = 0;
    if (left) memset(left, 0, n);
    if (gone) memset(gone, 0xff, (size_t)n * sizeof *gone);
    for (pass = 0; pass < 2; pass++) {
        for (t = 0; t < nt; t++) occ[t] = tm->use_first[t];
        for (p = 0; p < n; p++) {
            uint32_t u, first, end;
            t = GM__PLAN_T(tm->plan[p]);
            u = occ[t]++;
            first = tm->use_first[t];
            end = tm->use_first[t + 1];
            if (!slot[t]) {
                while (used + tm->t[t].bytes > cap && nheld) {
                    uint32_t j, far = 0, v;
                    for (j = 1; j < nheld; j++)
                        if (next[held[j]] > next[held[far]]) far = j;
                    v = held[far];
                    if (pass && left) left[curk[v]] = 1;
                    if (pass && gone) gone[curk[v]] = p;
                    used -= tm->t[v].bytes;
                    held[far] = held[--nheld];
                    slot[held[far]] = far + 1;
                    slot[v] = 0;
                }
                if (used + tm->t[t].bytes > cap) continue;
                held[nheld++] = t;
                slot[t] = nheld;
                used += tm->t[t].bytes;
            }
            curk[t] = u;
            next[t] = u + 1 < end ? (uint64_t)pass * n + tm->use_at[u + 1] : (uint64_t)(pass + 1) * n + tm->use_at[first];
        }
    }
    free(held), free(slot), free(curk), free(occ), free(next);
}

/* For the tests of the plan: tensors of mixed sizes (128 KiB to 1 MiB),
   and step k of random length over them (every third step over a quarter
   of them: one that fits), each use an acquire and a release, then the
   step's end. */
static inline void t_plan_tensors(gm_context* ctx, gm_tensor* t, int n, unsigned long long* rs) {
    int i;
    for (i = 0; i < n; i++) T_OK(gm_tensor_create(ctx, &t[i], (size_t)(1 + t_rand_r(rs) % 8) * 128 * KiB));
}

static inline void t_plan_step(gm_context* ctx, const gm_tensor* t, int n, int k, unsigned long long* rs) {
    int q, len = 10 + (int)(t_rand_r(rs) % 120);
    for (q = 0; q < len; q++) {
        void* p;
        int i = (int)(t_rand_r(rs) % (unsigned long long)(k % 3 ? n : n / 4));
        T_OK(gm_tensor_acquire(ctx, t[i], NULL, &p));
        T_OK(gm_tensor_release(ctx, t[i], NULL, 0));
    }
    T_OK(gm_tier_step(ctx));
}

#endif
