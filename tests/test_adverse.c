/* test_adverse: a disk that misbehaves below the disk tier. This program
   defines pwrite, pread, fallocate, open, fcntl and (with io_uring)
   io_uring_submit itself, so the library's calls reach them first; each passes the call on
   to the real one unless a case says otherwise:
   - a file system without fallocate (EOPNOTSUPP, as NFS): the spill file
     grows unreserved, and tensors go to disk and come back;
   - writes and reads that move fewer bytes than asked, and not whole units
     of the direct-I/O alignment: the rest goes again from the last whole
     unit (an unaligned offset is refused by O_DIRECT);
   - a disk that moves nothing, or less than a unit each time: the job
     fails (no progress), the tensor stays where it was;
   - writes and reads refused for a moment (EAGAIN): they go again, a few
     times at most, then the job fails and the tensor stays where it was;
   - a disk busy for 30 ms, refusing everything meanwhile (EAGAIN): each
     refused I/O goes again after a moment that doubles, so that the disk
     has time to recover;
   - io_uring_submit failing once: the request it left in the ring is
     never run against a slot that went on to other I/O;
   - a file system without O_TMPFILE that refuses O_DIRECT (open and fcntl
     defined here too): nothing is left in the directory;
   - a disk that holds every write until the case lets it go: a prefetch
     whose room needs a host copy written to disk first starts that write
     and returns, without waiting for it.
   Every tensor's bytes are checked after each case, with gm_check. */
#define _GNU_SOURCE
#include "gm_tier_test.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the calls below do to the spill file: 0 nothing, else one of these. */
enum { A_NONE, A_HALF_PLUS, A_ZERO, A_TINY, A_NOSUP };
static volatile int atk_write, atk_read, atk_falloc, atk_submit, atk_tmpfile, atk_direct, atk_direct_hits;
static int atk_again; /* the next this many pwrite and pread calls fail with EAGAIN */
static uint64_t atk_busy_ns;    /* and every one for this long (ns) from the first one it meets */
static uint64_t atk_busy_until; /* (that first one's time plus atk_busy_ns, CLOCK_MONOTONIC) */
static long n_write, n_read;
static int atk_hold;   /* while set, pwrite waits before it writes (a disk that takes its time) */
static long n_held;    /* pwrite calls that waited so */

static void* real_fn(const char* name) {
    void* f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "test_adverse: no %s below this program\n", name);
        abort();
    }
    return f;
}

/* n bytes asked; the real call made first (it moves them all), then what
   the attack says it moved */
static ssize_t attacked(int atk, ssize_t got, size_t n) {
    if (got < 0 || atk == A_NONE) return got;
    if (atk == A_HALF_PLUS) return n > 8192 ? (ssize_t)(n / 2 + 1) : got; /* not a whole unit; at the end all */
    if (atk == A_ZERO) return 0;
    if (atk == A_TINY) return n > 100 ? 100 : got;
    return got;
}

static uint64_t now_ns(void) { return (uint64_t)(t_now() * 1e9); }

