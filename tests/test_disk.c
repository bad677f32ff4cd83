/* The disk tier: round trips of many sizes through device, host and disk,
   checked byte for byte, with io_uring and with pread/pwrite; host copies
   demoted to disk when the host tier is full; faults at each step of a
   transfer (failing, short and out-of-space writes, failing and short
   reads, a byte flipped in the file) giving the right error and losing
   nothing; the spill file hidden, mode 0600 and gone at shutdown; the
   spill budget; every tier full, a tensor on disk swapped in for a
   device victim; host budgets of whole pages and not; the randomized differential walk with most tensors on
   disk; CRC32C against known values. Sim only (the kernels read device
   memory from the host). The spill directory is made under
   $GM_TEST_DISK_DIR (default /var/tmp) and must be empty at the end. */
#include "gm_tier_test.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__) /* several times slower again: shorter walks */
#define WALK_STEPS 600
#define BIG_MAX (512 * KiB)
#define HUGE (16 * MiB)
#elif defined(__SANITIZE_ADDRESS__)
#define WALK_STEPS 1500
#define BIG_MAX (512 * KiB)
#define HUGE (16 * MiB)
#else
#define WALK_STEPS 5000
#define BIG_MAX (2 * MiB)
#define HUGE (64 * MiB)
#endif

static char dir[512];

static gm_context* disk_ctx(size_t dev, size_t host, size_t disk, gm_disk_io io, gm_toggle crc) {
    gm_desc d = t_desc();
    d.device_budget = dev;
    d.host_budget = host;
    d.disk_dir = dir;
    d.disk_budget = disk;
    d.disk_io = io;
    d.disk_checksum = crc;
    return t_setup(d);
}

/* The spill file's descriptor, found through /proc: -1 if there is none. */
static int spill_fd(char* link, size_t cap) {
    DIR* d = opendir("/proc/self/fd");
    struct dirent* e;
    int found = -1;
    size_t n = strlen(dir);
    while (d && (e = readdir(d)) != NULL) {
        char path[600], target[600];
        ssize_t k;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        k = readlink(path, target, sizeof target - 1);
        if (k <= 0) continue;
        target[k] = 0;
        if (strncmp(target, dir, n) == 0 && target[n] == '/') {
            found = atoi(e->d_name);
            if (link) snprintf(link, cap, "%s", target);
        }
    }
    if (d) closedir(d);
    return found;
}

static int dir_entries(void) {
    DIR* d = opendir(dir);
    struct dirent* e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

/* Without GPUMEM_URING a request for io_uring is served by pread/pwrite. */
#ifdef GPUMEM_URING
static const int t_uring_built = 1;
#else
static const int t_uring_built = 0;
#endif
static const char* io_name(gm_disk_io io) {
    return io == GM_DISK_IO_PREAD ? "pread" : t_uring_built ? "io_uring" : "io_uring asked, not built: pread";
}

/* One size through every path: device -> host -> disk (written from the
   host copy), disk -> device, device -> disk straight (written from the
   device through staging), disk -> device, each read checked byte for
   byte; then a clean trip (the disk copy is kept: no write). */
static void roundtrip(gm_context* ctx, size_t n, unsigned seed) {
    gm_tensor a;
    gm_tier_stats s0, s1;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, seed, NULL);
    T_OK(gm_tensor_evict(ctx, a));
    T_EQ(where(ctx, a), GM_TIER_HOST);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, seed, NULL);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    fill(ctx, a, n, seed + 1, NULL); /* written: the disk copy is stale */
    T_OK(gm_tier_get_stats(ctx, &s0));
    T_EQ(s0.disk_bytes, 0);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_EQ(where(ctx, a), GM_TIER_DISK);
    verify(ctx, a, n, seed + 1, NULL);
    T_OK(gm_tier_get_stats(ctx, &s0));
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK)); /* clean: nothing written */
    T_OK(gm_tier_get_stats(ctx, &s1));
    T_EQ(s1.bytes_to_disk, s0.bytes_to_disk);
    verify(ctx, a, n, seed + 1, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
}

static void test_roundtrips(gm_disk_io io) {
    static const size_t sizes[] = {1, 4095, 4096, 4097, MiB + 1, 3 * MiB + 5, HUGE};
    gm_context* ctx = disk_ctx(HUGE + 16 * MiB, HUGE + 16 * MiB, 0, io, GM_TOGGLE_DEFAULT);
    gm_tier_stats ts;
    size_t i;
    t_every_byte = 1;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) roundtrip(ctx, sizes[i], (unsigned)(i * 7 + 3));
    t_every_byte = 0;
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.disk_errors, 0);
    T_EQ(ts.checksum_failures, 0);
    T_CHECK(ts.bytes_to_disk > 2 * (int64_t)HUGE && ts.bytes_from_disk > 2 * (int64_t)HUGE);
    T_CHECK(ts.disk_reserved >= (int64_t)HUGE);
    T_CHECK(ts.disk_ios > 4 * (int64_t)(HUGE / MiB));
    printf("%s: %lld chunk I/Os, mean queue depth %.1f, %.0f MB/s written, %.0f MB/s read\n", io_name(io),
           (long long)ts.disk_ios, (double)ts.disk_depth_sum / (double)ts.disk_ios,
           (double)ts.bytes_to_disk / (double)ts.disk_write_ns * 1e3,
           (double)ts.bytes_from_disk / (double)ts.disk_read_ns * 1e3);
    T_CHECK(ts.disk_depth_sum > 4 * ts.disk_ios); /* the queue was deep: the ring's, or pread's I/O threads' */
    T_OK(gm_shutdown(ctx));
}

/* The host tier full: device evictions push the coldest host copies to
   disk; every tensor reads back intact; create finds room on disk. */
/* A host copy in pieces with a disk chunk of 12 KiB (not a power of two):
   the pieces are whole multiples of it and of the page, so every chunk of
   the write from the pieces lies in one of them; the bytes come back from
   disk whole, and gm_check walks the pieces. */
static void test_host_pieces_disk(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a, b, c;
    gm_tier_stats ts;
    d.device_budget = 8 * MiB;
    d.host_budget = 4 * MiB; /* pieces of 1/16 of it, in whole 12 KiB chunks: 258048 bytes */
    d.disk_dir = dir;
    d.disk_chunk = 12 * KiB;
    if (!(ctx = t_setup(d))) return;
    T_EQ(gm_query_desc(ctx).disk_chunk, 12 * KiB);
    T_OK(gm_tensor_create(ctx, &a, 3 * MiB / 2));
    T_OK(gm_tensor_create(ctx, &b, 3 * MiB / 2));
    T_OK(gm_tensor_create(ctx, &c, 2 * MiB + 3));
    fill(ctx, a, 3 * MiB / 2, 71, NULL);
    fill(ctx, b, 3 * MiB / 2, 72, NULL);
    fill(ctx, c, 2 * MiB + 3, 73, NULL);
    T_OK(gm_tensor_evict(ctx, a)); /* the host pool: a, b, then 1 MiB free */
    T_OK(gm_tensor_evict(ctx, b));
    T_OK(gm_tensor_destroy(ctx, a)); /* 1.5 MiB free before b, 1 MiB after: c needs both */
    T_OK(gm_tensor_evict(ctx, c));
    T_EQ(where(ctx, c), GM_TIER_HOST);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_scattered, 1);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_evict_to(ctx, c, GM_TIER_DISK)); /* written from its pieces, chunk by chunk */
    T_EQ(where(ctx, c), GM_TIER_DISK);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, c, 2 * MiB + 3, 73, NULL);
    verify(ctx, b, 3 * MiB / 2, 72, NULL);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.checksum_failures, 0);
    T_EQ(ts.disk_errors, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_tensor_destroy(ctx, c));
    T_OK(gm_shutdown(ctx));
}

/* A file system whose direct I/O asks for 64 KiB (as one may report
   through statx; here the disk's alignment is set so before any I/O): a
   copy's last chunk goes to and from the file in whole 64 KiB, so host
   copies are made of whole 64 KiB too. Before, a 10 KiB copy was 12 KiB
   of the pool and a read ahead into it wrote 64 KiB: over the host copy
   after it. c and then b take the host pool's first 12 KiB blocks, c goes,
   and a is read ahead into c's place, just before b. */
static void test_disk_align_host(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__disk* dk;
    gm_tensor a, b, c, full;
    gm_tier_stats ts;
    void* p;
    const size_t n = 10 * KiB + 3;
    d.device_budget = 8 * MiB;
    d.host_budget = 4 * MiB;
    d.disk_dir = dir;
    d.disk_chunk = 64 * KiB;
    if (!(ctx = t_setup(d))) return;
    dk = (gm__disk*)ctx->disk;
    T_EQ(dk->reserved, 0); /* no extent yet: the alignment may change */
    dk->align = 64 * KiB;
    dk->budget -= dk->budget % dk->align;
    T_OK(gm_tensor_create(ctx, &a, n));
    T_OK(gm_tensor_create(ctx, &b, n));
    T_OK(gm_tensor_create(ctx, &c, n));
    fill(ctx, a, n, 81, NULL);
    fill(ctx, b, n, 82, NULL);
    fill(ctx, c, n, 83, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_OK(gm_tensor_evict(ctx, c));
    T_OK(gm_tensor_evict(ctx, b));
    T_EQ(where(ctx, b), GM_TIER_HOST);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, c));
    T_OK(gm_tensor_create(ctx, &full, 8 * MiB)); /* the device held whole: a prefetch reads ahead into the host */
    T_OK(gm_tensor_acquire_as(ctx, full, NULL, GM_ACCESS_OVERWRITE, &p));
    T_OK(gm_tensor_prefetch(ctx, a, NULL));
    T_OK(gm_tensor_release(ctx, full, NULL, 0));
    T_OK(gm_tensor_destroy(ctx, full));
    T_EQ(gm_check(ctx), 0);
    t_every_byte = 1;
    verify(ctx, a, n, 81, NULL); /* waits for the read ahead, which has landed in the host tier then */
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.bytes_from_disk >= (int64_t)n);
    T_EQ(ts.bytes_to_host, 2 * (int64_t)n); /* c and b only: a came up from disk through the host tier */
    verify(ctx, b, n, 82, NULL);
    t_every_byte = 0;
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_shutdown(ctx));
}

static void test_demotion(void) {
    gm_context* ctx = disk_ctx(8 * MiB, 8 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[48];
    gm_tier_stats ts;
    int i, on_disk = 0;
    for (i = 0; i < 48; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB - 100 * (size_t)i));
        fill(ctx, t[i], MiB - 100 * (size_t)i, (unsigned)i + 1, NULL);
        T_EQ(gm_check(ctx), 0);
    }
    for (i = 0; i < 48; i++) on_disk += where(ctx, t[i]) == GM_TIER_DISK;
    T_CHECK(on_disk >= 30);
    T_EQ(where(ctx, t[0]), GM_TIER_DISK); /* the coldest went first */
    T_EQ(where(ctx, t[47]), GM_TIER_DEVICE);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.host_demotions >= 30);
    T_EQ(ts.tensors, 48);
    for (i = 0; i < 48; i++) verify(ctx, t[i], MiB - 100 * (size_t)i, (unsigned)i + 1, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    { /* device and host full of acquired tensors: a new one starts on disk */
        void* p[16];
        gm_tensor c;
        int k;
        for (k = 0; k < 7; k++) T_OK(gm_tensor_acquire(ctx, t[k], NULL, &p[k]));
        T_OK(gm_tensor_create(ctx, &c, 4 * MiB));
        T_CHECK(where(ctx, c) != GM_TIER_NONE);
        for (k = 0; k < 7; k++) T_OK(gm_tensor_release(ctx, t[k], NULL, 0));
        fill(ctx, c, 4 * MiB, 99, NULL);
        T_OK(gm_tensor_evict_to(ctx, c, GM_TIER_DISK));
        verify(ctx, c, 4 * MiB, 99, NULL);
        T_OK(gm_tensor_destroy(ctx, c));
    }
    for (i = 0; i < 48; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.disk_bytes, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* host_budget at any value, with a disk tier below: budgets that are
   whole pages and budgets that are not (below one page too). The host
   pool takes whole pages up to the budget; tensors fill the device and
   host tiers and spill to disk; each step keeps gm_check at 0, and every
   byte reads back, in both orders and after a trip to disk. */
static int hb_info;
static void hb_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level == GM_LOG_INFO && strstr(msg, "host_budget 10486760") && strstr(msg, "10485760")) hb_info++;
    t_log(level, msg, NULL);
}

