/* cudart.c -- a CUDA runtime stand-in for tests: the subset of the CUDA
   runtime (and, through the driver entry points, of the driver's virtual
   memory API) that gpumem uses, with the real headers' prototypes, built on
   host memory and threads. A test double: it proves that code keeps CUDA's
   documented rules, at their strictest, not that a GPU is fast. Each rule
   it enforces is listed in README.md beside it, and broken on purpose by
   test_cudart.c. Violations are counted (gmcudart_violations) and printed
   on stderr; faults (host access to gdev memory) are real SIGSEGVs. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gm_cudart.h"

#define API __attribute__((visibility("default")))
#define GRAN ((size_t)2 << 20)      /* the VM allocation granularity */
#define MANAGED_SPAN ((size_t)64 << 30) /* address space for a device's managed memory */

/* >>state -----------------------------------------------------------------
   One mutex (G) guards every table below; a stream's queue has its own
   mutex and condition variable. Per thread: the current device, the last
   error, whether it runs a host function, and its capture mode. */
typedef struct extent { size_t off, len; } extent;
typedef struct arena { extent* e; size_t n, cap; size_t limit; } arena; /* used extents, sorted by off */

typedef struct stream stream;
typedef struct gdev {
    int ctx;                  /* primary context created */
    int fd;                   /* device memory: a memfd of the capacity */
    char *dview, *rw;         /* PROT_NONE view (gdev pointers), read-write view (ours) */
    size_t cap, used;
    arena mem;
    int mfd;                  /* managed memory: a memfd, a user view and ours */
    char *muser, *mrw;
    arena man;
    int busy;                 /* streams running an op now (concurrentManagedAccess 0: managed is off limits) */
    stream* legacy;
    stream** streams;         /* every stream made on it (destroyed ones too, until drained) */
    size_t nstreams, capstreams;
} gdev;

enum { R_DEVICE = 1, R_VM, R_MANAGED, R_PINNED, R_REGISTERED };
typedef struct region {
    uintptr_t start;
    size_t len;
    int kind, dev;
    char* rw;                 /* device-side: where our copies reach its bytes */
    int access;               /* VM: the device may read and write it */
    int fd;                   /* pinned: its file */
    struct vmh* h;            /* VM: the physical allocation mapped here */
} region;

typedef struct vmh {          /* cuMemCreate's physical memory */
    struct vmh* all;          /* every record ever made (they are never freed) */
    int dev;
    size_t off, size;
    int mapped, released;
} vmh;

typedef struct reservation { uintptr_t start; size_t len; } reservation;

enum { OP_COPY, OP_HOST, OP_WAIT, OP_SET, OP_NOP };
typedef struct op {
    struct op* next;
    int kind;
    char* dst;
    const char* src;
    size_t n;
    int val;
    void* owned;              /* freed after the op: a pageable source's staging */
    cudaHostFn_t fn;
    void* user;
    stream* ws;               /* OP_WAIT: until ws->completed >= wseq */
    uint64_t wseq;
} op;

struct stream {
    int dev, blocking, legacy;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op *head, *tail;
    uint64_t submitted, completed;
    int stop, running;
    /* capture */
    int capturing;            /* 0 none, 1 active, 2 invalidated */
    enum cudaStreamCaptureMode cmode;
    pthread_t cthread;
    uint64_t captured;        /* ops recorded, not run */
};

typedef struct slot { stream* s; int live; struct slot* next_free; } slot; /* a stream handle */

typedef struct event {
    stream* s;
    uint64_t seq;
    int captured;
} event;

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_pid; /* the process that initialized the runtime */
static int g_init, g_ndev = 2, g_cma = 1, g_driver = CUDART_VERSION, g_abort;
static size_t g_cap = (size_t)16 << 30;
static gdev* g_dev;
static region* g_reg;
static size_t g_nreg, g_capreg;
static reservation* g_res;
static size_t g_nres, g_capres;
static struct vmh* g_vmh;    /* cuMemCreate's records, all of them */
static slot* g_free_slots;    /* destroyed handles, newest first */
static cudaError_t g_sticky;
static int g_violations;
static char g_last_violation[512];
static int g_global_captures; /* open captures in cudaStreamCaptureModeGlobal */

static __thread int t_dev;
static __thread cudaError_t t_err;
static __thread int t_in_host_fn;
static __thread enum cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

static size_t parse_size(const char* s, size_t def) {
    char* end;
    double v;
    if (!s || !*s) return def;
    v = strtod(s, &end);
    if (end == s || v <= 0) return def;
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

/* Once, under G: the configuration and the devices' memory. */
static void init_locked(void) {
    int d;
    const char* e;
    if (g_init) return;
    g_init = 1;
    g_pid = getpid();
    if ((e = getenv("GM_CUDART_DEVICES")) && atoi(e) > 0 && atoi(e) <= 64) g_ndev = atoi(e);
    g_cap = parse_size(getenv("GM_CUDART_CAPACITY"), g_cap);
    g_cap = (g_cap + GRAN - 1) / GRAN * GRAN;
    if ((e = getenv("GM_CUDART_CMA"))) g_cma = atoi(e) != 0;
    if ((e = getenv("GM_CUDART_DRIVER")) && atoi(e) > 0) g_driver = atoi(e);
    if ((e = getenv("GM_CUDART_ABORT"))) g_abort = atoi(e) != 0;
    g_dev = (gdev*)calloc((size_t)g_ndev, sizeof *g_dev);
    for (d = 0; g_dev && d < g_ndev; d++) {
        g_dev[d].fd = g_dev[d].mfd = -1;
        g_dev[d].cap = g_cap;
    }
}

static void violation(const char* fmt, ...) {
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&G);
    g_violations++;
    snprintf(g_last_violation, sizeof g_last_violation, "%s", msg);
    pthread_mutex_unlock(&G);
    fprintf(stderr, "cudart stand-in: violation: %s\n", msg);
    if (g_abort) abort();
}

static cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady) t_err = e;
    return e;
}

/* >>memory ----------------------------------------------------------------
   Extents of a device's memfd (device memory and VM physical memory) or of
   its managed memfd; regions by address (sorted, binary search). */
static int arena_take(arena* a, size_t len, size_t align, size_t* off) {
    size_t i, at = 0;
    for (i = 0; i <= a->n; i++) {
        size_t end = i < a->n ? a->e[i].off : a->limit;
        at = (at + align - 1) / align * align;
        if (at <= end && end - at >= len) break;
        if (i < a->n) at = a->e[i].off + a->e[i].len;
    }
    if (i > a->n) return 0;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        extent* e = (extent*)realloc(a->e, cap * sizeof *e);
        if (!e) return 0;
        a->e = e, a->cap = cap;
    }
    memmove(&a->e[i + 1], &a->e[i], (a->n - i) * sizeof *a->e);
    a->e[i].off = at, a->e[i].len = len;
    a->n++;
    *off = at;
    return 1;
}

static void arena_give(arena* a, size_t off) {
    size_t i;
    for (i = 0; i < a->n && a->e[i].off != off; i++) {}
    if (i == a->n) return;
    memmove(&a->e[i], &a->e[i + 1], (a->n - i - 1) * sizeof *a->e);
    a->n--;
}