/* Whether this call is refused for a moment (EAGAIN), by atk_again. */
static int refused(void) {
    uint64_t busy = __atomic_load_n(&atk_busy_ns, __ATOMIC_RELAXED), t = now_ns(), zero = 0;
    if (busy) { /* the window opens at the first call it meets, however late that comes */
        __atomic_compare_exchange_n(&atk_busy_until, &zero, t + busy, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        if (t < __atomic_load_n(&atk_busy_until, __ATOMIC_RELAXED)) {
            errno = EAGAIN;
            return 1;
        }
    }
    if (__atomic_load_n(&atk_again, __ATOMIC_RELAXED) <= 0 || __atomic_sub_fetch(&atk_again, 1, __ATOMIC_RELAXED) < 0)
        return 0;
    errno = EAGAIN;
    return 1;
}

/* pread and pwrite run on the disk tier's I/O threads, several at once:
   the real function is looked up atomically. */
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void*, size_t, off_t);
    ssize_t (*fn)(int, const void*, size_t, off_t) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        void* f = real_fn("pwrite");
        memcpy(&fn, &f, sizeof fn);
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&n_write, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&atk_hold, __ATOMIC_ACQUIRE)) {
        __atomic_add_fetch(&n_held, 1, __ATOMIC_RELAXED);
        while (__atomic_load_n(&atk_hold, __ATOMIC_ACQUIRE)) usleep(200);
    }
    if (refused()) return -1;
    return attacked(atk_write, fn(fd, buf, n, off), n);
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
    static ssize_t (*real)(int, void*, size_t, off_t);
    ssize_t (*fn)(int, void*, size_t, off_t) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        void* f = real_fn("pread");
        memcpy(&fn, &f, sizeof fn);
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&n_read, 1, __ATOMIC_RELAXED);
    if (refused()) return -1;
    return attacked(atk_read, fn(fd, buf, n, off), n);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    static int (*real)(int, int, off_t, off_t);
    if (!real) {
        void* f = real_fn("fallocate");
        memcpy(&real, &f, sizeof real);
    }
    if (atk_falloc == A_NOSUP) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return real(fd, mode, off, len);
}

int open(const char* path, int flags, ...) {
    static int (*real)(const char*, int, ...);
    mode_t mode = 0;
    if (!real) {
        void* f = real_fn("open");
        memcpy(&real, &f, sizeof real);
    }
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (atk_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) { /* a file system without O_TMPFILE */
        errno = EOPNOTSUPP;
        return -1;
    }
    return real(path, flags, mode);
}

int fcntl(int fd, int cmd, ...) {
    static int (*real)(int, int, ...);
    va_list ap;
    long arg;
    if (!real) {
        void* f = real_fn("fcntl");
        memcpy(&real, &f, sizeof real);
    }
    va_start(ap, cmd);
    arg = va_arg(ap, long); /* as glibc's own fcntl reads it, whatever the command */
    va_end(ap);
    if (atk_direct && cmd == F_SETFL && (arg & O_DIRECT)) { /* a file system that refuses O_DIRECT */
        atk_direct_hits++;
        errno = EINVAL;
        return -1;
    }
    return real(fd, cmd, arg);
}

#ifdef GPUMEM_URING
int io_uring_submit(struct io_uring* ring) {
    static int (*real)(struct io_uring*);
    if (!real) {
        void* f = real_fn("io_uring_submit");
        memcpy(&real, &f, sizeof real);
    }
    if (atk_submit > 0 && --atk_submit == 0) return -EBUSY; /* this one fails: its request stays in the ring */
    return real(ring);
}
#endif

static char dir[512];

static gm_context* adverse_ctx(gm_disk_io io, size_t chunk) {
    gm_desc d = t_desc();
    d.device_budget = 16 * MiB;
    d.host_budget = 8 * MiB;
    d.disk_dir = dir;
    d.disk_io = io;
    d.disk_chunk = chunk;
    return t_setup(d);
}

/* Whether the spill file is O_DIRECT (the rounding cases are about it). */
static int direct(gm_context* ctx) { return ((gm__disk*)ctx->disk)->direct; }

/* A file system without fallocate. Before, every extent failed as a full
   disk (GM_ERR_DISK_FULL) and the disk tier was dead. */
static void test_no_fallocate(gm_disk_io io) {
    gm_context* ctx;
    gm_tensor a, b;
    gm_tier_stats ts;
    const size_t n = 3 * MiB + 77;
    atk_falloc = A_NOSUP;
    ctx = adverse_ctx(io, 0);
    if (!ctx) {
        atk_falloc = A_NONE;
        return;
    }
    T_OK(gm_tensor_create(ctx, &a, n));
    T_OK(gm_tensor_create(ctx, &b, n));
    fill(ctx, a, n, 11, NULL);
    fill(ctx, b, n, 12, NULL);
    t_log_count = 0;
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_CHECK(strstr(t_last_log, "cannot reserve room") != NULL || t_log_count > 0);
    T_OK(gm_tensor_evict_to(ctx, b, GM_TIER_DISK));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.disk_reserved >= (int64_t)(2 * n));
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 11, NULL);
    verify(ctx, b, n, 12, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_shutdown(ctx));
    atk_falloc = A_NONE;
}