static void test_host_budget(void) {
    static const size_t budgets[] = {6 * MiB,   4096,      10 * MiB + 1000, 6 * MiB + 4095, 3 * MiB + 4097,
                                     3 * 4096 + 1, 5000, 4095, 1000, 1};
    size_t k;
    t_every_byte = 1;
    for (k = 0; k < sizeof budgets / sizeof budgets[0]; k++) {
        const size_t budget = budgets[k], pages = budget < 4096 ? 4096 : budget - budget % 4096;
        gm_context* ctx = disk_ctx(4 * MiB, budget, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm_tensor t[64];
        size_t sz[64], total = 0;
        gm_tier_stats ts;
        int n = 0, i, on_host = 0, on_disk = 0, bad = 0, fails = t_fail;
        T_EQ(gm_query_desc(ctx).host_budget, pages);
        while (n < 64 && total < 4 * MiB + pages + 6 * MiB) { /* past the device and the host: some spill */
            sz[n] = n % 3 == 2 ? (size_t)n * 97 % 6000 + 1 : 300 * KiB + (size_t)n * 1111 + 1; /* small ones fit a small pool */
            if (!T_OK(gm_tensor_create(ctx, &t[n], sz[n]))) break;
            fill(ctx, t[n], sz[n], (unsigned)n + 1, NULL);
            total += sz[n++];
            bad += gm_check(ctx) != 0;
        }
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_CHECK(ts.host_reserved <= (int64_t)pages);
        T_CHECK(ts.host_bytes <= (int64_t)pages);
        T_CHECK(ts.disk_bytes > 0);
        for (i = 0; i < n; i++) on_host += where(ctx, t[i]) == GM_TIER_HOST, on_disk += where(ctx, t[i]) == GM_TIER_DISK;
        T_CHECK(on_disk > 0);
        if (pages >= 2 * MiB) T_CHECK(on_host > 0);
        if (pages) T_CHECK(ts.bytes_to_host > 0);
        else T_EQ(ts.bytes_to_host, 0);
        for (i = 0; i < n; i++) {
            verify(ctx, t[i], sz[i], (unsigned)i + 1, NULL);
            bad += gm_check(ctx) != 0;
        }
        for (i = n - 1; i >= 0; i--) {
            verify(ctx, t[i], sz[i], (unsigned)i + 1, NULL);
            bad += gm_check(ctx) != 0;
        }
        for (i = 0; i < n; i += 3) {
            T_OK(gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK));
            bad += gm_check(ctx) != 0;
        }
        for (i = 0; i < n; i++) {
            verify(ctx, t[i], sz[i], (unsigned)i + 1, NULL);
            bad += gm_check(ctx) != 0;
        }
        T_EQ(errors_now(ctx), 0);
        T_EQ(bad, 0);
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_CHECK(ts.host_reserved <= (int64_t)pages);
        for (i = 0; i < n; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_shutdown(ctx));
        if (t_fail != fails) printf("(with host_budget %zu)\n", budget);
    }
    t_every_byte = 0;
    { /* the rounding is said once, at info */
        gm_desc d = t_desc();
        gm_context* ctx;
        d.host_budget = 10 * MiB + 1000;
        d.log_fn = hb_log;
        d.log_level = GM_LOG_INFO;
        ctx = t_setup(d);
        T_EQ(hb_info, 1);
        T_EQ(gm_query_desc(ctx).host_budget, 10 * MiB);
        T_OK(gm_shutdown(ctx));
        T_EQ(hb_info, 1);
    }
    { /* below one page: one page, never 0 (which a second resolve would read as the 4 GiB default) */
        gm_desc d = t_desc();
        gm_context* ctx;
        d.host_budget = 1000;
        ctx = t_setup(d);
        d = gm_query_desc(ctx);
        T_EQ(d.host_budget, 4096);
        T_OK(gm_shutdown(ctx));
        ctx = t_setup(d);
        T_EQ(gm_query_desc(ctx).host_budget, 4096);
        T_OK(gm_shutdown(ctx));
    }
}

/* Flips one byte of the spill file at `off` (through its /proc link). */
static void flip_byte(off_t off) {
    char link[600], path[64];
    unsigned char c;
    int fd = spill_fd(link, sizeof link), rw;
    T_CHECK(fd >= 0);
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rw = open(path, O_RDWR);
    T_CHECK(rw >= 0);
    T_EQ(pread(rw, &c, 1, off), 1);
    c ^= 0x20;
    T_EQ(pwrite(rw, &c, 1, off), 1);
    T_EQ(fsync(rw), 0);
    close(rw);
}

/* The io_uring ring reports itself broken as the first chunk of a write of
   64 completes (GM_SIM_FAULT_DISK_RING), with the rest still in flight:
   the disk tier stops, the write fails and its tensor stays where it was
   (in the host tier, whose copy the engine sends a queue of at once),
   and every I/O the kernel still held is reaped from the ring before its
   slot, or the memory it reads or writes, is anyone else's (before, they
   were all declared done at once, and their buffers could be reused while
   the kernel still wrote them). Later disk operations fail cleanly. */
static void test_ring_broken(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__disk* dk;
    gm_tensor a, b;
    void* p;
    const size_t n = 4 * MiB;
    int i, inflight = 1, drained = 0, at_break = 0;
    d.device_budget = 64 * MiB;
    d.host_budget = 64 * MiB;
    d.disk_dir = dir;
    d.disk_io = GM_DISK_IO_URING;
    d.disk_chunk = 64 * 1024;
    ctx = t_setup(d);
    dk = (gm__disk*)ctx->disk;
    if (!dk || !dk->uring) {
        printf("ring broken: skipped (no io_uring here)\n");
        T_OK(gm_shutdown(ctx));
        return;
    }
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 41, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_OK(gm_tensor_create(ctx, &b, n));
    fill(ctx, b, n, 42, NULL);
    T_OK(gm_tensor_evict(ctx, b)); /* from the host tier: the engine sends a whole queue before it reaps */
    t_log_count = 0;
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_RING, 1));
    T_EQ(gm_tensor_evict_to(ctx, b, GM_TIER_DISK), GM_ERR_IO);
    T_EQ(where(ctx, b), GM_TIER_HOST);
    T_CHECK(t_log_count > 0);
    for (i = 0; i < 5000 && inflight; i++) { /* the engine reaps what was in flight */
        pthread_mutex_lock(&dk->mu);
        inflight = dk->inflight;
        drained = dk->drained;
        at_break = dk->broken_inflight;
        pthread_mutex_unlock(&dk->mu);
        if (inflight) usleep(1000);
    }
    T_EQ(inflight, 0);
    T_CHECK(at_break >= 2); /* the write's other chunks were in flight as it broke */
    T_EQ(drained, at_break); /* each reaped, none declared done */
    printf("ring broken: %d I/Os in flight as it broke, %d reaped after\n", at_break, drained);
    T_EQ(gm_check(ctx), 0);
    T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_IO); /* the disk tier stopped: a stays there */
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_EQ(gm_tensor_evict_to(ctx, b, GM_TIER_DISK), GM_ERR_IO);
    verify(ctx, b, n, 42, NULL);
    T_OK(gm_tensor_evict(ctx, b)); /* the host tier still works */
    T_EQ(where(ctx, b), GM_TIER_HOST);
    verify(ctx, b, n, 42, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_faults(gm_disk_io io) {
    gm_context* ctx = disk_ctx(64 * MiB, 64 * MiB, 0, io, GM_TOGGLE_DEFAULT);
    gm_tensor a;
    gm_tier_stats ts;
    void* p;
    const size_t n = 5 * MiB + 123;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 41, NULL);
    /* a write that fails: from the device, then from the host copy */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 3));
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_IO);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 41, NULL);
    T_OK(gm_tensor_evict(ctx, a));
    T_EQ(where(ctx, a), GM_TIER_HOST);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1));
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_IO);
    T_EQ(where(ctx, a), GM_TIER_HOST);
    T_EQ(gm_check(ctx), 0);
    /* no space on the device of the file system */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_FULL, 2));
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_DISK_FULL);
    T_EQ(where(ctx, a), GM_TIER_HOST);
    verify(ctx, a, n, 41, NULL);
    T_EQ(gm_check(ctx), 0);
    /* a short write is resumed */
    fill(ctx, a, n, 42, NULL);
    T_OK(gm_tier_get_stats(ctx, &ts));
    {
        int64_t ios = ts.disk_ios;
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_SHORT, 2));
        T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_EQ(ts.disk_ios - ios, 7); /* six chunks, one of them in two parts */
    }
    T_EQ(where(ctx, a), GM_TIER_DISK);
    /* a read that fails leaves the disk copy: the retry succeeds */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_READ, 4));
    T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_IO);
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_SHORT, 1)); /* and a short read is resumed */
    verify(ctx, a, n, 42, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    /* a byte flipped on disk: a checksum error naming the tensor, and the
       tensor stays on disk; put back, it reads fine */
    flip_byte(4096 + 17);
    t_log_count = 0;
    T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_CHECKSUM);
    T_CHECK(t_log_count > 0 && strstr(t_last_log, "checksum") != NULL);
    {
        char id[32];
        snprintf(id, sizeof id, "%#x", a.id);
        T_CHECK(strstr(t_last_log, id) != NULL);
    }
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.checksum_failures, 1);
    T_EQ(gm_check(ctx), 0);
    flip_byte(4096 + 17);
    verify(ctx, a, n, 42, NULL);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.disk_errors, 5); /* two writes, no space, a read, the checksum */
    T_OK(gm_tensor_destroy(ctx, a));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* With checksums off a flipped byte goes unnoticed: the option is honest. */