static size_t reg_index(uintptr_t p) { /* the first region starting after p */
    size_t lo = 0, hi = g_nreg;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_reg[mid].start <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static region* reg_find(const void* ptr) { /* the region holding ptr, under G */
    uintptr_t p = (uintptr_t)ptr;
    size_t i = reg_index(p);
    if (i == 0) return NULL;
    if (p - g_reg[i - 1].start < g_reg[i - 1].len) return &g_reg[i - 1];
    return NULL;
}

static int reg_add(region r) {
    size_t i = reg_index(r.start);
    if (g_nreg == g_capreg) {
        size_t cap = g_capreg ? 2 * g_capreg : 256;
        region* n = (region*)realloc(g_reg, cap * sizeof *n);
        if (!n) return 0;
        g_reg = n, g_capreg = cap;
    }
    memmove(&g_reg[i + 1], &g_reg[i], (g_nreg - i) * sizeof *g_reg);
    g_reg[i] = r;
    g_nreg++;
    return 1;
}

static void reg_del(region* r) {
    size_t i = (size_t)(r - g_reg);
    memmove(&g_reg[i], &g_reg[i + 1], (g_nreg - i - 1) * sizeof *g_reg);
    g_nreg--;
}

/* The device's memfd and its two views, made with its context. */
static int dev_memory(gdev* d) {
    if (d->fd >= 0) return 1;
    d->fd = memfd_create("cudart-device", MFD_CLOEXEC);
    if (d->fd < 0 || ftruncate(d->fd, (off_t)d->cap) != 0) return 0;
    d->dview = (char*)mmap(NULL, d->cap, PROT_NONE, MAP_SHARED | MAP_NORESERVE, d->fd, 0);
    d->rw = (char*)mmap(NULL, d->cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->fd, 0);
    if (d->dview == MAP_FAILED || d->rw == MAP_FAILED) return 0;
    d->mem.limit = d->cap;
    d->mfd = memfd_create("cudart-managed", MFD_CLOEXEC);
    if (d->mfd < 0 || ftruncate(d->mfd, (off_t)MANAGED_SPAN) != 0) return 0;
    d->muser = (char*)mmap(NULL, MANAGED_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->mfd, 0);
    d->mrw = (char*)mmap(NULL, MANAGED_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->mfd, 0);
    if (d->muser == MAP_FAILED || d->mrw == MAP_FAILED) return 0;
    d->man.limit = MANAGED_SPAN;
    return 1;
}

/* concurrentManagedAccess 0: managed memory is off limits to the host while
   the device runs anything (under G). */
static void busy_change(gdev* d, int delta) {
    int was = d->busy;
    d->busy += delta;
    if (g_cma || !d->muser || (was > 0) == (d->busy > 0)) return;
    mprotect(d->muser, MANAGED_SPAN, d->busy > 0 ? PROT_NONE : PROT_READ | PROT_WRITE);
}

/* >>streams ---------------------------------------------------------------
   A stream is a FIFO run by its own worker thread; `completed` only grows
   and never passes `submitted`. A handle is a slot: destroying a stream
   frees its slot at once (newest first for the next create) while the
   stream drains in the background. The legacy stream of a device orders
   itself against the blocking streams with waits put in their queues. */
static void* worker(void* arg) {
    stream* s = (stream*)arg;
    gdev* d = &g_dev[s->dev];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        op* o;
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        o = s->head;
        s->running = 1;
        pthread_mutex_unlock(&s->mu);
        if (o->kind != OP_WAIT && o->kind != OP_NOP) {
            pthread_mutex_lock(&G);
            busy_change(d, 1);
            pthread_mutex_unlock(&G);
        }
        switch (o->kind) {
        case OP_COPY: memmove(o->dst, o->src, o->n); break;
        case OP_SET: memset(o->dst, o->val, o->n); break;
        case OP_HOST:
            t_in_host_fn = 1;
            o->fn(o->user);
            t_in_host_fn = 0;
            break;
        case OP_WAIT:
            pthread_mutex_lock(&o->ws->mu);
            while (o->ws->completed < o->wseq) pthread_cond_wait(&o->ws->cv, &o->ws->mu);
            pthread_mutex_unlock(&o->ws->mu);
            break;
        default: break;
        }
        if (o->kind != OP_WAIT && o->kind != OP_NOP) {
            pthread_mutex_lock(&G);
            busy_change(d, -1);
            pthread_mutex_unlock(&G);
        }
        free(o->owned);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->completed++;
        s->running = 0;
        pthread_cond_broadcast(&s->cv);
        free(o);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static stream* stream_new(int dev, int blocking, int legacy) { /* under G */
    stream* s = (stream*)calloc(1, sizeof *s);
    gdev* d = &g_dev[dev];
    if (!s) return NULL;
    s->dev = dev, s->blocking = blocking, s->legacy = legacy;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, worker, s) != 0) {
        free(s);
        return NULL;
    }
    if (d->nstreams == d->capstreams) {
        size_t cap = d->capstreams ? 2 * d->capstreams : 16;
        stream** n = (stream**)realloc(d->streams, cap * sizeof *n);
        if (!n) return s; /* not listed: device synchronize cannot see it; it still works */
        d->streams = n, d->capstreams = cap;
    }
    d->streams[d->nstreams++] = s;
    return s;
}

static void push(stream* s, op* o) { /* with s->mu held */
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->submitted++;
    pthread_cond_broadcast(&s->cv);
}

