/* test_cudart.c -- the CUDA runtime stand-in's own tests: each rule of
   CUDA's contract that the stand-in enforces is broken here on purpose, and
   the test sees the fault, the error or the violation. Faults (host access
   to device memory, to managed memory while the device runs with
   concurrentManagedAccess 0) happen in forked children. Last line:
   "N passed, N failed". */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gm_cudart.h"

static int pass, failed;
#define CHECK(c) check_((c) ? 1 : 0, #c, __LINE__)
#define EQ(a, b) eq_((long long)(a), (long long)(b), #a, #b, __LINE__)
#define OK(e) eq_((long long)(e), 0, #e, "cudaSuccess", __LINE__)
static int check_(int ok, const char* what, int line) {
    if (ok) pass++;
    else failed++, printf("FAIL test_cudart.c:%d: %s\n", line, what);
    return ok;
}
static int eq_(long long a, long long b, const char* sa, const char* sb, int line) {
    if (a == b) pass++;
    else failed++, printf("FAIL test_cudart.c:%d: %s == %s (%lld != %lld)\n", line, sa, sb, a, b);
    return a == b;
}

/* One violation more than before, whose text names `what`. */
static int seen;
#define VIOLATION(what) violation_((what), __LINE__)
static void violation_(const char* what, int line) {
    int now = gmcudart_violations();
    eq_(now, seen + 1, "violations", "one more", line);
    check_(strstr(gmcudart_last_violation(), what) != NULL, what, line);
    seen = now;
}
#define NO_VIOLATION() eq_(gmcudart_violations(), seen, "violations", "none more", __LINE__)

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A gate: a host function that blocks its stream until opened. */
typedef struct gate { pthread_mutex_t mu; pthread_cond_t cv; int open, ran; } gate;
static void gate_init(gate* g) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = g->ran = 0;
}
static void CUDART_CB gate_wait(void* arg) {
    gate* g = (gate*)arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    g->ran = 1;
    pthread_mutex_unlock(&g->mu);
}
static void gate_open(gate* g) {
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
static void CUDART_CB set_flag(void* arg) { *(volatile int*)arg = 1; }

/* Whether fn(arg) run in a forked child dies of SIGSEGV. */
static int segfaults(void (*fn)(void*), void* arg) {
    int st;
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* the fault is expected: no core file */
        signal(SIGSEGV, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}
static void read_byte(void* p) { (void)*(volatile char*)p; }
static void write_byte(void* p) { *(volatile char*)p = 1; }

/* Device 1 used alone creates no context on device 0 (in a child: the
   parent has used device 0 before). */
static void test_contexts(void) {
    int st;
    pid_t pid = fork();
    if (pid == 0) {
        void* p = NULL;
        int ok = cudaSetDevice(1) == cudaSuccess && cudaMalloc(&p, 4096) == cudaSuccess && cudaFree(p) == cudaSuccess &&
                 gmcudart_contexts(1) == 1 && gmcudart_contexts(0) == 0;
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    {
        int n = 0;
        OK(cudaGetDeviceCount(&n));
        CHECK(n >= 2);
        EQ(cudaSetDevice(n), cudaErrorInvalidDevice);
        EQ(cudaGetLastError(), cudaErrorInvalidDevice);
    }
    OK(cudaSetDevice(0));
    EQ(gmcudart_contexts(0), 1);
}

/* Streams run on their own; a wait captures the event's record at the
   call; queries say not-ready until done; a never-recorded event is
   complete. */
static void test_streams_events(void) {
    cudaStream_t a, b, c;
    cudaEvent_t e, never;
    gate g;
    volatile int flag = 0;
    gate_init(&g);
    OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&never, cudaEventDisableTiming));
    OK(cudaEventQuery(never)); /* never recorded: complete */
    OK(cudaStreamWaitEvent(b, never, 0)); /* and waiting on it waits for nothing */
    OK(cudaLaunchHostFunc(a, gate_wait, &g)); /* returns at once: a runs it */
    OK(cudaEventRecord(e, a));
    EQ(cudaStreamQuery(a), cudaErrorNotReady);
    EQ(cudaEventQuery(e), cudaErrorNotReady);
    OK(cudaGetLastError()); /* not-ready is not an error */
    OK(cudaStreamWaitEvent(b, e, 0)); /* b waits for a's record as it is now ... */
    OK(cudaEventRecord(e, c));        /* ... re-recording it on idle c changes nothing for b */
    OK(cudaLaunchHostFunc(b, set_flag, (void*)&flag));
    OK(cudaStreamSynchronize(c));
    OK(cudaEventQuery(e)); /* the new record is complete */
    nap_ms(50);
    EQ(flag, 0); /* b still waits for a's gate */
    gate_open(&g);
    OK(cudaStreamSynchronize(b));
    EQ(flag, 1);
    OK(cudaStreamQuery(a));
    OK(cudaEventDestroy(e));
    OK(cudaEventDestroy(never));
    OK(cudaStreamDestroy(a));
    OK(cudaStreamDestroy(b));
    OK(cudaStreamDestroy(c));
    NO_VIOLATION();
}

/* Handles come back, the newest freed first; destroy returns before the
   work ends; a destroyed handle not handed out again is a violation. */
static void test_handle_reuse(void) {
    cudaStream_t a, b, c, d;
    gate g;
    volatile int flag = 0;
    gate_init(&g);
    OK(cudaStreamCreate(&a));
    OK(cudaStreamCreate(&b));
    OK(cudaLaunchHostFunc(a, gate_wait, &g));
    OK(cudaLaunchHostFunc(a, set_flag, (void*)&flag));
    OK(cudaStreamDestroy(a)); /* returns with the gate still closed */
    EQ(flag, 0);
    OK(cudaStreamDestroy(b));
    OK(cudaStreamCreate(&c));
    CHECK(c == b); /* the newest freed handle first */
    OK(cudaStreamCreate(&d));
    CHECK(d == a);
    gate_open(&g);
    OK(cudaDeviceSynchronize()); /* a's work still runs, and ends */
    EQ(flag, 1);
    OK(cudaStreamDestroy(c));
    EQ(cudaStreamSynchronize(c), cudaErrorInvalidResourceHandle);
    VIOLATION("was destroyed");
    (void)cudaGetLastError();
    OK(cudaStreamDestroy(d));
}

/* 256-byte alignment and never 512; host code cannot touch device memory;
   bytes are checked through copies. */
static void test_device_memory(void) {
    void* p[8];
    char buf[1000], back[1000];
    int i, all256 = 1, any512 = 0;
    for (i = 0; i < 8; i++) {
        OK(cudaMalloc(&p[i], (size_t)(i + 1) * 1000));
        all256 &= (uintptr_t)p[i] % 256 == 0;
        any512 |= (uintptr_t)p[i] % 512 == 0;
    }
    CHECK(all256);
    CHECK(!any512);
    CHECK(segfaults(read_byte, p[0]));
    CHECK(segfaults(write_byte, p[1]));
    for (i = 0; i < 1000; i++) buf[i] = (char)(i * 7);
    OK(cudaMemcpy(p[2], buf, 1000, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(back, p[2], 1000, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(buf, back, 1000));
    OK(cudaMemset(p[3], 0x5a, 1000));
    OK(cudaMemcpy(back, p[3], 1000, cudaMemcpyDefault));
    CHECK(back[0] == 0x5a && back[999] == 0x5a);
    /* the wrong kind, and a copy past the end */
    EQ(cudaMemcpy(back, p[2], 1000, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    VIOLATION("kind");
    EQ(cudaMemcpy(back, p[0], 1001, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    VIOLATION("run past");
    EQ(cudaGetLastError(), cudaErrorInvalidValue);
    OK(cudaGetLastError());
    EQ(cudaFree((char*)p[4] + 256), cudaErrorInvalidValue);
    VIOLATION("not the start");
    (void)cudaGetLastError();
    for (i = 0; i < 8; i++) OK(cudaFree(p[i]));
}

/* cudaFree and cudaFreeHost wait for the whole device. */
typedef struct freer { void* p; int host; volatile int done; } freer;
static void* free_thread(void* arg) {
    freer* f = (freer*)arg;
    if (f->host) (void)cudaFreeHost(f->p);
    else (void)cudaFree(f->p);
    f->done = 1;
    return NULL;
}
static void test_free_waits(void) {
    int host;
    for (host = 0; host < 2; host++) {
        cudaStream_t s;
        pthread_t th;
        gate g;
        freer f = {NULL, host, 0};
        gate_init(&g);
        OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        if (host) OK(cudaHostAlloc(&f.p, 4096, cudaHostAllocDefault));
        else OK(cudaMalloc(&f.p, 4096));
        OK(cudaLaunchHostFunc(s, gate_wait, &g)); /* unrelated work on another stream */
        pthread_create(&th, NULL, free_thread, &f);
        nap_ms(50);
        EQ(f.done, 0); /* the free waits for it */
        gate_open(&g);
        pthread_join(th, NULL);
        EQ(f.done, 1);
        OK(cudaStreamDestroy(s));
    }
    NO_VIOLATION();
}

/* A host function may make no CUDA call. */
static volatile cudaError_t inside;
static void CUDART_CB calls_cuda(void* arg) {
    int n;
    (void)arg;
    inside = cudaGetDeviceCount(&n);
}
static void test_host_function(void) {
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaLaunchHostFunc(s, calls_cuda, NULL));
    OK(cudaStreamSynchronize(s));
    EQ(inside, cudaErrorNotPermitted);
    VIOLATION("host function");
    OK(cudaStreamDestroy(s));
}

/* concurrentManagedAccess 0: host access while the device runs faults; a
   host-to-host copy into managed memory is a CPU access. */
static void test_managed(void) {
    cudaStream_t s;
    char* m;
    char* buf; /* pinned: a copy with pageable memory may wait for its stream */
    int v;
    gate g;
    struct cudaMemLocation dev0;
    memset(&dev0, 0, sizeof dev0);
    dev0.type = cudaMemLocationTypeDevice, dev0.id = 0;
    gate_init(&g);
    OK(cudaHostAlloc((void**)&buf, 64, cudaHostAllocDefault));
    OK(cudaMallocManaged((void**)&m, 1 << 20, cudaMemAttachGlobal));
    m[0] = 1; /* idle device: the host may touch it */
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    gmcudart_set_cma(0);
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
    EQ(v, 0);
    EQ(cudaMemAdvise(m, 4096, cudaMemAdviseSetPreferredLocation, dev0), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    OK(cudaLaunchHostFunc(s, gate_wait, &g)); /* the device is busy */
    nap_ms(20);
    CHECK(segfaults(read_byte, m));
    memset(buf, 3, 64);
    OK(cudaMemcpyAsync(m + 4096, buf, 64, cudaMemcpyDefault, s)); /* through the device: fine */
    NO_VIOLATION();
    gate_open(&g);
    OK(cudaStreamSynchronize(s));
    EQ(m[4096], 3); /* idle again */
    OK(cudaMemcpy(m, buf, 64, cudaMemcpyHostToHost));
    VIOLATION("host-to-host");
    gmcudart_set_cma(1);
    OK(cudaMemAdvise(m, 4096, cudaMemAdviseSetPreferredLocation, dev0));
    OK(cudaMemPrefetchAsync(m, 4096, dev0, 0, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaStreamDestroy(s));
    OK(cudaFree(m));
    OK(cudaFreeHost(buf));
}

/* An asynchronous copy with pageable memory "might be synchronous with
   respect to host": it returns only once the stream's earlier work and the
   copy are done. */
static void* open_later(void* arg) {
    nap_ms(100);
    gate_open((gate*)arg);
    return NULL;
}
static void test_pageable_waits(void) {
    cudaStream_t s;
    gate g;
    void* d = NULL;
    char buf[64];
    pthread_t th;
    gate_init(&g);
    memset(buf, 7, sizeof buf);
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    OK(cudaMalloc(&d, sizeof buf));
    OK(cudaLaunchHostFunc(s, gate_wait, &g));
    pthread_create(&th, NULL, open_later, &g);
    OK(cudaMemcpyAsync(d, buf, sizeof buf, cudaMemcpyHostToDevice, s));
    CHECK(g.ran); /* it waited for the gate */
    pthread_join(th, NULL);
    OK(cudaStreamDestroy(s));
    OK(cudaFree(d));
    NO_VIOLATION();
}

/* Out of memory is returned and cleared; an injected device fault sticks. */
static void test_errors(void) {
    void *p = NULL, *q = NULL;
    size_t fr, total;
    int n;
    OK(cudaMemGetInfo(&fr, &total));
    EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
    EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    OK(cudaGetLastError()); /* cleared */
    OK(cudaMalloc(&p, 4096));
    gmcudart_inject_sticky(cudaErrorIllegalAddress);
    EQ(cudaMalloc(&q, 4096), cudaErrorIllegalAddress);
    EQ(cudaGetLastError(), cudaErrorIllegalAddress);
    EQ(cudaGetLastError(), cudaErrorIllegalAddress); /* sticky: not cleared */
    EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EQ(cudaGetDeviceCount(&n), cudaErrorIllegalAddress);
    gmcudart_reset(); /* a process would have to exit; tests go on */
    OK(cudaFree(p));
    gmcudart_set_driver_version(CUDART_VERSION - 10);
    EQ(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
    EQ(cudaMalloc(&p, 64), cudaErrorInsufficientDriver);
    OK(cudaDriverGetVersion(&n));
    CHECK(n < CUDART_VERSION);
    gmcudart_set_driver_version(CUDART_VERSION);
    (void)cudaGetLastError();
    OK(cudaGetDeviceCount(&n));
    NO_VIOLATION();
}

/* CUDA does not survive fork(): in a child of a process that initialized
   it, every call fails with an initialization error (and is a violation). */
static void test_fork(void) {
    int st;
    pid_t pid;
    void* p = NULL;
    OK(cudaMalloc(&p, 4096)); /* this process has initialized CUDA */
    pid = fork();
    if (pid == 0) {
        void* q = NULL;
        int before = gmcudart_violations();
        int ok = cudaMalloc(&q, 4096) == cudaErrorInitializationError && gmcudart_violations() == before + 1 &&
                 strstr(gmcudart_last_violation(), "fork") != NULL;
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cudaFree(p)); /* the parent goes on */
    NO_VIOLATION();
}

/* While a stream captures, allocation, free, synchronization and queries of
   captured events are refused, and the capture is invalidated. */
static void test_capture(void) {
    cudaStream_t s;
    cudaGraph_t graph;
    cudaEvent_t e;
    enum cudaStreamCaptureStatus st;
    void* p;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    /* a clean capture */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaStreamIsCapturing(s, &st));
    EQ(st, cudaStreamCaptureStatusActive);
    OK(cudaEventRecord(e, s));
    OK(cudaStreamEndCapture(s, &graph));
    CHECK(graph != NULL);
    OK(cudaGraphDestroy(graph));
    /* cudaMalloc during a global capture */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EQ(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    OK(cudaStreamIsCapturing(s, &st));
    EQ(st, cudaStreamCaptureStatusInvalidated);
    EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    /* synchronizing the capturing stream */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    /* querying an event recorded in the capture */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    OK(cudaEventRecord(e, s));
    EQ(cudaEventQuery(e), cudaErrorStreamCaptureUnsupported);
    EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    /* relaxed mode allows cudaMalloc */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    OK(cudaMalloc(&p, 4096));
    OK(cudaStreamEndCapture(s, &graph));
    OK(cudaGraphDestroy(graph));
    OK(cudaFree(p));
    (void)cudaGetLastError();
    OK(cudaEventRecord(e, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaEventQuery(e));
    OK(cudaEventDestroy(e));
    OK(cudaStreamDestroy(s));
    NO_VIOLATION();
}

/* io_uring's buffer registration, through the system calls (no liburing):
   0 accepted, an errno refused, -1 when io_uring is not available. */
static int uring_register(void* p, size_t n) {
    struct io_uring_params par;
    struct iovec iov;
    int fd, r;
    memset(&par, 0, sizeof par);
    fd = (int)syscall(__NR_io_uring_setup, 4, &par);
    if (fd < 0) return -1;
    iov.iov_base = p, iov.iov_len = n;
    r = (int)syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS, &iov, 1);
    r = r < 0 ? errno : 0;
    close(fd);
    return r;
}
static void test_pinned(void) {
    void *pinned, *anon;
    size_t n = 1 << 20;
    int r;
    OK(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
    anon = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(anon != MAP_FAILED);
    OK(cudaHostRegister(anon, n, cudaHostRegisterDefault));
    EQ(cudaHostRegister(anon, n, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
    (void)cudaGetLastError();
    r = uring_register(pinned, n);
    if (r == -1) {
        printf("note: io_uring is not available here: its buffer registration is not checked\n");
    } else {
        CHECK(r != 0); /* cudaHostAlloc's shared file mapping: refused */
        EQ(uring_register(anon, n), 0); /* anonymous memory, registered with CUDA: accepted */
    }
    OK(cudaHostUnregister(anon));
    EQ(cudaHostUnregister(anon), cudaErrorHostMemoryNotRegistered);
    (void)cudaGetLastError();
    munmap(anon, n);
    OK(cudaFreeHost(pinned));
    NO_VIOLATION();
}

/* The virtual-memory API: granularity, access, unmap before release. */
typedef CUresult (*fn_gran)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
static void* entry(const char* name) {
    void* fn = NULL;
    enum cudaDriverEntryPointQueryResult st;
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &st) != cudaSuccess) return NULL;
#else
    if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &st) != cudaSuccess) return NULL;
#endif
    return fn;
}
static void test_vm(void) {
    fn_gran gran;
    fn_reserve reserve;
    fn_addr_free addr_free;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUmemGenericAllocationHandle h1, h2;
    CUdeviceptr va;
    size_t g = 0;
    char buf[4096], back[4096];
    int i;
    *(void**)&gran = entry("cuMemGetAllocationGranularity");
    *(void**)&reserve = entry("cuMemAddressReserve");
    *(void**)&addr_free = entry("cuMemAddressFree");
    *(void**)&create = entry("cuMemCreate");
    *(void**)&release = entry("cuMemRelease");
    *(void**)&map = entry("cuMemMap");
    *(void**)&unmap = entry("cuMemUnmap");
    *(void**)&access = entry("cuMemSetAccess");
    if (!CHECK(gran && reserve && addr_free && create && release && map && unmap && access)) return;
    CHECK(entry("cuNoSuchFunction") == NULL);
    (void)cudaGetLastError();
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    EQ(gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    EQ(g, 2u << 20);
    EQ(reserve(&va, g / 2, 0, 0, 0), CUDA_ERROR_INVALID_VALUE); /* not a multiple of the granularity */
    EQ(create(&h1, g / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    EQ(reserve(&va, 4 * g, 0, 0, 0), CUDA_SUCCESS);
    EQ(create(&h1, g, &prop, 0), CUDA_SUCCESS);
    EQ(create(&h2, g, &prop, 0), CUDA_SUCCESS);
    EQ(map(va + g / 2, g, 0, h1, 0), CUDA_ERROR_INVALID_VALUE); /* not aligned */
    EQ(map(va, g, 0, h1, 0), CUDA_SUCCESS);
    EQ(map(va + g, g, 0, h2, 0), CUDA_SUCCESS);
    for (i = 0; i < 4096; i++) buf[i] = (char)(i * 13);
    /* no access yet: the device cannot reach it */
    EQ(cudaMemcpy((void*)(uintptr_t)(va + g - 2048), buf, 4096, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    VIOLATION("without access");
    (void)cudaGetLastError();
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EQ(access(va, 3 * g, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* a part is not mapped */
    EQ(access(va, 2 * g, &acc, 1), CUDA_SUCCESS);
    /* a copy across the two mappings */
    OK(cudaMemcpy((void*)(uintptr_t)(va + g - 2048), buf, 4096, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(back, (void*)(uintptr_t)(va + g - 2048), 4096, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(buf, back, 4096));
    CHECK(segfaults(read_byte, (void*)(uintptr_t)va)); /* device memory still */
    EQ(unmap(va + g / 2, g), CUDA_ERROR_INVALID_VALUE); /* not a whole mapping */
    EQ(release(h1), CUDA_SUCCESS); /* mapped: the memory stays until unmapped */
    OK(cudaMemcpy(back, (void*)(uintptr_t)va, 64, cudaMemcpyDeviceToHost));
    EQ(addr_free(va, 4 * g), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    VIOLATION("still mapped");
    EQ(unmap(va, 2 * g), CUDA_SUCCESS);
    EQ(release(h2), CUDA_SUCCESS);
    EQ(release(h2), CUDA_ERROR_INVALID_VALUE);
    VIOLATION("released twice");
    EQ(addr_free(va, 4 * g), CUDA_SUCCESS);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    test_contexts();
    test_streams_events();
    test_handle_reuse();
    test_device_memory();
    test_free_waits();
    test_host_function();
    test_managed();
    test_pageable_waits();
    test_errors();
    test_fork();
    test_capture();
    test_pinned();
    test_vm();
    printf("%d passed, %d failed\n", pass, failed);
    return failed ? 1 : 0;
}