static void test_checksum_off(void) {
    gm_context* ctx = disk_ctx(16 * MiB, 16 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_OFF);
    gm_tensor a;
    void* p;
    T_OK(gm_tensor_create(ctx, &a, 8192));
    fill(ctx, a, 8192, 5, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    flip_byte(0);
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* The spill file: not in the directory, mode 0600, no links, gone at
   shutdown. A directory that does not exist fails setup with GM_ERR_IO. */
static void test_file(void) {
    gm_context* ctx;
    char link[600];
    struct stat st;
    int fd, before = dir_entries();
    gm_desc d = t_desc();
    ctx = disk_ctx(16 * MiB, 16 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    fd = spill_fd(link, sizeof link);
    T_CHECK(fd >= 0);
    T_EQ(dir_entries(), before);
    T_CHECK(strstr(link, "(deleted)") != NULL);
    T_EQ(fstat(fd, &st), 0);
    T_EQ(st.st_mode & 0777, 0600);
    T_EQ(st.st_nlink, 0);
    T_EQ(st.st_uid, getuid());
    {
        gm_tensor a;
        T_OK(gm_tensor_create(ctx, &a, 100000));
        fill(ctx, a, 100000, 9, NULL);
        T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
        T_EQ(dir_entries(), before);
        T_OK(gm_tensor_destroy(ctx, a));
    }
    T_OK(gm_shutdown(ctx));
    T_EQ(spill_fd(NULL, 0), -1);
    T_EQ(dir_entries(), before);
    /* bad directories and options */
    d.disk_dir = "/nonexistent/gpumem-spill";
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.log_fn = t_log;
    ctx = NULL;
    T_EQ(gm_setup(&ctx, &d), GM_ERR_IO);
    T_CHECK(ctx == NULL && strstr(t_last_log, "/nonexistent/gpumem-spill") != NULL);
    {
        char conf[700];
        gm_desc q;
        d = t_desc();
        snprintf(conf, sizeof conf, "disk_dir:%s,disk_budget:64M,disk_io:pread,disk_depth:8,disk_chunk:256K,disk_checksum:off", dir);
        d.conf = conf;
        ctx = t_setup(d);
        q = gm_query_desc(ctx);
        T_CHECK(q.disk_dir && strcmp(q.disk_dir, dir) == 0);
        T_EQ(q.disk_budget, 64 * MiB);
        T_EQ(q.disk_io, GM_DISK_IO_PREAD);
        T_EQ(q.disk_depth, 8);
        T_EQ(q.disk_chunk, 256 * KiB);
        T_EQ(q.disk_checksum, GM_TOGGLE_OFF);
        roundtrip(ctx, 3 * MiB + 1, 77); /* 13 chunks through 8 slots */
        T_OK(gm_shutdown(ctx));
    }
}

/* The spill budget: past it, an honest error and the tensor stays; with
   device, host and disk all full, an honest out-of-memory. */
static void test_budget(void) {
    gm_context* ctx = disk_ctx(4 * MiB, 2 * MiB, 3 * MiB, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor a, b, t[8];
    gm_tier_stats ts;
    int i, made = 0;
    T_OK(gm_tensor_create(ctx, &a, 2 * MiB));
    fill(ctx, a, 2 * MiB, 3, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_OK(gm_tensor_create(ctx, &b, 2 * MiB));
    fill(ctx, b, 2 * MiB, 4, NULL);
    t_log_count = 0;
    T_EQ(gm_tensor_evict_to(ctx, b, GM_TIER_DISK), GM_ERR_DISK_FULL);
    T_EQ(t_log_count, 1); /* said, as a warning (before: an info line) */
    T_CHECK(strstr(t_last_log, "cannot go to disk") != NULL);
    T_EQ(where(ctx, b), GM_TIER_DEVICE);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.disk_reserved <= 3 * (int64_t)MiB);
    for (i = 0; i < 8; i++) {
        gm_result r = gm_tensor_create(ctx, &t[i], MiB);
        if (r != GM_OK) {
            T_EQ(r, GM_ERR_OUT_OF_MEMORY);
            break;
        }
        made++;
        fill(ctx, t[i], MiB, 10u + (unsigned)i, NULL);
        T_EQ(gm_check(ctx), 0);
    }
    T_CHECK(made >= 3 && made < 8);
    /* Every tier full: bringing a tensor back needs a victim with room
       below, so two go; then each comes back (the victims, read clean,
       keep their copies below and leave for free) and reads intact. */
    T_OK(gm_tensor_destroy(ctx, t[made - 1]));
    T_OK(gm_tensor_destroy(ctx, t[made - 2]));
    for (i = 0; i < made - 2; i++) verify(ctx, t[i], MiB, 10u + (unsigned)i, NULL);
    for (i = 0; i < made - 2; i++) T_OK(gm_tensor_destroy(ctx, t[i])); /* room for the 2 MiB pair */
    verify(ctx, a, 2 * MiB, 3, NULL);
    verify(ctx, b, 2 * MiB, 4, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx)); /* tensors left live are released with the context */
}

/* A disk budget below one unit of direct I/O holds nothing: setup says
   so (before: silently), and a tensor sent to disk stays where it was. */
static void test_budget_below_unit(void) {
    gm_context* ctx;
    gm_tensor a;
    t_log_count = 0;
    ctx = disk_ctx(4 * MiB, 2 * MiB, 1, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    T_CHECK(t_log_count >= 1 && strstr(t_last_log, "can hold nothing") != NULL);
    T_OK(gm_tensor_create(ctx, &a, 64 * KiB));
    fill(ctx, a, 64 * KiB, 7, NULL);
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_DISK_FULL);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    verify(ctx, a, 64 * KiB, 7, NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* The differential walk with a host tier far smaller than the tensors:
   most of them end up on disk. */
static void test_walk(long steps, gm_disk_io io, size_t dev, size_t host) {
    gm_context* ctx = disk_ctx(dev, host, 0, io, GM_TOGGLE_DEFAULT);
    gm_tier_stats ts = t_walk(ctx, steps, BIG_MAX, 1);
    T_CHECK(ts.bytes_to_disk > 0 && ts.bytes_from_disk > 0 && ts.host_demotions > 0);
    T_EQ(ts.disk_errors, 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.tensors, 0);
    T_OK(gm_shutdown(ctx));
}

/* A walk with every tier full of tensors of one size (device, host and
   spill file eight each): reads and writes, in any order, always succeed,
   tensors in the host tier or on disk coming back by swaps, gm_check after
   every step, every byte checked. */
static void test_full_walk(long steps) {
    enum { N = 24 };
    const size_t sz = 256 * KiB;
    gm_context* ctx = disk_ctx(8 * sz, 8 * sz, 8 * sz, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[N];
    unsigned seed[N];
    gm_tier_stats ts;
    long step;
    int i, bad = 0;
    for (i = 0; i < N; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], sz));
        seed[i] = 500u + (unsigned)i;
        fill(ctx, t[i], sz, seed[i], NULL);
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.device_bytes + ts.host_bytes + ts.disk_bytes, (int64_t)(N * sz));
    for (step = 0; step < steps && bad < 5; step++) {
        unsigned long long r = t_rand();
        int k = (int)(r % N);
        unsigned op = (unsigned)((r >> 8) % 10);
        gm_result res = GM_OK;
        if (op < 5) verify(ctx, t[k], sz, seed[k], NULL);
        else if (op < 8) fill(ctx, t[k], sz, seed[k] = (unsigned)(r >> 32) | 1, NULL);
        else if (op < 9) res = gm_tensor_prefetch(ctx, t[k], NULL);
        else res = gm_tensor_evict(ctx, t[k]);
        if (res != GM_OK && res != GM_ERR_OUT_OF_MEMORY && res != GM_ERR_HOST_OUT_OF_MEMORY && res != GM_ERR_DISK_FULL &&
            bad++ < 5) /* an eviction may find no room below */
            printf("full walk step %ld: op %u: %s\n", step, op, gm_result_string(res));
        if (gm_check(ctx) != 0 && bad++ < 5) printf("full walk step %ld: gm_check failed\n", step);
    }
    T_EQ(bad, 0);
    for (i = 0; i < N; i++) verify(ctx, t[i], sz, seed[i], NULL);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.swaps > 0 && ts.bytes_from_disk > 0);
    T_EQ(ts.disk_errors, 0);
    printf("full tiers walk: %ld steps, %lld swaps, MiB from disk %.1f, to disk %.1f\n", steps, (long long)ts.swaps,
           (double)ts.bytes_from_disk / (double)MiB, (double)ts.bytes_to_disk / (double)MiB);
    for (i = 0; i < N; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* Bytes on disk at the end of the walk, before the tensors go: most. */
static void test_walk_mostly_disk(void) {
    gm_context* ctx = disk_ctx(8 * MiB, 8 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[200];
    gm_tier_stats ts;
    int i;
    for (i = 0; i < 200; i++) {
        size_t n = (size_t)(t_rand() % (512 * KiB)) + 1;
        T_OK(gm_tensor_create(ctx, &t[i], n));
        fill(ctx, t[i], n, (unsigned)i + 1, NULL);
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.disk_bytes > ts.host_bytes + ts.device_bytes);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_crc(void) {
    static unsigned char buf[(1 << 20) + 3 * 4096 + 64];
    /* lengths around the hardware path's block of three lanes (3 x GM__CRC_LANE) */
    static const size_t edge[] = {0, 1, 7, 8, 4095, 4096, 12287, 12288, 12289, 12295, 24576, 24583, 36863, 1 << 20,
                                  (1 << 20) + 3 * 4096 + 1};
    size_t i;
    T_EQ(gm__crc32c(0, "123456789", 9), 0xE3069283u); /* the check value */
    T_EQ(gm__crc32c(0, "", 0), 0);
    for (i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(t_rand() >> 24);
    for (i = 0; i < sizeof edge / sizeof edge[0]; i++) { /* hardware (if any) == tables at each edge, any alignment */
        size_t off = i % 8;
        T_EQ(gm__crc32c(0, buf + off, edge[i]), ~gm__crc32c_sw(~0u, buf + off, edge[i]));
        T_EQ(gm__crc32c(0x5bd1e995u, buf + off, edge[i]), ~gm__crc32c_sw(~0x5bd1e995u, buf + off, edge[i]));
    }
    for (i = 0; i < 40; i++) { /* hardware (if any) == tables, at any alignment and split */
        size_t off = (size_t)(t_rand() % 64), len = (size_t)(t_rand() % (i < 20 ? 60000 : 1 << 20)),
               cut = len ? (size_t)(t_rand() % len) : 0;
        uint32_t whole = ~gm__crc32c_sw(~0u, buf + off, len);
        T_EQ(gm__crc32c(0, buf + off, len), whole);
        T_EQ(gm__crc32c(gm__crc32c(0, buf + off, cut), buf + off + cut, len - cut), whole);
        /* and two halves checked apart, combined (chunks read out of order) */
        T_EQ(gm__crc32c_combine(gm__crc32c(0, buf + off, cut), gm__crc32c(0, buf + off + cut, len - cut), len - cut), whole);
    }
}

/* The index of a tensor of t[0..n) on disk, or -1. */
static int on_disk_of(gm_context* ctx, const gm_tensor* t, int n) {
    int i, k = -1;
    for (i = 0; i < n; i++)
        if (where(ctx, t[i]) == GM_TIER_DISK) k = i;
    return k;
}

/* A swap with disk of tensors of two chunks whose second chunk's write
   fails, and whose first chunk then cannot be traded back (its write
   fails too): the victim's device copy holds part of the other tensor's
   bytes, and the other's extent part of the victim's. Both are marked
   lost: an acquire that reads refuses them with GM_ERR_IO (before, it
   handed out the mixed bytes as if whole), the others read as before, and
   an acquire that overwrites makes each whole again. */
static void test_swap_lost(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t[4];
    gm_tensor_info info;
    unsigned seed[4];
    int i, k, lost = 0, victim = -1;
    void* p;
    d.device_budget = 8 * MiB;
    d.host_budget = 4 * MiB;
    d.disk_dir = dir;
    d.disk_budget = 4 * MiB;
    d.disk_chunk = 2 * MiB; /* a swap's half: one I/O */
    ctx = t_setup(d);
    t_every_byte = 1;
    for (i = 0; i < 4; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 4 * MiB));
        seed[i] = 70u + (unsigned)i;
        fill(ctx, t[i], 4 * MiB, seed[i], NULL);
    }
    k = on_disk_of(ctx, t, 4);
    T_CHECK(k >= 0);
    if (k < 0) {
        T_OK(gm_shutdown(ctx));
        return;
    }
    /* writes: the first chunk's goes, the second's fails (EIO), x's second chunk goes back;
       then the first chunk's trade back fails (ENOSPC), and its chunk goes back */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 2));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_FULL, 3)); /* counted on writes the first let through */
    T_CHECK(gm_tensor_acquire(ctx, t[k], NULL, &p) != GM_OK);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 0));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_FULL, 0));
    T_CHECK(strstr(t_last_log, "lost") != NULL);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 4; i++) {
        T_OK(gm_tensor_get_info(ctx, t[i], &info));
        lost += info.lost;
        if (info.lost && i != k) victim = i;
    }
    T_EQ(lost, 2);
    T_CHECK(victim >= 0);
    T_OK(gm_tensor_get_info(ctx, t[k], &info));
    T_EQ(info.lost, 1);
    T_EQ(where(ctx, t[k]), GM_TIER_DISK);
    if (victim >= 0) T_EQ(where(ctx, t[victim]), GM_TIER_DEVICE);
    for (i = 0; i < 4; i++) {
        if (i == k || i == victim) {
            t_log_count = 0;
            T_EQ(gm_tensor_acquire(ctx, t[i], NULL, &p), GM_ERR_IO);
            T_CHECK(t_log_count > 0 && strstr(t_last_log, "lost") != NULL);
            T_EQ(gm_tensor_acquire_as(ctx, t[i], NULL, GM_ACCESS_READ, &p), GM_ERR_IO);
        } else {
            verify(ctx, t[i], 4 * MiB, seed[i], NULL);
        }
        T_EQ(gm_check(ctx), 0);
    }
    for (i = 0; i < 4; i++) /* overwritten: whole again */
        if (i == k || i == victim) {
            seed[i] += 100u;
            if (T_OK(gm_tensor_acquire_as(ctx, t[i], NULL, GM_ACCESS_OVERWRITE, &p))) {
                T_OK(run(ctx, NULL, p, 4 * MiB, seed[i], 1));
                T_OK(gm_tensor_release(ctx, t[i], NULL, 1));
            }
            T_OK(gm_tensor_get_info(ctx, t[i], &info));
            T_EQ(info.lost, 0);
        }
    for (k = 0; k < 2; k++)
        for (i = 0; i < 4; i++) {
            verify(ctx, t[i], 4 * MiB, seed[i], NULL);
            T_EQ(gm_check(ctx), 0);
        }
    T_EQ(errors_now(ctx), 0); /* (before, the victim's first chunk read as the other's: 2 MiB wrong) */
    t_every_byte = 0;
    T_OK(gm_shutdown(ctx));
}