static uint64_t submitted(stream* s) {
    uint64_t n;
    pthread_mutex_lock(&s->mu);
    n = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void wait_seq(stream* s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void put_wait(stream* s, stream* on, uint64_t seq) { /* s waits for on's first seq ops (s->mu held) */
    op* w;
    if (!seq) return;
    w = (op*)calloc(1, sizeof *w);
    if (!w) return;
    w->kind = OP_WAIT, w->ws = on, w->wseq = seq;
    push(s, w);
}

/* Enqueues o on s with the legacy stream's implicit ordering; a capturing
   stream records it instead of running it. */
static cudaError_t enqueue(stream* s, op* o) {
    gdev* d = &g_dev[s->dev];
    size_t i;
    uint64_t legacy_seq = 0;
    uint64_t* block_seq = NULL;
    stream** block = NULL;
    size_t nb = 0;
    pthread_mutex_lock(&G);
    if (s->legacy && d->nstreams) {
        block = (stream**)malloc(d->nstreams * sizeof *block);
        block_seq = (uint64_t*)malloc(d->nstreams * sizeof *block_seq);
        for (i = 0; block && block_seq && i < d->nstreams; i++)
            if (d->streams[i] != s && d->streams[i]->blocking && !d->streams[i]->stop) block[nb++] = d->streams[i];
    } else if (s->blocking && !s->legacy && d->legacy) {
        legacy_seq = submitted(d->legacy);
    }
    pthread_mutex_unlock(&G);
    for (i = 0; i < nb; i++) block_seq[i] = submitted(block[i]);
    pthread_mutex_lock(&s->mu);
    if (s->capturing) {
        s->captured++;
        pthread_mutex_unlock(&s->mu);
        free(o->owned);
        free(o);
        free(block), free(block_seq);
        return cudaSuccess;
    }
    for (i = 0; i < nb; i++) put_wait(s, block[i], block_seq[i]);
    if (legacy_seq) put_wait(s, d->legacy, legacy_seq);
    push(s, o);
    pthread_mutex_unlock(&s->mu);
    free(block), free(block_seq);
    return cudaSuccess;
}

static void device_sync(int dev) {
    gdev* d = &g_dev[dev];
    size_t i, n;
    stream** all;
    uint64_t* seq;
    pthread_mutex_lock(&G);
    n = d->nstreams;
    all = (stream**)malloc((n ? n : 1) * sizeof *all);
    seq = (uint64_t*)malloc((n ? n : 1) * sizeof *seq);
    for (i = 0; all && i < n; i++) all[i] = d->streams[i];
    pthread_mutex_unlock(&G);
    for (i = 0; all && seq && i < n; i++) seq[i] = submitted(all[i]);
    for (i = 0; all && seq && i < n; i++) wait_seq(all[i], seq[i]);
    free(all), free(seq);
}

/* >>entry -----------------------------------------------------------------
   Every call starts here: no CUDA call from a host function, a sticky error
   stays, a driver too old refuses all but the version and error queries,
   and a call that needs a context creates the current device's. */
enum { NEED_DRIVER = 1, NEED_CTX = 2 };
static cudaError_t enter(const char* name, int need) {
    if (t_in_host_fn) {
        violation("%s called from inside a host function (cudaLaunchHostFunc)", name);
        return fail(cudaErrorNotPermitted);
    }
    pthread_mutex_lock(&G);
    init_locked();
    if (g_pid != getpid()) { /* CUDA does not survive fork(): a child of a process that used it cannot */
        pthread_mutex_unlock(&G);
        violation("%s called in a child of a process that had initialized CUDA (fork without exec)", name);
        return fail(cudaErrorInitializationError);
    }
    if (g_sticky) {
        cudaError_t e = g_sticky;
        pthread_mutex_unlock(&G);
        return fail(e);
    }
    if ((need & NEED_DRIVER) && g_driver < CUDART_VERSION) {
        pthread_mutex_unlock(&G);
        return fail(cudaErrorInsufficientDriver);
    }
    if (need & NEED_CTX) {
        gdev* d = &g_dev[t_dev];
        if (!d->ctx) {
            if (!dev_memory(d)) {
                pthread_mutex_unlock(&G);
                return fail(cudaErrorInitializationError);
            }
            d->ctx = 1;
            d->legacy = stream_new(t_dev, 1, 1);
        }
    }
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}
#define ENTER(need)                                    \
    do {                                               \
        cudaError_t e_ = enter(__func__, (need));      \
        if (e_ != cudaSuccess) return e_;              \
    } while (0)

/* The stream a handle names (the current device's legacy stream for NULL),
   or NULL after a violation. */
static stream* get_stream(cudaStream_t h, const char* name) {
    slot* sl;
    stream* s = NULL;
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return g_dev[t_dev].legacy;
    sl = (slot*)(void*)h;
    pthread_mutex_lock(&G);
    if (sl->live) s = sl->s;
    pthread_mutex_unlock(&G);
    if (!s) violation("%s: stream %p was destroyed (and not handed out again)", name, (void*)h);
    return s;
}

/* Capture: may this thread make a potentially unsafe call now? If not, the
   captures that forbid it are invalidated (as CUDA does). */
static int unsafe_allowed(const char* name) {
    gdev* d;
    size_t i;
    int k, bad = 0;
    if (t_mode == cudaStreamCaptureModeRelaxed) return 1;
    pthread_mutex_lock(&G);
    for (k = 0; k < g_ndev; k++) {
        d = &g_dev[k];
        for (i = 0; i < d->nstreams; i++) {
            stream* s = d->streams[i];
            int mine, forbids;
            if (s->capturing != 1) continue;
            mine = pthread_equal(s->cthread, pthread_self());
            forbids = (mine && s->cmode != cudaStreamCaptureModeRelaxed) ||
                      (!mine && t_mode == cudaStreamCaptureModeGlobal && s->cmode == cudaStreamCaptureModeGlobal);
            if (forbids) {
                s->capturing = 2;
                if (s->cmode == cudaStreamCaptureModeGlobal) g_global_captures--;
                bad = 1;
            }
        }
    }
    pthread_mutex_unlock(&G);
    if (bad) fprintf(stderr, "cudart stand-in: %s during a stream capture: the capture is invalidated\n", name);
    return !bad;
}
#define UNSAFE()                                                                  \
    do {                                                                          \
        if (!unsafe_allowed(__func__)) return fail(cudaErrorStreamCaptureUnsupported); \
    } while (0)

/* >>control ---------------------------------------------------------------- */
API int gmcudart_violations(void) {
    int n;
    pthread_mutex_lock(&G);
    n = g_violations;
    pthread_mutex_unlock(&G);
    return n;
}
API const char* gmcudart_last_violation(void) {
    static __thread char copy[sizeof g_last_violation];
    pthread_mutex_lock(&G);
    memcpy(copy, g_last_violation, sizeof copy);
    pthread_mutex_unlock(&G);
    return copy;
}
API void gmcudart_reset_violations(void) {
    pthread_mutex_lock(&G);
    g_violations = 0;
    g_last_violation[0] = 0;
    pthread_mutex_unlock(&G);
}
API int gmcudart_contexts(int device) {
    int n;
    pthread_mutex_lock(&G);
    init_locked();
    n = device >= 0 && device < g_ndev ? g_dev[device].ctx : 0;
    pthread_mutex_unlock(&G);
    return n;
}
API void gmcudart_set_cma(int on) {
    int k;
    pthread_mutex_lock(&G);
    init_locked();
    g_cma = on != 0;
    for (k = 0; k < g_ndev; k++) /* the user views follow at once */
        if (g_dev[k].muser)
            mprotect(g_dev[k].muser, MANAGED_SPAN, !g_cma && g_dev[k].busy ? PROT_NONE : PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&G);
}
API void gmcudart_set_driver_version(int version) {
    pthread_mutex_lock(&G);
    init_locked();
    g_driver = version;
    pthread_mutex_unlock(&G);
}
API void gmcudart_inject_sticky(int error) {
    pthread_mutex_lock(&G);
    g_sticky = (cudaError_t)error;
    pthread_mutex_unlock(&G);
}
API void gmcudart_reset(void) {
    pthread_mutex_lock(&G);
    g_sticky = cudaSuccess;
    pthread_mutex_unlock(&G);
    t_err = cudaSuccess;
}
API size_t gmcudart_set_capacity(int device, size_t bytes) {
    size_t old = 0;
    pthread_mutex_lock(&G);
    init_locked();
    if (device >= 0 && device < g_ndev) {
        gdev* d = &g_dev[device];
        old = d->cap;
        if (d->used == 0 && bytes) { /* the memfd and views are remade at that size */
            if (d->fd >= 0) {
                munmap(d->dview, d->cap);
                munmap(d->rw, d->cap);
                close(d->fd);
                d->fd = -1;
            }
            d->cap = (bytes + GRAN - 1) / GRAN * GRAN;
            if (d->ctx && d->mfd >= 0) { /* keep managed memory: only device memory is remade */
                d->fd = memfd_create("cudart-device", MFD_CLOEXEC);
                if (d->fd >= 0 && ftruncate(d->fd, (off_t)d->cap) == 0) {
                    d->dview = (char*)mmap(NULL, d->cap, PROT_NONE, MAP_SHARED | MAP_NORESERVE, d->fd, 0);
                    d->rw = (char*)mmap(NULL, d->cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->fd, 0);
                }
                d->mem.limit = d->cap;
            }
        }
    }
    pthread_mutex_unlock(&G);
    return old;
}
API int gmcudart_in_host_func(void) { return t_in_host_fn; }

/* >>device ----------------------------------------------------------------- */
API cudaError_t cudaGetDeviceCount(int* count) {
    ENTER(NEED_DRIVER);
    if (!count) return fail(cudaErrorInvalidValue);
    *count = g_ndev;
    return cudaSuccess;
}
API cudaError_t cudaGetDevice(int* device) {
    ENTER(NEED_DRIVER);
    if (!device) return fail(cudaErrorInvalidValue);
    *device = t_dev;
    return cudaSuccess;
}
API cudaError_t cudaSetDevice(int device) {
    ENTER(NEED_DRIVER);
    if (device < 0 || device >= g_ndev) return fail(cudaErrorInvalidDevice);
    t_dev = device; /* since CUDA 12 this creates the device's primary context */
    ENTER(NEED_DRIVER | NEED_CTX);
    return cudaSuccess;
}
API cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    ENTER(NEED_DRIVER);
    if (!value) return fail(cudaErrorInvalidValue);
    if (device < 0 || device >= g_ndev) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrConcurrentManagedAccess: *value = g_cma; break;
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 0; break;
    default: *value = 0; break;
    }
    return cudaSuccess;
}
API cudaError_t cudaDriverGetVersion(int* v) {
    ENTER(0);
    if (!v) return fail(cudaErrorInvalidValue);
    *v = g_driver;
    return cudaSuccess;
}
API cudaError_t cudaRuntimeGetVersion(int* v) {
    ENTER(0);
    if (!v) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
API cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
    gdev* d;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!free_b || !total) return fail(cudaErrorInvalidValue);
    d = &g_dev[t_dev];
    pthread_mutex_lock(&G);
    *free_b = d->cap - d->used;
    *total = d->cap;
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}
API cudaError_t cudaDeviceSynchronize(void) {
    ENTER(NEED_DRIVER | NEED_CTX);
    UNSAFE();
    device_sync(t_dev);
    return cudaSuccess;
}

