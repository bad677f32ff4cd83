/* The tiered manager's public calls in any order, right and wrong, against
   a model of each tensor: its bytes (a pattern from a seed, written and
   checked by host functions on the streams), its nested acquires and
   their stream. A few small budgets (the device, the host tier, a disk
   tier or none), faults armed on the way (device and host allocations,
   copies, disk reads and writes, a short transfer, a full disk), and
   LRU, learned order or a custom choice.
   After every call: gm_check is 0, and each tensor's acquire count is the
   model's. A misuse (a release of a tensor not acquired, a destroy or an
   eviction of an acquired one, another stream, a stale handle, a bad
   phase) is refused and changes nothing. A call may fail for want of
   room or from a fault, and nothing is lost: every acquire that succeeds
   of a tensor written before reads what was last written, and at the end,
   faults disarmed, every tensor reads back whole.
   The input: one byte of configuration, then three bytes per call (the
   call, a tensor slot, an argument); its length's parity picks the spill
   files' directory (ft_dir). The sim only. */
#define GPUMEM_IMPLEMENTATION
#include "../../gpumem.h"
#define FUZZ_NAME "tier"
#include "fuzz.h"
#include <unistd.h>

#define FT_N 8        /* tensor slots */
#define FT_OPS 256    /* calls an input may make, at most */
#define FT_KIB ((size_t)1 << 10)

typedef struct ft_tensor {
    gm_tensor h, old; /* old: a destroyed handle of this slot (stale), or {0} */
    size_t n;
    unsigned seed;    /* the bytes last written (0: none to check) */
    unsigned acq;     /* nested acquires */
    int si;           /* their stream */
    int live;
} ft_tensor;

typedef struct ft_job {
    unsigned char* p;
    size_t n;
    unsigned seed;
    int write;
} ft_job;

static long ft_bad; /* bytes a check found wrong (atomic) */

/* The pattern of a seed: one 64-bit word for every 8 bytes (the tail
   takes the first bytes of its word), so that every byte is checked. */