/* Every tier full, each holding whole tensors: a tensor on disk comes back
   by trading places with a device victim (the victim's bytes go into its
   extent), with nothing destroyed; every read is intact, round after
   round. A write that fails in the middle of such a swap, or a read that
   fails its checksum, leaves both tensors where they were, whole. */
static void test_full_swap(void) {
    gm_context* ctx = disk_ctx(2 * MiB, MiB, MiB, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[4];
    gm_tier_stats s0, s1;
    unsigned seed[4];
    int i, k, on_disk = -1;
    for (i = 0; i < 4; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        seed[i] = 40u + (unsigned)i;
        fill(ctx, t[i], MiB, seed[i], NULL);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &s0));
    T_EQ(s0.device_bytes + s0.host_bytes + s0.disk_bytes, (int64_t)(4 * MiB)); /* every tier full */
    t_log_count = 0; /* a swap is no failure: nothing is said at warn or above */
    for (k = 0; k < 3; k++)
        for (i = 0; i < 4; i++) {
            if (k == 2) {
                seed[i] += 100u;
                fill(ctx, t[i], MiB, seed[i], NULL); /* written again: the swap carries new bytes down */
            } else {
                verify(ctx, t[i], MiB, seed[i], NULL);
            }
            T_EQ(where(ctx, t[i]), GM_TIER_DEVICE);
            T_EQ(gm_check(ctx), 0);
        }
    T_EQ(t_log_count, 0);
    T_OK(gm_tier_get_stats(ctx, &s1));
    T_CHECK(s1.swaps > s0.swaps);
    T_CHECK(s1.bytes_from_disk > s0.bytes_from_disk && s1.bytes_to_disk > s0.bytes_to_disk);
    T_EQ(s1.disk_errors, 0);
    for (i = 0; i < 4; i++) verify(ctx, t[i], MiB, seed[i], NULL);
    /* a failing write in the swap: the acquire fails, nothing moves, nothing is lost */
    on_disk = on_disk_of(ctx, t, 4);
    T_CHECK(on_disk >= 0);
    if (on_disk >= 0) {
        void* p;
        gm_tier w[4];
        for (i = 0; i < 4; i++) w[i] = where(ctx, t[i]);
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1));
        T_EQ(gm_tensor_acquire(ctx, t[on_disk], NULL, &p), GM_ERR_IO);
        for (i = 0; i < 4; i++) T_EQ(where(ctx, t[i]), w[i]);
        T_EQ(gm_check(ctx), 0);
        for (i = 0; i < 4; i++) verify(ctx, t[(on_disk + i) % 4], MiB, seed[(on_disk + i) % 4], NULL);
    }
    /* the write fails and so does the write that puts the tensor's chunk back: said as an
       error (the bytes may be mixed), never as a clean failure */
    on_disk = on_disk_of(ctx, t, 4);
    if (on_disk >= 0) {
        void* p;
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1));
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_FULL, 1)); /* counted on writes the first let through */
        t_log_count = 0;
        T_CHECK(gm_tensor_acquire(ctx, t[on_disk], NULL, &p) != GM_OK);
        T_CHECK(strstr(t_last_log, "failed twice") != NULL);
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 0));
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_FULL, 0));
        T_EQ(gm_check(ctx), 0);
        /* the sim's injected failures are reported after the bytes moved: putting the chunk
           back did restore it, and every byte is where it was */
        for (i = 0; i < 4; i++) verify(ctx, t[(on_disk + i) % 4], MiB, seed[(on_disk + i) % 4], NULL);
    }
    /* a byte flipped in the file under the tensor on disk: the swap reads it, the checksum
       fails, every chunk is traded back, and the error names the tensor */
    on_disk = on_disk_of(ctx, t, 4);
    T_CHECK(on_disk >= 0);
    if (on_disk >= 0) {
        void* p;
        char id[32];
        T_OK(gm_tier_get_stats(ctx, &s0));
        flip_byte(4096 + 17);
        t_log_count = 0;
        T_EQ(gm_tensor_acquire(ctx, t[on_disk], NULL, &p), GM_ERR_CHECKSUM);
        snprintf(id, sizeof id, "%#x", t[on_disk].id);
        T_CHECK(t_log_count > 0 && strstr(t_last_log, "checksum") != NULL && strstr(t_last_log, id) != NULL);
        T_EQ(where(ctx, t[on_disk]), GM_TIER_DISK);
        T_OK(gm_tier_get_stats(ctx, &s1));
        T_EQ(s1.checksum_failures - s0.checksum_failures, 1);
        T_EQ(gm_check(ctx), 0);
        flip_byte(4096 + 17);
        for (i = 0; i < 4; i++) verify(ctx, t[(on_disk + i) % 4], MiB, seed[(on_disk + i) % 4], NULL);
    }
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 4; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* One use of tensor i: its bytes checked, then written anew. */
static void use_rw(gm_context* ctx, gm_tensor t, size_t n, unsigned* seed) {
    void* p;
    if (!T_OK(gm_tensor_acquire(ctx, t, NULL, &p))) return;
    if (*seed) T_OK(run(ctx, NULL, p, n, *seed, 0));
    T_OK(run(ctx, NULL, p, n, ++*seed, 1));
    T_OK(gm_tensor_release(ctx, t, NULL, 1));
}

/* Learned order tunes its plan's room (gpumem.h, >>tier: plan room): the
   plan counts on the device and host budgets, then on them less one, two
   and three of its largest tensors, three steps each, then keeps one of
   those for good; a step of other acquires starts again from the whole
   budgets, and so does a phase that moves nothing through the disk.
   Tensors of three sizes, forward then backward, each use checked. */
static void test_plan_room(size_t dev, size_t host, int moves) {
    enum { N = 14, STEPS = 20 };
    gm_context* ctx = disk_ctx(dev, host, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[N];
    size_t n[N], full = dev + host, big = 2 * MiB, kept = 0;
    unsigned seed[N];
    gm_tier_stats ts;
    int i, q, step;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < N; i++) {
        n[i] = (size_t)(2 + i % 3) * MiB / 2; /* 1, 1.5 and 2 MiB: 20.5 MiB in all */
        seed[i] = 0;
        T_OK(gm_tensor_create(ctx, &t[i], n[i]));
    }
    for (step = 0; step < STEPS + 2; step++) {
        size_t want;
        int other = step == STEPS; /* half the step: another plan */
        T_OK(gm_tier_get_stats(ctx, &ts));
        if (step == 0) want = 0; /* no plan yet */
        else if (!moves || step < 4 || step > STEPS) want = full;
        else if (step < 13) want = full - (size_t)((step - 1) / 3) * big; /* rooms 0, 1, 2, 3 in turn */
        else want = kept ? kept : (size_t)ts.plan_cache_bytes; /* one of them, kept */
        if (step == 13) {
            kept = (size_t)ts.plan_cache_bytes;
            T_CHECK(kept == full || kept == full - big || kept == full - 2 * big || kept == full - 3 * big);
        }
        if (!T_EQ(ts.plan_cache_bytes, (long long)want)) printf("  (plan room, step %d)\n", step);
        for (q = 0; q < (other ? N / 2 : 2 * N); q++) {
            i = q < N ? q : 2 * N - 1 - q;
            use_rw(ctx, t[i], n[i], &seed[i]);
        }
        T_OK(gm_tier_step(ctx));
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(moves ? ts.bytes_from_disk > 0 : ts.bytes_from_disk == 0);
    T_EQ(ts.disk_errors, 0);
    for (i = 0; i < N; i++) {
        verify(ctx, t[i], n[i], seed[i], NULL);
        T_OK(gm_tensor_destroy(ctx, t[i]));
    }
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Where the plan moves tensors from the device to the host tier (gpumem.h,
   gm__plan_dep), the room reads ahead from disk leave for them, against a
   scan of Belady's two runs: at each position, the tensors the device's
   run lets go there that the fast tiers' run keeps. Random steps of random
   lengths over tensors of mixed sizes, on a device holding about a
   quarter of them and a host tier an eighth; after each, the plan of the
   phase expected next. */
static void test_plan_dep(void) {
    enum { L = 40, STEPS = 30 };
    gm_context* ctx = disk_ctx(6 * MiB, 3 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[L];
    unsigned long long rs = 5;
    int i, k, moves = 0, differ = 0, plans = 0;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 0, NULL, NULL));
    t_plan_tensors(ctx, t, L, &rs);
    for (k = 0; k < STEPS; k++) {
        gm__tier* tm;
        t_plan_step(ctx, t, L, k, &rs);
        tm = gm__tier_of(ctx);
        gm__rmu_lock(&tm->mu);
        if (T_CHECK(tm->leaves != NULL && tm->dep != NULL)) {
            uint32_t n = tm->nplan, p, tt, u, at;
            uint32_t* g0 = (uint32_t*)malloc(n * sizeof *g0);
            uint32_t* g1 = (uint32_t*)malloc(n * sizeof *g1);
            t_belady_scan(tm, ctx->budget, NULL, g0);
            t_belady_scan(tm, tm->ph[tm->cur].tune.cap, NULL, g1);
            differ += tm->dep[0] != n + 2; /* the offsets, then the tensors */
            for (p = 0; p < n; p++) {
                at = tm->dep[p];
                for (tt = 0; tt < tm->n; tt++) /* by tensor, then use: the order it is built in */
                    for (u = tm->use_first[tt]; u < tm->use_first[tt + 1]; u++)
                        if (g0[u] == p && g1[u] == UINT32_MAX) {
                            differ += at >= tm->dep[p + 1] || tm->dep[at] != tt;
                            at++;
                            moves++;
                        }
                differ += at != tm->dep[p + 1];
            }
            plans++;
            free(g0), free(g1);
        }
        gm__rmu_unlock(&tm->mu);
        T_EQ(gm_check(ctx), 0);
    }
    printf("the plan's moves to the host tier against a scan: %d plans, %d moves, %d differ\n", plans, moves, differ);
    T_EQ(differ, 0);
    T_CHECK(moves > plans);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* Learned order: a written tensor that Belady's order sends to disk starts
   its write when it is released (gpumem.h, gm__rel_do), once its use
   completed, with no other call: its disk copy lands while it stays on the
   device, and its bytes are those the use wrote. A write that fails there
   leaves the tensor readable where it was. Six tensors of 1 MiB, forward
   then backward, on a device of 3 MiB and a host tier of 1 MiB: the first
   two of the forward pass are used farthest ahead, and leave. */
static void test_release_write(void) {
    enum { N = 6, STEPS = 3 };
    gm_context* ctx = disk_ctx(3 * MiB, 1 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[N];
    unsigned seed[N] = {0};
    gm_tier_stats ts;
    int i, q, step, landed = 0;
    long failed = 0;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 1, NULL, NULL));
    for (i = 0; i < N; i++) T_OK(gm_tensor_create(ctx, &t[i], MiB));
    for (step = 0; step < STEPS + 2; step++) {
        if (step == STEPS + 1) T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1)); /* the next write fails */
        for (q = 0; q < 2 * N; q++) {
            gm_tensor_info in;
            int k;
            memset(&in, 0, sizeof in);
            i = q < N ? q : 2 * N - 1 - q;
            use_rw(ctx, t[i], MiB, &seed[i]);
            if (step < STEPS || q > 1) continue;
            gm_device_synchronize(ctx); /* the use completed; no call but these two from now */
            for (k = 0; k < 2000; k++) { /* its write lands (finished jobs apply at every call) */
                T_OK(gm_tier_get_stats(ctx, &ts));
                T_OK(gm_tensor_get_info(ctx, t[i], &in));
                if (in.on_disk || ts.disk_errors > failed) break;
                usleep(1000);
            }
            if (in.on_disk) {
                landed++;
                T_EQ(in.tier, GM_TIER_DEVICE);
            }
            if (ts.disk_errors > failed) { /* the injected failure: nothing lost */
                failed = (long)ts.disk_errors;
                verify(ctx, t[i], MiB, seed[i], NULL);
            }
        }
        T_OK(gm_tier_step(ctx));
        T_EQ(gm_check(ctx), 0);
    }
    T_CHECK(landed >= 2);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.disk_errors, 1);
    for (i = 0; i < N; i++) { /* every tensor holds its last use's bytes, read back from disk too */
        T_OK(gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK));
        verify(ctx, t[i], MiB, seed[i], NULL);
        T_OK(gm_tensor_destroy(ctx, t[i]));
    }
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Learned order reads a tensor due soon straight from disk into the
   device when the host tier has no room for it (here: a host tier smaller
   than any tensor), so that its acquire finds it there: a prefetch hit.
   gm_check runs while those reads are under way; an injected read failure
   leaves the tensor on disk, to be read again when acquired; eviction to
   disk and destroy wait for a read still under way. */