/* >>alloc ------------------------------------------------------------------
   Device memory: 256-byte aligned and never 512 (blocks at 512-aligned
   offsets, pointers 256 past them), unreadable from the host; cudaFree
   waits for the whole device. */
API cudaError_t cudaMalloc(void** ptr, size_t size) {
    gdev* d;
    size_t off, len;
    region r;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr) return fail(cudaErrorInvalidValue);
    UNSAFE();
    *ptr = NULL;
    if (!size) return cudaSuccess;
    if (size > ((size_t)1 << 50)) return fail(cudaErrorMemoryAllocation);
    d = &g_dev[t_dev];
    len = (size + 256 + 511) / 512 * 512;
    pthread_mutex_lock(&G);
    if (d->used + len > d->cap || !arena_take(&d->mem, len, 512, &off)) {
        pthread_mutex_unlock(&G);
        return fail(cudaErrorMemoryAllocation);
    }
    memset(&r, 0, sizeof r);
    r.start = (uintptr_t)(d->dview + off + 256);
    r.len = size;
    r.kind = R_DEVICE;
    r.dev = t_dev;
    r.rw = d->rw + off + 256;
    r.fd = -1;
    if (!reg_add(r)) {
        arena_give(&d->mem, off);
        pthread_mutex_unlock(&G);
        return fail(cudaErrorMemoryAllocation);
    }
    d->used += len;
    pthread_mutex_unlock(&G);
    *ptr = (void*)r.start;
    return cudaSuccess;
}

API cudaError_t cudaFree(void* ptr) {
    region* r;
    int dev = t_dev;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr) return cudaSuccess;
    UNSAFE();
    pthread_mutex_lock(&G);
    r = reg_find(ptr);
    if (r && (r->kind == R_DEVICE || r->kind == R_MANAGED) && r->start == (uintptr_t)ptr) dev = r->dev;
    pthread_mutex_unlock(&G);
    device_sync(dev); /* cudaFree waits for the whole device */
    pthread_mutex_lock(&G);
    r = reg_find(ptr);
    if (!r || (r->kind != R_DEVICE && r->kind != R_MANAGED) || r->start != (uintptr_t)ptr) {
        pthread_mutex_unlock(&G);
        violation("cudaFree(%p): not the start of live device or managed memory", ptr);
        return fail(cudaErrorInvalidValue);
    }
    if (r->kind == R_DEVICE) {
        gdev* d = &g_dev[r->dev];
        size_t off = (size_t)(r->rw - d->rw) - 256, len = (r->len + 256 + 511) / 512 * 512;
        arena_give(&d->mem, off);
        d->used -= len;
    } else {
        gdev* d = &g_dev[r->dev];
        size_t off = (size_t)(r->rw - d->mrw);
        memset(r->rw, 0, r->len); /* the next owner sees no old bytes of this one */
        arena_give(&d->man, off);
    }
    reg_del(r);
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

/* Pinned memory: a shared mapping of an unlinked file, as NVIDIA's driver
   maps it through its device file (so io_uring refuses to register it). */
API cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
    const char* dir = getenv("TMPDIR");
    int fd;
    void* p;
    region r;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr) return fail(cudaErrorInvalidValue);
    UNSAFE();
    *ptr = NULL;
    if (!size) return cudaSuccess;
    fd = open(dir && *dir ? dir : "/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    memset(&r, 0, sizeof r);
    r.start = (uintptr_t)p, r.len = size, r.kind = R_PINNED, r.dev = t_dev, r.fd = fd;
    pthread_mutex_lock(&G);
    if (!reg_add(r)) {
        pthread_mutex_unlock(&G);
        munmap(p, size), close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    pthread_mutex_unlock(&G);
    *ptr = p;
    return cudaSuccess;
}
API cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

API cudaError_t cudaFreeHost(void* ptr) {
    region* r;
    size_t len;
    int fd;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr) return cudaSuccess;
    UNSAFE();
    device_sync(t_dev); /* as cudaFree */
    pthread_mutex_lock(&G);
    r = reg_find(ptr);
    if (!r || r->kind != R_PINNED || r->start != (uintptr_t)ptr) {
        pthread_mutex_unlock(&G);
        violation("cudaFreeHost(%p): not memory of cudaHostAlloc", ptr);
        return fail(cudaErrorInvalidValue);
    }
    len = r->len, fd = r->fd;
    reg_del(r);
    pthread_mutex_unlock(&G);
    munmap(ptr, len);
    close(fd);
    return cudaSuccess;
}

API cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
    region r;
    uintptr_t p = (uintptr_t)ptr;
    size_t i;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr || !size) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&G);
    for (i = 0; i < g_nreg; i++) /* any overlap with memory we know */
        if (g_reg[i].start < p + size && p < g_reg[i].start + g_reg[i].len) {
            int kind = g_reg[i].kind;
            pthread_mutex_unlock(&G);
            return fail(kind == R_REGISTERED || kind == R_PINNED ? cudaErrorHostMemoryAlreadyRegistered
                                                                  : cudaErrorInvalidValue);
        }
    memset(&r, 0, sizeof r);
    r.start = p, r.len = size, r.kind = R_REGISTERED, r.dev = t_dev, r.fd = -1;
    i = (size_t)reg_add(r);
    pthread_mutex_unlock(&G);
    return i ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