/* pwrite and pread say they moved just over half of what was asked (not
   a whole unit of the alignment), down to the last 8 KiB. Before, the rest went again at an
   unaligned offset, which O_DIRECT refuses: the write and the read failed. */
static void test_short_unaligned(void) {
    gm_context* ctx = adverse_ctx(GM_DISK_IO_PREAD, 0);
    gm_tensor a;
    void* p;
    const size_t n = 5 * MiB + 123;
    if (!ctx) return;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 21, NULL);
    atk_write = A_HALF_PLUS;
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    atk_write = A_NONE;
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_EQ(gm_check(ctx), 0);
    atk_read = A_HALF_PLUS;
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    atk_read = A_NONE;
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 21, NULL);
    T_EQ(errors_now(ctx), 0);
    if (!direct(ctx)) printf("note: the spill file is not O_DIRECT here: the unaligned case ran buffered\n");
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* A disk that moves nothing, or 100 bytes at a time (under O_DIRECT, no
   whole unit: no progress either): the write fails as an I/O error, the
   tensor stays on the device; the read fails, it stays on disk. */
static void test_no_progress(int atk) {
    gm_context* ctx = adverse_ctx(GM_DISK_IO_PREAD, 0);
    gm_tensor a;
    gm_tier_stats ts;
    void* p;
    const size_t n = 2 * MiB + 5;
    long w0;
    if (!ctx) return;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 31, NULL);
    atk_write = atk;
    w0 = n_write;
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_IO);
    atk_write = A_NONE;
    T_CHECK(n_write - w0 < 64); /* it gave up, it did not spin */
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 31, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    if (atk == A_ZERO || direct(ctx)) {
        atk_read = atk;
        T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_IO);
        atk_read = A_NONE;
        T_EQ(where(ctx, a), GM_TIER_DISK);
        T_EQ(gm_check(ctx), 0);
    }
    verify(ctx, a, n, 31, NULL);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.disk_errors > 0);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* pwrite and pread refuse for a moment (EAGAIN, as a completion may say
   when a device queue is full): a few refusals and the I/O goes again and
   succeeds; a refusal that does not end fails the job after a few tries,
   and the tensor stays where it was. Before, the first refusal failed the
   write (and the read) as an I/O error. */