static void test_read_into_device(void) {
    enum { N = 6, STEPS = 4 };
    gm_context* ctx = disk_ctx(3 * MiB, 512 * 1024, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[N];
    unsigned seed[N] = {0};
    gm_tier_stats ts;
    int i, step;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < N; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        use_rw(ctx, t[i], MiB, &seed[i]);
    }
    T_OK(gm_tier_step(ctx));
    for (step = 0; step < STEPS; step++) {
        if (step == STEPS - 1) T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_READ, 1)); /* the next chunk read fails */
        for (i = 0; i < N; i++) {
            verify(ctx, t[i], MiB, seed[i], NULL);
            T_EQ(gm_check(ctx), 0);
        }
        T_OK(gm_tier_step(ctx));
    }
    memset(&ts, 0, sizeof ts);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.prefetch_hits >= (int64_t)(STEPS - 1) * (N - 3)); /* with no host room, only reads into the device prefetch */
    T_CHECK(ts.host_bytes == 0 && ts.bytes_from_disk > 0);
    T_EQ(ts.disk_errors, 1);
    for (i = 0; i < N; i++) { /* reads under way for the next step's first tensors end first */
        T_OK(gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK));
        T_EQ(gm_check(ctx), 0);
        verify(ctx, t[i], MiB, seed[i], NULL);
    }
    T_OK(gm_tier_step(ctx));
    verify(ctx, t[0], MiB, seed[0], NULL);
    for (i = 0; i < N; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_EQ(gm_check(ctx), 0);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Learned order with the disk tier: t0 is used once a step, t1..t3 twice;
   the plan counts on 4 MiB (a 2 MiB device and a 2 MiB host tier) but a
   pinned tensor leaves the device room for one, so that one must be on
   disk. When t0 leaves the device for t1, which comes from the host tier
   with no room there, the two trade places (t0's bytes into t1's host
   block): the tiers keep what Belady's order over both keeps, and each
   step moves Belady's 2 MiB each way (t0 and t3 read and written once).
   Before the trade, t0 went around to disk (3 MiB each way: one for the
   copy in transit); before that, into the host tier, pushing out t2 or
   t3, used next (4). A write that fails in such a step loses nothing. */
static void test_write_around(void) {
    enum { STEPS = 16, LAST = 4 };
    static const int seq[] = {0, 1, 2, 3, 1, 2, 3};
    gm_context* ctx = disk_ctx(2 * MiB, 2 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    gm_tensor t[4], pin;
    unsigned seed[4] = {0}, pseed = 0;
    int i, step, kept = 0;
    gm_tier_stats s0, s1;
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 0, NULL, NULL));
    T_OK(gm_tensor_create(ctx, &pin, MiB));
    use_rw(ctx, pin, MiB, &pseed);
    T_OK(gm_tensor_set_priority(ctx, pin, 0, 1));
    for (i = 0; i < 4; i++) T_OK(gm_tensor_create(ctx, &t[i], MiB));
    for (step = 0; step < STEPS; step++) {
        if (step == STEPS - LAST) T_OK(gm_tier_get_stats(ctx, &s0));
        for (i = 0; i < (int)(sizeof seq / sizeof seq[0]); i++) {
            use_rw(ctx, t[seq[i]], MiB, &seed[seq[i]]);
            if (step >= STEPS - LAST && i == 1) kept += where(ctx, t[0]) == GM_TIER_HOST; /* t0 left for t1 */
            T_EQ(gm_check(ctx), 0);
        }
        T_OK(gm_tier_step(ctx));
    }
    T_OK(gm_tier_get_stats(ctx, &s1));
    T_EQ(kept, LAST);
    T_CHECK(s1.swaps - s0.swaps >= LAST);
    T_EQ(s1.plan_cache_bytes, (long long)(4 * MiB));
    if (!T_CHECK(s1.bytes_from_disk - s0.bytes_from_disk <= (int64_t)(2 * LAST * MiB) &&
                 s1.bytes_to_disk - s0.bytes_to_disk <= (int64_t)(2 * LAST * MiB)))
        printf("  (%lld bytes read, %lld written in %d steps)\n", (long long)(s1.bytes_from_disk - s0.bytes_from_disk),
               (long long)(s1.bytes_to_disk - s0.bytes_to_disk), LAST);
    T_EQ(s1.disk_errors, 0);
    /* the step's first write to disk fails: the tensor stays where it was, and every acquire finds room */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1));
    for (i = 0; i < (int)(sizeof seq / sizeof seq[0]); i++) {
        use_rw(ctx, t[seq[i]], MiB, &seed[seq[i]]);
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &s1));
    T_EQ(s1.disk_errors, 1);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 4; i++) {
        verify(ctx, t[i], MiB, seed[i], NULL);
        T_OK(gm_tensor_destroy(ctx, t[i]));
    }
    T_OK(gm_tensor_destroy(ctx, pin));
    T_EQ(gm_check(ctx), 0);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* One use of a tensor: its bytes checked, then, when it writes, written anew. */
static void use_t(gm_context* ctx, gm_tensor t, size_t n, unsigned* seed, int write) {
    void* p;
    if (!T_OK(gm_tensor_acquire(ctx, t, NULL, &p))) return;
    if (*seed) T_OK(run(ctx, NULL, p, n, *seed, 0));
    if (write) T_OK(run(ctx, NULL, p, n, ++*seed, 1));
    T_OK(gm_tensor_release(ctx, t, NULL, write));
}

/* Learned order with the disk tier, a transformer-shaped step (bench/spill's
   at 1/8 of its sizes: per block weights W, activations A kept for the
   backward pass, gradients G and optimizer moments M; 96 MiB in all) under
   a device budget of half of it and a host tier of a quarter. A tensor
   leaving the device goes to disk itself when any host copy that would
   leave for it, not only the first, is used sooner (Belady's order over the
   two tiers). Before, the first copy given up could be one the device also
   held (for free) and the next an activation used a few acquires later,
   written to disk and read back at once: 0.51-0.55 of the working set a
   step through the disk each way, 0.41 after (bench/spill at full size:
   724 and 632 MiB a step both ways together, of 768). Every byte checked. */
static void test_around_each(void) {
    enum { B = 6, STEPS = 24, LAST = 4 };
    size_t u = 128 * KiB, sz[4 * B], ws = 0;
    int seq[3 * 4 * B][2], nseq = 0, b, i, step;
    gm_tensor t[4 * B];
    unsigned seed[4 * B];
    gm_tier_stats s0, s1;
    gm_context* ctx;
    for (b = 0; b < B; b++) { /* W = 4b, A = 4b + 1, G = 4b + 2, M = 4b + 3 */
        sz[4 * b] = 24 * u, sz[4 * b + 1] = 32 * u, sz[4 * b + 2] = 24 * u, sz[4 * b + 3] = 48 * u;
        ws += 128 * u;
    }
#define T_USE(x, w) (seq[nseq][0] = (x), seq[nseq][1] = (w), nseq++)
    for (b = 0; b < B; b++) T_USE(4 * b, 0), T_USE(4 * b + 1, 1);
    for (b = B - 1; b >= 0; b--) T_USE(4 * b + 1, 0), T_USE(4 * b, 0), T_USE(4 * b + 2, 1);
    for (b = 0; b < B; b++) T_USE(4 * b + 2, 0), T_USE(4 * b + 3, 1), T_USE(4 * b, 1);
#undef T_USE
    ctx = disk_ctx(ws / 2, ws / 4, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 3, NULL, NULL));
    for (i = 0; i < 4 * B; i++) {
        seed[i] = 0;
        T_OK(gm_tensor_create(ctx, &t[i], sz[i]));
    }
    for (step = 0; step < STEPS; step++) {
        if (step == STEPS - LAST) T_OK(gm_tier_get_stats(ctx, &s0));
        for (i = 0; i < nseq; i++) {
            use_t(ctx, t[seq[i][0]], sz[seq[i][0]], &seed[seq[i][0]], seq[i][1]);
            T_EQ(gm_check(ctx), 0);
        }
        T_OK(gm_tier_step(ctx));
    }
    T_OK(gm_tier_get_stats(ctx, &s1));
    {
        double each = (double)(s1.bytes_to_disk - s0.bytes_to_disk + s1.bytes_from_disk - s0.bytes_from_disk) / 2 / LAST /
                      (double)ws;
        if (!T_CHECK(each < 0.46)) printf("  %.3f of the working set a step through the disk each way\n", each);
    }
    T_EQ(s1.disk_errors, 0);
    for (i = 0; i < 4 * B; i++) {
        verify(ctx, t[i], sz[i], seed[i], NULL);
        T_OK(gm_tensor_destroy(ctx, t[i]));
    }
    T_EQ(gm_check(ctx), 0);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A host block a disk job keeps when its tensor is written (gm__job_detach)
   goes back to the pool when the job ends: stamped with the tensor's last
   copies from it too, so that the next copy into it waits for them. Here
   the copy from it into the device queues behind a long one on `in` (a slow
   link), the write behind waits for its gate, and the block is handed to
   another tensor's copy out as soon as the job ends: without the stamp,
   that copy lands first and the tensor reads the other's bytes. Sim only
   (white-box: the write behind is started directly). */
static void test_detached_block(void) {
#ifndef GM_TEST_CUDA
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__tier* tm;
    gm_tensor a, b, c;
    void *pa, *pc;
    d.device_budget = 4 * MiB;
    d.host_budget = 4 * MiB;
    d.disk_dir = dir;
    d.sim.link_bytes_per_s = 100e6; /* 2 MiB: 21 ms; 512 KiB: 5 ms */
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &c, 2 * MiB));
    T_OK(gm_tensor_create(ctx, &a, 512 * KiB));
    T_OK(gm_tensor_create(ctx, &b, 256 * KiB));
    fill(ctx, c, 2 * MiB, 1, NULL);
    fill(ctx, a, 512 * KiB, 1, NULL);
    fill(ctx, b, 256 * KiB, 3, NULL);
    T_OK(gm_tensor_evict(ctx, c));
    gm_device_synchronize(ctx);
    T_OK(gm_tensor_evict(ctx, a)); /* its copy out: 5 ms on `out` */
    tm = gm__tier_of(ctx);
    gm__rmu_lock(&tm->mu);
    T_OK(gm__disk_behind(ctx, tm, &tm->t[(a.id & 0xfffffu) - 1])); /* gated on that copy */
    gm__rmu_unlock(&tm->mu);
    T_OK(gm_tensor_acquire(ctx, c, NULL, &pc)); /* 21 ms on `in` */
    T_OK(gm_tensor_acquire(ctx, a, NULL, &pa)); /* behind it: a's host block is read at about 21 ms */
    T_OK(run(ctx, NULL, pa, 512 * KiB, 1, 0));
    T_OK(gm_tensor_release(ctx, a, NULL, 1)); /* written: the job keeps the block */
    T_OK(gm_tensor_release(ctx, c, NULL, 0));
    usleep(12000); /* the job's gate opened at 5 ms, and its write ended */
    T_OK(gm_tensor_evict(ctx, b)); /* into the block the job gave back */
    T_EQ(errors_now(ctx), 0);
    verify(ctx, b, 256 * KiB, 3, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
#endif
}