API cudaError_t cudaHostUnregister(void* ptr) {
    region* r;
    ENTER(NEED_DRIVER | NEED_CTX);
    pthread_mutex_lock(&G);
    r = reg_find(ptr);
    if (!r || r->kind != R_REGISTERED || r->start != (uintptr_t)ptr) {
        pthread_mutex_unlock(&G);
        return fail(cudaErrorHostMemoryNotRegistered);
    }
    reg_del(r);
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

/* Managed memory: host-addressable (the user view), reached by our copies
   through the read-write view. */
API cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
    gdev* d;
    size_t off, len;
    region r;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ptr) return fail(cudaErrorInvalidValue);
    UNSAFE();
    *ptr = NULL;
    if (!size) return fail(cudaErrorInvalidValue);
    d = &g_dev[t_dev];
    len = (size + 4095) / 4096 * 4096;
    pthread_mutex_lock(&G);
    if (!arena_take(&d->man, len, 4096, &off)) {
        pthread_mutex_unlock(&G);
        return fail(cudaErrorMemoryAllocation);
    }
    memset(&r, 0, sizeof r);
    r.start = (uintptr_t)(d->muser + off), r.len = size, r.kind = R_MANAGED, r.dev = t_dev, r.fd = -1;
    r.rw = d->mrw + off;
    if (!reg_add(r)) {
        arena_give(&d->man, off);
        pthread_mutex_unlock(&G);
        return fail(cudaErrorMemoryAllocation);
    }
    pthread_mutex_unlock(&G);
    *ptr = (void*)r.start;
    return cudaSuccess;
}

static int is_managed(const void* p, size_t n) {
    region* r;
    int ok;
    pthread_mutex_lock(&G);
    r = reg_find(p);
    ok = r && r->kind == R_MANAGED && (uintptr_t)p - r->start + n <= r->len;
    pthread_mutex_unlock(&G);
    return ok;
}

API cudaError_t cudaMemAdvise(const void* p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation loc) {
    (void)advice;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!g_cma) return fail(cudaErrorInvalidDevice); /* as WSL2 and Windows answer */
    if (!is_managed(p, n) || (loc.type == cudaMemLocationTypeDevice && (loc.id < 0 || loc.id >= g_ndev)))
        return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}

API cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, struct cudaMemLocation loc, unsigned int flags,
                                     cudaStream_t h) {
    stream* s;
    op* o;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!g_cma) return fail(cudaErrorInvalidDevice);
    if (!is_managed(p, n) || (loc.type == cudaMemLocationTypeDevice && (loc.id < 0 || loc.id >= g_ndev)))
        return fail(cudaErrorInvalidValue);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    o = (op*)calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    o->kind = OP_NOP;
    return enqueue(s, o);
}

/* >>copy -------------------------------------------------------------------
   Where a pointer's n bytes are: device-side (device, VM with access, or
   managed memory: our read-write view), pinned host, or pageable host. */
enum { LOC_DEVICE = 1, LOC_MANAGED, LOC_PINNED, LOC_PAGEABLE, LOC_BAD };
/* A range may run over several VM mappings laid side by side (one
   reservation, several cuMemCreate handles): valid if each has access. */
static int vm_run_ok(size_t i, uintptr_t p, size_t n) { /* under G: from region i, which holds p */
    uintptr_t end = p + n, at = g_reg[i].start + g_reg[i].len;
    if (!g_reg[i].access) return 0;
    while (at < end) {
        if (++i >= g_nreg || g_reg[i].kind != R_VM || g_reg[i].start != at || !g_reg[i].access) return 0;
        at += g_reg[i].len;
    }
    return 1;
}

/* Bytes from p to the end of its region (SIZE_MAX outside any). */
static size_t piece_len(const void* p) {
    region* r;
    size_t n = SIZE_MAX;
    pthread_mutex_lock(&G);
    if ((r = reg_find(p)) != NULL) n = r->len - ((uintptr_t)p - r->start);
    pthread_mutex_unlock(&G);
    return n;
}

static int locate(const void* p, size_t n, char** rw, int* dev) {
    region* r;
    int loc;
    pthread_mutex_lock(&G);
    r = reg_find(p);
    if (!r) {
        pthread_mutex_unlock(&G);
        *rw = (char*)(uintptr_t)p;
        return LOC_PAGEABLE;
    }
    if (r->kind == R_VM) loc = vm_run_ok((size_t)(r - g_reg), (uintptr_t)p, n) ? LOC_DEVICE : LOC_BAD;
    else if ((uintptr_t)p - r->start + n > r->len) loc = LOC_BAD;
    else if (r->kind == R_DEVICE) loc = LOC_DEVICE;
    else if (r->kind == R_MANAGED) loc = LOC_MANAGED;
    else loc = LOC_PINNED;
    *rw = r->rw ? r->rw + ((uintptr_t)p - r->start) : (char*)(uintptr_t)p;
    *dev = r->dev;
    pthread_mutex_unlock(&G);
    return loc;
}

static const char* loc_name(int loc) {
    static const char* n[] = {"", "device", "managed", "pinned host", "pageable host", "no valid"};
    return n[loc];
}

static cudaError_t copy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t h, int sync,
                        const char* name) {
    char *drw, *srw;
    int dd = -1, sd = -1, dl, sl, dev_dst, dev_src;
    stream* s;
    op* o;
    cudaError_t e;
    uint64_t seq;
    char* staged = NULL;
    size_t at, len;
    if (!n) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    if (!(s = get_stream(h, name))) return fail(cudaErrorInvalidResourceHandle);
    dl = locate(dst, n, &drw, &dd);
    sl = locate(src, n, &srw, &sd);
    if (dl == LOC_BAD || sl == LOC_BAD) {
        violation("%s: %zu bytes at %p or %p run past their allocation, or into a VM range without access", name, n,
                  dst, src);
        return fail(cudaErrorInvalidValue);
    }
    dev_dst = dl == LOC_DEVICE || dl == LOC_MANAGED;
    dev_src = sl == LOC_DEVICE || sl == LOC_MANAGED;
    if (kind == cudaMemcpyDefault) /* inferred, as with unified addressing */
        kind = dev_dst && dev_src ? cudaMemcpyDeviceToDevice : dev_dst ? cudaMemcpyHostToDevice
             : dev_src ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
    {
        int want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        int want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
        /* managed memory is either; device memory never host; host memory never device */
        if ((want_dst_dev ? dl == LOC_PINNED || dl == LOC_PAGEABLE : dl == LOC_DEVICE) ||
            (want_src_dev ? sl == LOC_PINNED || sl == LOC_PAGEABLE : sl == LOC_DEVICE)) {
            violation("%s: kind %d, but the destination is %s memory and the source %s memory", name, (int)kind,
                      loc_name(dl), loc_name(sl));
            return fail(cudaErrorInvalidValue);
        }
    }
    if (kind == cudaMemcpyHostToHost && !g_cma && (dl == LOC_MANAGED || sl == LOC_MANAGED))
        violation("%s: a host-to-host copy touches managed memory, a CPU access (concurrentManagedAccess is 0)", name);
    if (sl == LOC_PAGEABLE && dl != LOC_PAGEABLE) { /* pageable to the device: staged before the call returns */
        staged = (char*)malloc(n);
        if (!staged) return fail(cudaErrorMemoryAllocation);
        memcpy(staged, src, n);
    }
    /* one op per piece that lies in one mapping on both sides (VM ranges
       are separate mappings; their bytes are not contiguous in our view) */
    for (at = 0; at < n; at += len) {
        size_t ld = dl == LOC_PAGEABLE ? SIZE_MAX : piece_len((const char*)dst + at);
        size_t ls = sl == LOC_PAGEABLE || staged ? SIZE_MAX : piece_len((const char*)src + at);
        len = n - at;
        if (ld < len) len = ld;
        if (ls < len) len = ls;
        o = (op*)calloc(1, sizeof *o);
        if (!o) {
            if (at == 0) free(staged);
            return fail(cudaErrorMemoryAllocation); /* pieces queued so far still run */
        }
        o->kind = OP_COPY;
        if (dl == LOC_PAGEABLE || dl == LOC_PINNED) o->dst = (char*)dst + at;
        else locate((const char*)dst + at, len, &o->dst, &dd);
        if (staged) o->src = staged + at;
        else if (sl == LOC_PAGEABLE || sl == LOC_PINNED) o->src = (const char*)src + at;
        else locate((const char*)src + at, len, &srw, &sd), o->src = srw;
        if (at + len == n) o->owned = staged; /* freed after the last piece */
        o->n = len;
        e = enqueue(s, o);
        if (e != cudaSuccess) return e;
    }
    seq = submitted(s);
    /* to or from pageable memory, and every synchronous copy: returns once
       done (an asynchronous copy with pageable memory "might be synchronous
       with respect to host": at the strictest, it waits for the stream's
       earlier work; a host-to-host copy is synchronous with the host) */
    if (sync || dl == LOC_PAGEABLE || sl == LOC_PAGEABLE || kind == cudaMemcpyHostToHost) {
        if (s->capturing) return cudaSuccess;
        wait_seq(s, seq);
    }
    return cudaSuccess;
}