static void test_transient(void) {
    gm_context* ctx = adverse_ctx(GM_DISK_IO_PREAD, 256 * KiB);
    gm_tensor a;
    void* p;
    const size_t n = 2 * MiB + 17;
    long w0;
    if (!ctx) return;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 61, NULL);
    atk_again = 3;
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_EQ(atk_again <= 0, 1);
    atk_again = 0;
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_EQ(gm_check(ctx), 0);
    atk_again = 3;
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    atk_again = 0;
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    verify(ctx, a, n, 61, NULL);
    T_EQ(errors_now(ctx), 0);
    fill(ctx, a, n, 62, NULL); /* written: the next eviction writes it again */
    atk_again = 1 << 20;       /* the disk never takes it */
    w0 = n_write;
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_IO);
    atk_again = 0;
    T_CHECK(n_write - w0 < 200); /* it gave up */
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 62, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    verify(ctx, a, n, 62, NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* The disk refuses everything for ns from the next I/O on (0: never). */
static void busy_for(uint64_t ns) {
    __atomic_store_n(&atk_busy_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&atk_busy_until, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&atk_busy_ns, ns, __ATOMIC_RELAXED);
}

/* A disk that refuses every write and read for 30 ms (EAGAIN) from the
   first one on, then takes them. Before, a refused I/O went again at
   once, eight times within microseconds, and the job failed (GM_ERR_IO):
   an eviction to disk and a bring-in from it both failed on a disk busy
   for a moment. Now each try waits longer (1 ms, then twice as long:
   255 ms in all), and both end well, with the bytes intact. */
static void test_busy_disk(void) {
    gm_context* ctx = adverse_ctx(GM_DISK_IO_PREAD, 256 * KiB);
    gm_tensor a;
    void* p;
    const size_t n = MiB + 5;
    if (!ctx) return;
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 71, NULL);
    t_log_count = 0;
    busy_for(30000000u);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    busy_for(0);
    T_EQ(where(ctx, a), GM_TIER_DISK);
    T_CHECK(t_log_count > 0); /* each refusal said */
    T_CHECK(strstr(t_last_log, "it goes again in") != NULL);
    T_EQ(gm_check(ctx), 0);
    busy_for(30000000u);
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    busy_for(0);
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    verify(ctx, a, n, 71, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    /* written again; its first chunk refused for a moment while the others
       move nothing: the job fails, and the chunk waiting to go again ends
       with it (it is not sent to a job that failed) */
    fill(ctx, a, n, 72, NULL);
    atk_again = 1;
    atk_write = A_ZERO;
    T_EQ(gm_tensor_evict_to(ctx, a, GM_TIER_DISK), GM_ERR_IO);
    atk_write = A_NONE;
    atk_again = 0;
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, a, n, 72, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK)); /* and the disk is usable after */
    verify(ctx, a, n, 72, NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* io_uring_submit fails for one request (EBUSY): that chunk fails, and the
   request stays in the ring, sent by the next submit. Before, it was then
   run for a slot already given to other I/O (its completion met a slot
   with no job: a crash, or a read landing in memory given back). Now it is
   a no-op by then. A few jobs after it, every byte checks. */
static void test_submit_fails(void) {
#ifdef GPUMEM_URING
    gm_context* ctx = adverse_ctx(GM_DISK_IO_URING, 256 * KiB);
    gm_tensor t[6];
    const size_t n = 3 * MiB + 9;
    int i, k;
    if (!ctx) return;
    if (!((gm__disk*)ctx->disk)->uring) {
        printf("note: io_uring is not available here: the submit case did not run\n");
        T_OK(gm_shutdown(ctx));
        return;
    }
    for (i = 0; i < 6; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], n));
        fill(ctx, t[i], n, 40u + (unsigned)i, NULL);
    }
    for (k = 2; k <= 6; k += 2) { /* the k-th submit from here fails */
        gm_tier was = where(ctx, t[k / 2 - 1]);
        gm_result r;
        atk_submit = k;
        r = gm_tensor_evict_to(ctx, t[k / 2 - 1], GM_TIER_DISK);
        atk_submit = 0;
        T_CHECK(r == GM_OK || r == GM_ERR_IO);
        T_EQ(where(ctx, t[k / 2 - 1]), r == GM_OK ? GM_TIER_DISK : was); /* a failed write: where it was */
        T_EQ(gm_check(ctx), 0);
        for (i = 3; i < 6; i++) T_OK(gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK)); /* more I/O through the ring */
        for (i = 0; i < 6; i++) verify(ctx, t[i], n, 40u + (unsigned)i, NULL);
        T_EQ(gm_check(ctx), 0);
    }
    T_EQ(errors_now(ctx), 0);
    for (i = 0; i < 6; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
#endif
}