/* A write to disk straight from the device (through the staging slots)
   that fails on its first chunk: the job ends only once the staging copies
   it queued and never sent landed, since they read the device memory its
   tensor may free as soon as the job is over. Here eight chunks of 64 KiB
   are staged at once, each 16 ms on a slow link, and the first write
   fails: before, the eviction returned after the first copy, with seven
   still queued, and the tensor's memory, freed and unmapped, was read
   after (a crash on sim, a read of freed memory on a GPU). Sim only (the
   link's rate and figures). */
static void test_failed_staged_write(void) {
#ifndef GM_TEST_CUDA
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a;
    uint64_t b0, b1, busy;
    unsigned seed = 7;
    d.device_budget = 4 * MiB;
    d.host_budget = 0;
    d.disk_dir = dir;
    d.disk_chunk = 64 * KiB;
    d.sim.link_bytes_per_s = 4e6; /* 64 KiB: 16 ms */
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &a, 512 * KiB));
    fill(ctx, a, 512 * KiB, seed, NULL);
    gm_device_synchronize(ctx);
    T_OK(gm_sim_link_stats(ctx, 1, &b0, &busy));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DISK_WRITE, 1));
    T_CHECK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK) == GM_ERR_IO);
    T_OK(gm_sim_link_stats(ctx, 1, &b1, &busy));
    if (!T_EQ(b1 - b0, 512 * KiB)) printf("  (%llu bytes of the staging copies landed)\n", (unsigned long long)(b1 - b0));
    T_EQ(where(ctx, a), GM_TIER_DEVICE); /* nothing lost */
    verify(ctx, a, 512 * KiB, seed, NULL);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_empty_cache(ctx)); /* its memory unmapped: no copy reads it any more */
    gm_device_synchronize(ctx);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
#endif
}

/* One cycle over n tensors, each acquired and released written (its
   eviction copies it out), then, under learned order, the step's end. */
static void cycle_written(gm_context* ctx, const gm_tensor* t, int n, int learned) {
    int i;
    for (i = 0; i < n; i++) {
        void* p;
        T_OK(gm_tensor_acquire(ctx, t[i], NULL, &p));
        T_OK(gm_tensor_release(ctx, t[i], NULL, 1));
    }
    if (learned) T_OK(gm_tier_step(ctx));
}

/* The end of a test of cycle_written: gm_check, then every tensor
   destroyed (t, from calloc, freed) and the context shut down. */
static void cycled_done(gm_context* ctx, gm_tensor* t, int n) {
    int i;
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < n; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    free(t);
    T_OK(gm_shutdown(ctx));
}

/* With the host tier full, the host copy to give up for each eviction
   comes from the host victims' heaps, not from a walk of every tensor
   (tm->hh_looks counts the entries a choice looked at, and each build's
   tensors): a cycle of written tensors over a device and a host tier that
   hold a tenth and a quarter of them, so that every eviction needs host
   room. LRU, and learned order (one build per step: the plan moves every
   next use; and one when stale entries fill the heaps, after as many
   pushes as there are host copies). The walks it replaced looked at
   every tensor for each choice, N per eviction; the t_walk differential
   walks compare each choice with such a walk. */
static void test_host_victim_looks(void) {
    enum { N = 4000, CYCLES = 4 };
    int learned;
    for (learned = 0; learned < 2; learned++) {
        gm_context* ctx = disk_ctx(N / 10 * 4 * KiB, N / 4 * 4 * KiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm__tier* tm = NULL;
        gm_tensor* t = (gm_tensor*)calloc(N, sizeof *t);
        gm_tier_stats a, b;
        uint64_t looks = 0, builds = 0, pushes = 0;
        int i, c;
        memset(&a, 0, sizeof a);
        if (learned) T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        for (i = 0; i < N; i++) T_OK(gm_tensor_create(ctx, &t[i], 4 * KiB));
        for (c = 0; c < CYCLES; c++) {
            if (c == CYCLES - 2) {
                T_OK(gm_tier_get_stats(ctx, &a));
                tm = gm__tier_of(ctx);
                looks = tm->hh_looks;
                builds = tm->hh_builds;
                pushes = tm->hh_pushes;
            }
            cycle_written(ctx, t, N, learned);
        }
        T_OK(gm_tier_get_stats(ctx, &b));
        tm = gm__tier_of(ctx);
        if (!T_CHECK(b.evictions - a.evictions >= N && b.bytes_to_disk > a.bytes_to_disk && tm->hh_builds > 0))
            printf("  (%lld evictions, %lld bytes to disk, %llu builds)\n", (long long)(b.evictions - a.evictions),
                   (long long)(b.bytes_to_disk - a.bytes_to_disk), (unsigned long long)tm->hh_builds);
        /* A build a step under learned order, and one each time the
           heaps hold twice the host copies (2 nhost + 64 entries, stale
           ones kept): at least nhost + 64 pushes since the last build
           (nhost is about N / 4 here). The pushes: a few per acquire and
           per eviction. How many rebuilds the stale entries cause depends
           on when the disk's jobs end. */
        pushes = tm->hh_pushes - pushes;
        if (!T_CHECK(pushes <= 4 * ((uint64_t)(b.evictions - a.evictions) + 2 * N)))
            printf("  (%s: %llu pushes)\n", learned ? "learned" : "LRU", (unsigned long long)pushes);
        if (!T_CHECK(tm->hh_builds - builds <= (uint64_t)(learned ? 2 : 0) + 1 + pushes / (N / 4 + 64)))
            printf("  (%s: %llu builds, %llu pushes)\n", learned ? "learned" : "LRU", (unsigned long long)(tm->hh_builds - builds),
                   (unsigned long long)pushes);
        if (!T_CHECK(tm->hh_looks - looks <= 16 * (uint64_t)(b.evictions - a.evictions) + (tm->hh_builds - builds) * N))
            printf("  (%s: %llu entries looked at for %lld evictions)\n", learned ? "learned" : "LRU",
                   (unsigned long long)(tm->hh_looks - looks), (long long)(b.evictions - a.evictions));
        cycled_done(ctx, t, N);
    }
}

/* A disk tier's bookkeeping does not grow with the tensors: after each
   eviction, gm__host_clean looks at the host copies noted since its last
   look (learned order), or at none while the host tier has room (LRU), not
   at every tensor (tm->hc_looks counts what it looked at). Then learned
   order over a repeating step with departures from it (other tensors,
   overwrites, tensors made again, evictions to disk), gm_check after
   every call: it finds any host copy Belady's order sends to disk that
   was not noted. */
static void test_clean_looks(void) {
    enum { N = 2000, CYCLES = 5, M = 24, STEPS = 30 };
    int learned;
    for (learned = 0; learned < 2; learned++) {
        gm_context* ctx = disk_ctx(4 * MiB, 16 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm__tier* tm;
        gm_tensor* t = (gm_tensor*)calloc(N, sizeof *t);
        gm_tier_stats a, b;
        uint64_t looks = 0;
        int i, c;
        if (learned) T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        for (i = 0; i < N; i++) T_OK(gm_tensor_create(ctx, &t[i], 4 * KiB));
        memset(&a, 0, sizeof a);
        for (c = 0; c < CYCLES; c++) {
            if (c == CYCLES - 2) {
                T_OK(gm_tier_get_stats(ctx, &a));
                looks = gm__tier_of(ctx)->hc_looks;
            }
            cycle_written(ctx, t, N, learned);
        }
        T_OK(gm_tier_get_stats(ctx, &b));
        tm = gm__tier_of(ctx);
        if (!T_CHECK(b.evictions - a.evictions >= N / 2)) printf("  (%lld evictions)\n", (long long)(b.evictions - a.evictions));
        if (!T_CHECK(tm->hc_looks - looks <= (uint64_t)(learned ? 4 : 1) * (uint64_t)(b.evictions - a.evictions)))
            printf("  (%s: %llu tensors looked at for %lld evictions)\n", learned ? "learned" : "LRU",
                   (unsigned long long)(tm->hc_looks - looks), (long long)(b.evictions - a.evictions));
        cycled_done(ctx, t, N);
    }
    {
        gm_context* ctx = disk_ctx(3 * MiB, 2 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm_tensor t[M];
        size_t sz[M];
        unsigned seed[M];
        unsigned long long rs = 5;
        int order[40], i, q, step;
        gm_tier_stats st;
        T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        for (i = 0; i < M; i++) {
            sz[i] = (size_t)(1 + t_rand_r(&rs) % 4) * 128 * KiB;
            seed[i] = 0;
            T_OK(gm_tensor_create(ctx, &t[i], sz[i]));
        }
        for (q = 0; q < 40; q++) order[q] = (int)(t_rand_r(&rs) % M);
        for (step = 0; step < STEPS; step++) {
            for (q = 0; q < 40; q++) {
                unsigned long long r = t_rand_r(&rs) % 100;
                void* p;
                i = r < 8 ? (int)(t_rand_r(&rs) % M) : order[q]; /* now and then another tensor */
                if (r >= 8 && r < 11) { /* made again: a new tensor in the slot */
                    T_OK(gm_tensor_destroy(ctx, t[i]));
                    T_OK(gm_tensor_create(ctx, &t[i], sz[i]));
                    seed[i] = 0;
                } else if (r >= 11 && r < 14 && seed[i]) {
                    gm_result e = gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK);
                    T_CHECK(e == GM_OK || e == GM_ERR_DISK_FULL);
                }
                if (r >= 14 && r < 24) { /* an overwrite */
                    T_OK(gm_tensor_acquire_as(ctx, t[i], NULL, GM_ACCESS_OVERWRITE, &p));
                    T_OK(run(ctx, NULL, p, sz[i], ++seed[i], 1));
                    T_OK(gm_tensor_release(ctx, t[i], NULL, 1));
                } else if (r >= 24 && r < 50 && seed[i]) { /* a read */
                    verify(ctx, t[i], sz[i], seed[i], NULL);
                } else {
                    use_rw(ctx, t[i], sz[i], &seed[i]);
                }
                T_EQ(gm_check(ctx), 0);
            }
            T_OK(gm_tier_step(ctx));
            T_EQ(gm_check(ctx), 0);
        }
        T_OK(gm_tier_get_stats(ctx, &st));
        T_CHECK(st.host_demotions > 0); /* the plan wrote host copies behind */
        for (i = 0; i < M; i++) {
            if (seed[i]) verify(ctx, t[i], sz[i], seed[i], NULL);
            T_OK(gm_tensor_destroy(ctx, t[i]));
        }
        T_EQ(errors_now(ctx), 0);
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_shutdown(ctx));
    }
}

/* A warning whose cause persists (a full file system under the spill
   file) is logged once per GM__QUIET_NS, then with how many were left out. */
static void test_quiet(void) {
    uint64_t last = 0, held = 0;
    char note[96];
    T_CHECK(gm__quiet(&last, &held, note, sizeof note));
    T_EQ(note[0], 0);
    T_CHECK(!gm__quiet(&last, &held, note, sizeof note));
    T_CHECK(!gm__quiet(&last, &held, note, sizeof note));
    T_EQ(held, 2);
    last -= GM__QUIET_NS + 1000000000ull; /* the window has passed */
    T_CHECK(gm__quiet(&last, &held, note, sizeof note));
    T_CHECK(strstr(note, "and 2 times in the last 11 s") != NULL);
    T_EQ(held, 0);
}

/* The modelled disk (desc.sim.disk_bytes_per_s, sim_disk:): the spill
   file's I/O is paced to its rate, reads and writes together, so that
   moving 16 MiB out and back at 64 MiB/s takes at least half a second
   (an I/O can end later than the model says, never sooner), and every
   byte comes back; through io_uring and through pread/pwrite. */
static void test_disk_model(gm_disk_io io) {
    gm_desc d = t_desc(), q;
    gm_context* ctx;
    gm_tensor t[2];
    gm_tier_stats st;
    double t0, took, want;
    int i;
    d.device_budget = 24 * MiB;
    d.host_budget = 4 * MiB; /* below any tensor: the moves go to disk */
    d.disk_dir = dir;
    d.disk_io = io;
    d.conf = "sim_disk:64M";
    ctx = t_setup(d);
    q = gm_query_desc(ctx);
    T_CHECK(q.sim.disk_bytes_per_s == 64.0 * MiB); /* 64M: 64 MiB a second */
    for (i = 0; i < 2; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 8 * MiB));
        fill(ctx, t[i], 8 * MiB, (unsigned)i + 7, NULL);
    }
    t0 = t_now() * 1e3;
    for (i = 0; i < 2; i++) T_OK(gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK));
    for (i = 0; i < 2; i++) verify(ctx, t[i], 8 * MiB, (unsigned)i + 7, NULL);
    took = t_now() * 1e3 - t0;
    T_OK(gm_tier_get_stats(ctx, &st));
    want = (double)(st.bytes_to_disk + st.bytes_from_disk) / (64.0 * MiB) * 1e3;
    T_CHECK(st.bytes_to_disk >= (int64_t)(16 * MiB) && st.bytes_from_disk >= (int64_t)(16 * MiB));
    T_CHECK(took >= 0.98 * want);
    if (took < 0.98 * want) printf("  the modelled disk: %.1f ms for what it paces to %.1f ms\n", took, want);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 2; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    gm_shutdown(ctx);
}