API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    ENTER(NEED_DRIVER | NEED_CTX);
    return copy(dst, src, n, kind, s, 0, __func__);
}
API cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
    ENTER(NEED_DRIVER | NEED_CTX);
    UNSAFE();
    return copy(dst, src, n, kind, NULL, 1, __func__);
}

static cudaError_t set(void* dst, int val, size_t n, cudaStream_t h, int sync, const char* name) {
    char* rw;
    int dev;
    stream* s;
    op* o;
    int loc;
    size_t at, len;
    if (!n) return cudaSuccess;
    if (!(s = get_stream(h, name))) return fail(cudaErrorInvalidResourceHandle);
    loc = locate(dst, n, &rw, &dev);
    if (loc != LOC_DEVICE && loc != LOC_MANAGED) {
        violation("%s: %p is %s memory, not device memory", name, dst, loc_name(loc));
        return fail(cudaErrorInvalidValue);
    }
    for (at = 0; at < n; at += len) { /* one op per mapping, as in copy() */
        size_t l = piece_len((char*)dst + at);
        len = l < n - at ? l : n - at;
        if (!(o = (op*)calloc(1, sizeof *o))) return fail(cudaErrorMemoryAllocation);
        locate((char*)dst + at, len, &rw, &dev);
        o->kind = OP_SET, o->dst = rw, o->val = val, o->n = len;
        enqueue(s, o);
    }
    if (sync && !s->capturing) wait_seq(s, submitted(s));
    return cudaSuccess;
}
API cudaError_t cudaMemset(void* dst, int val, size_t n) {
    ENTER(NEED_DRIVER | NEED_CTX);
    UNSAFE();
    return set(dst, val, n, NULL, 1, __func__);
}
API cudaError_t cudaMemsetAsync(void* dst, int val, size_t n, cudaStream_t s) {
    ENTER(NEED_DRIVER | NEED_CTX);
    return set(dst, val, n, s, 0, __func__);
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void* user) {
    stream* s;
    op* o;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!fn) return fail(cudaErrorInvalidValue);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    o = (op*)calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    o->kind = OP_HOST, o->fn = fn, o->user = user;
    return enqueue(s, o);
}

API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
    char* rw;
    int dev = 0, loc;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!a) return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    loc = locate(p, 1, &rw, &dev);
    a->type = loc == LOC_DEVICE ? cudaMemoryTypeDevice : loc == LOC_MANAGED ? cudaMemoryTypeManaged
            : loc == LOC_PINNED ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
    a->device = loc == LOC_PAGEABLE ? -2 : dev;
    a->devicePointer = loc == LOC_PAGEABLE ? NULL : (void*)(uintptr_t)p;
    a->hostPointer = loc == LOC_DEVICE || loc == LOC_PAGEABLE ? NULL : (void*)(uintptr_t)p;
    return cudaSuccess;
}

/* >>api-streams -------------------------------------------------------------- */
static cudaError_t stream_create(cudaStream_t* out, unsigned int flags) {
    slot* sl = NULL;
    stream* s;
    if (!out) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&G);
    s = stream_new(t_dev, !(flags & cudaStreamNonBlocking), 0);
    if (s && (sl = g_free_slots) != NULL) g_free_slots = sl->next_free; /* the newest freed handle first */
    pthread_mutex_unlock(&G);
    if (!s) return fail(cudaErrorMemoryAllocation);
    if (!sl && !(sl = (slot*)calloc(1, sizeof *sl))) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&G);
    sl->s = s, sl->live = 1, sl->next_free = NULL;
    pthread_mutex_unlock(&G);
    *out = (cudaStream_t)(void*)sl;
    return cudaSuccess;
}
API cudaError_t cudaStreamCreate(cudaStream_t* out) {
    ENTER(NEED_DRIVER | NEED_CTX);
    return stream_create(out, cudaStreamDefault);
}
API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
    ENTER(NEED_DRIVER | NEED_CTX);
    return stream_create(out, flags);
}

/* Returns before the stream's work is done: the worker drains it, then
   exits; the handle is free for the next create at once. */
API cudaError_t cudaStreamDestroy(cudaStream_t h) {
    slot* sl = (slot*)(void*)h;
    stream* s;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return fail(cudaErrorInvalidResourceHandle);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&G);
    sl->live = 0;
    sl->s = NULL;
    sl->next_free = g_free_slots;
    g_free_slots = sl;
    pthread_mutex_unlock(&G);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_detach(s->th); /* it stays listed (device synchronize still waits for it); it is never freed */
    return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    stream* s;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    if (s->capturing) { /* synchronizing a capturing stream is always refused */
        pthread_mutex_lock(&G);
        if (s->capturing == 1 && s->cmode == cudaStreamCaptureModeGlobal) g_global_captures--;
        s->capturing = 2;
        pthread_mutex_unlock(&G);
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    UNSAFE();
    wait_seq(s, submitted(s));
    return cudaSuccess;
}

API cudaError_t cudaStreamQuery(cudaStream_t h) {
    stream* s;
    int done;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    done = s->completed == s->submitted;
    pthread_mutex_unlock(&s->mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

/* >>events ----------------------------------------------------------------- */
API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
    event* e;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!out) return fail(cudaErrorInvalidValue);
    e = (event*)calloc(1, sizeof *e);
    if (!e) return fail(cudaErrorMemoryAllocation);
    *out = (cudaEvent_t)(void*)e;
    return cudaSuccess;
}
API cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, cudaEventDefault); }

API cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    free((event*)(void*)ev); /* streams waiting on it captured its record: they hold no pointer to it */
    return cudaSuccess;
}

API cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h) {
    event* e = (event*)(void*)ev;
    stream* s;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    e->s = s;
    e->seq = s->submitted;
    e->captured = s->capturing != 0;
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

static cudaError_t captured_event(event* e) { /* using an event recorded into a capture: refused, capture gone */
    pthread_mutex_lock(&G);
    if (e->s->capturing == 1) {
        if (e->s->cmode == cudaStreamCaptureModeGlobal) g_global_captures--;
        e->s->capturing = 2;
    }
    pthread_mutex_unlock(&G);
    return fail(cudaErrorStreamCaptureUnsupported);
}

API cudaError_t cudaEventQuery(cudaEvent_t ev) {
    event* e = (event*)(void*)ev;
    int done;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (!e->s) return cudaSuccess; /* never recorded: complete */
    if (e->captured) return captured_event(e);
    pthread_mutex_lock(&e->s->mu);
    done = e->s->completed >= e->seq;
    pthread_mutex_unlock(&e->s->mu);
    return done ? cudaSuccess : cudaErrorNotReady; /* not an error: not left as the last error */
}

API cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    event* e = (event*)(void*)ev;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (!e->s) return cudaSuccess;
    if (e->captured) return captured_event(e);
    UNSAFE();
    wait_seq(e->s, e->seq);
    return cudaSuccess;
}

/* The wait captures the event's record now: re-recording it later changes
   nothing for this wait. */
API cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
    event* e = (event*)(void*)ev;
    stream* s;
    op* o;
    (void)flags;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    if (!e->s || !e->seq) return cudaSuccess;
    o = (op*)calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    o->kind = OP_WAIT, o->ws = e->s, o->wseq = e->seq;
    return enqueue(s, o);
}

/* >>capture ---------------------------------------------------------------- */
API cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
    stream* s;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return fail(cudaErrorStreamCaptureUnsupported);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&G);
    if (s->capturing) {
        pthread_mutex_unlock(&G);
        return fail(cudaErrorIllegalState);
    }
    pthread_mutex_lock(&s->mu);
    s->capturing = 1, s->cmode = mode, s->cthread = pthread_self(), s->captured = 0;
    pthread_mutex_unlock(&s->mu);
    if (mode == cudaStreamCaptureModeGlobal) g_global_captures++;
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

API cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* graph) {
    stream* s;
    int was;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!graph) return fail(cudaErrorInvalidValue);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&G);
    pthread_mutex_lock(&s->mu);
    was = s->capturing;
    if (was == 1 && s->cmode == cudaStreamCaptureModeGlobal) g_global_captures--;
    s->capturing = 0;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&G);
    *graph = NULL;
    if (!was) return fail(cudaErrorIllegalState);
    if (was == 2) return fail(cudaErrorStreamCaptureInvalidated);
    *graph = (cudaGraph_t)malloc(1);
    return cudaSuccess;
}

API cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    ENTER(NEED_DRIVER);
    free(g);
    return cudaSuccess;
}

API cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus* status) {
    stream* s;
    ENTER(NEED_DRIVER | NEED_CTX);
    if (!status) return fail(cudaErrorInvalidValue);
    if (!(s = get_stream(h, __func__))) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    *status = s->capturing == 1 ? cudaStreamCaptureStatusActive
            : s->capturing == 2 ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
    enum cudaStreamCaptureMode old;
    ENTER(NEED_DRIVER);
    if (!mode) return fail(cudaErrorInvalidValue);
    old = t_mode;
    t_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* >>errors ----------------------------------------------------------------- */
API cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_err;
    if (t_in_host_fn) return enter(__func__, 0);
    pthread_mutex_lock(&G);
    if (g_sticky) e = g_sticky; /* sticky: not cleared */
    else t_err = cudaSuccess;
    pthread_mutex_unlock(&G);
    return e;
}
API cudaError_t cudaPeekAtLastError(void) {
    cudaError_t e;
    if (t_in_host_fn) return enter(__func__, 0);
    pthread_mutex_lock(&G);
    e = g_sticky ? g_sticky : t_err;
    pthread_mutex_unlock(&G);
    return e;
}

static const struct { cudaError_t e; const char *name, *text; } g_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
};
API const char* cudaGetErrorName(cudaError_t e) {
    size_t i;
    for (i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].e == e) return g_errors[i].name;
    return "cudaErrorUnknown";
}
API const char* cudaGetErrorString(cudaError_t e) {
    size_t i;
    for (i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].e == e) return g_errors[i].text;
    return "unknown error";
}

/* >>vm ---------------------------------------------------------------------
   The driver's virtual memory, reached through cudaGetDriverEntryPoint:
   reservations are PROT_NONE anonymous ranges; cuMemCreate takes 2 MiB
   extents of the device's memfd (counted against its capacity); cuMemMap
   maps them PROT_NONE at fixed addresses (host access faults), and copies
   reach them only once cuMemSetAccess opened them to the device. */
static CUresult drv_enter(const char* name) {
    cudaError_t e = enter(name, NEED_DRIVER | NEED_CTX);
    if (e == cudaErrorNotPermitted) return CUDA_ERROR_NOT_PERMITTED;
    if (e == cudaErrorInsufficientDriver) return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
    if (e != cudaSuccess) return CUDA_ERROR_ILLEGAL_ADDRESS; /* sticky */
    return CUDA_SUCCESS;
}
#define DRV_ENTER()                               \
    do {                                          \
        CUresult r_ = drv_enter(__func__);         \
        if (r_ != CUDA_SUCCESS) return r_;         \
    } while (0)

static CUresult prop_ok(const CUmemAllocationProp* p) {
    if (!p || p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->location.id < 0 || p->location.id >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

static CUresult vm_granularity(size_t* g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags opt) {
    CUresult r;
    (void)opt;
    DRV_ENTER();
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    if ((r = prop_ok(prop)) != CUDA_SUCCESS) return r;
    *g = GRAN;
    return CUDA_SUCCESS;
}

static CUresult vm_reserve(CUdeviceptr* ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    char* p;
    uintptr_t a;
    (void)addr, (void)flags;
    DRV_ENTER();
    if (!ptr || !size || size % GRAN || (align && (align & (align - 1)))) return CUDA_ERROR_INVALID_VALUE;
    if (align < GRAN) align = GRAN;
    p = (char*)mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    a = ((uintptr_t)p + align - 1) / align * align; /* trim to the alignment */
    if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
    munmap((char*)a + size, (uintptr_t)p + size + align - a - size);
    pthread_mutex_lock(&G);
    if (g_nres == g_capres) {
        size_t cap = g_capres ? 2 * g_capres : 16;
        reservation* n = (reservation*)realloc(g_res, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&G);
            munmap((void*)a, size);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g_res = n, g_capres = cap;
    }
    g_res[g_nres].start = a, g_res[g_nres].len = size;
    g_nres++;
    pthread_mutex_unlock(&G);
    *ptr = (CUdeviceptr)a;
    return CUDA_SUCCESS;
}

static CUresult vm_addr_free(CUdeviceptr ptr, size_t size) {
    size_t i;
    DRV_ENTER();
    pthread_mutex_lock(&G);
    for (i = 0; i < g_nres && !(g_res[i].start == ptr && g_res[i].len == size); i++) {}
    if (i == g_nres) {
        pthread_mutex_unlock(&G);
        return CUDA_ERROR_INVALID_VALUE;
    }
    {
        size_t k;
        for (k = 0; k < g_nreg; k++)
            if (g_reg[k].kind == R_VM && g_reg[k].start >= ptr && g_reg[k].start < ptr + size) {
                pthread_mutex_unlock(&G);
                violation("cuMemAddressFree(%#llx): a range in it is still mapped (cuMemUnmap first)",
                          (unsigned long long)ptr);
                return CUDA_ERROR_INVALID_VALUE;
            }
    }
    g_res[i] = g_res[--g_nres];
    pthread_mutex_unlock(&G);
    munmap((void*)(uintptr_t)ptr, size);
    return CUDA_SUCCESS;
}

static CUresult vm_create(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                          unsigned long long flags) {
    CUresult r;
    gdev* d;
    vmh* m;
    size_t off;
    (void)flags;
    DRV_ENTER();
    if (!h || !size || size % GRAN) return CUDA_ERROR_INVALID_VALUE;
    if ((r = prop_ok(prop)) != CUDA_SUCCESS) return r;
    d = &g_dev[prop->location.id];
    m = (vmh*)calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&G);
    if (!dev_memory(d) || d->used + size > d->cap || !arena_take(&d->mem, size, GRAN, &off)) {
        pthread_mutex_unlock(&G);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->used += size;
    m->all = g_vmh;
    g_vmh = m;
    pthread_mutex_unlock(&G);
    m->dev = prop->location.id, m->off = off, m->size = size;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)m;
    return CUDA_SUCCESS;
}

static void vm_drop(vmh* m) { /* under G: the physical memory goes when released and unmapped */
    if (m->released && !m->mapped && m->size) {
        gdev* d = &g_dev[m->dev];
        arena_give(&d->mem, m->off);
        d->used -= m->size;
        m->size = 0; /* the record stays (never freed), so a second release is seen */
    }
}

static CUresult vm_release(CUmemGenericAllocationHandle h) {
    vmh* m = (vmh*)(uintptr_t)h;
    DRV_ENTER();
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G);
    if (m->released) {
        pthread_mutex_unlock(&G);
        violation("cuMemRelease: handle released twice");
        return CUDA_ERROR_INVALID_VALUE;
    }
    m->released = 1;
    vm_drop(m);
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}