static uint64_t ft_word(unsigned seed, size_t k) {
    uint64_t x = ((uint64_t)seed << 32 ^ (uint64_t)k) * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

/* A "kernel" on a stream (gm_launch_host_copy keeps its argument): fills
   the bytes from the seed, or counts the words that differ. On sim the
   host reads device memory. */
static void ft_kernel(void* arg) {
    const ft_job* j = (const ft_job*)arg;
    size_t k, words = j->n / 8, bad = 0;
    for (k = 0; k <= words; k++) {
        uint64_t w = ft_word(j->seed, k);
        size_t len = k < words ? 8 : j->n % 8;
        if (!len) break;
        if (j->write) memcpy(j->p + 8 * k, &w, len);
        else bad += memcmp(j->p + 8 * k, &w, len) != 0;
    }
    if (bad) __atomic_add_fetch(&ft_bad, (long)bad, __ATOMIC_RELAXED);
}

static gm_result ft_run(gm_context* ctx, gm_stream s, void* p, size_t n, unsigned seed, int write) {
    ft_job j;
    j.p = (unsigned char*)p;
    j.n = n;
    j.seed = seed;
    j.write = write;
    return gm_launch_host_copy(ctx, s, ft_kernel, &j, sizeof j);
}

/* The spill files' directories: one in /tmp, and one in memory (/dev/shm,
   where the disk's I/O completes at once: the engine's races with the
   copies come out other ways; /tmp again where there is none). An input
   of even length uses the second. */
static char ft_dir[2][64];
static void ft_dir_remove(void) {
    (void)rmdir(ft_dir[0]);
    if (strcmp(ft_dir[0], ft_dir[1])) (void)rmdir(ft_dir[1]);
}

/* A custom policy's choice: any candidate, or none (n), by the input. */
static size_t ft_victim(gm_context* ctx, const gm_tensor* c, size_t n, void* user) {
    unsigned k = *(const unsigned*)user;
    (void)ctx, (void)c;
    return k % 4 == 3 ? n : (size_t)k % n;
}

/* The results a call may give when it is used right: success, or a want
   of room, or a fault's. */
static int ft_fair(gm_result r) {
    return r == GM_OK || r == GM_ERR_OUT_OF_MEMORY || r == GM_ERR_HOST_OUT_OF_MEMORY || r == GM_ERR_COPY_FAILED ||
           r == GM_ERR_IO || r == GM_ERR_DISK_FULL || r == GM_ERR_CHECKSUM;
}

static void ft_check(gm_context* ctx, const ft_tensor* t, gm_stream* st) {
    int i, live = 0;
    gm_tier_stats ts;
    FUZZ_ASSERT(gm_check(ctx) == 0);
    for (i = 0; i < FT_N; i++) {
        gm_tensor_info info;
        if (!t[i].live) continue;
        live++;
        FUZZ_ASSERT(gm_tensor_get_info(ctx, t[i].h, &info) == GM_OK);
        FUZZ_ASSERT(info.acquired == t[i].acq);
        FUZZ_ASSERT(info.bytes == t[i].n);
    }
    FUZZ_ASSERT(gm_tier_get_stats(ctx, &ts) == GM_OK);
    FUZZ_ASSERT(ts.tensors == live);
    (void)gm_stream_synchronize(ctx, st[0]); /* the checks queued so far have run */
    (void)gm_stream_synchronize(ctx, st[1]);
    FUZZ_ASSERT(__atomic_load_n(&ft_bad, __ATOMIC_RELAXED) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const size_t dev_budget[4] = {256 * FT_KIB, 512 * FT_KIB, 1024 * FT_KIB, 2048 * FT_KIB};
    static const size_t host_budget[4] = {64 * FT_KIB, 256 * FT_KIB, 512 * FT_KIB, 1024 * FT_KIB};
    static const gm_sim_fault faults[7] = {GM_SIM_FAULT_DEVICE_ALLOC, GM_SIM_FAULT_COPY,      GM_SIM_FAULT_HOST_ALLOC,
                                           GM_SIM_FAULT_DISK_WRITE,   GM_SIM_FAULT_DISK_READ,  GM_SIM_FAULT_DISK_SHORT,
                                           GM_SIM_FAULT_DISK_FULL};
    ft_tensor t[FT_N];
    gm_stream st[2];
    gm_context* ctx;
    gm_desc d;
    size_t pos, ops = 0;
    int i, disk;
    unsigned cfg, next_seed = 1, victim_arg = 0;
    if (size < 1) return 0;
    if (!ft_dir[0][0]) { /* made once and removed at exit (each file goes at shutdown) */
        snprintf(ft_dir[0], sizeof ft_dir[0], "/tmp/gm-fuzz-tier-XXXXXX");
        if (!mkdtemp(ft_dir[0])) abort();
        snprintf(ft_dir[1], sizeof ft_dir[1], "/dev/shm/gm-fuzz-tier-XXXXXX");
        if (!mkdtemp(ft_dir[1])) memcpy(ft_dir[1], ft_dir[0], sizeof ft_dir[1]);
        atexit(ft_dir_remove);
    }
    cfg = data[0];
    disk = (cfg >> 4) & 1;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.device_budget = dev_budget[cfg & 3];
    d.host_budget = host_budget[(cfg >> 2) & 3];
    d.disk_dir = disk ? ft_dir[size % 2 == 0] : NULL;
    d.disk_budget = disk ? (size_t)8 << 20 : 0;
    d.disk_chunk = 64 * FT_KIB; /* host copies in pieces of 64 KiB (a sixteenth of the largest host tier) */
    d.disk_io = (cfg >> 6) & 1 ? GM_DISK_IO_PREAD : GM_DISK_IO_DEFAULT;
    d.expandable = (cfg >> 7) & 1 ? GM_TOGGLE_ON : GM_TOGGLE_DEFAULT;
    if (gm_setup(&ctx, &d) != GM_OK) return 0;
    st[0] = NULL;
    FUZZ_ASSERT(gm_stream_create(ctx, &st[1]) == GM_OK);
    if ((cfg >> 5) & 1) FUZZ_ASSERT(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL) == GM_OK);
    memset(t, 0, sizeof t);
    __atomic_store_n(&ft_bad, 0, __ATOMIC_RELAXED);
    for (pos = 1; pos + 3 <= size && ops < FT_OPS; pos += 3, ops++) {
        unsigned op = data[pos] % 20, arg = data[pos + 2];
        ft_tensor* x = &t[data[pos + 1] % FT_N];
        gm_stream s = st[arg & 1];
        gm_result r;
        void* p = NULL;
        if (!x->live && op <= 14) op = 0; /* a call on an empty slot makes its tensor */
        switch (op) {
        case 0: /* create (a slot in use is destroyed first, when it may be) */
            if (x->live && x->acq) break;
            if (x->live) {
                FUZZ_ASSERT(gm_tensor_destroy(ctx, x->h) == GM_OK);
                x->old = x->h;
                x->live = 0;
            }
            x->n = arg & 1 ? (size_t)arg * 613 + 1 : ((size_t)arg % 64 + 1) * 4 * FT_KIB;
            r = gm_tensor_create(ctx, &x->h, x->n);
            FUZZ_ASSERT(ft_fair(r));
            if (r == GM_OK) {
                x->live = 1;
                x->seed = 0;
                x->acq = 0;
            }
            break;
        case 1: /* destroy: refused while acquired */
            if (!x->live) break;
            r = gm_tensor_destroy(ctx, x->h);
            if (x->acq) {
                FUZZ_ASSERT(r == GM_ERR_BAD_STATE);
                break;
            }
            FUZZ_ASSERT(r == GM_OK);
            x->old = x->h;
            x->live = 0;
            break;
        case 2: /* write it whole: acquired to overwrite or read-write, released written */
        case 3:
            if (!x->live) break;
            if (x->acq) s = st[x->si];
            r = gm_tensor_acquire_as(ctx, x->h, s, op == 2 ? GM_ACCESS_OVERWRITE : GM_ACCESS_READ_WRITE, &p);
            FUZZ_ASSERT(ft_fair(r));
            if (r != GM_OK) break;
            if (op == 3 && x->seed) FUZZ_ASSERT(ft_run(ctx, s, p, x->n, x->seed, 0) == GM_OK);
            x->seed = next_seed++;
            FUZZ_ASSERT(ft_run(ctx, s, p, x->n, x->seed, 1) == GM_OK);
            FUZZ_ASSERT(gm_tensor_release(ctx, x->h, s, arg & 2 ? GM_AS_ACQUIRED : 1) == GM_OK);
            break;
        case 4: /* read and check, released clean (read-write) or as acquired (read) */
        case 5:
            if (!x->live) break;
            if (x->acq) s = st[x->si];
            r = gm_tensor_acquire_as(ctx, x->h, s, op == 4 ? GM_ACCESS_READ_WRITE : GM_ACCESS_READ, &p);
            FUZZ_ASSERT(ft_fair(r));
            if (r != GM_OK) break;
            if (x->seed) FUZZ_ASSERT(ft_run(ctx, s, p, x->n, x->seed, 0) == GM_OK);
            FUZZ_ASSERT(gm_tensor_release(ctx, x->h, s, op == 4 ? 0 : GM_AS_ACQUIRED) == GM_OK);
            break;
        case 6: /* hold: acquired (read), kept */
            if (!x->live) break;
            if (x->acq) s = st[x->si];
            r = gm_tensor_acquire_as(ctx, x->h, s, GM_ACCESS_READ, &p);
            FUZZ_ASSERT(ft_fair(r));
            if (r != GM_OK) break;
            if (x->seed) FUZZ_ASSERT(ft_run(ctx, s, p, x->n, x->seed, 0) == GM_OK);
            x->si = x->acq ? x->si : (int)(arg & 1);
            x->acq++;
            break;
        case 7: /* let go of a hold (clean); with none, refused */
            if (!x->live) break;
            r = gm_tensor_release(ctx, x->h, st[x->acq ? x->si : (int)(arg & 1)], 0);
            if (!x->acq) {
                FUZZ_ASSERT(r == GM_ERR_BAD_STATE);
                break;
            }
            FUZZ_ASSERT(r == GM_OK);
            x->acq--;
            break;
        case 8: { /* acquired on the other stream while held there, or released in a batch beside a tensor
                     not acquired: refused, and nothing released */
            ft_tensor* y = &t[(data[pos + 1] + 1 + (arg >> 5)) % FT_N];
            gm_use u[2];
            if (!x->live || !x->acq) break;
            r = gm_tensor_acquire(ctx, x->h, st[!x->si], &p);
            FUZZ_ASSERT(r == GM_ERR_INVALID_STREAM);
            FUZZ_ASSERT(gm_tensor_release(ctx, x->h, st[!x->si], 0) == GM_ERR_INVALID_STREAM);
            if (!y->live || y->acq) break;
            u[0].tensor = x->h, u[0].access = GM_ACCESS_READ, u[0].ptr = NULL;
            u[1].tensor = y->h, u[1].access = GM_ACCESS_READ, u[1].ptr = NULL;
            FUZZ_ASSERT(gm_tensor_release_many(ctx, u, 2, st[x->si]) == GM_ERR_BAD_STATE);
            break;
        }
        case 9:
            if (!x->live) break;
            FUZZ_ASSERT(ft_fair(gm_tensor_prefetch(ctx, x->h, x->acq ? st[x->si] : s)));
            break;
        case 10: /* evicted (to a tier): refused while acquired */
        case 11:
            if (!x->live) break;
            r = op == 10 ? gm_tensor_evict(ctx, x->h)
                         : gm_tensor_evict_to(ctx, x->h, arg & 2 ? GM_TIER_DISK : GM_TIER_HOST);
            if (x->acq) FUZZ_ASSERT(r == GM_ERR_BAD_STATE);
            else FUZZ_ASSERT(ft_fair(r) || r == GM_ERR_UNSUPPORTED); /* no disk tier */
            break;
        case 12: /* priority, pinned or not */
            if (!x->live) break;
            FUZZ_ASSERT(gm_tensor_set_priority(ctx, x->h, (int)(arg % 5) - 2, (arg >> 3) & 1) == GM_OK);
            break;
        case 13: /* a discard: the bytes go */
            if (!x->live) break;
            if (x->acq) s = st[x->si];
            r = gm_tensor_acquire_as(ctx, x->h, s, GM_ACCESS_READ_LAST, &p);
            FUZZ_ASSERT(ft_fair(r));
            if (r != GM_OK) break;
            FUZZ_ASSERT(gm_tensor_release(ctx, x->h, s, arg & 2 ? GM_AS_ACQUIRED : GM_DISCARD) == GM_OK);
            x->seed = 0; /* none to check until written again */
            break;
        case 14: { /* a batch: x overwritten, another slot read (a tensor twice is a nest; one held on
                      the other stream makes the whole batch a misuse) */
            ft_tensor* y = &t[(data[pos + 1] + 1 + (arg >> 5)) % FT_N];
            gm_use u[2];
            size_t nu = 1;
            if (!x->live || x->acq) break;
            u[0].tensor = x->h, u[0].access = GM_ACCESS_OVERWRITE, u[0].ptr = NULL;
            if (y->live) u[1].tensor = y->h, u[1].access = GM_ACCESS_READ, u[1].ptr = NULL, nu = 2;
            r = gm_tensor_acquire_many(ctx, u, nu, s);
            if (nu == 2 && y->acq && y->si != (int)(arg & 1)) {
                FUZZ_ASSERT(r == GM_ERR_INVALID_STREAM && !u[0].ptr && !u[1].ptr);
                break;
            }
            FUZZ_ASSERT(ft_fair(r));
            if (r != GM_OK) {
                FUZZ_ASSERT(!u[0].ptr && (nu < 2 || !u[1].ptr)); /* a failed batch acquires none */
                break;
            }
            if (nu == 2 && y->seed && y != x) FUZZ_ASSERT(ft_run(ctx, s, u[1].ptr, y->n, y->seed, 0) == GM_OK);
            x->seed = next_seed++;
            FUZZ_ASSERT(ft_run(ctx, s, u[0].ptr, x->n, x->seed, 1) == GM_OK);
            FUZZ_ASSERT(gm_tensor_release_many(ctx, u, nu, s) == GM_OK);
            break;
        }
        case 15: /* the end of a step; or (by the slot byte's high bits) a new device budget, the cache
                    emptied, the peaks reset */
            switch ((data[pos + 1] >> 3) & 3) {
            case 1:
                FUZZ_ASSERT(gm_set_budget(ctx, dev_budget[arg & 3]) == GM_OK);
                break;
            case 2:
                FUZZ_ASSERT(gm_empty_cache(ctx) == GM_OK);
                break;
            case 3:
                FUZZ_ASSERT(gm_tier_reset_peaks(ctx) == GM_OK);
                break;
            default:
                FUZZ_ASSERT(ft_fair(gm_tier_step(ctx)));
            }
            break;
        case 16: /* a phase, or one that does not exist */
            r = gm_tier_set_phase(ctx, (int)(arg % (GM_TIER_PHASES + 2)) - 1);
            if ((int)(arg % (GM_TIER_PHASES + 2)) - 1 < 0 || (int)(arg % (GM_TIER_PHASES + 2)) - 1 >= GM_TIER_PHASES)
                FUZZ_ASSERT(r == GM_ERR_INVALID_ARGUMENT);
            else
                FUZZ_ASSERT(ft_fair(r));
            break;
        case 17: /* the policy: LRU, learned order, or a custom choice */
            victim_arg = arg >> 3;
            if (arg % 3 == 2)
                FUZZ_ASSERT(gm_tier_set_policy(ctx, GM_EVICT_CUSTOM, (int)(arg >> 1) % 4, ft_victim, &victim_arg) == GM_OK);
            else
                FUZZ_ASSERT(gm_tier_set_policy(ctx, arg % 3 ? GM_EVICT_LEARNED : GM_EVICT_LRU, (int)(arg >> 1) % 4, NULL,
                                               NULL) == GM_OK);
            break;
        case 18: /* a fault, the nth of its kind from now (0: disarmed) */
            if ((faults[arg % 7] >= GM_SIM_FAULT_DISK_WRITE) && !disk) break;
            FUZZ_ASSERT(gm_sim_inject(ctx, faults[arg % 7], (uint64_t)(arg >> 3) % 6) == GM_OK);
            break;
        case 19: { /* a stale handle, one of another context, or {0}: refused by every call */
            gm_tensor h = x->old;
            if (arg % 3 == 1 && x->live) h = x->h, h.ctx_id ^= 1u + (arg >> 2);
            if (arg % 3 == 2) h.id = h.ctx_id = 0;
            if (!h.id && arg % 3 != 2) break;
            FUZZ_ASSERT(gm_tensor_acquire(ctx, h, s, &p) == GM_ERR_STALE_HANDLE);
            FUZZ_ASSERT(gm_tensor_release(ctx, h, s, 1) == GM_ERR_STALE_HANDLE);
            FUZZ_ASSERT(gm_tensor_destroy(ctx, h) == GM_ERR_STALE_HANDLE);
            FUZZ_ASSERT(gm_tensor_evict(ctx, h) == GM_ERR_STALE_HANDLE);
            FUZZ_ASSERT(gm_tensor_prefetch(ctx, h, s) == GM_ERR_STALE_HANDLE);
            FUZZ_ASSERT(gm_tensor_set_priority(ctx, h, 1, 1) == GM_ERR_STALE_HANDLE);
            break;
        }
        }
        ft_check(ctx, t, st);
    }
    /* faults disarmed, holds let go: everything reads back */
    {
        gm_sim_fault k;
        for (k = GM_SIM_FAULT_DEVICE_ALLOC; k <= GM_SIM_FAULT_DISK_FULL; k = (gm_sim_fault)(k + 1))
            FUZZ_ASSERT(gm_sim_inject(ctx, k, 0) == GM_OK);
    }
    for (i = 0; i < FT_N; i++)
        for (; t[i].live && t[i].acq; t[i].acq--) FUZZ_ASSERT(gm_tensor_release(ctx, t[i].h, st[t[i].si], 0) == GM_OK);
    for (i = 0; i < FT_N; i++) {
        void* p;
        gm_result r;
        if (!t[i].live || !t[i].seed) continue;
        r = gm_tensor_acquire_as(ctx, t[i].h, st[i & 1], GM_ACCESS_READ, &p);
        FUZZ_ASSERT(r == GM_OK || r == GM_ERR_OUT_OF_MEMORY); /* all eight may not fit beside each other's room */
        if (r != GM_OK) continue;
        FUZZ_ASSERT(ft_run(ctx, st[i & 1], p, t[i].n, t[i].seed, 0) == GM_OK);
        FUZZ_ASSERT(gm_tensor_release(ctx, t[i].h, st[i & 1], GM_AS_ACQUIRED) == GM_OK);
        ft_check(ctx, t, st);
    }
    for (i = 0; i < FT_N; i++)
        if (t[i].live) FUZZ_ASSERT(gm_tensor_destroy(ctx, t[i].h) == GM_OK);
    FUZZ_ASSERT(gm_check(ctx) == 0);
    FUZZ_ASSERT(gm_stream_destroy(ctx, st[1]) == GM_OK);
    FUZZ_ASSERT(gm_shutdown(ctx) == GM_OK);
    return 0;
}