/* A prefetch does not write a victim to disk and wait for it: the device
   holds one written tensor (b), the host tier nothing, and a prefetch of
   a tensor never written (a, whose room below is on disk) needs b's room,
   which only a write to disk can give. The write (8 MiB on a disk
   modelled at 16 MiB/s: half a second) starts, and the prefetch returns
   at once, both tensors where they were: before, it waited for the write
   (b left for disk and a came in), and learned order's first acquire of a
   step launched its work 10-14 ms late on bench/spill's transformer, the
   device idle meanwhile. The acquire then waits for the write, and every
   byte is where it was. */
static void test_prefetch_nowait(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a, b;
    gm_tier w;
    void* p;
    d.device_budget = 12 * MiB; /* one 8 MiB tensor */
    d.host_budget = 4 * MiB;    /* none */
    d.disk_dir = dir;
    d.sim.disk_bytes_per_s = 16.0 * MiB;
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &a, 8 * MiB));
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK)); /* never written: an extent is its copy */
    T_OK(gm_tensor_create(ctx, &b, 8 * MiB));
    fill(ctx, b, 8 * MiB, 22, NULL); /* written: the device holds its only copy */
    T_OK(gm_tensor_where(ctx, a, &w));
    T_EQ(w, GM_TIER_DISK);
    T_OK(gm_tensor_prefetch(ctx, a, NULL)); /* b's write starts; nobody moves yet */
    T_OK(gm_tensor_where(ctx, a, &w));
    T_EQ(w, GM_TIER_DISK);
    T_OK(gm_tensor_where(ctx, b, &w));
    T_EQ(w, GM_TIER_DEVICE);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p)); /* waits for b's write */
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_OK(gm_tensor_where(ctx, b, &w));
    T_EQ(w, GM_TIER_DISK);
    fill(ctx, a, 8 * MiB, 21, NULL);
    verify(ctx, b, 8 * MiB, 22, NULL);
    verify(ctx, a, 8 * MiB, 21, NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tensor_destroy(ctx, b));
    gm_shutdown(ctx);
}

/* Acquires in no order under learned order, with gm_tier_step every 16 of
   them (each step's plan is a guess that does not come true): no more is
   read from disk than LRU reads for the same acquires. Before, each pair of
   acquires found side by side in some plan by chance ended the lost state,
   and reads ahead from disk started for a sequence that did not come: 2.1x
   LRU's bytes from disk here. */
static int64_t erratic_run(gm_evict_policy policy, int64_t* wasted) {
    gm_context* ctx = disk_ctx(6 * MiB, 4 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    enum { N = 40, OPS = 3000 };
    gm_tensor t[N];
    gm_tier_stats st;
    unsigned long long r = 99;
    int i;
    T_OK(gm_tier_set_policy(ctx, policy, 4, NULL, NULL));
    for (i = 0; i < N; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 256 * KiB + (size_t)(t_rand_r(&r) % (768 * KiB))));
        fill(ctx, t[i], 4 * KiB, (unsigned)i + 1, NULL);
    }
    for (i = 0; i < OPS; i++) {
        unsigned long long x = t_rand_r(&r);
        void* p;
        T_OK(gm_tensor_acquire(ctx, t[x % N], NULL, &p));
        T_OK(gm_tensor_release(ctx, t[x % N], NULL, (x >> 32) % 4 == 0));
        if (i % 16 == 15) T_OK(gm_tier_step(ctx));
    }
    T_OK(gm_tier_get_stats(ctx, &st));
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < N; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
    *wasted = st.prefetch_wasted + st.read_ahead_wasted;
    return st.bytes_from_disk;
}

/* A step of 40 acquires in order, one in four of them replaced by a tensor
   at random (a departure, and one more to resynchronize after it): the
   plan is right often enough, and prefetching goes on. */
static int64_t noisy_hits(void) {
    gm_context* ctx = disk_ctx(6 * MiB, 4 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    enum { N = 40, STEPS = 40 };
    gm_tensor t[N];
    gm_tier_stats st;
    unsigned long long r = 5;
    int i, k;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 4, NULL, NULL));
    for (i = 0; i < N; i++) T_OK(gm_tensor_create(ctx, &t[i], 256 * KiB));
    for (k = 0; k < STEPS; k++) {
        for (i = 0; i < N; i++) {
            int j = i % 4 == 3 ? (int)(t_rand_r(&r) % N) : i;
            void* p;
            T_OK(gm_tensor_acquire(ctx, t[j], NULL, &p));
            T_OK(gm_tensor_release(ctx, t[j], NULL, 1));
        }
        T_OK(gm_tier_step(ctx));
    }
    T_OK(gm_tier_get_stats(ctx, &st));
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < N; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
    return st.prefetch_hits;
}

static void test_erratic_learned(void) {
    int64_t wl, wr, lru = erratic_run(GM_EVICT_LRU, &wl), learned = erratic_run(GM_EVICT_LEARNED, &wr);
    int64_t noisy = noisy_hits();
    printf("acquires in no order: MiB read from disk, LRU %.1f, learned %.1f; reads and prefetches ahead wasted %lld; "
           "one acquire in four at random: %lld prefetch hits of %d acquires\n",
           (double)lru / (double)MiB, (double)learned / (double)MiB, (long long)wr, (long long)noisy, 40 * 40);
    T_CHECK(lru > 0);
    T_CHECK((double)learned <= 1.15 * (double)lru);
    T_CHECK(wr <= wl + 64);
    T_CHECK(noisy >= 40 * 40 / 4); /* a quarter of the acquires at least */
}

/* Threads on one context with a disk tier: four threads acquire, write,
   read back, prefetch, evict (to the host tier or to disk), reprioritize,
   destroy and make again their own tensors of mixed sizes (4 KiB to 3 MiB,
   about three times what the device and host tiers hold together), so
   that each one's misses evict the others' tensors through the host tier
   to disk and back; under learned order the first thread also ends steps
   (gm_tier_step) while the others run. A fifth thread runs gm_check, asks
   where tensors are and reads the statistics, and with `faults` arms disk
   faults now and then (failing, short and out-of-space writes, failing
   reads): a call may answer GM_ERR_IO or GM_ERR_DISK_FULL, nothing else.
   Then the faults are disarmed, and every thread reads back every tensor
   it wrote: nothing may be lost. */
#define TD_THREADS 4
#define TD_TENSORS 10
typedef struct td_shared {
    gm_context* ctx;
    gm_tensor all[TD_THREADS * TD_TENSORS];
    pthread_mutex_t mu;
    pthread_barrier_t bar;
    int steps, learned, faults, stop, errs, faulted;
} td_shared;
typedef struct td_arg {
    td_shared* sh;
    int id;
} td_arg;

static void td_bad(td_shared* sh, int id, const char* what, gm_result e) {
    pthread_mutex_lock(&sh->mu);
    if (sh->errs++ < 8) printf("threads on disk: thread %d: %s: %s\n", id, what, gm_result_string(e));
    pthread_mutex_unlock(&sh->mu);
}

/* Whether e is what an armed disk fault may answer (counted). */
static int td_fault(td_shared* sh, gm_result e) {
    if (!sh->faults || (e != GM_ERR_IO && e != GM_ERR_DISK_FULL)) return 0;
    pthread_mutex_lock(&sh->mu);
    sh->faulted++;
    pthread_mutex_unlock(&sh->mu);
    return 1;
}

static void td_publish(td_shared* sh, gm_tensor* slot, gm_tensor h) {
    pthread_mutex_lock(&sh->mu); /* the checker reads the array as it changes */
    *slot = h;
    pthread_mutex_unlock(&sh->mu);
}

/* Copies p's n bytes in (write) or out and checks them against seed. */
static void td_bytes(td_shared* sh, int id, gm_stream s, void* p, unsigned char* buf, size_t n, unsigned seed,
                     int write, size_t stride) {
    size_t j;
    if (write)
        for (j = 0; j < n; j++) buf[j] = pat(seed, j);
    if (gm_memcpy_async(sh->ctx, write ? p : buf, write ? buf : p, n,
                        write ? GM_COPY_HOST_TO_DEVICE : GM_COPY_DEVICE_TO_HOST, s) != GM_OK ||
        gm_stream_synchronize(sh->ctx, s) != GM_OK)
        td_bad(sh, id, "copy", GM_ERR_COPY_FAILED);
    if (!write)
        for (j = 0; j < n; j += stride)
            if (buf[j] != pat(seed, j)) {
                td_bad(sh, id, "bytes lost", GM_OK);
                pthread_mutex_lock(&err_mu);
                byte_errors++;
                pthread_mutex_unlock(&err_mu);
                break;
            }
}