/* Entries in the spill directory (besides . and ..). */
static int dir_entries(void) {
    DIR* d = opendir(dir);
    struct dirent* e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* A file system without O_TMPFILE that refuses O_DIRECT: the spill file is
   a named file, unlinked at once, and used through the page cache; no file
   is left in the directory. Before, the file was opened with O_DIRECT and
   the refusal came after it was created, leaving it behind. */
static void test_no_tmpfile_no_direct(void) {
    gm_context* ctx;
    gm_tensor a;
    const size_t n = MiB + 3;
    atk_tmpfile = atk_direct = 1;
    atk_direct_hits = 0;
    ctx = adverse_ctx(GM_DISK_IO_DEFAULT, 0);
    atk_tmpfile = atk_direct = 0;
    if (!ctx) return;
    T_CHECK(atk_direct_hits > 0);
    T_EQ(direct(ctx), 0);
    T_EQ(dir_entries(), 0);
    T_OK(gm_tensor_create(ctx, &a, n));
    fill(ctx, a, n, 51, NULL);
    T_OK(gm_tensor_evict_to(ctx, a, GM_TIER_DISK));
    T_EQ(where(ctx, a), GM_TIER_DISK);
    verify(ctx, a, n, 51, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
    T_EQ(dir_entries(), 0);
}

/* A watchdog for the case below: it lets held writes go after 20 s, so a
   call that waits for one ends (and the case fails) instead of hanging. */
static int hold_done, hold_broke;
static void* hold_watch(void* a) {
    int k;
    (void)a;
    for (k = 0; k < 20000 && !__atomic_load_n(&hold_done, __ATOMIC_ACQUIRE); k++) usleep(1000);
    if (!__atomic_load_n(&hold_done, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&hold_broke, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&atk_hold, 0, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* A prefetch never waits for the disk. The device holds four written
   tensors and the host tier two more (their only copies), and the disk
   holds every write until the case lets it go. Prefetching a tensor of
   the host tier needs a device victim to go to the host tier, whose room
   comes only once the other host copy was written to disk. Before, the
   prefetch started that write and waited for it (for good, with this
   disk); now it starts it and returns, the tensor where it was, and an
   acquire after the disk let go finds every byte. */
static void test_prefetch_no_wait(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t[6];
    pthread_t wd;
    const size_t n = 4 * MiB;
    int k, on_host = 0;
    d.device_budget = 16 * MiB;
    d.host_budget = 8 * MiB;
    d.disk_dir = dir;
    d.disk_io = GM_DISK_IO_PREAD;
    ctx = t_setup(d);
    if (!ctx) return;
    hold_done = hold_broke = 0;
    n_held = 0;
    __atomic_store_n(&atk_hold, 1, __ATOMIC_RELEASE);
    pthread_create(&wd, NULL, hold_watch, NULL);
    for (k = 0; k < 6; k++) {
        T_OK(gm_tensor_create(ctx, &t[k], n));
        fill(ctx, t[k], n, 80u + (unsigned)k, NULL);
    }
    for (k = 0; k < 6; k++) on_host += where(ctx, t[k]) == GM_TIER_HOST;
    T_EQ(on_host, 2);
    T_EQ(where(ctx, t[0]), GM_TIER_HOST);
    T_OK(gm_tensor_prefetch(ctx, t[0], NULL));
    T_EQ(__atomic_load_n(&hold_broke, __ATOMIC_ACQUIRE), 0); /* it returned while the writes were held */
    T_EQ(where(ctx, t[0]), GM_TIER_HOST);
    for (k = 0; k < 10000 && !__atomic_load_n(&n_held, __ATOMIC_RELAXED); k++) usleep(1000);
    T_CHECK(__atomic_load_n(&n_held, __ATOMIC_RELAXED) > 0); /* it started the write its room needs */
    T_EQ(gm_check(ctx), 0);
    __atomic_store_n(&hold_done, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&atk_hold, 0, __ATOMIC_RELEASE);
    pthread_join(wd, NULL);
    for (k = 0; k < 6; k++) verify(ctx, t[k], n, 80u + (unsigned)k, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (k = 0; k < 6; k++) T_OK(gm_tensor_destroy(ctx, t[k]));
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    const char* base = getenv("GM_TEST_DISK_DIR");
    (void)t_walk; /* the shared walk is for the other suites */
    snprintf(dir, sizeof dir, "%s/gpumem-adverse-XXXXXX", base && *base ? base : "/var/tmp");
    if (!mkdtemp(dir)) {
        printf("note: cannot make a directory for the spill file (%s): skipped\n", strerror(errno));
        return t_done();
    }
    test_no_fallocate(GM_DISK_IO_PREAD);
    test_no_fallocate(GM_DISK_IO_DEFAULT);
    test_short_unaligned();
    test_no_progress(A_ZERO);
    test_no_progress(A_TINY);
    test_transient();
    test_busy_disk();
    test_submit_fails();
    test_no_tmpfile_no_direct();
    test_prefetch_no_wait();
    rmdir(dir);
    return t_done();
}