static CUresult vm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags) {
    vmh* m = (vmh*)(uintptr_t)h;
    size_t i;
    gdev* d;
    region r;
    void* p;
    (void)flags;
    DRV_ENTER();
    if (!m || offset || !size || size != m->size || ptr % GRAN) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&G);
    for (i = 0; i < g_nres && !(ptr >= g_res[i].start && ptr + size <= g_res[i].start + g_res[i].len); i++) {}
    if (i == g_nres || m->released) {
        pthread_mutex_unlock(&G);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (i = 0; i < g_nreg; i++)
        if (g_reg[i].start < ptr + size && ptr < g_reg[i].start + g_reg[i].len) {
            pthread_mutex_unlock(&G);
            violation("cuMemMap(%#llx): the range is mapped already", (unsigned long long)ptr);
            return CUDA_ERROR_INVALID_VALUE;
        }
    d = &g_dev[m->dev];
    p = mmap((void*)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, d->fd, (off_t)m->off);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&G);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(&r, 0, sizeof r);
    r.start = ptr, r.len = size, r.kind = R_VM, r.dev = m->dev, r.rw = d->rw + m->off, r.fd = -1, r.h = m;
    if (!reg_add(r)) {
        mmap((void*)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        pthread_mutex_unlock(&G);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->mapped++;
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}

static CUresult vm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
    size_t i, covered = 0;
    int rw = 0;
    DRV_ENTER();
    if (!desc || !count || !size) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= g_ndev)
            return CUDA_ERROR_INVALID_DEVICE;
        rw |= desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    pthread_mutex_lock(&G);
    for (i = 0; i < g_nreg; i++)
        if (g_reg[i].kind == R_VM && g_reg[i].start >= ptr && g_reg[i].start + g_reg[i].len <= ptr + size) {
            g_reg[i].access = rw;
            covered += g_reg[i].len;
        }
    pthread_mutex_unlock(&G);
    return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* every byte must be mapped */
}

static CUresult vm_unmap(CUdeviceptr ptr, size_t size) {
    size_t i, covered = 0;
    DRV_ENTER();
    pthread_mutex_lock(&G);
    for (i = 0; i < g_nreg; i++) /* exactly whole mapped ranges */
        if (g_reg[i].kind == R_VM && g_reg[i].start < ptr + size && ptr < g_reg[i].start + g_reg[i].len) {
            if (g_reg[i].start < ptr || g_reg[i].start + g_reg[i].len > ptr + size) {
                pthread_mutex_unlock(&G);
                return CUDA_ERROR_INVALID_VALUE;
            }
            covered += g_reg[i].len;
        }
    if (covered != size) {
        pthread_mutex_unlock(&G);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (i = 0; i < g_nreg;) {
        if (g_reg[i].kind == R_VM && g_reg[i].start >= ptr && g_reg[i].start < ptr + size) {
            vmh* m = g_reg[i].h;
            mmap((void*)g_reg[i].start, g_reg[i].len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                 -1, 0);
            reg_del(&g_reg[i]);
            m->mapped--;
            vm_drop(m);
            continue;
        }
        i++;
    }
    pthread_mutex_unlock(&G);
    return CUDA_SUCCESS;
}

static CUresult drv_error_string(CUresult e, const char** s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
    case CUDA_SUCCESS: *s = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case CUDA_ERROR_NOT_PERMITTED: *s = "operation not permitted"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; break;
    default: *s = "unknown error"; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult drv_device_get(CUdevice* dev, int ordinal) {
    DRV_ENTER();
    if (!dev || ordinal < 0 || ordinal >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

static CUresult drv_primary_state(CUdevice dev, unsigned int* flags, int* active) {
    if (t_in_host_fn) {
        violation("cuDevicePrimaryCtxGetState called from inside a host function");
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if (!flags || !active || dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    *active = gmcudart_contexts(dev); /* asks, creates nothing */
    return CUDA_SUCCESS;
}

typedef void (*anyfn)(void);
static const struct { const char* name; anyfn fn; } g_entries[] = {
    {"cuMemGetAllocationGranularity", (anyfn)vm_granularity},
    {"cuMemAddressReserve", (anyfn)vm_reserve},
    {"cuMemAddressFree", (anyfn)vm_addr_free},
    {"cuMemCreate", (anyfn)vm_create},
    {"cuMemRelease", (anyfn)vm_release},
    {"cuMemMap", (anyfn)vm_map},
    {"cuMemUnmap", (anyfn)vm_unmap},
    {"cuMemSetAccess", (anyfn)vm_set_access},
    {"cuGetErrorString", (anyfn)drv_error_string},
    {"cuDeviceGet", (anyfn)drv_device_get},
    {"cuDevicePrimaryCtxGetState", (anyfn)drv_primary_state},
};

API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                                 unsigned long long flags, enum cudaDriverEntryPointQueryResult* st) {
    size_t i;
    (void)version, (void)flags;
    ENTER(NEED_DRIVER);
    if (!symbol || !fn) return fail(cudaErrorInvalidValue);
    *fn = NULL;
    for (i = 0; i < sizeof g_entries / sizeof g_entries[0]; i++)
        if (!strcmp(symbol, g_entries[i].name)) {
            memcpy(fn, &g_entries[i].fn, sizeof *fn); /* a function pointer handed out as void*, as CUDA does */
            if (st) *st = cudaDriverEntryPointSuccess;
            return cudaSuccess;
        }
    if (st) *st = cudaDriverEntryPointSymbolNotFound;
    return fail(cudaErrorSymbolNotFound);
}

API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                        enum cudaDriverEntryPointQueryResult* st) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, st);
}