static void* td_worker(void* a) {
    td_arg* ta = (td_arg*)a;
    td_shared* sh = ta->sh;
    gm_context* ctx = sh->ctx;
    int id = ta->id, i, k;
    gm_stream s;
    gm_tensor* t = sh->all + id * TD_TENSORS;
    size_t size[TD_TENSORS];
    unsigned seed[TD_TENSORS]; /* 0: never written */
    unsigned long long r = 0x9E3779B97F4A7C15ull * (unsigned long long)(id + 7);
    unsigned char* buf = (unsigned char*)malloc(3 * MiB + 4 * KiB);
    if (!buf || gm_stream_create(ctx, &s) != GM_OK) {
        td_bad(sh, id, "setup", GM_ERR_HOST_OUT_OF_MEMORY);
        free(buf);
        pthread_barrier_wait(&sh->bar);
        pthread_barrier_wait(&sh->bar);
        return NULL;
    }
    for (k = 0; k < TD_TENSORS; k++) {
        gm_tensor h;
        gm_result e;
        size[k] = 4 * KiB + (size_t)(t_rand_r(&r) % (3 * MiB));
        seed[k] = 0;
        if ((e = gm_tensor_create(ctx, &h, size[k])) != GM_OK) td_bad(sh, id, "create", e);
        td_publish(sh, &t[k], h);
    }
    for (i = 0; i < sh->steps; i++) {
        unsigned long long x = t_rand_r(&r);
        int o = (int)((x >> 16) % TD_TENSORS);
        void* p;
        gm_result e = GM_OK;
        k = (int)(x % TD_TENSORS);
        switch ((x >> 8) % 16) {
        case 0: /* a hint: with the other threads' tensors acquired there may be no hole of its size */
            e = gm_tensor_prefetch(ctx, t[o], s);
            if (e != GM_OK && e != GM_ERR_OUT_OF_MEMORY && !td_fault(sh, e)) td_bad(sh, id, "prefetch", e);
            break;
        case 1:
            if ((e = gm_tensor_evict(ctx, t[o])) != GM_OK && !td_fault(sh, e)) td_bad(sh, id, "evict", e);
            break;
        case 2:
            if ((e = gm_tensor_evict_to(ctx, t[o], GM_TIER_DISK)) != GM_OK && !td_fault(sh, e))
                td_bad(sh, id, "evict to disk", e);
            break;
        case 3:
            if ((e = gm_tensor_set_priority(ctx, t[o], (int)((x >> 20) % 3), 0)) != GM_OK)
                td_bad(sh, id, "set_priority", e);
            break;
        case 4: { /* gone, and another in its place */
            gm_tensor h;
            if ((e = gm_tensor_destroy(ctx, t[o])) != GM_OK) td_bad(sh, id, "destroy", e);
            size[o] = 4 * KiB + (size_t)((x >> 24) % (3 * MiB));
            seed[o] = 0;
            if ((e = gm_tensor_create(ctx, &h, size[o])) != GM_OK) td_bad(sh, id, "create", e);
            td_publish(sh, &t[o], h);
            break;
        }
        case 5:
            if (id == 0 && sh->learned && (e = gm_tier_step(ctx)) != GM_OK) td_bad(sh, id, "step", e);
            break;
        default:
            break;
        }
        if ((e = gm_tensor_acquire(ctx, t[k], s, &p)) != GM_OK) {
            if (!td_fault(sh, e)) td_bad(sh, id, "acquire", e);
            continue;
        }
        if (seed[k] && (x >> 32) % 3) { /* read back what was written last */
            td_bytes(sh, id, s, p, buf, size[k], seed[k], 0, 97);
            if ((e = gm_tensor_release(ctx, t[k], s, 0)) != GM_OK) td_bad(sh, id, "release", e);
        } else {
            seed[k] = (unsigned)(x >> 40) | 1u;
            td_bytes(sh, id, s, p, buf, size[k], seed[k], 1, 1);
            if ((e = gm_tensor_release(ctx, t[k], s, 1)) != GM_OK) td_bad(sh, id, "release", e);
        }
    }
    pthread_barrier_wait(&sh->bar); /* the checker stops, the faults are disarmed */
    pthread_barrier_wait(&sh->bar);
    for (k = 0; k < TD_TENSORS; k++) { /* every byte of what each tensor holds */
        void* p;
        gm_result e;
        if (!seed[k]) continue;
        if ((e = gm_tensor_acquire(ctx, t[k], s, &p)) != GM_OK) {
            td_bad(sh, id, "acquire after the faults", e);
            continue;
        }
        td_bytes(sh, id, s, p, buf, size[k], seed[k], 0, 1);
        if ((e = gm_tensor_release(ctx, t[k], s, 0)) != GM_OK) td_bad(sh, id, "release", e);
    }
    if (gm_stream_synchronize(ctx, s) != GM_OK || gm_stream_destroy(ctx, s) != GM_OK) td_bad(sh, id, "stream", GM_OK);
    free(buf);
    return NULL;
}

static void* td_checker(void* a) {
    td_shared* sh = (td_shared*)a;
    static const gm_sim_fault kinds[] = {GM_SIM_FAULT_DISK_WRITE, GM_SIM_FAULT_DISK_READ, GM_SIM_FAULT_DISK_SHORT,
                                         GM_SIM_FAULT_DISK_FULL};
    unsigned long long r = 3;
    intptr_t n = 0;
    int stop = 0;
    while (!stop) {
        gm_tier w;
        gm_tier_stats st;
        gm_tensor_info info;
        gm_tensor x;
        gm_result e;
        pthread_mutex_lock(&sh->mu);
        x = sh->all[t_rand_r(&r) % (TD_THREADS * TD_TENSORS)];
        stop = sh->stop;
        pthread_mutex_unlock(&sh->mu);
        if (gm_check(sh->ctx) != 0) td_bad(sh, -1, "gm_check", GM_OK);
        e = gm_tensor_where(sh->ctx, x, &w); /* one destroyed meanwhile is a stale handle */
        if (e != GM_OK && e != GM_ERR_STALE_HANDLE) td_bad(sh, -1, "where", e);
        e = gm_tensor_get_info(sh->ctx, x, &info);
        if (e != GM_OK && e != GM_ERR_STALE_HANDLE) td_bad(sh, -1, "get_info", e);
        if (gm_tier_get_stats(sh->ctx, &st) != GM_OK) td_bad(sh, -1, "stats", GM_OK);
        if (sh->faults && t_rand_r(&r) % 4 == 0) {
            unsigned long long q = t_rand_r(&r);
            if ((e = gm_sim_inject(sh->ctx, kinds[q % 4], 1 + (q >> 8) % 32)) != GM_OK) td_bad(sh, -1, "inject", e);
        }
        n++;
        usleep(200);
    }
    return (void*)n;
}

static void test_threads_disk(int learned, int faults, int steps) {
    static td_shared sh; /* large: not on the stack */
    td_arg args[TD_THREADS];
    pthread_t th[TD_THREADS], ck;
    gm_tier_stats st;
    gm_sim_fault f;
    void* checks;
    long before = byte_errors;
    int k;
    memset(&sh, 0, sizeof sh);
    sh.ctx = disk_ctx(24 * MiB, 16 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
    sh.steps = steps;
    sh.learned = learned;
    sh.faults = faults;
    pthread_mutex_init(&sh.mu, NULL);
    pthread_barrier_init(&sh.bar, NULL, TD_THREADS + 1);
    if (learned) T_OK(gm_tier_set_policy(sh.ctx, GM_EVICT_LEARNED, 4, NULL, NULL));
    { /* the manager exists before the checker asks */
        gm_tensor h;
        T_OK(gm_tensor_create(sh.ctx, &h, 64));
        T_OK(gm_tensor_destroy(sh.ctx, h));
    }
    pthread_create(&ck, NULL, td_checker, &sh);
    for (k = 0; k < TD_THREADS; k++) {
        args[k].sh = &sh;
        args[k].id = k;
        pthread_create(&th[k], NULL, td_worker, &args[k]);
    }
    pthread_barrier_wait(&sh.bar);
    pthread_mutex_lock(&sh.mu);
    sh.stop = 1;
    pthread_mutex_unlock(&sh.mu);
    pthread_join(ck, &checks);
    for (f = GM_SIM_FAULT_DISK_WRITE; f <= GM_SIM_FAULT_DISK_FULL; f = (gm_sim_fault)(f + 1))
        T_OK(gm_sim_inject(sh.ctx, f, 0));
    pthread_barrier_wait(&sh.bar);
    for (k = 0; k < TD_THREADS; k++) pthread_join(th[k], NULL);
    T_EQ(sh.errs, 0);
    T_EQ(byte_errors - before, 0);
    T_CHECK((intptr_t)checks > 0);
    T_EQ(gm_check(sh.ctx), 0);
    T_OK(gm_tier_get_stats(sh.ctx, &st));
    T_CHECK(st.bytes_to_disk > 0 && st.bytes_from_disk > 0); /* the threads spilled each other's tensors */
    if (faults) T_CHECK(st.disk_errors > 0);
    printf("threads on disk (%s%s): %d threads, %lld bytes to disk, %lld from, %d calls answered with a disk fault, "
           "%ld checks beside\n", learned ? "learned" : "LRU", faults ? ", disk faults" : "", TD_THREADS,
           (long long)st.bytes_to_disk, (long long)st.bytes_from_disk, sh.faulted, (long)(intptr_t)checks);
    for (k = 0; k < TD_THREADS * TD_TENSORS; k++) T_OK(gm_tensor_destroy(sh.ctx, sh.all[k]));
    T_EQ(errors_now(sh.ctx), 0);
    T_EQ(gm_check(sh.ctx), 0);
    T_OK(gm_shutdown(sh.ctx));
    pthread_barrier_destroy(&sh.bar);
    pthread_mutex_destroy(&sh.mu);
}

int main(int argc, char** argv) {
    const char* base = getenv("GM_TEST_DISK_DIR");
    snprintf(dir, sizeof dir, "%s/gpumem-test-XXXXXX", base ? base : "/var/tmp");
    if (!mkdtemp(dir)) {
        printf("FAIL: cannot make a directory %s\n", dir);
        return 1;
    }
    test_crc();
    test_quiet();
    test_disk_model(GM_DISK_IO_DEFAULT);
    test_disk_model(GM_DISK_IO_PREAD);
    test_prefetch_nowait();
    test_file();
    test_roundtrips(GM_DISK_IO_URING);
    test_roundtrips(GM_DISK_IO_PREAD);
    test_demotion();
    test_host_pieces_disk();
    test_disk_align_host();
    test_faults(GM_DISK_IO_URING);
    test_ring_broken();
    test_faults(GM_DISK_IO_PREAD);
    test_checksum_off();
    test_budget();
    test_budget_below_unit();
    test_full_swap();
    test_swap_lost();
    test_host_budget();
    test_walk_mostly_disk();
    test_release_write();
    test_read_into_device();
    test_write_around();
    test_around_each();
    test_clean_looks();
    test_host_victim_looks();
    test_detached_block();
    test_failed_staged_write();
    test_plan_room(8 * MiB, 4 * MiB, 1);
    test_plan_room(32 * MiB, 8 * MiB, 0);
    test_plan_dep();
    test_erratic_learned();
    test_threads_disk(0, 0, WALK_STEPS / 4);
    test_threads_disk(1, 0, WALK_STEPS / 4);
    test_threads_disk(1, 1, WALK_STEPS / 4);
    test_threads_disk(0, 1, WALK_STEPS / 4);
    test_full_walk(WALK_STEPS / 2);
    test_walk(argc > 1 ? atol(argv[1]) : WALK_STEPS, GM_DISK_IO_DEFAULT, 24 * MiB, 12 * MiB);
    test_walk(WALK_STEPS / 3, GM_DISK_IO_PREAD, 8 * MiB, 4 * MiB);
    { /* learned order over a repeating sequence: prefetch and write-behind with three tiers */
        gm_context* ctx = disk_ctx(24 * MiB, 12 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm_tier_stats ts;
        T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        t_walk_period = 97;
        ts = t_walk(ctx, WALK_STEPS / 3, BIG_MAX, 1);
        t_walk_period = 0;
        T_CHECK(ts.bytes_to_disk > 0 && ts.bytes_from_disk > 0);
        T_EQ(ts.disk_errors, 0);
        T_OK(gm_shutdown(ctx));
    }
    { /* the same with disk faults now and then: write-behind, read-ahead and
         demotions that fail in the I/O engine leave every tensor readable */
        gm_context* ctx = disk_ctx(24 * MiB, 12 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm_tier_stats ts;
        T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        t_walk_period = 97;
        t_walk_faults = 1;
        ts = t_walk(ctx, WALK_STEPS / 3, BIG_MAX, 1);
        t_walk_faults = 0;
        t_walk_period = 0;
        T_CHECK(ts.disk_errors > 0);
        T_OK(gm_shutdown(ctx));
        /* and under LRU, with pread/pwrite */
        ctx = disk_ctx(8 * MiB, 4 * MiB, 0, GM_DISK_IO_PREAD, GM_TOGGLE_DEFAULT);
        t_walk_faults = 1;
        ts = t_walk(ctx, WALK_STEPS / 5, BIG_MAX, 1);
        t_walk_faults = 0;
        T_CHECK(ts.disk_errors > 0);
        T_OK(gm_shutdown(ctx));
    }
    { /* three tiers with every tensor over 1 MiB and of mixed sizes: compaction's moves
         beside write-behind, read-ahead and swaps, a copy failing now and then (sim) and
         disk faults too; learned order, whose plan also tunes its room */
        gm_context* ctx = disk_ctx(40 * MiB, 24 * MiB, 0, GM_DISK_IO_DEFAULT, GM_TOGGLE_DEFAULT);
        gm_tier_stats ts;
        T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        t_walk_period = 61;
        t_walk_nt = 48;
        t_walk_large = 1;
        t_walk_copy_faults = 1;
        t_walk_faults = 1;
        ts = t_walk(ctx, WALK_STEPS / 5, 4 * MiB, 1);
        t_walk_defaults();
        T_CHECK(ts.bytes_to_disk > 0 && ts.bytes_from_disk > 0 && ts.compactions > 0);
        T_OK(gm_shutdown(ctx));
    }
    T_EQ(dir_entries(), 0); /* nothing left behind */
    T_EQ(rmdir(dir), 0);
    return t_done();
}
