/* gpumem.h -- a caching allocator for GPU memory, in one C header.

    Do this in ONE C or C++ file of your project:

        #define GPUMEM_IMPLEMENTATION
        #include "gpumem.h"

    and include "gpumem.h" without the define everywhere else. In that one
    file include it before any system header (it defines _GNU_SOURCE for
    mmap and clock_gettime), or build with -D_GNU_SOURCE. Link with
    -pthread. The simulated backend ("sim") is always built; define
    GPUMEM_CUDA before the include (or with -DGPUMEM_CUDA) to build the CUDA
    backend too, and link with -lcudart. Define GPUMEM_URING (and link with
    -luring, Debian's liburing-dev) for the disk tier's io_uring path;
    without it the disk tier uses pread/pwrite.

    Optional overrides, before the implementation include:
        GPUMEM_STATIC             make every public function static
        GPUMEM_MALLOC(n) / GPUMEM_FREE(p)   host allocation (both or neither)
        GPUMEM_ASSERT(c)          internal assertions (default: assert)
        GPUMEM_DEBUG              misuse (double free, foreign pointer, bad
                                  stream) also asserts, on top of the error
        GPUMEM_PLAN_SEARCH        work budget of gm_plan_pack's exact
                                  search (default 1e9, about a second on
                                  the hardest packings, x 1000/n past
                                  1000 requests; 0 turns it off)

    QUICK START
    ===========
        gm_context* ctx;
        gm_result r = gm_setup(&ctx, &(gm_desc){ .device_budget = 8ull << 30 });
        if (r != GM_OK) { puts(gm_result_string(r)); return 1; }
        void* p;
        gm_alloc(ctx, &p, 1 << 20, NULL);   // NULL: the default stream
        ...use p on the default stream...
        gm_free(ctx, p);                    // cached: the next gm_alloc of
                                            // this size reuses it at once
        char buf[8192];
        gm_summary(ctx, buf, sizeof buf); puts(buf);
        gm_shutdown(ctx);

    Every fallible call returns a gm_result (GM_OK is 0, errors are
    negative) and writes its outputs through pointers. gm_result_string()
    names a code; the details (the CUDA error string, the OOM breakdown)
    go to the log callback, which is silent unless you set one
    (desc.log_fn = gm_log_stderr is ready made).

    BACKENDS
    ========
    desc.backend picks one at setup; a CUDA build can still run the sim.
      GM_BACKEND_SIM   a simulated device in host memory: capacity-limited
                       (desc.sim.capacity), 256-byte aligned, memory from
                       MAP_NORESERVE mappings (untouched pages cost nothing,
                       so a 55 GB trace replays on a small machine), truly
                       asynchronous streams (a worker thread each), copies
                       that move bytes with an optional link-bandwidth model,
                       host functions run as stream work ("kernels"), and
                       fault injection (gm_sim_inject).
      GM_BACKEND_CUDA  the CUDA runtime: cudaMalloc/cudaFree, streams and
                       events, cudaMemcpyAsync, pinned and managed memory.
                       Every return code is checked; with no usable device
                       gm_setup returns GM_ERR_NO_DEVICE and logs why.
      GM_BACKEND_DEFAULT  CUDA when built with GPUMEM_CUDA, else sim.

    THE CACHING ALLOCATOR
    =====================
    Requests are rounded up to 512 bytes. Requests up to 1 MiB come from the
    small pool (2 MiB segments), larger ones from the large pool (20 MiB
    segments, or the request rounded to 2 MiB when it is 10 MiB or more).
    A block is best-fit (smallest block that fits, then lowest address),
    split when the rest is worth keeping, and coalesced with free
    neighbours of the same segment when freed.

    Streams: a block belongs to the stream it was allocated on and is reused
    at once on that stream after gm_free (stream order makes that safe). If
    another stream used it, say so with gm_record_stream: gm_free then
    records an event on each such stream and the block is reused only once
    they all completed. A segment that is entirely free may move to another
    stream once an event recorded on its old stream after the last free has
    completed.

    When a request cannot be served the allocator climbs a ladder:
      1. best fit in the free lists (and whole free segments of other
         streams whose last use has completed);
      2. a new segment, if the device budget allows it;
      3. give cached segments that are entirely free back to the device and
         retry;
      4. wait for the pending cross-stream events, search again, retry;
      5. ask the tier manager (when one is attached) to evict;
      6. call desc.oom_fn, which may free memory and ask for a retry;
      7. with desc.fallback = GM_FALLBACK_MANAGED (or a desc.fallback_fn
         that answers it), serve the request from unified memory,
         prefetched to the device: the pointer works as any other and
         gm_free releases it (after waiting for the device); counted in
         num_managed_fallbacks;
      8. fail with GM_ERR_OUT_OF_MEMORY, logging the requested size, the
         capacity and budget, what is allocated, what is reserved but
         unallocated, and what the device has free.

    THE TIERED MANAGER
    ==================
    Tensors (gm_tensor, a handle with a generation) live on the device while
    used and spill to a pinned host pool (desc.host_budget, grown in 64 MiB
    chunks, whole free chunks given back past twice the peak use of the
    last 1024 tensor operations) when cold:
        gm_tensor w;  void* p;
        gm_tensor_create(ctx, &w, bytes);
        gm_tensor_acquire(ctx, w, stream, &p);  // on the device, ordered on stream
        ...kernels use p on stream...
        gm_tensor_release(ctx, w, stream, 1);   // written: the host copy is stale
    A released tensor may be evicted when room is needed, by a tensor or by
    a plain gm_alloc (rung 5 of the ladder): lowest priority first, then
    least recently released, or by next use with GM_EVICT_LEARNED and
    gm_tier_step (prefetching ahead), or by your own gm_victim_fn. Copies
    run on two streams of the manager's own, one per direction of the link,
    so a tensor going out and one coming in move at once. Everything is
    ordered on the device with events: a copy waits for the release of the
    tensor it reads (an event recorded at gm_tensor_release), an acquire's
    stream for the copy that brought its tensor in, and the memory an
    evicted tensor leaves is handed out again at once in stream order, so
    acquire, release and prefetch do not make the calling thread wait for
    the device (the disk tier aside: see below). A tensor is always in some
    tier, and a copy or allocation that fails leaves it where it was. When device and
    host are both full (and no disk tier takes more), desc.fallback (or
    desc.fallback_fn) may serve a tensor from managed memory; otherwise a
    host tensor being brought in trades places with a victim on the device
    whose slot it fits and whose bytes fit its host block (a swap, through
    a 4 MiB bounce buffer, chunk by chunk, waiting for each copy: slow but
    no failure; gm_tier_stats.swaps counts them), and only when no victim
    fits, GM_ERR_OUT_OF_MEMORY. Under GM_EVICT_LEARNED with a disk tier a
    tensor coming from the host tier also swaps when its device victim
    finds no room in the host tier: no copy goes through the disk for it.

    Say what an acquire does with the bytes, and release as acquired:
        gm_use u[3] = {{w, GM_ACCESS_READ}, {x, GM_ACCESS_READ},
                       {y, GM_ACCESS_OVERWRITE}};            // a layer
        gm_tensor_acquire_many(ctx, u, 3, stream);    // all three, or none
        ...kernels read u[0].ptr, u[1].ptr, write all of u[2].ptr...
        gm_tensor_release_many(ctx, u, 3, stream);    // y written, w and x not
    GM_ACCESS_OVERWRITE brings nothing in (zeroed gradients, recomputed
    activations); a tensor never written moves no byte in any tier; a
    read keeps the copies below valid, so its eviction is free. One
    tensor at a time: gm_tensor_acquire_as, and gm_tensor_release with
    GM_AS_ACQUIRED. Evaluation and training: gm_tier_set_phase keeps a
    learned plan per phase (or a step is matched by how it begins).

    Questions a port asks:
    - A pointer from an acquire stays valid for all work queued on its
      stream before the release, even if that work runs later: eviction
      waits (on the device) for the release's event. After the release,
      queue nothing more on it.
    - gm_launch_host's `user` must live until the function ran; use
      gm_launch_host_copy for a small argument block copied at the call.
    - Options: a desc field you set wins, then desc.conf, then GPUMEM_CONF
      (each fills only the fields still zero); ignore_env skips the
      environment (GPUMEM_CONF and GPUMEM_TRACE).
    - Device budget: at least the largest set of tensors acquired at once
      (a batch's sum), rounded up to the allocator's blocks (512 B, and
      2 MiB segments below 1 MiB, 20 MiB segments below 10 MiB), plus what
      plain gm_alloc holds; some room beyond that (a rule of thumb: 10%)
      leaves prefetches somewhere to land. With
      less, a batch fails with GM_ERR_OUT_OF_MEMORY before acquiring any.
    - prefetch_ahead (learned order): enough acquires to cover one copy:
      (tensor bytes / link bytes per s) / compute time per acquire, at
      least 1; 2-4 is typical. More only costs room: a prefetch never
      evicts a tensor needed sooner than the one it brings.
    - Outside a recorded step (another phase without gm_tier_set_phase,
      or a new sequence), acquires that depart from the plan resynchronize
      to it; four in a row and learned order stops prefetching and evicts
      least recently used first, until the plan is followed again.
    - Complexity (docs/api.md has each call's): with classic segments an
      acquire that evicts k tensors costs O(k log n) when a victim's block
      gives the room (the same size), with LRU or learned victims (a heap
      by next use), and a create or bring-in that finds free room weighs
      only the segments holding a free block large enough; expandable
      segments walk the pool's blocks, as do a custom policy (it sees every
      candidate) and host-tier victims with a disk tier; a batch of n is
      O(n^2); gm_tier_step is O(plan + tensors), plus Belady's order,
      O(plan log plan) for the device and, with a disk tier, for the
      device and host tiers together.

    THE DISK TIER
    =============
    With desc.disk_dir (or disk_dir:PATH) set, the host tier is no longer
    the floor: when it is full, host copies that another tier also holds
    are dropped and the coldest others are written to a spill file, and a
    tensor larger than the host tier goes from the device straight to disk.
    gm_tensor_evict_to(ctx, t, GM_TIER_DISK) sends one there now. The file:
      - one per context, created unlinked in disk_dir (O_TMPFILE, mode
        0600): no other user can open it, and nothing is left after a crash;
      - opened O_DIRECT (the page cache is bypassed; a file system that
        refuses it, such as tmpfs, is used buffered, with a warning);
      - reserved with fallocate 256 MiB at a time up to desc.disk_budget
        (default: the free space at setup), so a full disk shows as
        GM_ERR_DISK_FULL before any write, and the allocator's OOM path
        follows when every tier is full (a file system without fallocate,
        such as NFS, grows it unreserved, with a warning: a full disk
        then shows as a write that fails with GM_ERR_DISK_FULL);
      - cut into extents by the same arena as the device and host pools,
        aligned to the file system's direct-I/O alignment (4 KiB or more).
    A transfer is cut into chunks (disk_chunk, 1 MiB) through pinned
    staging slots (disk_depth and half again: 48 MiB by default), with up
    to disk_depth (32) chunks in flight: the copy of the next chunks off
    the device, their CRC32C and the disk I/O overlap, and each completion
    refills the queue while the other slots' copies run. With GPUMEM_URING
    the I/O goes through io_uring with the staging buffers and the file
    registered (flags and registrations the kernel refuses are dropped one
    by one; a kernel without io_uring gets pread/pwrite, with a warning);
    disk_io:pread asks for pread/pwrite, which I/O threads run (up to
    disk_depth, 16 at most) so that its queue is deep too. Short transfers are resumed, every
    completion is checked, and no I/O outlives the call that started it.
    Each extent keeps a CRC32C of the tensor's bytes (disk_checksum:off
    skips it), checked on read-back: a mismatch is GM_ERR_CHECKSUM naming
    the tensor. A failed write (GM_ERR_IO, GM_ERR_DISK_FULL) leaves the
    tensor where it was; a failed read leaves the disk copy, so a retry can
    succeed. A copy below the device stays valid until the tensor is
    released as written, so a clean tensor leaves the device for free.
    Every disk transfer runs on the context's I/O engine (a thread of its
    own with its own ring), most urgent first: an acquire that needs a
    tensor from disk waits only for that tensor's transfer; prefetches and
    writes behind never block the caller, and a call waits for a write
    only when the host tier has no free room, no copy it may drop and no
    write under way for what the call needs (a demotion then). Under
    GM_EVICT_LEARNED the plan treats device and host as one cache in
    Belady's order: tensors the plan will need are read from disk into the
    host tier ahead of their use, copies the order sends to disk are written
    behind as soon as they are chosen, and the host-to-device prefetch then
    finds them in pinned memory. The two tiers hold less than their budgets
    (holes between tensors of mixed sizes, tensors on their way in or out),
    so each phase's plan tries counting on the budgets less 0 to 3 of its
    largest tensors, three steps each, and keeps the one that moved the
    fewest bytes through the disk (an INFO log line says which;
    gm_tier_stats.plan_cache_bytes is the active plan's); it tries again
    after 1024 steps, or when the steps change. A transfer that fails in the engine leaves
    the tensor readable where it still is (gm_tier_stats.disk_errors).

    PLANNED MODE
    ============
    A training step makes the same requests in the same order every time.
    Record one (gm_plan_begin, the step, gm_plan_end) and gpumem packs its
    requests into one region by their lifetimes (gm_plan_pack: greedy by
    size, best-fit offsets); then call gm_plan_step before each step, and
    the n-th gm_alloc of the step gets the n-th request's offset, in O(1),
    with no search. A request that differs (size, stream, an extra one, a
    block still live where the plan wants its bytes) is a departure: the
    online allocator serves it and gm_plan_get_stats counts it; past an
    eighth of the plan in one step, the next step is recorded and planned
    again. Requests that outlive the recorded step are left to the online
    allocator. Planned blocks never overlap a live block. A recording knows
    the order of its events; gm_plan_mark tells it their time (an op's
    index, a schedule's time), and hard steps then pack much closer, as the
    search orders requests by their lifetimes' real lengths.

    OPTIONS
    =======
    Each desc field left zero takes its value from the environment variable
    GPUMEM_CONF ("key:value,key:value", as PYTORCH_CUDA_ALLOC_CONF), or from
    desc.conf (same syntax, read before GPUMEM_CONF), else the default. A bad
    key or value is a warning in the log and the default, never a failure.
    Sizes take suffixes K, M, G, T (powers of 1024).

      key                 desc field                   default
      backend:sim|cuda    backend                      see BACKENDS
      device:N            device                       0
      budget:8G|0.25      device_budget / _fraction    the whole device
      caching:on|off      caching                      on
      thread_cache:on|off thread_cache                 on
      thread_cache_max:64M thread_cache_max            1M, 64M once threads contend
      expandable:on|off   expandable                   off
      expandable_page:20M expandable_page              the backend's granularity
      gc_threshold:0.8    gc_threshold                 off
      max_split_size:64M  max_split_size (> 20 MiB)    unlimited
      log:error|warn|info|debug   log_level            warn
      host_budget:16G     host_budget                  4 GiB
      fallback:fail|managed  fallback                  fail
      disk_dir:/path      disk_dir                     no disk tier
      disk_budget:64G     disk_budget                  free space at setup
      disk_checksum:on|off  disk_checksum              on
      disk_io:uring|pread disk_io                      uring if built, else pread
      disk_depth:32       disk_depth (1..1024)         32
      disk_chunk:1M       disk_chunk (4K..64M)         1 MiB
      sim_capacity:16G    sim.capacity (up to 4T)      16 GiB
      sim_link:25G        sim.link_bytes_per_s         unlimited (bytes/s)
      sim_disk:2G         sim.disk_bytes_per_s         the disk's own (bytes/s)
      sim_inline:on|off   sim.run_inline               off
      sim_bytes:on|off    sim.move_bytes               on

    expandable:on gives each pool and stream one large reserved address
    range instead of separate segments; 2 MiB pages are mapped when a block
    first lands on them, and pages left idle are given back (once their
    stream is past them) before reserved memory would grow past its peak.
    Fragmentation then stays near the page granularity: the memory reserved
    follows the memory live. Needs a backend with virtual memory (sim, and
    CUDA through the driver's cuMem* calls; where the driver lacks them it
    warns and keeps classic segments).
    A budget makes a large card behave like a small one: the allocator never
    reserves more than the budget from the device (a budget above the
    device's memory is the device's memory). caching:off sends every
    request straight to the backend (for memory checkers). gc_threshold:F
    gives back the cached segments unused the longest before growing past
    F * budget.

    TRACES AND SNAPSHOTS
    ====================
    With desc.trace_path set (or the environment variable GPUMEM_TRACE) the
    context writes every allocation and free to that file in RMM's replay
    CSV format, Thread,Time,Action,Pointer,Size,Stream (time in
    microseconds since setup, the size as requested), so a run can be
    replayed through gpumem (tools/gm-replay) or another allocator. Give
    each context its own file: each one truncates its path at setup.
    gm_snapshot() gives the segments and blocks as JSON.

    STATISTICS AND CHECKING
    =======================
    gm_get_stats() has PyTorch's semantics: for allocations, segments,
    active, inactive-split blocks and their bytes, and for reserved and
    requested bytes, the current value, the peak, and the running totals
    allocated and freed, each for all pools, the small and the large pool.
    gm_summary() prints them as a table. gm_check() walks every structure
    and returns the number of broken invariants (0 when healthy), logging
    one line for each that names the structure and what is wrong;
    gm_check_report() also writes those lines into a buffer.

    OWNERSHIP AND MISUSE
    ====================
    Every pointer has one owner, and each call takes only its own, on every
    backend: gm_free, gm_record_stream and gm_block_size take gm_alloc's
    blocks; gm_raw_free only gm_raw_alloc's memory, with its size; the
    device memory gm_tensor_acquire returns belongs to the tiered manager,
    the plan's region and the pinned host tier to gpumem. Anything else is
    GM_ERR_FOREIGN_POINTER with a log line saying what the pointer is; a
    pointer freed already is GM_ERR_DOUBLE_FREE. A tensor handle carries
    its context's serial number (copy the whole gm_tensor), and every other
    context refuses it. A call on a context after gm_shutdown reads freed
    memory: while it has not been reused the call is refused, and with
    GPUMEM_DEBUG it asserts with a message; AddressSanitizer catches every
    case. Misuse never changes anything.

    THREAD SAFETY
    =============
    One context may be used from many threads: every call takes the
    context's lock. Contexts are independent (one per device; nothing is
    global). gm_setup and gm_shutdown must not race with other calls on the
    same context. Host functions run on a stream (gm_launch_host) must make
    no gpumem call and no CUDA call at all: CUDA forbids CUDA calls inside
    them, and every gpumem call may make one (and waits the allocator makes
    may wait for that very stream). With CUDA's per-thread default stream
    (--default-stream per-thread), NULL names a different stream on each
    thread; pass explicit streams instead.
*/
/* The implementation needs POSIX and Linux names (mmap flags, clock_gettime,
   pthreads); they must be asked for before the first system header. */
#if defined(GPUMEM_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef GPUMEM_STATIC
#define GPUMEM_API static
#else
#define GPUMEM_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>api -------------------------------------------------------------------*/

/* Results: 0 is success, GM_NOT_READY is a positive "not yet", errors are
   negative and grouped by area. */
typedef enum gm_result {
    GM_OK = 0,
    GM_NOT_READY = 1,
    /* general */
    GM_ERR_INVALID_ARGUMENT = -1,
    GM_ERR_UNSUPPORTED = -2,
    GM_ERR_INTERNAL = -3,
    /* memory */
    GM_ERR_OUT_OF_MEMORY = -20,
    GM_ERR_HOST_OUT_OF_MEMORY = -21,
    GM_ERR_DISK_FULL = -22,        /* the spill file's budget or file system is full */
    /* misuse */
    GM_ERR_DOUBLE_FREE = -40,
    GM_ERR_FOREIGN_POINTER = -41,
    GM_ERR_STALE_HANDLE = -42,
    GM_ERR_INVALID_STREAM = -43,
    GM_ERR_BAD_STATE = -44,        /* a tensor not in the state the call needs */
    /* device */
    GM_ERR_NO_DEVICE = -60,
    GM_ERR_BACKEND = -61,
    GM_ERR_COPY_FAILED = -62,
    /* disk tier */
    GM_ERR_IO = -80,               /* a read or write of the spill file failed */
    GM_ERR_CHECKSUM = -81          /* bytes read back from disk differ from those written */
} gm_result;

typedef struct gm_context gm_context;

/* A stream of the context's backend. NULL is the default stream. On CUDA a
   gm_stream is a cudaStream_t (cast either way); on sim it comes from
   gm_stream_create. */
typedef struct gm_stream_t* gm_stream;

typedef enum gm_backend {
    GM_BACKEND_DEFAULT = 0,
    GM_BACKEND_SIM,
    GM_BACKEND_CUDA
} gm_backend;

typedef enum gm_log_level {
    GM_LOG_DEFAULT = 0, /* = GM_LOG_WARN */
    GM_LOG_ERROR,
    GM_LOG_WARN,
    GM_LOG_INFO,
    GM_LOG_DEBUG
} gm_log_level;

typedef enum gm_toggle {
    GM_TOGGLE_DEFAULT = 0,
    GM_TOGGLE_ON,
    GM_TOGGLE_OFF
} gm_toggle;

typedef enum gm_oom_action {
    GM_OOM_FAIL = 0, /* give up: the allocation returns GM_ERR_OUT_OF_MEMORY */
    GM_OOM_RETRY     /* the hook released memory: climb the ladder once more */
} gm_oom_action;

typedef enum gm_copy_kind {
    GM_COPY_HOST_TO_DEVICE = 0,
    GM_COPY_DEVICE_TO_HOST,
    GM_COPY_DEVICE_TO_DEVICE,
    GM_COPY_HOST_TO_HOST,
    GM_COPY_DEFAULT /* inferred from the pointers (cudaMemcpyDefault): for unified memory */
} gm_copy_kind;

typedef enum gm_sim_fault {
    GM_SIM_FAULT_DEVICE_ALLOC = 0, /* the Nth device allocation from now fails */
    GM_SIM_FAULT_COPY,             /* the Nth async copy from now fails */
    GM_SIM_FAULT_HOST_ALLOC,       /* the Nth pinned host allocation fails */
    /* the spill file's I/O, counted in chunks (any backend's disk tier, but
       armed through the sim) */
    GM_SIM_FAULT_DISK_WRITE,       /* the Nth chunk write completes with EIO */
    GM_SIM_FAULT_DISK_READ,        /* the Nth chunk read completes with EIO */
    GM_SIM_FAULT_DISK_SHORT,       /* the Nth chunk read or write moves only half (resumed) */
    GM_SIM_FAULT_DISK_FULL,        /* the Nth chunk write completes with ENOSPC */
    GM_SIM_FAULT_DISK_RING         /* io_uring: the ring reports itself broken (EBADF) as the Nth chunk
                                      completes; the disk tier stops, and what the kernel still holds
                                      is reaped before its buffers are anyone else's */
} gm_sim_fault;

/* A tensor of the tiered manager: pool index and generation (id), so a
   handle of a destroyed tensor is refused, and the serial number of the
   context that made it (ctx_id), so every other context refuses it. {0} is
   no tensor. */
typedef struct gm_tensor {
    uint32_t id;
    uint32_t ctx_id;
} gm_tensor;

typedef enum gm_tier {
    GM_TIER_NONE = 0,
    GM_TIER_DEVICE,
    GM_TIER_HOST,
    GM_TIER_DISK,    /* the spill file (desc.disk_dir) */
    GM_TIER_MANAGED  /* served by unified memory */
} gm_tier;

/* What a tensor gets when device memory runs out and nothing can be
   evicted. */
typedef enum gm_fallback {
    GM_FALLBACK_DEFAULT = 0, /* = GM_FALLBACK_FAIL */
    GM_FALLBACK_FAIL,        /* GM_ERR_OUT_OF_MEMORY; the tensor stays where it was */
    GM_FALLBACK_MANAGED      /* unified memory, advised and prefetched to the device */
} gm_fallback;

/* How the spill file is read and written. */
typedef enum gm_disk_io {
    GM_DISK_IO_DEFAULT = 0, /* io_uring when built with GPUMEM_URING and the kernel allows it, else pread */
    GM_DISK_IO_URING,       /* io_uring (needs GPUMEM_URING); falls back to pread if the kernel refuses */
    GM_DISK_IO_PREAD        /* pread/pwrite, from up to 16 I/O threads */
} gm_disk_io;

/* Which released tensor leaves the device when room is needed. */
typedef enum gm_evict_policy {
    GM_EVICT_DEFAULT = 0, /* = GM_EVICT_LRU */
    GM_EVICT_LRU,         /* least recently released first */
    GM_EVICT_LEARNED,     /* the one whose next use is farthest, by the
                             order of acquires of the last step; prefetch
                             ahead of use */
    GM_EVICT_CUSTOM       /* a gm_victim_fn chooses */
} gm_evict_policy;

typedef void (*gm_log_fn)(gm_log_level level, const char* message, void* user);
/* Called without the context lock held, so it may call gm_free. */
typedef gm_oom_action (*gm_oom_fn)(gm_context* ctx, size_t size, gm_stream stream, void* user);
typedef void (*gm_host_fn)(void* user);
/* Decides, when a tensor of `bytes` finds no device room and nothing more
   can be evicted: GM_FALLBACK_FAIL or GM_FALLBACK_MANAGED. */
typedef gm_fallback (*gm_fallback_fn)(gm_context* ctx, size_t bytes, void* user);
/* Chooses a victim among n candidates (least recently released first);
   returns its index, or n to evict nothing. Called with the manager's lock
   held: it must not call gm_tensor_* functions. */
typedef size_t (*gm_victim_fn)(gm_context* ctx, const gm_tensor* candidates, size_t n, void* user);

typedef struct gm_sim_desc {
    size_t capacity;            /* device memory, default 16 GiB */
    double link_bytes_per_s;    /* host<->device, each direction; 0: unlimited */
    double device_bytes_per_s;  /* device->device; 0: unlimited */
    uint64_t fail_device_alloc; /* the Nth device allocation fails; 0: never */
    uint64_t fail_copy;         /* the Nth async copy fails; 0: never */
    gm_toggle run_inline;       /* GM_TOGGLE_ON: an op the model gives no time (a copy of up to
                                   1 MiB over an unlimited link) queued on an idle stream runs at
                                   once in the calling thread, with no hand-off to the stream's
                                   thread: for measuring host-side costs. Default off: copies run
                                   on the stream's thread, concurrently with the host, as on a
                                   device */
    gm_toggle move_bytes;       /* GM_TOGGLE_OFF: copies keep their modelled time, link bytes and
                                   order, but move no bytes (a destination's contents are then
                                   undefined): for benchmarks of host-side costs, where the CPU
                                   moving the bytes stands in for a copy engine that would not
                                   charge the host. Default on */
    double disk_bytes_per_s;    /* the spill file's I/O, reads and writes together, paced to this
                                   rate as one modelled disk (with any backend): a chunk's I/O ends
                                   no sooner than the disk's previous one (or its start) plus its
                                   bytes over the rate, so that benchmarks do not drift with a
                                   shared machine's disk. Slower than the real disk to be exact;
                                   0: the disk's own speed */
} gm_sim_desc;

/* Zero means default in every field. */
typedef struct gm_desc {
    gm_backend backend;
    int device;                    /* device ordinal, default 0 */
    size_t device_budget;          /* bytes the allocator may reserve */
    double device_budget_fraction; /* or this fraction of the device (0..1] */
    gm_toggle caching;             /* GM_TOGGLE_OFF: no cache, for checkers */
    gm_toggle expandable;          /* GM_TOGGLE_ON: expandable segments */
    double gc_threshold;           /* (0..1): release cold cache past this */
    size_t max_split_size;         /* blocks this large are never split */
    gm_oom_fn oom_fn;
    void* oom_user;
    gm_log_fn log_fn;
    void* log_user;
    gm_log_level log_level;
    const char* conf;              /* options, GPUMEM_CONF syntax */
    int ignore_env;                /* non-zero: do not read GPUMEM_CONF or GPUMEM_TRACE */
    const char* trace_path;        /* write every alloc and free here (CSV) */
    size_t host_budget;            /* pinned host tier, default 4 GiB; rounded down to whole 4 KiB pages,
                                      the pool's granularity, and at least one page (an info line says
                                      so; a resolved desc given again resolves to itself) */
    gm_fallback fallback;          /* when nothing more can be evicted */
    gm_fallback_fn fallback_fn;    /* or this decides, case by case */
    void* fallback_user;
    const char* disk_dir;          /* spill to a file here when the host tier is full; NULL: no disk tier */
    size_t disk_budget;            /* spill file size limit, default: the file system's free space at setup */
    gm_toggle disk_checksum;       /* CRC32C per extent, checked on read-back; default on */
    gm_disk_io disk_io;
    int disk_depth;                /* chunks in flight, default 32 */
    size_t disk_chunk;             /* bytes per chunk, default 1 MiB */
    gm_sim_desc sim;
    gm_toggle thread_cache;        /* per-thread caches of small freed blocks; default on */
    size_t expandable_page;        /* page of expandable segments, rounded up to a multiple of the
                                      backend's granularity (2 MiB on the sim and on current GPUs);
                                      default that granularity. On CUDA each page is one physical
                                      allocation, mapped and unmapped by its own driver calls (30 to
                                      100 us each on an H200, whatever the size): larger pages make
                                      fewer calls, and reserved memory coarser */
    size_t thread_cache_max;       /* the largest request the thread caches serve; default 1 MiB (the
                                      small pool). Larger (up to 1 GiB, and 1/32 of the budget) lets
                                      threads reuse large blocks without the lock, at the price of up
                                      to twice this much free memory held per thread (given back when
                                      a request would otherwise fail). 1 MiB with expandable segments.
                                      Left 0, it widens to 64 MiB (and 1/32 of the budget) once two
                                      threads contend at the lock for larger blocks */
} gm_desc;

/* One statistic, with PyTorch's semantics. */
typedef struct gm_stat {
    int64_t current;
    int64_t peak;
    int64_t allocated; /* running total of increments */
    int64_t freed;     /* running total of decrements */
} gm_stat;

enum { GM_STAT_ALL = 0, GM_STAT_SMALL_POOL = 1, GM_STAT_LARGE_POOL = 2, GM_STAT_POOLS = 3 };

/* X(name, is_bytes): the per-pool statistics. */
#define GM_STAT_LIST(X)           \
    X(allocation, 0)              \
    X(segment, 0)                 \
    X(active, 0)                  \
    X(inactive_split, 0)          \
    X(allocated_bytes, 1)         \
    X(reserved_bytes, 1)          \
    X(active_bytes, 1)            \
    X(inactive_split_bytes, 1)    \
    X(requested_bytes, 1)

/* X(name): plain event counters. num_device_alloc and num_device_free
   count backend calls (a segment, or a run of pages mapped or unmapped);
   num_pages_mapped and num_pages_unmapped count expandable segments'
   pages (on CUDA each a cuMemCreate and cuMemMap, or a cuMemUnmap and
   cuMemRelease). */
#define GM_COUNTER_LIST(X)   \
    X(num_alloc_retries)     \
    X(num_ooms)              \
    X(num_device_alloc)      \
    X(num_device_free)       \
    X(num_sync_all_streams)  \
    X(num_oom_hook_calls)    \
    X(num_managed_fallbacks) \
    X(num_pages_mapped)      \
    X(num_pages_unmapped)

typedef struct gm_stats {
#define GM__STAT_FIELD(name, is_bytes) gm_stat name[GM_STAT_POOLS];
    GM_STAT_LIST(GM__STAT_FIELD)
#undef GM__STAT_FIELD
#define GM__COUNTER_FIELD(name) int64_t name;
    GM_COUNTER_LIST(GM__COUNTER_FIELD)
#undef GM__COUNTER_FIELD
    int64_t managed_bytes; /* bytes gm_alloc serves from unified memory now (rung 7) */
} gm_stats;

/* The tiered manager's figures. */
typedef struct gm_tier_stats {
    int64_t tensors;
    int64_t device_bytes, host_bytes, managed_bytes; /* tensor bytes in each tier */
    int64_t evictions;        /* device copies given up */
    int64_t clean_evictions;  /* of those, free: the host copy was still valid */
    int64_t bytes_to_host, bytes_to_device;
    int64_t prefetch_hits;    /* acquires that found a prefetched copy */
    int64_t prefetch_misses;  /* acquires that had to bring the tensor in */
    int64_t managed_fallbacks;
    int64_t acquire_ns;       /* host time spent in gm_tensor_acquire */
    /* the disk tier */
    int64_t disk_bytes;       /* tensor bytes with a valid copy on disk */
    int64_t disk_reserved;    /* bytes of the spill file reserved (fallocate) */
    int64_t bytes_to_disk, bytes_from_disk;
    int64_t disk_write_ns, disk_read_ns; /* wall time of the transfers each way */
    int64_t disk_ios;         /* chunk I/Os submitted (resubmissions included) */
    int64_t disk_depth_sum;   /* sum over submissions of the I/Os then in flight
                                 (disk_depth_sum / disk_ios: the depth a submission found) */
    int64_t disk_errors;      /* transfers that failed (the tensor stayed put) */
    int64_t checksum_failures;
    int64_t host_demotions;   /* host copies written to disk to make host room (when it was wanted,
                                 or behind, to keep half the host tier free or clean) */
    int64_t host_reserved;    /* pinned bytes the host pool holds (it gives back whole chunks
                                 past twice its recent peak use) */
    int64_t disk_busy_ns;     /* time with I/O in flight on the spill file */
    int64_t disk_depth_ns;    /* I/Os in flight, integrated over time: disk_depth_ns /
                                 disk_busy_ns is the mean queue depth while busy */
    int64_t swaps;            /* of the evictions, those that traded places with a tensor brought
                                 in from the host tier (device and host both full; learned order
                                 with a disk tier: whenever the victim finds no host room) or from
                                 disk (every tier full) */
    int64_t disk_backlog_ns;  /* time with chunks waiting while the I/O queue is full or every
                                 staging slot is taken (the disk is the bottleneck then) */
    int64_t disk_backlog_depth_ns; /* I/Os in flight integrated over that time: the ratio is the
                                 mean depth while work waits (disk_depth when the queue is kept full) */
    /* the most tensor bytes each tier held since setup or gm_tier_reset_peaks */
    int64_t peak_device_bytes, peak_host_bytes, peak_disk_bytes, peak_managed_bytes;
    int64_t bytes_not_copied; /* bytes an acquire did not bring in: never written, or GM_ACCESS_OVERWRITE */
    int64_t prefetch_wasted;  /* prefetched to the device, then evicted or destroyed before any acquire */
    int64_t read_ahead_wasted;/* read from disk into the host tier ahead of use, then dropped unused */
    int64_t plan_departures;  /* learned order: acquires the plan did not expect */
    int64_t plan_lost;        /* times the acquires left every plan (prefetching stopped, LRU until
                                 a known sequence began again) */
    int64_t plan_cache_bytes; /* learned order with the disk tier: the bytes of the device and host
                                 tiers the active plan counts on (their budgets, less the room
                                 tuning over steps found to move the fewest bytes through the disk) */
    int64_t compactions;      /* tensors moved within the device (a copy there) so that the free room
                                 in pieces between them made one place for a tensor, instead of
                                 tensors leaving the device */
    int64_t bytes_compacted;  /* their bytes */
    int64_t host_scattered;   /* host copies made of several pieces of the host pool, no free piece
                                 holding one whole (the copies in and out then run one per piece) */
} gm_tier_stats;

/* What an acquire will do with the bytes. */
typedef enum gm_access {
    GM_ACCESS_READ_WRITE = 0, /* brought in; the release says whether they changed */
    GM_ACCESS_READ,           /* brought in; released unchanged (GM_AS_ACQUIRED: not written) */
    GM_ACCESS_OVERWRITE,      /* the caller writes every byte before reading any: nothing is
                                 brought in, and the release is written whatever it says */
    GM_ACCESS_READ_LAST       /* brought in, read for the last time: released (as acquired, or
                                 in a batch) the bytes are discarded (GM_DISCARD) */
} gm_access;

/* gm_tensor_release's `written`: as the acquires since the tensor was last
   not acquired said (written unless every one was GM_ACCESS_READ). */
#define GM_AS_ACQUIRED (-1)
/* gm_tensor_release's `written`: the bytes are not needed any more (a
   gradient the optimizer consumed, an activation after its backward): the
   tensor holds no bytes until written again, so it leaves the device and
   comes back without a copy, like a tensor never written. */
#define GM_DISCARD (-2)

/* One tensor of a batch (gm_tensor_acquire_many / gm_tensor_release_many). */
typedef struct gm_use {
    gm_tensor tensor;
    gm_access access;
    void* ptr; /* set by gm_tensor_acquire_many */
} gm_use;

typedef struct gm_tensor_info {
    size_t bytes;    /* as created (0 became 1) */
    gm_tier tier;    /* as gm_tensor_where */
    int priority, pinned;
    unsigned acquired; /* nested acquires now */
    int written;     /* 0: never released as written: holds no bytes, and moving it costs nothing */
    int on_host, on_disk; /* valid copies below the device */
    int lost;        /* 1: its bytes were lost (a swap that failed twice, the device or disk failing
                        under it): an acquire refuses it with GM_ERR_IO unless it overwrites
                        (GM_ACCESS_OVERWRITE), which makes it whole again */
} gm_tensor_info;

/* gm_launch_host_copy copies this many bytes of argument at most. */
#define GM_LAUNCH_ARG_MAX 256

/* Setup and teardown. gm_setup fails with GM_ERR_NO_DEVICE when the chosen
   backend has no usable device, GM_ERR_INVALID_ARGUMENT for a NULL out. */
GPUMEM_API gm_result gm_setup(gm_context** out, const gm_desc* desc);
/* Synchronizes the streams, returns every segment to the device, frees the
   context. Live allocations, raw memory and tensors are logged as leaks and
   released too. The context is gone afterwards: a call on it (a second
   gm_shutdown included) reads freed memory, which no library can always
   catch. While that memory has not been reused, such a call is refused with
   GM_ERR_INVALID_ARGUMENT, and with GPUMEM_DEBUG it asserts with a message;
   run under AddressSanitizer to catch every case. */
GPUMEM_API gm_result gm_shutdown(gm_context* ctx);
/* The desc as resolved at setup: every default filled in. */
GPUMEM_API gm_desc gm_query_desc(const gm_context* ctx);
GPUMEM_API const char* gm_result_string(gm_result result);
GPUMEM_API const char* gm_backend_name(const gm_context* ctx);
/* A ready log callback: one line per message on stderr. */
GPUMEM_API void gm_log_stderr(gm_log_level level, const char* message, void* user);

/* The caching allocator.
   gm_alloc: *out receives a 512-byte aligned device pointer usable on
   `stream` (NULL: the default stream). size 0 gives *out = NULL and GM_OK.
   Fails with GM_ERR_OUT_OF_MEMORY after the OOM ladder (see the manual;
   with the managed fallback its last rung serves the request from unified
   memory instead),
   GM_ERR_INVALID_STREAM for a stream the backend does not know, and
   GM_ERR_INVALID_ARGUMENT for NULL ctx or out. */
GPUMEM_API gm_result gm_alloc(gm_context* ctx, void** out, size_t size, gm_stream stream);
/* gm_alloc with flags. GM_ALLOC_NO_SYNC: the stream may be capturing a
   CUDA graph, so the request is served only from the cache or a new
   segment (cudaMalloc, which capture allows in relaxed mode): no
   synchronization, no event recorded on any stream, no eviction, no hook;
   otherwise GM_ERR_OUT_OF_MEMORY. gm_alloc is gm_alloc_ex with 0. */
enum { GM_ALLOC_NO_SYNC = 1 };
GPUMEM_API gm_result gm_alloc_ex(gm_context* ctx, void** out, size_t size, gm_stream stream, unsigned flags);
/* Returns the block to the cache, on the stream it was allocated on.
   gm_free(ctx, NULL) is GM_OK. A pointer freed twice gives
   GM_ERR_DOUBLE_FREE, a pointer not from gm_alloc GM_ERR_FOREIGN_POINTER
   (an address inside a block or never handed out, raw memory, a tensor's
   device memory, the plan's region); the allocator is unchanged by
   either.
   Thread caches (desc.thread_cache, on by default; off with a trace or
   caching:off): each thread keeps up to 8 freed
   blocks of each size up to 1 MiB (desc.thread_cache_max; left 0, 64 MiB
   once two threads contend for larger blocks), per stream, at
   most 2 MiB (and 1/64 of the budget) in all; with a larger
   thread_cache_max, twice that (and 1/16 of the budget). A gm_alloc of the
   same rounded size on the same stream takes one back, and gm_free of a
   block the thread was handed puts it there, both without the context's
   lock. An allocation of up to thread_cache_max that goes through the lock
   (and gm_get_stats; with expandable segments or a thread_cache_max past
   1 MiB, any allocation through the lock) gives the calling thread's
   blocks back first; blocks in
   other threads' caches are given back when a request would otherwise fail
   and by gm_empty_cache, gm_check, gm_snapshot, gm_set_budget and
   gm_stream_destroy. Statistics count a cached block as freed: with one
   thread, allocations, active, allocated and requested bytes are what they
   would be without the caches, peaks included; with several allocating at
   once a peak may be a little off the true one. A cached block is not
   counted as an inactive split until it is given back (gm_get_stats gives
   the calling thread's back). A block may be freed by any thread. */
GPUMEM_API gm_result gm_free(gm_context* ctx, void* ptr);
/* Marks that `stream` also uses the block at ptr: gm_free will not let the
   block be reused until the work queued on `stream` before the free ends. */
GPUMEM_API gm_result gm_record_stream(gm_context* ctx, void* ptr, gm_stream stream);
/* Waits for pending frees and gives every entirely free segment back. */
GPUMEM_API gm_result gm_empty_cache(gm_context* ctx);
/* Changes the budget while running (as PyTorch's
   set_per_process_memory_fraction): at most the device's memory. Below what
   is reserved now, the cache gives back what it can at once (waiting for
   nothing); memory in use stays, and nothing new is reserved until the
   total is under the budget. Expandable segments keep the address range
   sized by the budget they were opened with. */
GPUMEM_API gm_result gm_set_budget(gm_context* ctx, size_t bytes);
/* Size of the block the allocator holds for ptr: the request rounded to
   512 bytes, or more when the rest of a block was too small to split off. */
GPUMEM_API gm_result gm_block_size(gm_context* ctx, const void* ptr, size_t* size);

/* Statistics and checking. */
GPUMEM_API gm_result gm_get_stats(gm_context* ctx, gm_stats* out);
GPUMEM_API gm_result gm_reset_peak_stats(gm_context* ctx);
GPUMEM_API gm_result gm_reset_accumulated_stats(gm_context* ctx);
/* Writes a text table into buf (always terminated when cap > 0); returns
   the length the whole table needs, excluding the terminator. A NULL buf
   writes nothing, whatever cap says. */
GPUMEM_API size_t gm_summary(gm_context* ctx, char* buf, size_t cap);
/* Walks every structure; returns the number of broken invariants, each
   logged at GM_LOG_ERROR as one line naming the structure and what is
   wrong ("check: tier: tensor 0x100003 (65536 bytes) on the LRU list but
   acquired"); past 20 lines, one more says how many were left out
   ("check: 7 more"). 0 when healthy; -1 for a NULL context. */
GPUMEM_API int gm_check(gm_context* ctx);
/* gm_check, also writing its lines (each ending in a newline, the same
   20 and the "more" line) into buf: NUL-terminated, truncated to size
   bytes; an empty string when healthy. buf may be NULL when size is 0.
   Returns what gm_check returns; the lines are logged as well. */
GPUMEM_API int gm_check_report(gm_context* ctx, char* buf, size_t size);
/* Writes the segments and their blocks as JSON into buf (terminated when
   cap > 0); returns the length the whole document needs, so
   gm_snapshot(ctx, NULL, 0) sizes the buffer (a NULL buf writes nothing,
   whatever cap says). */
GPUMEM_API size_t gm_snapshot(gm_context* ctx, char* buf, size_t cap);

/* The device, through the context's backend. */
GPUMEM_API gm_result gm_mem_info(gm_context* ctx, size_t* free_bytes, size_t* total_bytes);
/* A new stream of the backend; the caller destroys it (gm_shutdown does not). */
GPUMEM_API gm_result gm_stream_create(gm_context* ctx, gm_stream* out);
/* Synchronizes the stream first; blocks it owned become reusable by others. */
GPUMEM_API gm_result gm_stream_destroy(gm_context* ctx, gm_stream stream);
/* For a stream made elsewhere (cudaStreamCreate, PyTorch) that gpumem has
   used, before its owner destroys it: synchronizes it and forgets it, so
   its cached blocks go to other streams, and a new stream that CUDA hands
   the same handle later starts afresh instead of inheriting blocks whose
   old work may still run. Refuses the default stream. */
GPUMEM_API gm_result gm_stream_detach(gm_context* ctx, gm_stream stream);
GPUMEM_API gm_result gm_stream_synchronize(gm_context* ctx, gm_stream stream);
GPUMEM_API gm_result gm_device_synchronize(gm_context* ctx);
GPUMEM_API gm_result gm_memcpy_async(gm_context* ctx, void* dst, const void* src, size_t size,
                                     gm_copy_kind kind, gm_stream stream);
/* Runs fn(user) on the stream, in order with its other work. fn must make
   no gpumem and no CUDA call (CUDA forbids them in host functions). What
   user points to must live until fn has run (gm_stream_synchronize tells);
   gm_launch_host_copy copies `size` bytes of arg (at most
   GM_LAUNCH_ARG_MAX) now, and fn gets a pointer to the copy, valid during
   the call, so the caller's block may go at once. */
GPUMEM_API gm_result gm_launch_host(gm_context* ctx, gm_stream stream, gm_host_fn fn, void* user);
GPUMEM_API gm_result gm_launch_host_copy(gm_context* ctx, gm_stream stream, gm_host_fn fn, const void* arg, size_t size);
/* Device memory straight from the backend, bypassing the cache and the
   budget: the baseline the demo and benchmarks compare against.
   gm_raw_free takes only what gm_raw_alloc gave (GM_ERR_FOREIGN_POINTER
   otherwise, a block of the cache included), with the size it was given
   (GM_ERR_INVALID_ARGUMENT otherwise); gm_shutdown frees what is left. */
GPUMEM_API gm_result gm_raw_alloc(gm_context* ctx, void** out, size_t size);
GPUMEM_API gm_result gm_raw_free(gm_context* ctx, void* ptr, size_t size);
/* The tiered manager. A tensor lives on the device while used, can be
   evicted to the pinned host tier when released, and comes back on
   acquire. Its bytes are never lost: a copy or allocation that fails leaves
   it where it was.
   gm_tensor_create: room for `bytes`, on the device if it fits (evicting
     released tensors if needed), else in the host tier, else per
     desc.fallback. Contents are undefined until written.
   gm_tensor_acquire: *ptr is valid on `stream` until the matching release;
     the tensor is brought to the device first (ordered on the stream), and
     cannot be evicted while acquired. Several acquires on one stream nest.
   gm_tensor_release: `written` non-zero says the device copy changed, so a
     host copy is stale; a clean tensor with a host copy is evicted for free.
   gm_tensor_prefetch: starts bringing it to the device on the manager's copy
     stream; a later acquire on `stream` waits only for that copy. It never
     waits for the disk: where room would need a write to disk to end (a
     victim's with no room below but the disk, a host copy's that makes
     room for a victim in the host tier, or such a write under way), that
     write starts or goes on and it returns GM_OK with the tensor where it
     was (a prefetch is a hint); the acquire, or a later prefetch, takes
     the room once the write ended (the acquire waits for it if it is still
     under way). Learned order's own prefetches start a victim's write
     likewise, but wait for a host copy's: measured, they land in time so.
   gm_tensor_evict: moves a released tensor off the device now: to the host
     tier (whose coldest copies go to disk to make room, with a disk tier),
     or straight to disk when the host tier cannot hold it.
   gm_tensor_set_priority: released tensors of lower priority go first;
     pinned ones (non-zero) never leave the device by eviction.
   Misuse (a destroyed handle, release without acquire, release on another
   stream, destroy or evict while acquired, an acquire on a stream
   destroyed meanwhile) returns GM_ERR_STALE_HANDLE, GM_ERR_BAD_STATE or
   GM_ERR_INVALID_STREAM and changes nothing. A tensor whose stream was
   destroyed (gm_stream_destroy) while it was acquired is still released
   by a release on that stream's handle, with a warning (the stream's work
   was waited for as it was destroyed), so that it does not stay acquired
   for good. */
GPUMEM_API gm_result gm_tensor_create(gm_context* ctx, gm_tensor* out, size_t bytes);
GPUMEM_API gm_result gm_tensor_destroy(gm_context* ctx, gm_tensor t);
GPUMEM_API gm_result gm_tensor_acquire(gm_context* ctx, gm_tensor t, gm_stream stream, void** ptr);
GPUMEM_API gm_result gm_tensor_release(gm_context* ctx, gm_tensor t, gm_stream stream, int written);
GPUMEM_API gm_result gm_tensor_prefetch(gm_context* ctx, gm_tensor t, gm_stream stream);
GPUMEM_API gm_result gm_tensor_evict(gm_context* ctx, gm_tensor t);
/* Moves a released tensor down to `tier`: GM_TIER_HOST is gm_tensor_evict;
   GM_TIER_DISK writes it to the spill file (if no copy is there yet) and
   then gives up its device and host copies. GM_ERR_UNSUPPORTED without a
   disk tier; a failed write leaves it where it was. */
GPUMEM_API gm_result gm_tensor_evict_to(gm_context* ctx, gm_tensor t, gm_tier tier);
GPUMEM_API gm_result gm_tensor_set_priority(gm_context* ctx, gm_tensor t, int priority, int pinned);
GPUMEM_API gm_result gm_tensor_where(gm_context* ctx, gm_tensor t, gm_tier* tier);
/* Access modes and batches.
   gm_tensor_acquire is gm_tensor_acquire_as with GM_ACCESS_READ_WRITE.
   A tensor never released as written holds no bytes: no acquire brings it
   in, no eviction copies it out, in any tier. With GM_ACCESS_OVERWRITE
   nothing is brought in either; the copies below stay valid until the
   release (always written), so a failed acquire loses nothing.
   gm_tensor_acquire_many acquires uses[0..n) on `stream` as n calls of
   gm_tensor_acquire_as in that order would (same ordering guarantees,
   one lock round-trip), making room for all of them at once, largest
   first, with none of them a victim of another's room; when they do not
   fit beside the batch's own tensors already on the device, those leave
   too (to copies below) and the whole batch comes in again, packed, so a
   batch is refused only when it cannot fit beside what others hold.
   Either every one is acquired (uses[i].ptr set) or none is (the first
   failure's result; what was brought in stays, as a prefetch). A tensor may appear more than once
   (nested acquires). gm_tensor_release_many releases them in reverse
   order, each written unless its access is GM_ACCESS_READ (not written) or
   GM_ACCESS_READ_LAST (discarded); it checks every use first and releases
   none when one is misused. */
GPUMEM_API gm_result gm_tensor_acquire_as(gm_context* ctx, gm_tensor t, gm_stream stream, gm_access access, void** ptr);
GPUMEM_API gm_result gm_tensor_acquire_many(gm_context* ctx, gm_use* uses, size_t n, gm_stream stream);
GPUMEM_API gm_result gm_tensor_release_many(gm_context* ctx, const gm_use* uses, size_t n, gm_stream stream);
/* A tensor's size (0 for a handle that is not live), and its state. */
GPUMEM_API size_t gm_tensor_size(gm_context* ctx, gm_tensor t);
GPUMEM_API gm_result gm_tensor_get_info(gm_context* ctx, gm_tensor t, gm_tensor_info* out);
GPUMEM_API gm_result gm_tier_get_stats(gm_context* ctx, gm_tier_stats* out);
/* The peak_* figures of gm_tier_stats start again from what is held now. */
GPUMEM_API gm_result gm_tier_reset_peaks(gm_context* ctx);
/* The eviction policy. With GM_EVICT_LEARNED, call gm_tier_step at the end
   of each training step: the order of that step's acquires becomes the
   plan for the next, the victim is the tensor used farthest ahead, and
   after each acquire the next `prefetch_ahead` tensors of the plan are
   brought in early (never evicting one needed sooner). While the plan
   evicts (in this step or the last), the next victim is written behind
   when Belady's order on the device evicts it before its next use: its
   copy to host starts at once, into free host room, and its device copy
   stays until the room is needed, then goes without a wait. With a
   disk tier, a written tensor the plan sends to disk starts its write to
   disk when it is released. fn and user serve GM_EVICT_CUSTOM. */
GPUMEM_API gm_result gm_tier_set_policy(gm_context* ctx, gm_evict_policy policy, int prefetch_ahead, gm_victim_fn fn,
                                        void* user);
GPUMEM_API gm_result gm_tier_step(gm_context* ctx);
/* Learned order by phase (training, evaluation, generation, ...): the
   acquires from now belong to `phase` (0 .. GM_TIER_PHASES-1; every context
   starts in 0), which records its own steps and keeps its own plan; the
   step of the phase left ends here, as by gm_tier_step. Without it, a step
   is matched to the plan that began the same way (its first acquires), so
   steps that alternate between a few sequences each keep theirs. Either
   way, acquires that depart from the plan make it resynchronize, and a run
   of departures stops prefetching (LRU victims) until the plan is followed
   again (gm_tier_stats.plan_departures, plan_lost, prefetch_wasted). */
#define GM_TIER_PHASES 8
GPUMEM_API gm_result gm_tier_set_phase(gm_context* ctx, int phase);

/* Make the nth next operation of that kind fail (n = 1: the next one);
   n = 0 disarms. The device's kinds (allocation, copy, pinned allocation)
   are the sim's (GM_ERR_UNSUPPORTED elsewhere); the disk tier's kinds work
   on every backend. */
GPUMEM_API gm_result gm_sim_inject(gm_context* ctx, gm_sim_fault fault, uint64_t nth);
/* Sim only: bytes carried and time busy of the host-to-device (dir 0) and
   device-to-host (dir 1) links since setup, for achieved-rate figures. */
GPUMEM_API gm_result gm_sim_link_stats(gm_context* ctx, int dir, uint64_t* bytes, uint64_t* busy_ns);

/* Offset planning: the packer of the planned mode, usable on its own (no
   context). A request needs `size` bytes while live in [start, end) of
   some clock (for a training step: the indices of its allocation and its
   free). gm_plan_pack gives each an offset, a multiple of `align` (0:
   512), such that two requests live at the same time never overlap, in a
   region as small as it can make it, and writes the region's size. Greedy
   by size with best-fit offsets (TFLite's arena planner), under several
   orders and then perturbed orders while that is cheap; the best kept.
   A packing as small as the largest sum live at one time (sizes rounded
   to align) is optimal and ends the work at once. Where the best is more
   than 0.2% above that, a branch-and-bound search (MiniMalloc's, with
   frequent restarts) probes smaller regions within a fixed work budget (GPUMEM_PLAN_SEARCH: about a
   second on the hardest inputs, scaled by 1000/n past 1000 requests); the
   same input always gives the same plan. The search orders requests by
   their lifetimes' lengths in the caller's clock: where that clock is real
   time (a schedule's, a trace's), it packs hard inputs much closer than
   event indices let it (a recording gets it from gm_plan_mark).
   GM_ERR_INVALID_ARGUMENT for NULL pointers or more than 2^32 - 1
   requests (nothing written), and for end <= start, a size of 0, an align
   above 2^62, or sizes that, rounded up to align, sum past 2^62, so that no
   offset or sum can wrap (no offset written, *region 0);
   GM_ERR_HOST_OUT_OF_MEMORY if its scratch cannot be had. */
typedef struct gm_plan_req {
    uint64_t size;
    uint64_t start, end; /* live in [start, end) */
    uint64_t offset;     /* out */
} gm_plan_req;
GPUMEM_API gm_result gm_plan_pack(gm_plan_req* reqs, size_t n, size_t align, uint64_t* region);
/* The checker: the number of pairs of requests live at the same time whose
   ranges overlap, plus requests that end past `region` (or past 2^64); 0
   for a valid plan, -1 for bad arguments (NULL with n > 0, more than
   2^32 - 1 requests, a request with end <= start or a size of 0). */
GPUMEM_API long long gm_plan_check(const gm_plan_req* reqs, size_t n, uint64_t region);
/* The largest sum of sizes live at one time: no plan is smaller. 0 for
   NULL or n = 0; requests with end <= start are never live; UINT64_MAX
   when the peak does not fit in 64 bits. */
GPUMEM_API uint64_t gm_plan_peak_live(const gm_plan_req* reqs, size_t n);

/* Planned mode, for steps that repeat (a training loop):
     gm_plan_begin(ctx);        // record this step's gm_alloc / gm_free
     ...one step...             // (gm_plan_mark(ctx, t) before each op: optional)
     gm_plan_end(ctx);          // pack it (gm_plan_pack) into one region, taken
                                // after the cache's free segments are given back
     for (;;) { gm_plan_step(ctx); ...one step... }
   With the plan enabled (gm_plan_end enables it), the n-th gm_alloc after
   gm_plan_step gets the n-th recorded request's offset in the region when
   its size and stream match and no block still live overlaps it; anything
   else (another size, an extra request, a block the program has not freed
   yet) is a departure, served by the online allocator and counted. A
   request that outlived the recorded step is always served online. When a
   step's departures pass an eighth of the plan, the next gm_plan_step
   records that step again and the one after it re-plans. Planned blocks
   never overlap a live block, whatever the program does; gm_free,
   gm_block_size and gm_record_stream accept them (a planned block used on
   another stream makes its free wait for the device). */
typedef struct gm_plan_stats {
    int64_t requests;    /* in the plan */
    int64_t planned;     /* of those, served from the region (freed within the step) */
    int64_t hits;        /* requests served from the plan */
    int64_t departures;  /* requests that departed from it (served online) */
    int64_t online;      /* requests the plan leaves to the online allocator */
    int64_t steps, replans;
    int64_t region;      /* bytes of the plan's region */
    int64_t peak_live;   /* the recorded step's peak of planned bytes live */
} gm_plan_stats;
GPUMEM_API gm_result gm_plan_begin(gm_context* ctx);
GPUMEM_API gm_result gm_plan_end(gm_context* ctx);
GPUMEM_API gm_result gm_plan_enable(gm_context* ctx, int on);
GPUMEM_API gm_result gm_plan_step(gm_context* ctx);
/* While a step is recorded, what follows happened at `time` of the
   caller's clock: an operation's index in the step, a schedule's time, a
   trace's timestamps. Lifetimes are then measured in it when the step is
   planned (the search orders requests by them, and packs hard steps much
   closer where they are real lengths); events before the first mark take
   its time. Without marks a recording counts events. Marks must not go
   back within a recording (GM_ERR_INVALID_ARGUMENT, the mark kept); each
   recording starts afresh; UINT64_MAX is refused. Mark every step, not
   only the first: gm_plan_step may record a step again after departures.
   Outside a recording a mark does nothing and costs one load, no lock. */
GPUMEM_API gm_result gm_plan_mark(gm_context* ctx, uint64_t time);
GPUMEM_API gm_result gm_plan_get_stats(gm_context* ctx, gm_plan_stats* out);

#ifdef __cplusplus
}
#endif
#endif /* GPUMEM_H */

/* ========================================================================
   IMPLEMENTATION. `grep '>>' gpumem.h` lists the sections.
   ======================================================================== */
#ifdef GPUMEM_IMPLEMENTATION
#ifndef GPUMEM_IMPLEMENTATION_DONE
#define GPUMEM_IMPLEMENTATION_DONE

/* >>platform --------------------------------------------------------------
   Includes, override macros and the few POSIX pieces the library needs. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if defined(GPUMEM_MALLOC) != defined(GPUMEM_FREE)
#error "define both GPUMEM_MALLOC and GPUMEM_FREE, or neither"
#endif
#ifndef GPUMEM_MALLOC
#define GPUMEM_MALLOC(n) malloc(n)
#define GPUMEM_FREE(p) free(p)
#endif
#ifndef GPUMEM_ASSERT
#include <assert.h>
#define GPUMEM_ASSERT(c) assert(c)
#endif
#ifdef GPUMEM_DEBUG
#define GM__MISUSE_ASSERT(c) GPUMEM_ASSERT(c)
#else
#define GM__MISUSE_ASSERT(c) ((void)0)
#endif

#ifdef GPUMEM_CUDA
#include <cuda.h> /* the driver's types, for its entry points (no libcuda link) */
#include <cuda_runtime_api.h>
#endif

#if defined(__GNUC__)
#define GM__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define GM__LIKELY(x) __builtin_expect(!!(x), 1)
#define GM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GM__HOT __attribute__((always_inline)) inline
#define GM__NOINLINE __attribute__((noinline))
#else
#define GM__NOINLINE
#define GM__PRINTF(f, a)
#define GM__LIKELY(x) (x)
#define GM__UNLIKELY(x) (x)
#define GM__HOT
#endif

#define GM__KIB ((size_t)1 << 10)
#define GM__MIB ((size_t)1 << 20)
#define GM__GIB ((size_t)1 << 30)
#define GM__PATH 4096
#define GM__HOST_PAGE 4096 /* the pinned host pool's granularity */
#define GM__SIM_MAX ((size_t)1 << 42) /* the largest simulated device */

/* A lock its holder may take again: the tiered manager's (the allocator's
   eviction hook runs under it from the manager's own calls). A caller
   that finds it held yields the processor, up to GM__RMU_YIELDS times,
   before it sleeps: the holds are short (an acquire that misses is well
   under a microsecond of work on sim), and a sleeper costs the holder a
   system call to wake it and itself a trip through the scheduler, several
   times the hold. Two threads acquiring and releasing tensors of their
   own, each acquire a miss (bench/tier_scale), got 0.62-0.80x one thread's
   throughput with a plain mutex (glibc's adaptive spin was the same, and
   spinning without yielding slower still: the threads the sim runs copies
   on lost their processor to it), and 0.87-1.1x yielding (up to 256,000
   tensors; 0.64x at a million). owner is written only by the holder;
   another thread reads it only to see that it is not itself. */
#define GM__RMU_YIELDS 256
static __thread char gm__rmu_self;
typedef struct gm__rmu {
    pthread_mutex_t mu;
    char* owner;    /* &gm__rmu_self of the holder, NULL when free */
    unsigned depth; /* the holder's nesting */
} gm__rmu;

static void gm__rmu_init(gm__rmu* m) {
    pthread_mutex_init(&m->mu, NULL);
    m->owner = NULL;
    m->depth = 0;
}

static void gm__rmu_lock(gm__rmu* m) {
    int k;
    if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == &gm__rmu_self) {
        m->depth++;
        return;
    }
    for (k = 0; pthread_mutex_trylock(&m->mu) != 0; k++) {
        if (k == GM__RMU_YIELDS) {
            pthread_mutex_lock(&m->mu);
            break;
        }
        sched_yield();
    }
    __atomic_store_n(&m->owner, &gm__rmu_self, __ATOMIC_RELAXED);
    m->depth = 1;
}

static void gm__rmu_unlock(gm__rmu* m) {
    if (--m->depth) return;
    __atomic_store_n(&m->owner, (char*)NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&m->mu);
}

static uint64_t gm__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits on cv (a default one: the real-time clock) for at most ns. */
static void gm__cond_wait_ns(pthread_cond_t* cv, pthread_mutex_t* mu, uint64_t ns) {
    struct timespec ts;
    uint64_t at;
    clock_gettime(CLOCK_REALTIME, &ts);
    at = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec = (time_t)(at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* A warning whose cause persists call after call (a full file system under
   the spill file, no room below the device) is logged at most once per
   GM__QUIET_NS: whether to log now, and then in `note` how many were left
   out since the last one ("" when none). *last and *held are the caller's,
   under its lock. */
#define GM__QUIET_NS 10000000000ull
static int gm__quiet(uint64_t* last, uint64_t* held, char* note, size_t cap) {
    uint64_t now = gm__now_ns();
    if (*last && now - *last < GM__QUIET_NS) {
        ++*held;
        return 0;
    }
    if (*held) snprintf(note, cap, " (and %llu times in the last %llu s, not logged)", (unsigned long long)*held,
                        (unsigned long long)((now - *last) / 1000000000u));
    else note[0] = 0;
    *last = now;
    *held = 0;
    return 1;
}

static void gm__sleep_until_ns(uint64_t t) {
    for (;;) {
        uint64_t now = gm__now_ns();
        if (now >= t) return;
        uint64_t d = t - now;
        struct timespec ts;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
        nanosleep(&ts, NULL);
    }
}

static void* gm__calloc(size_t n) {
    void* p = GPUMEM_MALLOC(n);
    if (p) memset(p, 0, n);
    return p;
}

static size_t gm__round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Grows an array of `old` bytes to `n` bytes through the allocation hooks. */
static void* gm__grow_array(void* p, size_t old, size_t n) {
    void* q = GPUMEM_MALLOC(n);
    if (!q) return NULL;
    if (p) memcpy(q, p, old);
    GPUMEM_FREE(p);
    return q;
}

/* A table of n entries of esz bytes that reads as zero until written. It
   is made in leaves of up to 1024 entries, each when an entry of it is
   first written, so a table sized by address space costs host memory only
   where it is used. Invariants: leaf has nleaf = ceil(n / 2^shift)
   pointers, `made` of them not NULL; a leaf is zeroed when made. */
#define GM__SPARSE_SHIFT 10
typedef struct gm__sparse {
    unsigned char** leaf;
    size_t nleaf, made;
    unsigned shift;         /* entries per leaf: 1 << shift */
} gm__sparse;

static int gm__sparse_init(gm__sparse* t, size_t n) {
    unsigned k = 0;
    while (k < GM__SPARSE_SHIFT && ((size_t)1 << k) < n) k++;
    t->shift = k;
    t->nleaf = (n + ((size_t)1 << k) - 1) >> k;
    t->made = 0;
    t->leaf = (unsigned char**)gm__calloc((t->nleaf ? t->nleaf : 1) * sizeof *t->leaf);
    return t->leaf != NULL;
}

/* Entry i, or NULL when its leaf was never made (it reads as zero). */
static GM__HOT void* gm__sparse_at(const gm__sparse* t, size_t i, size_t esz) {
    unsigned char* l = t->leaf[i >> t->shift];
    return l ? l + (i & (((size_t)1 << t->shift) - 1)) * esz : NULL;
}

/* Entry i, its leaf made if it was not; NULL when host memory ran out. */
static void* gm__sparse_make(gm__sparse* t, size_t i, size_t esz) {
    unsigned char** l = &t->leaf[i >> t->shift];
    if (!*l) {
        if ((*l = (unsigned char*)gm__calloc(esz << t->shift)) == NULL) return NULL;
        t->made++;
    }
    return *l + (i & (((size_t)1 << t->shift) - 1)) * esz;
}

/* Frees the table; with owns, its entries are pointers freed too. */
static void gm__sparse_free(gm__sparse* t, int owns) {
    size_t l, e;
    if (!t->leaf) return;
    for (l = 0; l < t->nleaf; l++) {
        if (owns && t->leaf[l])
            for (e = 0; e < ((size_t)1 << t->shift); e++) GPUMEM_FREE(((void**)(void*)t->leaf[l])[e]);
        GPUMEM_FREE(t->leaf[l]);
    }
    GPUMEM_FREE(t->leaf);
    t->leaf = NULL;
}

/* >>context ---------------------------------------------------------------
   The context's layout, shared by every section below. Invariants: every
   field below `mu` is read or written only with `mu` held, except the
   backend state, which guards itself. */
typedef struct gm__block gm__block;
typedef struct gm__seg gm__seg;
typedef struct gm__arena gm__arena;
typedef struct gm__backend gm__backend;

/* A block: a range [addr, addr + size) of one segment. Records live in host
   memory, never inside the range they describe. */
enum { GM__FREE = 0, GM__USED = 1, GM__PENDING = 2 };
struct gm__block {
    uint64_t tcw;           /* the thread caches' word (>>tcache), atomic; first: a
                               record's reuse keeps it */
    uintptr_t addr;
    size_t size;
    gm__block *prev, *next; /* address-ordered neighbours in the segment */
    gm__block *l, *r;       /* free: treap children; pending: list links */
    gm__seg* seg;           /* free: its key in the tree is seg->key (the segment's owner) */
    uint32_t prio;          /* treap priority */
    uint8_t state;
    uint8_t owner;          /* USED: who holds it (GM__OWN_*) */
    /* caching allocator */
    size_t requested;
    uint32_t* uses;         /* stream indices from gm_record_stream */
    void** events;          /* pending: events still to complete */
    uint32_t nuses, capuses, nevents;
    uint32_t tag;           /* GM__OWN_TENSOR: the tensor's handle id */
    uint64_t ord[2];        /* stream-ordered reuse (the host pool): marks a new user of
                               these bytes must order itself after; merged by max
                               when blocks coalesce, kept by both halves of a split */
};
/* A record is two cache lines on 64-bit targets (GM__REC_STRIDE rounds it
   to whole lines): a field more would cost every block, and every tensor
   on the device, a third line. */
typedef char gm__block_fits_two_lines[sizeof(void*) != 8 || sizeof(gm__block) <= 128 ? 1 : -1];

/* Who holds a USED block of the caching allocator: gm_free and
   gm_record_stream take only the caller's own (GM__OWN_USER). */
enum { GM__OWN_USER = 0, GM__OWN_TENSOR = 1, GM__OWN_PLAN = 2 };

struct gm__seg {
    uintptr_t base;
    size_t size;
    gm__seg *prev, *next;
    gm__arena* arena;
    gm__block* first;
    uintptr_t key;          /* owner: stream index + 1 for the allocator */
    uint64_t ord;           /* the arena's count of segments made before it: the list is by ord, descending */
    uint64_t free_epoch;    /* owner's epoch at the last free into it */
    uint64_t tick;          /* context clock at the last free (for gc) */
    size_t mapped;          /* bytes counted as reserved: all of it, or the
                               mapped pages of an expandable segment */
    struct gm__vseg* va;    /* expandable: its pages; else NULL */
    gm__sparse freed;       /* per GM__MARK_SPAN bytes, a bitmap (uint8_t*) of
                               the 512-byte slots where a freed block started
                               (made on first use; leaf NULL: none yet) */
    uintptr_t raw;          /* where the backend's allocation starts (base is
                               raised to 512 bytes within it), or 0: base */
    size_t raw_size;        /* and its size */
};

typedef struct gm__chunk { struct gm__chunk* next; } gm__chunk;

struct gm__arena {
    size_t align;           /* every addr and size is a multiple */
    gm__seg* segs;
    size_t nsegs;
    gm__block* root;        /* treap of free blocks by (key, size, addr) */
    size_t nfree;
    size_t nwhole;          /* of them, those that are a whole segment */
    gm__block* spare;       /* recycled block records */
    gm__seg* spare_seg;
    gm__chunk* chunks;      /* record slabs, freed at destroy */
    uint64_t nord;          /* segments made (for gm__seg.ord) */
    uint32_t rng;
    gm_stats* st;           /* statistics to keep, or NULL */
    int pool;
};

/* Per-stream state of the allocator. A fence is an event recorded on the
   stream; once it completed, every free made before it is safe for other
   streams: a segment with free_epoch <= safe_epoch may change owner. Up to
   GM__FENCES fences are in flight, oldest first, so a stream the host keeps
   busy still retires its older fences instead of pushing one further out. */
#define GM__FENCES 4
typedef struct gm__sstate {
    gm_stream stream;
    int dead;               /* synchronized and forgotten: always safe;
                               1 detached, 2 destroyed by gm_stream_destroy */
    void* fev[GM__FENCES];  /* fence events, a ring from fhead */
    uint64_t fep[GM__FENCES];
    uint32_t fhead, fcount;
    uint64_t epoch, safe_epoch;
    uint64_t dirty_epoch;   /* epoch of the last free on this stream */
    gm__seg* vseg[2];       /* expandable segment of each pool, or NULL */
} gm__sstate;

typedef struct gm__mapent { uintptr_t k; void* v; } gm__mapent; /* k 0: an empty slot */
typedef struct gm__ptrmap {
    gm__mapent* e;          /* key and value side by side: a probe reads one line */
    size_t cap, count;      /* cap is a power of two, count <= cap / 2 */
} gm__ptrmap;

struct gm_context {
    gm_desc desc;           /* resolved */
    uint32_t magic;         /* GM__CTX_LIVE from setup until shutdown */
    uint32_t serial;        /* process-unique, non-zero: tensor handles carry it */
    uint32_t tc_gate;       /* whether the thread caches' fast paths may run (GM__GATE_*, atomic) */
    uint32_t tc_cas;        /* a fast free takes its block by compare-and-swap (>>tcache; atomic, set once) */
    size_t tc_max;          /* the largest request they serve (desc.thread_cache_max, resolved) */
    size_t tc_lim;          /* tc_max while tc_gate is 0, else 0: a fast allocation's one test (atomic) */
    const gm__backend* be;
    void* bs;               /* backend state */
    size_t dev_align;       /* the alignment dev_alloc guarantees (set by init) */
    size_t total;           /* device memory */
    size_t budget;          /* what the allocator may reserve */
    size_t budget_slack;    /* reserved above the budget when it was last lowered */
    pthread_mutex_t mu;
    gm__arena pool[2];      /* 0: small, 1: large */
    gm__ptrmap map;         /* allocated blocks by address */
    gm__ptrmap managed;     /* gm_alloc's unified-memory fallback: address -> bytes */
    gm__ptrmap raw;         /* gm_raw_alloc's memory: address -> bytes */
    gm__sstate* ss;
    uint32_t nss, capss, last_ss;
    int ss_destroyed;       /* atomic: some stream was destroyed (gm__ss_gone) */
    size_t va_gran;         /* page size of expandable segments (desc.expandable_page); 0: classic */
    size_t va_align;        /* the backend's granularity: the reservations' alignment */
    size_t va_extra;        /* gm__va_keep's allowance: pages its limit gave back that were mapped again */
    gm__block* pending;     /* blocks waiting for record_stream events */
    size_t npending;
    void** evfree;          /* recycled events */
    uint32_t nevfree, capevfree;
    uint64_t tick;
    gm_stats stats;
    /* the tier manager's seam: evict up to `bytes`; returns bytes freed */
    size_t (*tier_evict)(gm_context* ctx, size_t bytes, void* tier);
    void* tier;
    void* plan;             /* planned mode (gm__plan), or NULL */
    void* disk;             /* the spill file (gm__disk), or NULL */
    gm_result dev_err;      /* the ladder: a device error that is not out-of-memory (it stops) */
    int nosync;             /* a GM_ALLOC_NO_SYNC request is being served: no fence is recorded */
    int grow_exact;         /* GM__GROW_EXACT of the request being served (gm__grow) */
    struct gm__dfree* dfree; /* device memory to give back once the lock is dropped */
    size_t ndfree, capdfree;
    struct gm__mblock *mpending, *mcache; /* unified memory freed: waiting for its streams, then cached */
    size_t mcached;         /* bytes in mcache */
    char disk_dir[GM__PATH]; /* desc.disk_dir when it came from an option */
    FILE* trace;            /* capture: RMM's replay CSV */
    uint64_t t0;            /* setup time, for the trace's clock */
    struct gm__tcache* tcs; /* the threads' caches of this context (>>tcache), under mu */
    int tc_on;              /* gm_alloc and gm_free may use them (set at setup) */
    size_t tc_wide;         /* what tc_max rises to once threads contend for large blocks (gm__tc_widen);
                               0: it stays (set at setup) */
    uint32_t tc_contended;  /* large requests that found mu held, by another thread than the last's (under mu) */
    uintptr_t tc_last;      /* the thread of the last large request through mu (its identity, gm__tc_self) */
    uint64_t tc_epoch;      /* statistics folds so far (atomic) */
    int tc_frozen;          /* the caches stand still (gm__tc_freeze), under mu */
};

/* >>log -------------------------------------------------------------------
   Results, messages and the log. The log is silent unless desc.log_fn is
   set; messages above desc.log_level are dropped before formatting. */
GPUMEM_API const char* gm_result_string(gm_result r) {
    switch (r) {
    case GM_OK: return "ok";
    case GM_NOT_READY: return "not ready";
    case GM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GM_ERR_UNSUPPORTED: return "unsupported by this backend";
    case GM_ERR_INTERNAL: return "internal error";
    case GM_ERR_OUT_OF_MEMORY: return "out of device memory";
    case GM_ERR_HOST_OUT_OF_MEMORY: return "out of host memory";
    case GM_ERR_DISK_FULL: return "out of spill space";
    case GM_ERR_DOUBLE_FREE: return "double free";
    case GM_ERR_FOREIGN_POINTER: return "pointer not allocated by this context";
    case GM_ERR_STALE_HANDLE: return "stale handle";
    case GM_ERR_INVALID_STREAM: return "invalid stream";
    case GM_ERR_BAD_STATE: return "tensor not in the state this call needs";
    case GM_ERR_NO_DEVICE: return "no device";
    case GM_ERR_BACKEND: return "backend error";
    case GM_ERR_COPY_FAILED: return "copy failed";
    case GM_ERR_IO: return "disk I/O failed";
    case GM_ERR_CHECKSUM: return "checksum mismatch on read-back";
    }
    return "unknown result";
}

GPUMEM_API void gm_log_stderr(gm_log_level level, const char* message, void* user) {
    static const char* names[] = {"", "error", "warn", "info", "debug"};
    (void)user;
    fprintf(stderr, "gpumem %s: %s\n", names[(int)level >= 1 && (int)level <= 4 ? (int)level : 0],
            message);
}

static void gm__vlog(const gm_desc* d, gm_log_level level, const char* fmt, va_list ap) {
    char buf[1024];
    int at = (int)d->log_level; /* 0 or none of gm_log_level (a desc not yet resolved): warn */
    if (at <= 0 || at > (int)GM_LOG_DEBUG) at = (int)GM_LOG_WARN;
    if (!d->log_fn || (int)level > at) return;
    vsnprintf(buf, sizeof buf, fmt, ap);
    d->log_fn(level, buf, d->log_user);
}

GM__PRINTF(3, 4) static void gm__log(const gm_context* ctx, gm_log_level level, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gm__vlog(&ctx->desc, level, fmt, ap);
    va_end(ap);
}

/* The same before there is a context (the desc being resolved). */
GM__PRINTF(3, 4) static void gm__dlog(const gm_desc* d, gm_log_level level, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gm__vlog(d, level, fmt, ap);
    va_end(ap);
}

/* The checker's report (>>check): every broken invariant it counts is one
   line, "check: <structure>: <what is wrong>", logged at GM_LOG_ERROR and
   kept in gm_check_report's buffer. Past GM__CHECK_LINES lines only the
   count grows, and gm__ck_end adds a line saying how many more. */
#define GM__CHECK_LINES 20
typedef struct gm__ck {
    const gm_context* ctx;
    int bad;
    char* buf;              /* gm_check_report's buffer, or NULL */
    size_t cap, len;
} gm__ck;

static void gm__ck_line(gm__ck* ck, const char* line) {
    int n;
    gm__log(ck->ctx, GM_LOG_ERROR, "%s", line);
    if (!ck->buf || ck->len + 1 >= ck->cap) return;
    n = snprintf(ck->buf + ck->len, ck->cap - ck->len, "%s\n", line);
    if (n > 0) ck->len = ck->len + (size_t)n < ck->cap ? ck->len + (size_t)n : ck->cap - 1;
}

GM__PRINTF(2, 3) static void gm__broken(gm__ck* ck, const char* fmt, ...) {
    char line[640] = "check: ";
    va_list ap;
    if (++ck->bad > GM__CHECK_LINES) return;
    va_start(ap, fmt);
    vsnprintf(line + 7, sizeof line - 7, fmt, ap);
    va_end(ap);
    gm__ck_line(ck, line);
}

static int gm__ck_end(gm__ck* ck) {
    char line[64];
    if (ck->bad <= GM__CHECK_LINES) return ck->bad;
    snprintf(line, sizeof line, "check: %d more", ck->bad - GM__CHECK_LINES);
    gm__ck_line(ck, line);
    return ck->bad;
}

/* Misuse: an error result and a log line always; an assert with GPUMEM_DEBUG. */
#define GM__MISUSE(ctx, code, ...) \
    (gm__log((ctx), GM_LOG_ERROR, __VA_ARGS__), GM__MISUSE_ASSERT(0), (code))

/* A context is live from gm_setup to gm_shutdown, which overwrites the
   mark before freeing it. A call on a context already shut down reads
   freed memory, which no library can always catch; while that memory has
   not been reused, the mark says so: the call is refused, and with
   GPUMEM_DEBUG it is an assertion with a message. The mark lies past the
   first bytes, which a host allocator may reuse for its own lists. */
#define GM__CTX_LIVE 0x676d6c76u
#define GM__CTX_DEAD 0x676d6464u
static int gm__ctx_dead(const gm_context* ctx) {
    if (GM__LIKELY(ctx->magic == GM__CTX_LIVE)) return 0;
#ifdef GPUMEM_DEBUG
    fprintf(stderr, "gpumem: a call on %p, which is %s\n", (const void*)ctx,
            ctx->magic == GM__CTX_DEAD ? "a context already shut down (gm_shutdown)" : "not a live gpumem context");
    GPUMEM_ASSERT(!"gpumem call on a context that was shut down");
#endif
    return 1;
}
#define GM__BAD_CTX(ctx) (!(ctx) || gm__ctx_dead(ctx))

/* Humane units for messages and the summary. */
static const char* gm__fmt_bytes(char* buf, size_t cap, double v) {
    static const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    double a = v < 0 ? -v : v;
    while (a >= 1024.0 && i < 5) { a /= 1024.0; v /= 1024.0; i++; }
    if (i == 0) snprintf(buf, cap, "%.0f %s", v, u[i]);
    else snprintf(buf, cap, "%.2f %s", v, u[i]);
    return buf;
}

/* >>options ---------------------------------------------------------------
   "key:value,..." strings (desc.conf, then GPUMEM_CONF) fill the desc
   fields left zero; defaults fill the rest. Bad input warns and is
   skipped. */
static int gm__parse_size(const char* s, size_t n, double* out_num, size_t* out_bytes, int* is_frac) {
    char tmp[64];
    char* end;
    double v, mul = 1;
    if (n == 0 || n >= sizeof tmp) return 0;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    v = strtod(tmp, &end);
    if (end == tmp || errno || v < 0 || v != v) return 0;
    *is_frac = 0;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case '%': *is_frac = 1; mul = 0.01; end++; break;
    default: return 0;
    }
    if ((*end == 'i' || *end == 'I') && mul > 1) end++;
    if ((*end == 'b' || *end == 'B') && mul > 1) end++;
    if (*end) return 0;
    if (mul == 1 && strchr(tmp, '.') && v <= 1.0) *is_frac = 1;
    *out_num = v * mul;
    if (!*is_frac && *out_num >= 18446744073709551615.0) return 0;
    *out_bytes = *is_frac ? 0 : (size_t)*out_num;
    return 1;
}

static int gm__word_is(const char* s, size_t n, const char* w) {
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* Word lists of the enum options: the 1-based position is the enum value. */
static const char* const gm__w_backend[] = {"sim", "cuda", NULL};
static const char* const gm__w_toggle[] = {"on", "off", NULL};
static const char* const gm__w_fallback[] = {"fail", "managed", NULL};
static const char* const gm__w_log[] = {"error", "warn", "info", "debug", NULL};
static const char* const gm__w_disk_io[] = {"uring", "pread", NULL};

/* The 1-based position of v in a word list, 0 when absent. */
static int gm__pick(const char* v, size_t vn, const char* const* words) {
    int i;
    for (i = 0; words[i]; i++)
        if (gm__word_is(v, vn, words[i])) return i + 1;
    return 0;
}

/* The enum options: key, words, and a setter that fills the field if it is
   still zero (the default). */
#define GM__ENUM_SET(name, field, type) \
    static void name(gm_desc* d, int w) { if (!d->field) d->field = (type)w; }
GM__ENUM_SET(gm__set_backend, backend, gm_backend)
GM__ENUM_SET(gm__set_expandable, expandable, gm_toggle)
GM__ENUM_SET(gm__set_caching, caching, gm_toggle)
GM__ENUM_SET(gm__set_thread_cache, thread_cache, gm_toggle)
GM__ENUM_SET(gm__set_fallback, fallback, gm_fallback)
GM__ENUM_SET(gm__set_log, log_level, gm_log_level)
GM__ENUM_SET(gm__set_disk_io, disk_io, gm_disk_io)
GM__ENUM_SET(gm__set_disk_checksum, disk_checksum, gm_toggle)
GM__ENUM_SET(gm__set_sim_inline, sim.run_inline, gm_toggle)
GM__ENUM_SET(gm__set_sim_bytes, sim.move_bytes, gm_toggle)
static const struct {
    const char* key;
    const char* const* words;
    void (*set)(gm_desc* d, int w);
} gm__enum_opts[] = {
    {"backend", gm__w_backend, gm__set_backend},     {"expandable", gm__w_toggle, gm__set_expandable},
    {"caching", gm__w_toggle, gm__set_caching},      {"fallback", gm__w_fallback, gm__set_fallback},
    {"log", gm__w_log, gm__set_log},                 {"disk_io", gm__w_disk_io, gm__set_disk_io},
    {"disk_checksum", gm__w_toggle, gm__set_disk_checksum}, {"thread_cache", gm__w_toggle, gm__set_thread_cache},
    {"sim_inline", gm__w_toggle, gm__set_sim_inline}, {"sim_bytes", gm__w_toggle, gm__set_sim_bytes},
};

/* Applies one key to `d` if d's field is still zero. Returns 0 for a bad key
   or value. */
static int gm__apply_option(gm_desc* d, char* dir, const char* k, size_t kn, const char* v, size_t vn) {
    double num = 0;
    size_t bytes = 0;
    int frac = 0;
    int w;
    size_t e;
    for (e = 0; e < sizeof gm__enum_opts / sizeof gm__enum_opts[0]; e++) {
        if (!gm__word_is(k, kn, gm__enum_opts[e].key)) continue;
        if (!(w = gm__pick(v, vn, gm__enum_opts[e].words))) return 0;
        gm__enum_opts[e].set(d, w);
        return 1;
    }
    if (gm__word_is(k, kn, "disk_dir")) {
        if (!vn || vn >= GM__PATH) return 0;
        if (!d->disk_dir) {
            memcpy(dir, v, vn);
            dir[vn] = 0;
            d->disk_dir = dir;
        }
    } else {
        if (!gm__parse_size(v, vn, &num, &bytes, &frac)) return 0;
        if (gm__word_is(k, kn, "device")) {
            if (frac || num > 1024 || num != (double)(int)num) return 0;
            if (!d->device) d->device = (int)num;
        } else if (gm__word_is(k, kn, "budget")) {
            if (frac) {
                if (num <= 0 || num > 1) return 0;
                if (!d->device_budget && d->device_budget_fraction == 0) d->device_budget_fraction = num;
            } else {
                if (bytes == 0) return 0;
                if (!d->device_budget && d->device_budget_fraction == 0) d->device_budget = bytes;
            }
        } else if (gm__word_is(k, kn, "gc_threshold")) {
            if (num <= 0 || num >= 1) return 0;
            if (d->gc_threshold == 0) d->gc_threshold = num;
        } else if (gm__word_is(k, kn, "max_split_size")) {
            if (frac || bytes <= 20 * GM__MIB) return 0; /* as PyTorch: above the large segment */
            if (!d->max_split_size) d->max_split_size = bytes;
        } else if (gm__word_is(k, kn, "thread_cache_max")) {
            if (frac || bytes == 0 || bytes > GM__GIB) return 0;
            if (!d->thread_cache_max) d->thread_cache_max = bytes;
        } else if (gm__word_is(k, kn, "expandable_page")) {
            if (frac || bytes == 0 || bytes > GM__GIB) return 0;
            if (!d->expandable_page) d->expandable_page = bytes;
        } else if (gm__word_is(k, kn, "host_budget")) {
            if (frac || bytes == 0) return 0;
            if (!d->host_budget) d->host_budget = bytes;
        } else if (gm__word_is(k, kn, "disk_budget")) {
            if (frac || bytes == 0) return 0;
            if (!d->disk_budget) d->disk_budget = bytes;
        } else if (gm__word_is(k, kn, "disk_chunk")) {
            if (frac || bytes < 4096 || bytes > 64 * GM__MIB) return 0;
            if (!d->disk_chunk) d->disk_chunk = bytes;
        } else if (gm__word_is(k, kn, "disk_depth")) {
            if (frac || num < 1 || num > 1024 || num != (double)(int)num) return 0;
            if (!d->disk_depth) d->disk_depth = (int)num;
        } else if (gm__word_is(k, kn, "sim_capacity")) {
            if (frac || bytes == 0) return 0;
            if (!d->sim.capacity) d->sim.capacity = bytes;
        } else if (gm__word_is(k, kn, "sim_link")) {
            if (frac || num < 1024) return 0; /* bytes per second */
            if (d->sim.link_bytes_per_s == 0) d->sim.link_bytes_per_s = num;
        } else if (gm__word_is(k, kn, "sim_disk")) {
            if (frac || num < 1024) return 0; /* bytes per second */
            if (d->sim.disk_bytes_per_s == 0) d->sim.disk_bytes_per_s = num;
        } else {
            return 0;
        }
    }
    return 1;
}

static void gm__apply_conf(gm_desc* d, char* dir, const char* conf, const char* origin) {
    const char* s = conf;
    while (s && *s) {
        const char* e = strchr(s, ',');
        const char* c;
        size_t n = e ? (size_t)(e - s) : strlen(s);
        while (n && (*s == ' ')) { s++; n--; }
        while (n && s[n - 1] == ' ') n--;
        c = (const char*)memchr(s, ':', n);
        if (n && (!c || !gm__apply_option(d, dir, s, (size_t)(c - s), c + 1, n - (size_t)(c - s) - 1))) {
            if (d->log_fn) {
                char msg[256];
                snprintf(msg, sizeof msg, "%s: ignoring bad option '%.*s' (default kept)", origin,
                         (int)(n > 100 ? 100 : n), s);
                d->log_fn(GM_LOG_WARN, msg, d->log_user);
            }
        }
        s = e ? e + 1 : NULL;
    }
}

/* An enum field of a desc outside its values (hi the last): the default,
   with a warning. */
static int gm__desc_enum(const gm_desc* d, int v, int hi, const char* name) {
    if (v >= 0 && v <= hi) return v;
    gm__dlog(d, GM_LOG_WARN, "%s is %d, none of its values: the default", name, v);
    return 0;
}

/* A sim rate of a desc: 0 (unlimited) or at least 1 KiB/s, as conf's
   sim_link (slower, a copy would take ages); else unlimited, with a warning. */
static double gm__desc_rate(const gm_desc* d, double v, const char* name) {
    if (v == 0 || v >= 1024) return v;
    gm__dlog(d, GM_LOG_WARN, "%s is %g, not at least 1024: unlimited", name, v);
    return 0;
}

/* dir: GM__PATH bytes that keep a disk_dir given as an option. */
static gm_desc gm__resolve_desc(const gm_desc* in, char* dir) {
    gm_desc d;
    if (in) d = *in;
    else memset(&d, 0, sizeof d);
    d.log_level = (gm_log_level)gm__desc_enum(&d, (int)d.log_level, GM_LOG_DEBUG, "desc.log_level");
    d.caching = (gm_toggle)gm__desc_enum(&d, (int)d.caching, GM_TOGGLE_OFF, "desc.caching");
    d.expandable = (gm_toggle)gm__desc_enum(&d, (int)d.expandable, GM_TOGGLE_OFF, "desc.expandable");
    d.thread_cache = (gm_toggle)gm__desc_enum(&d, (int)d.thread_cache, GM_TOGGLE_OFF, "desc.thread_cache");
    d.disk_checksum = (gm_toggle)gm__desc_enum(&d, (int)d.disk_checksum, GM_TOGGLE_OFF, "desc.disk_checksum");
    d.fallback = (gm_fallback)gm__desc_enum(&d, (int)d.fallback, GM_FALLBACK_MANAGED, "desc.fallback");
    d.disk_io = (gm_disk_io)gm__desc_enum(&d, (int)d.disk_io, GM_DISK_IO_PREAD, "desc.disk_io");
    d.sim.run_inline = (gm_toggle)gm__desc_enum(&d, (int)d.sim.run_inline, GM_TOGGLE_OFF, "desc.sim.run_inline");
    d.sim.move_bytes = (gm_toggle)gm__desc_enum(&d, (int)d.sim.move_bytes, GM_TOGGLE_OFF, "desc.sim.move_bytes");
    gm__apply_conf(&d, dir, d.conf, "desc.conf");
    if (!d.ignore_env) gm__apply_conf(&d, dir, getenv("GPUMEM_CONF"), "GPUMEM_CONF");
    if (!d.backend) {
#ifdef GPUMEM_CUDA
        d.backend = GM_BACKEND_CUDA;
#else
        d.backend = GM_BACKEND_SIM;
#endif
    }
    if (!d.caching) d.caching = GM_TOGGLE_ON;
    if (!d.thread_cache) d.thread_cache = GM_TOGGLE_ON;
    if (!d.expandable) d.expandable = GM_TOGGLE_OFF;
    if (!d.fallback) d.fallback = GM_FALLBACK_FAIL;
    if (!d.host_budget) d.host_budget = 4 * GM__GIB;
    if (!d.disk_checksum) d.disk_checksum = GM_TOGGLE_ON;
    if (d.disk_depth <= 0 || d.disk_depth > 1024) d.disk_depth = 32;
    if (d.disk_chunk < 4096 || d.disk_chunk > 64 * GM__MIB) d.disk_chunk = GM__MIB;
    if (d.disk_dir && !*d.disk_dir) d.disk_dir = NULL;
    if (!d.log_level) d.log_level = GM_LOG_WARN;
    if (d.host_budget % GM__HOST_PAGE) { /* the pool's segments are whole pages, so its budget is; */
        size_t pages = d.host_budget < GM__HOST_PAGE ? GM__HOST_PAGE /* never 0, which would read as the default */
                                                     : d.host_budget - d.host_budget % GM__HOST_PAGE;
        gm__dlog(&d, GM_LOG_INFO, "desc.host_budget %zu is not a multiple of %d: %zu", d.host_budget, GM__HOST_PAGE,
                 pages);
        d.host_budget = pages;
    }
    if (!d.sim.capacity) d.sim.capacity = 16 * GM__GIB;
    d.sim.link_bytes_per_s = gm__desc_rate(&d, d.sim.link_bytes_per_s, "desc.sim.link_bytes_per_s");
    d.sim.device_bytes_per_s = gm__desc_rate(&d, d.sim.device_bytes_per_s, "desc.sim.device_bytes_per_s");
    d.sim.disk_bytes_per_s = gm__desc_rate(&d, d.sim.disk_bytes_per_s, "desc.sim.disk_bytes_per_s");
    if (!d.sim.run_inline) d.sim.run_inline = GM_TOGGLE_OFF;
    if (!d.sim.move_bytes) d.sim.move_bytes = GM_TOGGLE_ON;
    if (d.sim.capacity > GM__SIM_MAX) { /* its address ranges must fit the address space */
        if (d.log_fn) d.log_fn(GM_LOG_WARN, "desc.sim.capacity above 4 TiB: 4 TiB", d.log_user);
        d.sim.capacity = GM__SIM_MAX;
    }
    if (d.gc_threshold < 0 || d.gc_threshold >= 1 || d.gc_threshold != d.gc_threshold) {
        if (d.log_fn) d.log_fn(GM_LOG_WARN, "desc.gc_threshold outside (0,1): off", d.log_user);
        d.gc_threshold = 0;
    }
    if (d.thread_cache_max > GM__GIB) {
        if (d.log_fn) d.log_fn(GM_LOG_WARN, "desc.thread_cache_max above 1 GiB: 1 MiB", d.log_user);
        d.thread_cache_max = 0;
    }
    if (d.max_split_size && d.max_split_size <= 20 * GM__MIB) {
        if (d.log_fn) d.log_fn(GM_LOG_WARN, "desc.max_split_size must exceed 20 MiB: unlimited", d.log_user);
        d.max_split_size = 0;
    }
    if (d.device_budget_fraction < 0 || d.device_budget_fraction > 1 ||
        d.device_budget_fraction != d.device_budget_fraction) {
        if (d.log_fn) d.log_fn(GM_LOG_WARN, "desc.device_budget_fraction outside (0,1]: ignored", d.log_user);
        d.device_budget_fraction = 0;
    }
    return d;
}

/* >>backend ---------------------------------------------------------------
   The table every backend fills. Events and streams are opaque pointers of
   the backend's own. event_query returns GM_OK when complete, GM_NOT_READY
   otherwise; an event never recorded counts as complete (as in CUDA). */
struct gm__backend {
    const char* name;
    gm_result (*init)(gm_context* ctx); /* sets ctx->bs and ctx->total */
    void (*shutdown)(gm_context* ctx);
    gm_result (*mem_info)(gm_context* ctx, size_t* free_bytes, size_t* total_bytes);
    gm_result (*dev_alloc)(gm_context* ctx, void** out, size_t size);
    gm_result (*dev_free)(gm_context* ctx, void* p, size_t size);
    gm_result (*host_alloc)(gm_context* ctx, void** out, size_t size); /* pinned */
    gm_result (*host_free)(gm_context* ctx, void* p, size_t size);
    gm_result (*host_register)(gm_context* ctx, void* p, size_t size);
    gm_result (*host_unregister)(gm_context* ctx, void* p);
    /* managed memory, advised to live on the device */
    gm_result (*managed_alloc)(gm_context* ctx, void** out, size_t size);
    gm_result (*managed_free)(gm_context* ctx, void* p, size_t size);
    gm_result (*managed_prefetch)(gm_context* ctx, void* p, size_t size, int to_device, gm_stream s);
    gm_result (*copy)(gm_context* ctx, void* dst, const void* src, size_t n, gm_copy_kind kind,
                      gm_stream s);
    gm_result (*launch_host)(gm_context* ctx, gm_stream s, gm_host_fn fn, void* user);
    gm_result (*stream_create)(gm_context* ctx, gm_stream* out);
    gm_result (*stream_destroy)(gm_context* ctx, gm_stream s);
    gm_result (*stream_sync)(gm_context* ctx, gm_stream s);
    int (*stream_valid)(gm_context* ctx, gm_stream s);
    gm_result (*device_sync)(gm_context* ctx);
    gm_result (*event_create)(gm_context* ctx, void** out);
    gm_result (*event_destroy)(gm_context* ctx, void* ev);
    gm_result (*event_record)(gm_context* ctx, void* ev, gm_stream s);
    gm_result (*event_query)(gm_context* ctx, void* ev);
    gm_result (*event_sync)(gm_context* ctx, void* ev);
    gm_result (*stream_wait_event)(gm_context* ctx, gm_stream s, void* ev);
    /* Virtual memory for expandable segments: reserve an address range,
       then map and unmap physical pages of va_granularity() bytes in it.
       va_granularity returns 0 where the backend cannot. A mapped page is
       counted against the device like an allocation. */
    size_t (*va_granularity)(gm_context* ctx);
    gm_result (*va_reserve)(gm_context* ctx, void** base, size_t size);
    gm_result (*va_release)(gm_context* ctx, void* base, size_t size);
    /* maps size / granularity pages at addr, one handle each, all or none */
    gm_result (*va_map)(gm_context* ctx, void* addr, size_t size, void** handles);
    /* unmaps the size / granularity pages at addr (handles: theirs), in
       order; *done: how many are unmapped, all unless it fails */
    gm_result (*va_unmap)(gm_context* ctx, void* addr, size_t size, void** handles, size_t* done);
};

/* >>ptrmap ----------------------------------------------------------------
   Pointers to values: the allocator's blocks by address, the sim's mappings
   by base. Open addressing, linear probing, deletion by backward shift (no
   tombstones). Invariants: cap is a power of two, at
   most half full; key 0 marks an empty slot (no block starts at 0). */
static size_t gm__map_home(const gm__ptrmap* m, uintptr_t k) {
    uint64_t h = (uint64_t)(k >> 9) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (m->cap - 1);
}

static int gm__map_grow(gm__ptrmap* m) {
    gm__ptrmap n;
    size_t i;
    n.cap = m->cap ? m->cap * 2 : 256;
    n.count = 0;
    n.e = (gm__mapent*)gm__calloc(n.cap * sizeof(gm__mapent));
    if (!n.e) return 0;
    for (i = 0; i < m->cap; i++) {
        if (m->e[i].k) {
            size_t j = gm__map_home(&n, m->e[i].k);
            while (n.e[j].k) j = (j + 1) & (n.cap - 1);
            n.e[j] = m->e[i];
            n.count++;
        }
    }
    GPUMEM_FREE(m->e);
    *m = n;
    return 1;
}

static int gm__map_put(gm__ptrmap* m, uintptr_t k, void* v) {
    size_t i;
    if ((m->count + 1) * 2 > m->cap && !gm__map_grow(m)) return 0;
    i = gm__map_home(m, k);
    while (m->e[i].k) i = (i + 1) & (m->cap - 1);
    m->e[i].k = k;
    m->e[i].v = v;
    m->count++;
    return 1;
}

/* k's slot, or (size_t)-1 when absent. */
static size_t gm__map_slot(const gm__ptrmap* m, uintptr_t k) {
    size_t i;
    if (!m->cap || !k) return (size_t)-1;
    for (i = gm__map_home(m, k); m->e[i].k; i = (i + 1) & (m->cap - 1))
        if (m->e[i].k == k) return i;
    return (size_t)-1;
}

static void* gm__map_get(const gm__ptrmap* m, uintptr_t k) {
    size_t i = gm__map_slot(m, k);
    return i == (size_t)-1 ? NULL : m->e[i].v;
}

/* Empties slot i (a gm__map_slot's answer), shifting back the entries
   after it that may move there. */
static void gm__map_del_at(gm__ptrmap* m, size_t i) {
    size_t j, mask = m->cap - 1;
    for (j = (i + 1) & mask; m->e[j].k; j = (j + 1) & mask) {
        size_t h = gm__map_home(m, m->e[j].k);
        /* the entry at j may move back to i unless its home lies in (i, j] */
        if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
        m->e[i] = m->e[j];
        i = j;
    }
    m->e[i].k = 0;
    m->e[i].v = NULL;
    m->count--;
}

static void* gm__map_del(gm__ptrmap* m, uintptr_t k) {
    size_t i = gm__map_slot(m, k);
    void* v;
    if (i == (size_t)-1) return NULL;
    v = m->e[i].v;
    gm__map_del_at(m, i);
    return v;
}

/* >>sim -------------------------------------------------------------------
   The simulated device. Memory: one MAP_NORESERVE mapping per allocation,
   counted against `capacity`. Streams: a worker thread each, running ops in
   FIFO order; `completed` only grows and never passes `submitted`. The
   worker is woken (cv) only when it sleeps for want of work (idle), and
   waiters for progress (done_cv) only when there are some (waiters): each
   wake-up is a futex hand-off that costs more than a small copy (tens of
   microseconds on a small virtual machine, where the other vCPU must be
   woken). So both sides poll first, for an adaptive while (at most
   GM__SIM_SPIN_MAX, yielding the CPU between looks): a worker whose queue
   ran dry polls `head` for the next queued op (spin_ns) before it sleeps,
   and a waiter polls `completed` (wspin_ns) before it sleeps. Each window
   doubles when polling would have caught a hand-off (the sleep it had to
   take was short) and halves when a poll ran out, so streams that get
   work now and then stop polling. head (when the queue was empty), stop
   and completed are written atomically (under mu) for the pollers; a
   poll only hints, and everything is checked again under mu. A wait for
   an event already complete queues nothing. With run_inline, a copy
   the model gives no time queued on an idle stream (head empty: all before
   it is done) runs at once in the calling thread, under the stream's
   lock, so nothing can be queued behind it before it completes. An event
   is (stream, seq): complete once stream->completed >= seq. Destroyed
   streams are drained and retired but kept until shutdown, so events on
   them stay valid and a handle is never reused. Copies hold a link, one per
   direction, busy until start + n / rate: concurrent copies share it.
   Managed memory is host memory whose residency is modelled (>>sim:
   unified memory): used + resident <= capacity. */
#define GM__SIM_MAGIC 0x53494d53u
enum { GM__SIM_COPY, GM__SIM_HOST, GM__SIM_WAIT, GM__SIM_MIGRATE };
enum { GM__LINK_H2D, GM__LINK_D2H, GM__LINK_D2D, GM__LINKS, GM__LINK_NONE = GM__LINKS };

typedef struct gm__sim_stream gm__sim_stream;
typedef struct gm__sim_op {
    struct gm__sim_op* next;
    int kind;
    void* dst;
    const void* src;
    size_t n;
    int link;
    gm_host_fn fn;
    void* user;
    gm__sim_stream* ws;
    uint64_t wseq;
    int to_dev;  /* a migration's direction */
    int managed; /* a copy that touches managed memory: it may fault */
} gm__sim_op;

struct gm__sim_stream {
    uint32_t magic;
    struct gm__sim* sim;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* work arrived (or stop): the worker waits on it */
    pthread_cond_t done_cv;/* progress made: waiters for `completed` wait on it */
    gm__sim_op *head, *tail;
    uint64_t submitted, completed;
    int stop, retired;
    int idle;              /* the worker waits on cv: an enqueue must wake it */
    uint32_t waiters;      /* threads waiting on done_cv: a completion wakes them */
    uint64_t spin_ns;      /* how long the worker polls for work before sleeping (under mu) */
    uint64_t wspin_ns;     /* how long a waiter polls for progress before sleeping (under mu) */
    gm__sim_stream* next;
};

/* An event: the stream and the count of its ops it was recorded after.
   Read without a lock (a sync or a query may meet a record of the same
   event on another thread: the allocator lets go of its lock to wait for
   events another thread may record again meanwhile, as CUDA allows), so
   the pair is a sequence lock: ver odd while a record writes it (a record
   claims it by compare-and-swap: two may run at once, on two streams). */
typedef struct gm__sim_event {
    gm__sim_stream* s;
    uint64_t seq;
    uint32_t ver;
} gm__sim_event;

/* One 2 MiB chunk of a managed mapping (the last may be shorter). */
typedef struct gm__sim_chunk {
    struct gm__sim_chunk *prev, *next; /* in the LRU while on the device */
    struct gm__sim_mrange* r;
    int where;                         /* GM__UVM_NOWHERE, _HOST or _DEV */
} gm__sim_chunk;

typedef struct gm__sim_mrange {
    struct gm__sim_mrange* next;
    char* base;
    size_t len, n; /* page-rounded bytes, chunks */
    gm__sim_chunk* c;
} gm__sim_mrange;

typedef struct gm__sim {
    pthread_mutex_t mu;    /* guards everything below */
    size_t capacity, used, managed, pinned;
    size_t resident;       /* bytes of managed chunks on the device */
    gm__sim_mrange* mranges;
    gm__sim_chunk *lru, *lru_tail; /* resident chunks, least recently migrated first */
    uint64_t ops[7], fail_at[7]; /* per gm_sim_fault kind: operations so far, the one to fail (0: none) */
    uint64_t link_free_at[GM__LINKS];
    uint64_t link_bytes[GM__LINKS], link_busy_ns[GM__LINKS];
    double rate[GM__LINKS];
    int run_inline;        /* desc.sim.run_inline */
    int no_bytes;          /* desc.sim.move_bytes off: copies move nothing */
    gm__sim_stream* streams;
    gm__sim_stream* def;
    gm__ptrmap maps;       /* every mapping: base -> page-rounded length + kind + 1
                              (kind: 0 device, 1 pinned, 2 managed, 3 host
                              memory registered, the caller's mapping) */
} gm__sim;

#define GM__SIM(ctx) ((gm__sim*)(ctx)->bs)

/* >>sim: unified memory ---------------------------------------------------
   Managed memory as the NVIDIA UVM driver (kernel-open/nvidia-uvm) serves
   it on a PCIe machine, advised to the device and prefetched as the CUDA
   backend does. Bytes never move (a managed mapping is host memory); what
   is modelled is where each 2 MiB chunk lives and the time the driver
   takes to move it, charged by holding the links and counted in their
   bytes. Invariants (sim->mu): a chunk is on the device iff it is in the
   LRU; resident sums their lengths; used + resident <= capacity, so a
   device allocation evicts chunks for its room (as PMA evicts UVM's chunks
   for other clients, uvm_pmm_gpu.c) and mem_info counts that room free;
   fresh memory is nowhere until first used, and its first use copies
   nothing.
   What the sim sees: prefetches, and copies, whose copy engine faults on
   managed pages not on the device. It cannot see a kernel's or the host's
   loads and stores. The tiered manager prefetches before every use, so a
   prefetch to the device is charged with the use after it, which streams
   the range once in address order: what the prefetch could not keep
   faults back in. A range larger than the room (capacity - used) then
   misses in every chunk (LRU under a cyclic walk): each is migrated by the
   prefetch, evicted for the next and faulted back by the use. The
   driver's thrashing detector does not step in: it skips evictions and
   prefetches (uvm_perf_thrashing.c, thrashing_event_cb), and mapping
   evicted pages remotely needs access-counter migrations, off without ATS
   (uvm_gpu_access_counters.c, is_migration_enabled). A chunk larger than
   the whole room crosses the link both ways at each use (where the driver
   would cancel the faults: uvm_gpu_replayable_faults.c, OOM).
   Time is charged only on a timed link (link_bytes_per_s > 0), as for
   copies; bytes are counted always. */
enum { GM__UVM_NOWHERE, GM__UVM_HOST, GM__UVM_DEV };
/* The VA block and PMM root chunk: evicted whole, least recently migrated
   first (uvm_pmm_gpu.c UVM_CHUNK_SIZE_MAX, pick_root_chunk_to_evict; the
   LRU is touched by every make-resident, uvm_va_block.c
   block_mark_memory_used). */
#define GM__UVM_CHUNK (2 * GM__MIB)
/* Fault batches to bring one block in from the host by faults: the
   density prefetcher (uvm_perf_prefetch.c, UVM_PREFETCH_THRESHOLD_DEFAULT
   51%) over the 32 big pages of 64 KiB that faults are grown to
   (grow_fault_granularity_if_no_thrashing) lets a walk from the start
   fault at big pages 0, 1, 2, 4, 8 and 16 before the region is the block.
   A block resident nowhere takes one: a first touch by the preferred
   location populates the whole block
   (uvm_perf_prefetch_prenotify_fault_migrations). A batch takes up to 256
   faults (uvm_gpu_replayable_faults.c, UVM_PERF_FAULT_BATCH_COUNT_DEFAULT);
   one block's never fill it. */
#define GM__UVM_ROUNDS 6
/* A batch's fixed cost: the 45 us far-fault latency of UVMSmart (Ganguly
   et al., "Interplay between Hardware Prefetcher and Page Eviction Policy
   in CPU-GPU Unified Virtual Memory", ISCA 2019: -page_fault_latency 66645
   cycles at 1481 MHz), within the 20-50 us of Zheng et al., "Towards High
   Performance Paged Memory for GPUs", HPCA 2016; tens of us in Allen & Ge,
   "In-Depth Analyses of Unified Virtual Memory System for GPU Accelerated
   Computing", SC 2021. */
#define GM__UVM_BATCH_NS 45000.0
/* Per fault in a batch, a copy engine's faults served one at a time
   (uvm_gpu_non_replayable_faults.c): a few us in Allen & Ge, SC 2021. */
#define GM__UVM_FAULT_NS 2000.0
/* A prefetch's own work per chunk (allocate, map, invalidate the TLB):
   small, as cudaMemPrefetchAsync runs near cudaMemcpy's rate and at least
   twice as fast as migration on demand (Sakharnykh, "Maximizing Unified
   Memory Performance in CUDA", NVIDIA blog, 2017). */
#define GM__UVM_MIGRATE_NS 10000.0
/* An eviction unmaps the chunk everywhere and copies it out on the
   servicing path (uvm_pmm_gpu.c evict_root_chunk): costed as one more
   batch, on top of its transfer (Allen & Ge, SC 2021: evictions add a
   cost per 2 MiB block). */
#define GM__UVM_EVICT_NS GM__UVM_BATCH_NS

static size_t gm__sim_clen(const gm__sim_chunk* c) {
    size_t off = (size_t)(c - c->r->c) * GM__UVM_CHUNK;
    return c->r->len - off < GM__UVM_CHUNK ? c->r->len - off : GM__UVM_CHUNK;
}

static void gm__sim_mfree(gm__sim_mrange* mr) {
    if (!mr) return;
    GPUMEM_FREE(mr->c);
    GPUMEM_FREE(mr);
}

/* The managed mapping holding p, if any. */
static gm__sim_mrange* gm__sim_mfind(const gm__sim* sim, const void* p) {
    gm__sim_mrange* r;
    for (r = sim->mranges; r; r = r->next)
        if ((const char*)p >= r->base && (const char*)p < r->base + r->len) return r;
    return NULL;
}

static void gm__sim_lru_del(gm__sim* sim, gm__sim_chunk* c) {
    if (c->prev) c->prev->next = c->next;
    else sim->lru = c->next;
    if (c->next) c->next->prev = c->prev;
    else sim->lru_tail = c->prev;
    c->prev = c->next = NULL;
}

static void gm__sim_lru_add(gm__sim* sim, gm__sim_chunk* c) {
    c->prev = sim->lru_tail;
    c->next = NULL;
    if (sim->lru_tail) sim->lru_tail->next = c;
    else sim->lru = c;
    sim->lru_tail = c;
}

/* Holds a link from `from` (or once it is free) for bytes at its rate plus
   overhead ns, counting the bytes; returns the end. Untimed links (rate 0)
   take no time. */
static uint64_t gm__sim_hold(gm__sim* sim, int link, uint64_t from, size_t bytes, double overhead) {
    uint64_t start = sim->link_free_at[link] > from ? sim->link_free_at[link] : from, end;
    double ns;
    sim->link_bytes[link] += bytes;
    if (sim->rate[link] <= 0) return from;
    ns = (double)bytes / sim->rate[link] * 1e9 + overhead;
    end = start + (ns < 1e15 ? (uint64_t)ns : (uint64_t)1e15);
    sim->link_free_at[link] = end;
    sim->link_busy_ns[link] += end - start;
    return end;
}

/* Evicts the least recently migrated chunk: its copy out, then the time
   after it. */
static uint64_t gm__sim_evict(gm__sim* sim, uint64_t t) {
    gm__sim_chunk* c = sim->lru;
    size_t len = gm__sim_clen(c);
    gm__sim_lru_del(sim, c);
    c->where = GM__UVM_HOST;
    sim->resident -= len;
    return gm__sim_hold(sim, GM__LINK_D2H, t, len, GM__UVM_EVICT_NS);
}

/* Evicts until used + resident fits the capacity (after used grew). */
static uint64_t gm__sim_make_room(gm__sim* sim, uint64_t t) {
    while (sim->lru && sim->used + sim->resident > sim->capacity) t = gm__sim_evict(sim, t);
    return t;
}

/* Brings chunks [i0, i1) of r to the device in address order from time t,
   each one not there costing a prefetch's work or (fault) the fault
   batches, plus its bytes when it was on the host; victims are other
   ranges' chunks first (those of [i0, i1) are touched to the LRU's end
   before any is brought), evicted before each migration on the same path
   (no overlap of the two directions). Returns the time it ends. */
static uint64_t gm__sim_bring(gm__sim* sim, gm__sim_mrange* r, size_t i0, size_t i1, int fault, uint64_t t) {
    size_t i;
    for (i = i0; i < i1; i++)
        if (r->c[i].where == GM__UVM_DEV) {
            gm__sim_lru_del(sim, &r->c[i]);
            gm__sim_lru_add(sim, &r->c[i]);
        }
    for (i = i0; i < i1; i++) {
        gm__sim_chunk* c = &r->c[i];
        size_t len = gm__sim_clen(c), in;
        double per = !fault ? GM__UVM_MIGRATE_NS
                   : (c->where == GM__UVM_HOST ? GM__UVM_ROUNDS : 1) * (GM__UVM_BATCH_NS + GM__UVM_FAULT_NS);
        if (c->where == GM__UVM_DEV) continue;
        in = c->where == GM__UVM_HOST ? len : 0; /* fresh memory is populated, not copied */
        if (len > sim->capacity - sim->used) { /* no room for it at all: in and out again */
            t = gm__sim_hold(sim, GM__LINK_H2D, t, in, per);
            t = gm__sim_hold(sim, GM__LINK_D2H, t, len, GM__UVM_EVICT_NS);
            c->where = GM__UVM_HOST;
            continue;
        }
        sim->resident += len; /* counted first: the loop below makes its room */
        while (sim->lru && sim->used + sim->resident > sim->capacity) t = gm__sim_evict(sim, t);
        t = gm__sim_hold(sim, GM__LINK_H2D, t, in, per);
        c->where = GM__UVM_DEV;
        gm__sim_lru_add(sim, c);
    }
    return t;
}

/* The chunks of r that [p, p + n) touches. */
static void gm__sim_span(const gm__sim_mrange* r, const void* p, size_t n, size_t* i0, size_t* i1) {
    size_t off = (size_t)((const char*)p - r->base), end = off + n < r->len ? off + n : r->len;
    *i0 = off / GM__UVM_CHUNK;
    *i1 = n ? (end + GM__UVM_CHUNK - 1) / GM__UVM_CHUNK : *i0;
}

/* A copy's access to [p, p + n): what is not on the device faults in. */
static uint64_t gm__sim_fault_in(gm__sim* sim, const void* p, size_t n, uint64_t t) {
    gm__sim_mrange* r = gm__sim_mfind(sim, p);
    size_t i0, i1;
    if (!r) return t;
    gm__sim_span(r, p, n, &i0, &i1);
    return gm__sim_bring(sim, r, i0, i1, 1, t);
}

/* A prefetch of [p, p + n) from time t: to the device, the migration and
   then the use after it (see the invariants); to the host, the chunks on
   the device copied back. Returns the time it ends. */
static uint64_t gm__sim_migrate(gm__sim* sim, const void* p, size_t n, int to_dev, uint64_t t) {
    gm__sim_mrange* r = gm__sim_mfind(sim, p);
    size_t i0, i1, i;
    if (!r) return t;
    gm__sim_span(r, p, n, &i0, &i1);
    if (to_dev) {
        t = gm__sim_bring(sim, r, i0, i1, 0, t);
        return gm__sim_fault_in(sim, p, n, t);
    }
    for (i = i0; i < i1; i++) {
        gm__sim_chunk* c = &r->c[i];
        if (c->where == GM__UVM_DEV) {
            gm__sim_lru_del(sim, c);
            sim->resident -= gm__sim_clen(c);
            t = gm__sim_hold(sim, GM__LINK_D2H, t, gm__sim_clen(c), GM__UVM_MIGRATE_NS);
        }
        c->where = GM__UVM_HOST;
    }
    return t;
}

/* A copy on `link` ended: its bytes and the time it held the link, from
   start to done. */
static void gm__sim_link_done(gm__sim* sim, int link, size_t n, uint64_t start, uint64_t done) {
    if (link == GM__LINK_NONE) return;
    pthread_mutex_lock(&sim->mu);
    sim->link_bytes[link] += n;
    sim->link_busy_ns[link] += done > start ? done - start : 0;
    if (done > sim->link_free_at[link]) sim->link_free_at[link] = done;
    pthread_mutex_unlock(&sim->mu);
}

/* The stream's next op completed (s->mu held): its waiters, if any, see it. */
static void gm__sim_completed(gm__sim_stream* s) {
    __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE); /* pollers read it without mu */
    if (s->waiters) pthread_cond_broadcast(&s->done_cv); /* no one waiting: no wake-up to pay for */
}

#define GM__SIM_SPIN_MAX 100000u /* ns: the longest a hand-off is polled for */

static void gm__cpu_relax(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls, for up to *win ns (s->mu held, released meanwhile), until the
   worker has an op queued or must stop (worker), else until s has
   completed `seq` ops; whether it saw that. A window that ran out halves. */
static int gm__sim_poll(gm__sim_stream* s, uint64_t* win, int worker, uint64_t seq) {
    uint64_t spin = *win, t0, t;
    int k, got;
    if (!spin) return 0;
    pthread_mutex_unlock(&s->mu);
    t0 = t = gm__now_ns();
    for (;;) {
        got = worker ? __atomic_load_n(&s->head, __ATOMIC_ACQUIRE) != NULL || __atomic_load_n(&s->stop, __ATOMIC_RELAXED)
                     : __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) >= seq;
        if (got || t - t0 >= spin) break;
        for (k = 0; k < 32; k++) gm__cpu_relax();
        sched_yield(); /* the thread being waited for may need this CPU */
        t = gm__now_ns();
    }
    pthread_mutex_lock(&s->mu);
    if (!got) *win /= 2;
    return got;
}

/* After a sleep of `slept` ns for a hand-off: had the window been that
   long, polling would have caught it, so it grows (s->mu held). */
static void gm__sim_spin_learn(uint64_t* win, uint64_t slept) {
    if (slept < GM__SIM_SPIN_MAX && 2 * slept > *win) *win = 2 * slept < GM__SIM_SPIN_MAX ? 2 * slept : GM__SIM_SPIN_MAX;
}

/* Until s has completed seq ops. */
static void gm__sim_wait(gm__sim_stream* s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    if (s->completed < seq && !gm__sim_poll(s, &s->wspin_ns, 0, seq)) {
        uint64_t t0 = gm__now_ns();
        s->waiters++;
        while (s->completed < seq) pthread_cond_wait(&s->done_cv, &s->mu);
        s->waiters--;
        gm__sim_spin_learn(&s->wspin_ns, gm__now_ns() - t0);
    }
    pthread_mutex_unlock(&s->mu);
}

static void* gm__sim_worker(void* arg) {
    gm__sim_stream* s = (gm__sim_stream*)arg;
    gm__sim* sim = s->sim;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        gm__sim_op* op;
        while (!s->head && !s->stop) {
            uint64_t t0;
            (void)gm__sim_poll(s, &s->spin_ns, 1, 0);
            if (s->head || s->stop) continue; /* it came meanwhile, perhaps as the poll ran out: no one woke us */
            t0 = gm__now_ns();
            s->idle = 1;
            pthread_cond_wait(&s->cv, &s->mu);
            s->idle = 0;
            if (s->head) gm__sim_spin_learn(&s->spin_ns, gm__now_ns() - t0);
        }
        if (!s->head) break;
        op = s->head;
        pthread_mutex_unlock(&s->mu);
        if (op->kind == GM__SIM_COPY) {
            uint64_t end = 0, t0 = gm__now_ns(), start = t0, done;
            if (op->managed) { /* the copy engine faults on what is not on the device, then copies */
                pthread_mutex_lock(&sim->mu);
                start = gm__sim_fault_in(sim, op->dst, op->n, start);
                start = gm__sim_fault_in(sim, op->src, op->n, start);
                pthread_mutex_unlock(&sim->mu);
            }
            if (op->link != GM__LINK_NONE && sim->rate[op->link] > 0) {
                double ns = (double)op->n / sim->rate[op->link] * 1e9;
                pthread_mutex_lock(&sim->mu);
                if (sim->link_free_at[op->link] > start) start = sim->link_free_at[op->link];
                end = start + (ns < 1e15 ? (uint64_t)ns : (uint64_t)1e15);
                sim->link_free_at[op->link] = end;
                pthread_mutex_unlock(&sim->mu);
            }
            if (op->dst != op->src && !sim->no_bytes) memmove(op->dst, op->src, op->n);
            if (end) gm__sleep_until_ns(end);
            else if (start > t0) gm__sleep_until_ns(start);
            done = gm__now_ns();
            gm__sim_link_done(sim, op->link, op->n, start, done);
        } else if (op->kind == GM__SIM_MIGRATE) {
            uint64_t end;
            pthread_mutex_lock(&sim->mu);
            end = gm__sim_migrate(sim, op->dst, op->n, op->to_dev, gm__now_ns());
            pthread_mutex_unlock(&sim->mu);
            gm__sleep_until_ns(end);
        } else if (op->kind == GM__SIM_HOST) {
            op->fn(op->user);
        } else {
            gm__sim_wait(op->ws, op->wseq);
        }
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        gm__sim_completed(s);
        GPUMEM_FREE(op);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static gm_result gm__sim_new_stream(gm_context* ctx, gm__sim_stream** out) {
    gm__sim* sim = GM__SIM(ctx);
    gm__sim_stream* s = (gm__sim_stream*)gm__calloc(sizeof *s);
    if (!s) return GM_ERR_HOST_OUT_OF_MEMORY;
    s->magic = GM__SIM_MAGIC;
    s->sim = sim;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    if (pthread_create(&s->th, NULL, gm__sim_worker, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->done_cv);
        pthread_mutex_destroy(&s->mu);
        GPUMEM_FREE(s);
        gm__log(ctx, GM_LOG_ERROR, "sim: cannot start a stream thread");
        return GM_ERR_BACKEND;
    }
    pthread_mutex_lock(&sim->mu);
    s->next = sim->streams;
    sim->streams = s;
    pthread_mutex_unlock(&sim->mu);
    *out = s;
    return GM_OK;
}

/* Drains and stops a stream; keeps the record (see the invariants). */
static void gm__sim_retire(gm__sim_stream* s) {
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED); /* pollers read it without mu */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->sim->mu); /* gm__sim_stream_valid reads it under sim->mu */
    s->retired = 1;
    pthread_mutex_unlock(&s->sim->mu);
}

static int gm__sim_stream_valid(gm_context* ctx, gm_stream st) {
    gm__sim* sim = GM__SIM(ctx);
    gm__sim_stream* s;
    int ok = 0;
    if (!st) return 1;
    pthread_mutex_lock(&sim->mu);
    for (s = sim->streams; s; s = s->next)
        if (s == (gm__sim_stream*)st && !s->retired) { ok = 1; break; }
    pthread_mutex_unlock(&sim->mu);
    return ok;
}

static gm__sim_stream* gm__sim_get(gm_context* ctx, gm_stream st) {
    if (!st) return GM__SIM(ctx)->def;
    return gm__sim_stream_valid(ctx, st) ? (gm__sim_stream*)st : NULL;
}

/* Whether op may run in the caller's thread (sim->run_inline): a copy the
   model gives no time, small enough that running it here costs the caller
   little. */
static int gm__sim_instant(const gm__sim* sim, const gm__sim_op* op) {
    return sim->run_inline && op->kind == GM__SIM_COPY && !op->managed && op->n <= GM__MIB &&
           (op->link == GM__LINK_NONE || sim->rate[op->link] <= 0);
}

static gm_result gm__sim_enqueue(gm_context* ctx, gm_stream st, gm__sim_op* tmpl) {
    gm__sim_stream* s = gm__sim_get(ctx, st);
    gm__sim_op* op;
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "sim: unknown or destroyed stream %p", (void*)st);
    if (gm__sim_instant(s->sim, tmpl)) {
        pthread_mutex_lock(&s->mu);
        if (!s->stop && !s->head) { /* idle: everything queued before it is done */
            if (tmpl->dst != tmpl->src && !s->sim->no_bytes) memmove(tmpl->dst, tmpl->src, tmpl->n);
            s->submitted++;
            gm__sim_completed(s);
            pthread_mutex_unlock(&s->mu);
            gm__sim_link_done(s->sim, tmpl->link, tmpl->n, 0, 0); /* its bytes; no modelled time */
            return GM_OK;
        }
        pthread_mutex_unlock(&s->mu);
    }
    op = (gm__sim_op*)GPUMEM_MALLOC(sizeof *op);
    if (!op) return GM_ERR_HOST_OUT_OF_MEMORY;
    *op = *tmpl;
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->stop) { /* being destroyed: the worker would never run it */
        pthread_mutex_unlock(&s->mu);
        GPUMEM_FREE(op);
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "sim: stream %p is being destroyed", (void*)st);
    }
    if (s->tail) s->tail->next = op;
    else __atomic_store_n(&s->head, op, __ATOMIC_RELEASE); /* a polling worker takes it without a wake-up */
    s->tail = op;
    s->submitted++;
    if (s->idle) pthread_cond_signal(&s->cv); /* a busy worker finds it without a wake-up */
    pthread_mutex_unlock(&s->mu);
    return GM_OK;
}

static gm_result gm__sim_init(gm_context* ctx) {
    gm__sim* sim = (gm__sim*)gm__calloc(sizeof *sim);
    gm_result r;
    if (!sim) return GM_ERR_HOST_OUT_OF_MEMORY;
    pthread_mutex_init(&sim->mu, NULL);
    sim->capacity = ctx->desc.sim.capacity;
    sim->fail_at[GM_SIM_FAULT_DEVICE_ALLOC] = ctx->desc.sim.fail_device_alloc;
    sim->fail_at[GM_SIM_FAULT_COPY] = ctx->desc.sim.fail_copy;
    sim->rate[GM__LINK_H2D] = sim->rate[GM__LINK_D2H] = ctx->desc.sim.link_bytes_per_s;
    sim->rate[GM__LINK_D2D] = ctx->desc.sim.device_bytes_per_s;
    sim->run_inline = ctx->desc.sim.run_inline == GM_TOGGLE_ON;
    sim->no_bytes = ctx->desc.sim.move_bytes == GM_TOGGLE_OFF;
    ctx->bs = sim;
    ctx->dev_align = 4096; /* whole pages */
    ctx->total = sim->capacity;
    r = gm__sim_new_stream(ctx, &sim->def);
    if (r != GM_OK) {
        pthread_mutex_destroy(&sim->mu);
        GPUMEM_FREE(sim);
        ctx->bs = NULL;
    }
    return r;
}

static void gm__sim_shutdown(gm_context* ctx) {
    gm__sim* sim = GM__SIM(ctx);
    gm__sim_stream *s, *next;
    if (!sim) return;
    for (s = sim->streams; s; s = next) {
        next = s->next;
        if (!s->retired) gm__sim_retire(s);
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->done_cv);
        pthread_mutex_destroy(&s->mu);
        GPUMEM_FREE(s);
    }
    if (sim->used || sim->managed || sim->pinned)
        gm__log(ctx, GM_LOG_WARN, "sim: shutdown with %zu device, %zu managed, %zu pinned bytes still mapped",
                sim->used, sim->managed, sim->pinned);
    { /* what is still mapped goes back with the context */
        size_t i;
        for (i = 0; i < sim->maps.cap; i++)
            if (sim->maps.e[i].k && ((uintptr_t)sim->maps.e[i].v & 4095) != 4) /* not registered memory: the caller's */
                munmap((void*)sim->maps.e[i].k, (size_t)((uintptr_t)sim->maps.e[i].v & ~(uintptr_t)4095));
    }
    while (sim->mranges) {
        gm__sim_mrange* mr = sim->mranges;
        sim->mranges = mr->next;
        gm__sim_mfree(mr);
    }
    GPUMEM_FREE(sim->maps.e);
    pthread_mutex_destroy(&sim->mu);
    GPUMEM_FREE(sim);
    ctx->bs = NULL;
}

static gm_result gm__sim_mem_info(gm_context* ctx, size_t* f, size_t* t) {
    gm__sim* sim = GM__SIM(ctx);
    pthread_mutex_lock(&sim->mu);
    *f = sim->capacity - sim->used;
    *t = sim->capacity;
    pthread_mutex_unlock(&sim->mu);
    return GM_OK;
}

static size_t gm__page(size_t n) { return gm__round_up(n ? n : 1, 4096); }

/* Counts one operation of a fault kind; 1 if it is the one armed to fail
   (which disarms it). Called with sim->mu held. */
static int gm__sim_fault(gm_context* ctx, gm__sim* sim, gm_sim_fault kind, size_t n) {
    static const char* what[] = {"device allocation", "copy", "pinned allocation", "disk write", "disk read",
                                 "disk transfer (short)", "disk write (no space)"};
    if (++sim->ops[kind] != sim->fail_at[kind] || !sim->fail_at[kind]) return 0;
    sim->fail_at[kind] = 0;
    gm__log(ctx, GM_LOG_INFO, "sim: injected failure of a %zu-byte %s", n, what[kind]);
    return 1;
}

/* Charges n bytes of device memory: the fault injection's count, then the
   capacity, whose managed chunks are evicted for the room; *until: when
   their copies out end (the caller waits for it once sim->mu is released).
   Called with sim->mu held; on failure it is released. */
static gm_result gm__sim_charge(gm_context* ctx, gm__sim* sim, size_t n, uint64_t* until) {
    if (gm__sim_fault(ctx, sim, GM_SIM_FAULT_DEVICE_ALLOC, n)) {
        pthread_mutex_unlock(&sim->mu);
        return GM_ERR_OUT_OF_MEMORY;
    }
    if (n > sim->capacity - sim->used) {
        pthread_mutex_unlock(&sim->mu);
        return GM_ERR_OUT_OF_MEMORY;
    }
    sim->used += n;
    *until = gm__sim_make_room(sim, gm__now_ns());
    return GM_OK;
}

/* which: 0 device (counted against capacity), 1 pinned, 2 managed */
static void gm__sim_uncount(gm__sim* sim, int which, size_t n) {
    pthread_mutex_lock(&sim->mu);
    if (which == 0) sim->used -= n;
    else if (which == 1) sim->pinned -= n;
    else sim->managed -= n;
    pthread_mutex_unlock(&sim->mu);
}

static gm_result gm__sim_map(gm_context* ctx, void** out, size_t size, int which) {
    gm__sim* sim = GM__SIM(ctx);
    void* p;
    size_t n = gm__page(size);
    uint64_t until = 0;
    gm__sim_mrange* mr = NULL;
    if (size > ((size_t)1 << 62)) return which == 1 ? GM_ERR_HOST_OUT_OF_MEMORY : GM_ERR_OUT_OF_MEMORY;
    if (which == 2) { /* its chunks, all nowhere yet */
        size_t i;
        mr = (gm__sim_mrange*)gm__calloc(sizeof *mr);
        if (mr) mr->n = (n + GM__UVM_CHUNK - 1) / GM__UVM_CHUNK;
        if (!mr || !(mr->c = (gm__sim_chunk*)gm__calloc(mr->n * sizeof *mr->c))) {
            GPUMEM_FREE(mr);
            return GM_ERR_HOST_OUT_OF_MEMORY;
        }
        mr->len = n;
        for (i = 0; i < mr->n; i++) mr->c[i].r = mr;
    }
    pthread_mutex_lock(&sim->mu);
    if (which == 0) {
        gm_result r = gm__sim_charge(ctx, sim, n, &until);
        if (r != GM_OK) return r;
    } else if (which == 1) {
        if (gm__sim_fault(ctx, sim, GM_SIM_FAULT_HOST_ALLOC, size)) {
            pthread_mutex_unlock(&sim->mu);
            return GM_ERR_HOST_OUT_OF_MEMORY;
        }
        sim->pinned += n;
    } else {
        sim->managed += n;
    }
    pthread_mutex_unlock(&sim->mu);
    gm__sleep_until_ns(until); /* cudaMalloc returns once PMA's evictions are done */
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        gm__sim_uncount(sim, which, n);
        gm__log(ctx, GM_LOG_WARN, "sim: mmap of %zu bytes failed: %s", n, strerror(e));
        gm__sim_mfree(mr);
        return which == 1 ? GM_ERR_HOST_OUT_OF_MEMORY : GM_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&sim->mu);
    if (!gm__map_put(&sim->maps, (uintptr_t)p, (void*)(uintptr_t)(n + (size_t)which + 1))) {
        pthread_mutex_unlock(&sim->mu);
        munmap(p, n);
        gm__sim_uncount(sim, which, n);
        gm__sim_mfree(mr);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    if (mr) {
        mr->base = (char*)p;
        mr->next = sim->mranges;
        sim->mranges = mr;
    }
    pthread_mutex_unlock(&sim->mu);
    *out = p;
    return GM_OK;
}

/* Only what sim mapped, of the kind and at the length it mapped, is
   unmapped: a foreign pointer, another kind of memory (as CUDA's cudaFree
   refuses pinned memory) or a wrong size would otherwise unmap it or its
   neighbours. */
static gm_result gm__sim_unmap(gm_context* ctx, void* p, size_t size, int which) {
    static const char* kinds[] = {"device", "pinned host", "managed"};
    gm__sim* sim = GM__SIM(ctx);
    size_t n = gm__page(size), slot;
    uintptr_t have;
    gm__sim_mrange *mr = NULL, **pp;
    pthread_mutex_lock(&sim->mu);
    slot = gm__map_slot(&sim->maps, (uintptr_t)p);
    have = slot == (size_t)-1 ? 0 : (uintptr_t)sim->maps.e[slot].v;
    if (have == n + (size_t)which + 1) gm__map_del_at(&sim->maps, slot);
    if (have == n + (size_t)which + 1 && which == 2) { /* its chunks leave the device with it */
        size_t i;
        for (pp = &sim->mranges; *pp && (*pp)->base != (char*)p; pp = &(*pp)->next) {}
        if ((mr = *pp) != NULL) *pp = mr->next;
        for (i = 0; mr && i < mr->n; i++)
            if (mr->c[i].where == GM__UVM_DEV) {
                gm__sim_lru_del(sim, &mr->c[i]);
                sim->resident -= gm__sim_clen(&mr->c[i]);
            }
    }
    pthread_mutex_unlock(&sim->mu);
    gm__sim_mfree(mr);
    if (have != n + (size_t)which + 1) {
        if (!have) return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "sim: %p is not a mapping of this device", p);
        if ((int)(have & 4095) - 1 != which)
            return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "sim: %p is %s memory, not %s memory", p,
                              kinds[(have & 3) - 1], kinds[which]);
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "sim: %p has %zu bytes mapped, not %zu", p,
                          (size_t)(have & ~(uintptr_t)4095), size);
    }
    if (munmap(p, n) != 0) {
        gm__log(ctx, GM_LOG_ERROR, "sim: munmap(%p, %zu) failed: %s", p, n, strerror(errno));
        return GM_ERR_BACKEND;
    }
    gm__sim_uncount(sim, which, n);
    return GM_OK;
}

static gm_result gm__sim_dev_alloc(gm_context* c, void** o, size_t n) { return gm__sim_map(c, o, n, 0); }
static gm_result gm__sim_dev_free(gm_context* c, void* p, size_t n) { return gm__sim_unmap(c, p, n, 0); }
static gm_result gm__sim_host_alloc(gm_context* c, void** o, size_t n) { return gm__sim_map(c, o, n, 1); }
static gm_result gm__sim_host_free(gm_context* c, void* p, size_t n) { return gm__sim_unmap(c, p, n, 1); }
static gm_result gm__sim_managed_alloc(gm_context* c, void** o, size_t n) { return gm__sim_map(c, o, n, 2); }
static gm_result gm__sim_managed_free(gm_context* c, void* p, size_t n) { return gm__sim_unmap(c, p, n, 2); }
/* Registered host memory is pinned memory that the caller mapped: counted
   and open to fault injection like cudaHostAlloc's, kept as kind 3 so the
   sim never unmaps it. */
static gm_result gm__sim_host_register(gm_context* ctx, void* p, size_t n) {
    gm__sim* sim = GM__SIM(ctx);
    size_t len = gm__page(n);
    int ok;
    pthread_mutex_lock(&sim->mu);
    if (gm__sim_fault(ctx, sim, GM_SIM_FAULT_HOST_ALLOC, n)) {
        pthread_mutex_unlock(&sim->mu);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    ok = !gm__map_get(&sim->maps, (uintptr_t)p) && gm__map_put(&sim->maps, (uintptr_t)p, (void*)(uintptr_t)(len + 4));
    if (ok) sim->pinned += len;
    pthread_mutex_unlock(&sim->mu);
    return ok ? GM_OK : GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "sim: %p cannot be registered (already known?)", p);
}
static gm_result gm__sim_host_unregister(gm_context* ctx, void* p) {
    gm__sim* sim = GM__SIM(ctx);
    uintptr_t have;
    pthread_mutex_lock(&sim->mu);
    have = (uintptr_t)gm__map_get(&sim->maps, (uintptr_t)p);
    if ((have & 4095) == 4) {
        gm__map_del(&sim->maps, (uintptr_t)p);
        sim->pinned -= have & ~(uintptr_t)4095;
    }
    pthread_mutex_unlock(&sim->mu);
    return (have & 4095) == 4 ? GM_OK : GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "sim: %p is not registered", p);
}
/* A migration in stream order, timed as >>sim: unified memory says. */
static gm_result gm__sim_managed_prefetch(gm_context* c, void* p, size_t n, int to_dev, gm_stream s) {
    gm__sim_op op;
    memset(&op, 0, sizeof op);
    op.kind = GM__SIM_MIGRATE;
    op.dst = p;
    op.n = n;
    op.to_dev = to_dev;
    return gm__sim_enqueue(c, s, &op);
}

/* Whether p is the base of a device mapping or in a managed one (with
   sim->mu). */
static int gm__sim_on_device(const gm__sim* sim, const void* p) {
    return ((uintptr_t)gm__map_get(&sim->maps, (uintptr_t)p) & 4095) == 1 /* kind + 1 */ || gm__sim_mfind(sim, p);
}

static gm_result gm__sim_copy(gm_context* ctx, void* dst, const void* src, size_t n, gm_copy_kind kind,
                              gm_stream st) {
    gm__sim* sim = GM__SIM(ctx);
    gm__sim_op op;
    int fail;
    pthread_mutex_lock(&sim->mu);
    fail = gm__sim_fault(ctx, sim, GM_SIM_FAULT_COPY, n);
    pthread_mutex_unlock(&sim->mu);
    if (fail) return GM_ERR_COPY_FAILED;
    memset(&op, 0, sizeof op);
    op.kind = GM__SIM_COPY;
    op.dst = dst;
    op.src = src;
    op.n = n;
    if (kind == GM_COPY_DEFAULT) { /* device or managed mappings (by their base) against host memory */
        int d, sr;
        pthread_mutex_lock(&sim->mu);
        d = gm__sim_on_device(sim, dst);
        sr = gm__sim_on_device(sim, src);
        pthread_mutex_unlock(&sim->mu);
        kind = d && sr ? GM_COPY_DEVICE_TO_DEVICE : d ? GM_COPY_HOST_TO_DEVICE : sr ? GM_COPY_DEVICE_TO_HOST
             : GM_COPY_HOST_TO_HOST;
    }
    op.link = kind == GM_COPY_HOST_TO_DEVICE ? GM__LINK_H2D
            : kind == GM_COPY_DEVICE_TO_HOST ? GM__LINK_D2H
            : kind == GM_COPY_DEVICE_TO_DEVICE ? GM__LINK_D2D : GM__LINK_NONE;
    if (op.link != GM__LINK_NONE) { /* the copy engine's access to managed memory may fault */
        pthread_mutex_lock(&sim->mu);
        op.managed = sim->mranges && (gm__sim_mfind(sim, dst) || gm__sim_mfind(sim, src));
        pthread_mutex_unlock(&sim->mu);
    }
    return gm__sim_enqueue(ctx, st, &op);
}

static gm_result gm__sim_launch_host(gm_context* ctx, gm_stream st, gm_host_fn fn, void* user) {
    gm__sim_op op;
    memset(&op, 0, sizeof op);
    op.kind = GM__SIM_HOST;
    op.fn = fn;
    op.user = user;
    return gm__sim_enqueue(ctx, st, &op);
}

static gm_result gm__sim_stream_create(gm_context* ctx, gm_stream* out) {
    gm__sim_stream* s;
    gm_result r = gm__sim_new_stream(ctx, &s);
    if (r == GM_OK) *out = (gm_stream)s;
    return r;
}

static gm_result gm__sim_stream_destroy(gm_context* ctx, gm_stream st) {
    gm__sim_stream* s = st ? gm__sim_get(ctx, st) : NULL;
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "sim: cannot destroy stream %p", (void*)st);
    gm__sim_retire(s);
    return GM_OK;
}

static gm_result gm__sim_stream_sync(gm_context* ctx, gm_stream st) {
    gm__sim_stream* s = gm__sim_get(ctx, st);
    uint64_t seq;
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "sim: unknown or destroyed stream %p", (void*)st);
    pthread_mutex_lock(&s->mu);
    seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    gm__sim_wait(s, seq);
    return GM_OK;
}

static gm_result gm__sim_device_sync(gm_context* ctx) {
    gm__sim* sim = GM__SIM(ctx);
    gm__sim_stream* s;
    pthread_mutex_lock(&sim->mu);
    s = sim->streams; /* the list only grows at the head: walking from here is safe */
    pthread_mutex_unlock(&sim->mu);
    for (; s; s = s->next) {
        uint64_t seq;
        pthread_mutex_lock(&s->mu);
        seq = s->submitted;
        pthread_mutex_unlock(&s->mu);
        gm__sim_wait(s, seq);
    }
    return GM_OK;
}

static gm_result gm__sim_event_create(gm_context* ctx, void** out) {
    gm__sim_event* e = (gm__sim_event*)gm__calloc(sizeof *e);
    (void)ctx;
    if (!e) return GM_ERR_HOST_OUT_OF_MEMORY;
    *out = e;
    return GM_OK;
}

static gm_result gm__sim_event_destroy(gm_context* ctx, void* ev) {
    (void)ctx;
    GPUMEM_FREE(ev);
    return GM_OK;
}

static gm_result gm__sim_event_record(gm_context* ctx, void* ev, gm_stream st) {
    gm__sim_event* e = (gm__sim_event*)ev;
    gm__sim_stream* s = gm__sim_get(ctx, st);
    uint32_t v;
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "sim: unknown or destroyed stream %p", (void*)st);
    pthread_mutex_lock(&s->mu);
    for (;;) { /* records on two streams at once (CUDA allows them) take turns: one claims ver, even to odd */
        v = __atomic_load_n(&e->ver, __ATOMIC_RELAXED);
        if (!(v & 1) && __atomic_compare_exchange_n(&e->ver, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) break;
        sched_yield();
    }
    __atomic_store_n(&e->s, s, __ATOMIC_RELEASE); /* a reader that sees either sees ver moved past v */
    __atomic_store_n(&e->seq, s->submitted, __ATOMIC_RELEASE);
    __atomic_store_n(&e->ver, v + 2, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    return GM_OK;
}

/* The stream and count an event was last recorded with, whole. */
static gm__sim_stream* gm__sim_event_at(const gm__sim_event* e, uint64_t* seq) {
    for (;;) {
        uint32_t v = __atomic_load_n(&e->ver, __ATOMIC_ACQUIRE);
        gm__sim_stream* s = __atomic_load_n(&e->s, __ATOMIC_ACQUIRE);
        *seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if (!(v & 1) && __atomic_load_n(&e->ver, __ATOMIC_RELAXED) == v) return s;
        sched_yield();
    }
}

/* Whether an event's record (stream s, count seq; s NULL: never recorded) has passed. */
static int gm__sim_passed(gm__sim_stream* s, uint64_t seq) {
    int done;
    if (!s) return 1;
    pthread_mutex_lock(&s->mu);
    done = s->completed >= seq;
    pthread_mutex_unlock(&s->mu);
    return done;
}

static gm_result gm__sim_event_query(gm_context* ctx, void* ev) {
    uint64_t seq;
    gm__sim_stream* s = gm__sim_event_at((gm__sim_event*)ev, &seq);
    (void)ctx;
    return gm__sim_passed(s, seq) ? GM_OK : GM_NOT_READY;
}

static gm_result gm__sim_event_sync(gm_context* ctx, void* ev) {
    uint64_t seq;
    gm__sim_stream* s = gm__sim_event_at((gm__sim_event*)ev, &seq);
    (void)ctx;
    if (s) gm__sim_wait(s, seq);
    return GM_OK;
}

static gm_result gm__sim_stream_wait_event(gm_context* ctx, gm_stream st, void* ev) {
    uint64_t seq;
    gm__sim_stream* s = gm__sim_event_at((gm__sim_event*)ev, &seq);
    gm__sim_op op;
    if (!s) return GM_OK;
    if (gm__sim_passed(s, seq) && gm__sim_get(ctx, st)) return GM_OK; /* nothing to wait for */
    memset(&op, 0, sizeof op);
    op.kind = GM__SIM_WAIT;
    op.ws = s;
    op.wseq = seq;
    return gm__sim_enqueue(ctx, st, &op);
}

/* Sim virtual memory: a PROT_NONE reservation; mapping a page makes it
   readable and writable and counts it against the capacity (and against
   the device-allocation fault injection); unmapping drops its contents. */
#define GM__SIM_GRAN (2 * GM__MIB)
static size_t gm__sim_va_granularity(gm_context* ctx) {
    (void)ctx;
    return GM__SIM_GRAN;
}

static gm_result gm__sim_va_reserve(gm_context* ctx, void** base, size_t size) {
    void* p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        gm__log(ctx, GM_LOG_WARN, "sim: cannot reserve %zu bytes of address space: %s", size, strerror(errno));
        return GM_ERR_OUT_OF_MEMORY;
    }
    *base = p;
    return GM_OK;
}

static gm_result gm__sim_va_release(gm_context* ctx, void* base, size_t size) {
    if (munmap(base, size) != 0) {
        gm__log(ctx, GM_LOG_ERROR, "sim: munmap(%p, %zu) failed: %s", base, size, strerror(errno));
        return GM_ERR_BACKEND;
    }
    return GM_OK;
}

static gm_result gm__sim_va_map(gm_context* ctx, void* addr, size_t size, void** handles) {
    gm__sim* sim = GM__SIM(ctx);
    gm_result r;
    uint64_t until = 0;
    pthread_mutex_lock(&sim->mu);
    if ((r = gm__sim_charge(ctx, sim, size, &until)) != GM_OK) return r;
    pthread_mutex_unlock(&sim->mu);
    gm__sleep_until_ns(until);
    if (mprotect(addr, size, PROT_READ | PROT_WRITE) != 0) {
        gm__log(ctx, GM_LOG_WARN, "sim: mprotect(%p, %zu) failed: %s", addr, size, strerror(errno));
        pthread_mutex_lock(&sim->mu);
        sim->used -= size;
        pthread_mutex_unlock(&sim->mu);
        return GM_ERR_OUT_OF_MEMORY;
    }
    (void)handles; /* the sim needs none: they stay NULL */
    return GM_OK;
}

static gm_result gm__sim_va_unmap(gm_context* ctx, void* addr, size_t size, void** handles, size_t* done) {
    gm__sim* sim = GM__SIM(ctx);
    (void)handles;
    *done = 0;
    if (madvise(addr, size, MADV_DONTNEED) != 0 || mprotect(addr, size, PROT_NONE) != 0) {
        gm__log(ctx, GM_LOG_ERROR, "sim: unmapping %p (%zu bytes) failed: %s", addr, size, strerror(errno));
        return GM_ERR_BACKEND;
    }
    *done = size / ctx->va_gran;
    pthread_mutex_lock(&sim->mu);
    sim->used -= size;
    pthread_mutex_unlock(&sim->mu);
    return GM_OK;
}

static const gm__backend gm__sim_backend = {
    "sim", gm__sim_init, gm__sim_shutdown, gm__sim_mem_info, gm__sim_dev_alloc, gm__sim_dev_free,
    gm__sim_host_alloc, gm__sim_host_free, gm__sim_host_register, gm__sim_host_unregister,
    gm__sim_managed_alloc, gm__sim_managed_free, gm__sim_managed_prefetch, gm__sim_copy,
    gm__sim_launch_host, gm__sim_stream_create, gm__sim_stream_destroy, gm__sim_stream_sync,
    gm__sim_stream_valid, gm__sim_device_sync, gm__sim_event_create, gm__sim_event_destroy,
    gm__sim_event_record, gm__sim_event_query, gm__sim_event_sync, gm__sim_stream_wait_event,
    gm__sim_va_granularity, gm__sim_va_reserve, gm__sim_va_release, gm__sim_va_map, gm__sim_va_unmap};

/* >>cuda ------------------------------------------------------------------
   The CUDA runtime backend. Every call's code goes through gm__cu(), which
   logs the CUDA name and string and maps it to a gm_result; sticky errors
   are not cleared (nothing can be done about them here). Each entry point
   first makes the context's device current, and gives the caller's device
   back afterwards only where that device already has a context: since
   CUDA 12 cudaSetDevice creates one (about 0.5 GiB), and a thread that
   never chose a device reports device 0 (PyTorch's device guard does the
   same). The driver's calls (primary-context state, virtual memory) come
   through cudaGetDriverEntryPointByVersion, so a binary starts without
   libcuda and links only the runtime. Host functions run on a stream
   (gm_launch_host) must make no CUDA call, and so no gpumem call. */
#ifdef GPUMEM_CUDA
typedef CUresult (*gm__cu_dev_get_fn)(CUdevice* dev, int ordinal);
typedef CUresult (*gm__cu_primary_fn)(CUdevice dev, unsigned int* flags, int* active);
typedef CUresult (*gm__cu_gran_fn)(size_t* g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags opt);
typedef CUresult (*gm__cu_reserve_fn)(CUdeviceptr* ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long f);
typedef CUresult (*gm__cu_addrfree_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*gm__cu_create_fn)(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                                     unsigned long long flags);
typedef CUresult (*gm__cu_release_fn)(CUmemGenericAllocationHandle h);
typedef CUresult (*gm__cu_map_fn)(CUdeviceptr ptr, size_t size, size_t off, CUmemGenericAllocationHandle h,
                                  unsigned long long flags);
typedef CUresult (*gm__cu_unmap_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*gm__cu_access_fn)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t n);
typedef CUresult (*gm__cu_errstr_fn)(CUresult e, const char** s);

typedef struct gm__cuda {
    int device;
    int cma;                /* concurrentManagedAccess: managed memory may be advised and prefetched */
    gm__cu_dev_get_fn dev_get;
    gm__cu_primary_fn primary;
    gm__cu_gran_fn gran;    /* virtual memory, or NULL where the driver lacks it */
    gm__cu_reserve_fn reserve;
    gm__cu_addrfree_fn addr_free;
    gm__cu_create_fn create;
    gm__cu_release_fn release;
    gm__cu_map_fn map;
    gm__cu_unmap_fn unmap;
    gm__cu_access_fn access;
    gm__cu_errstr_fn errstr;
} gm__cuda;

static gm_result gm__cu(const gm_context* ctx, cudaError_t e, const char* what) {
    if (e == cudaSuccess) return GM_OK;
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return GM_NOT_READY;
    }
    gm__log(ctx, e == cudaErrorMemoryAllocation ? GM_LOG_INFO : GM_LOG_ERROR, "cuda: %s: %s (%s)", what,
            cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError(); /* clears the error if it is not sticky */
    switch (e) {
    case cudaErrorMemoryAllocation: return GM_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStartupFailure: return GM_ERR_NO_DEVICE;
    case cudaErrorInvalidResourceHandle: return GM_ERR_INVALID_STREAM;
    default: return GM_ERR_BACKEND; /* a driver too old for the runtime included: that is no missing device */
    }
}

/* A driver call's result; CUDA_ERROR_OUT_OF_MEMORY is the out-of-memory
   the ladder handles, anything else is logged. */
static gm_result gm__cudrv(const gm_context* ctx, CUresult e, const char* what) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    const char* str = NULL;
    if (e == CUDA_SUCCESS) return GM_OK;
    if (cu->errstr) cu->errstr(e, &str);
    gm__log(ctx, e == CUDA_ERROR_OUT_OF_MEMORY ? GM_LOG_INFO : GM_LOG_ERROR, "cuda driver: %s: %s (%d)", what,
            str ? str : "unknown error", (int)e);
    return e == CUDA_ERROR_OUT_OF_MEMORY ? GM_ERR_OUT_OF_MEMORY : GM_ERR_BACKEND;
}

/* A driver entry point, or NULL where the driver has none. */
static void* gm__cu_entry(const char* name) {
    void* fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        fn = NULL;
#else
    if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
        fn = NULL;
#endif
    (void)cudaGetLastError();
    return fn;
}

/* Whether device `dev` has its primary context already (so making it
   current again creates nothing). Unknown: no. */
static int gm__cu_has_context(const gm__cuda* cu, int dev) {
    CUdevice d;
    unsigned int flags = 0;
    int active = 0;
    if (!cu->dev_get || !cu->primary || cu->dev_get(&d, dev) != CUDA_SUCCESS) return 0;
    return cu->primary(d, &flags, &active) == CUDA_SUCCESS && active;
}

/* A device guard, as PyTorch's: make the context's device current for one
   call, and give the caller's back afterwards where it has a context. */
static gm_result gm__cu_enter(const gm_context* ctx, int* prev) {
    int dev = ((gm__cuda*)ctx->bs)->device;
    gm_result r = gm__cu(ctx, cudaGetDevice(prev), "cudaGetDevice");
    if (r != GM_OK) return r;
    return *prev == dev ? GM_OK : gm__cu(ctx, cudaSetDevice(dev), "cudaSetDevice");
}
static void gm__cu_leave(const gm_context* ctx, int prev) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    if (prev != cu->device && gm__cu_has_context(cu, prev)) (void)gm__cu(ctx, cudaSetDevice(prev), "cudaSetDevice");
}
#define GM__CU_TRY(ctx, call)                             \
    do {                                                  \
        int gm__prev_;                                    \
        gm_result gm__r_ = gm__cu_enter(ctx, &gm__prev_); \
        if (gm__r_ != GM_OK) return gm__r_;               \
        gm__r_ = gm__cu((ctx), (call), #call);            \
        gm__cu_leave(ctx, gm__prev_);                     \
        return gm__r_;                                    \
    } while (0)

static gm_result gm__cu_init(gm_context* ctx) {
    int n = 0, prev = 0, cma = 0, drv = 0, rt = 0;
    size_t f = 0, t = 0;
    gm_result r;
    gm__cuda* cu;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) {
        (void)cudaGetLastError();
        cudaRuntimeGetVersion(&rt);
        gm__log(ctx, GM_LOG_ERROR, "cuda: the driver (CUDA %d.%d) is older than the runtime this program was built "
                "with (CUDA %d.%d): update the driver", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        return GM_ERR_BACKEND;
    }
    r = gm__cu(ctx, e, "cudaGetDeviceCount");
    if (r != GM_OK) return r == GM_ERR_BACKEND && e == cudaErrorInsufficientDriver ? GM_ERR_NO_DEVICE : r; /* no driver */
    if (ctx->desc.device < 0 || ctx->desc.device >= n) {
        gm__log(ctx, GM_LOG_ERROR, "cuda: device %d requested, %d present", ctx->desc.device, n);
        return GM_ERR_NO_DEVICE;
    }
    cu = (gm__cuda*)gm__calloc(sizeof *cu);
    if (!cu) return GM_ERR_HOST_OUT_OF_MEMORY;
    cu->device = ctx->desc.device;
    *(void**)&cu->dev_get = gm__cu_entry("cuDeviceGet");
    *(void**)&cu->primary = gm__cu_entry("cuDevicePrimaryCtxGetState");
    *(void**)&cu->gran = gm__cu_entry("cuMemGetAllocationGranularity");
    *(void**)&cu->reserve = gm__cu_entry("cuMemAddressReserve");
    *(void**)&cu->addr_free = gm__cu_entry("cuMemAddressFree");
    *(void**)&cu->create = gm__cu_entry("cuMemCreate");
    *(void**)&cu->release = gm__cu_entry("cuMemRelease");
    *(void**)&cu->map = gm__cu_entry("cuMemMap");
    *(void**)&cu->unmap = gm__cu_entry("cuMemUnmap");
    *(void**)&cu->access = gm__cu_entry("cuMemSetAccess");
    *(void**)&cu->errstr = gm__cu_entry("cuGetErrorString");
    ctx->bs = cu;
    ctx->dev_align = 256; /* what cudaMalloc documents */
    r = gm__cu(ctx, cudaGetDevice(&prev), "cudaGetDevice");
    if (r == GM_OK) r = gm__cu(ctx, cudaSetDevice(cu->device), "cudaSetDevice");
    if (r == GM_OK) r = gm__cu(ctx, cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    if (r == GM_OK && cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, cu->device) != cudaSuccess) {
        (void)cudaGetLastError();
        cma = 0;
    }
    if (prev != cu->device && gm__cu_has_context(cu, prev)) (void)cudaSetDevice(prev);
    if (r != GM_OK) {
        GPUMEM_FREE(cu);
        ctx->bs = NULL;
        return r;
    }
    cu->cma = cma;
    if (!cma)
        gm__log(ctx, GM_LOG_INFO, "cuda: device %d has no concurrent managed access: unified memory is neither advised "
                "nor prefetched, and only the copy engine touches it", cu->device);
    ctx->total = t;
    return GM_OK;
}

static void gm__cu_shutdown(gm_context* ctx) {
    GPUMEM_FREE(ctx->bs);
    ctx->bs = NULL;
}

static gm_result gm__cu_mem_info(gm_context* ctx, size_t* f, size_t* t) {
    GM__CU_TRY(ctx, cudaMemGetInfo(f, t));
}
static gm_result gm__cu_dev_alloc(gm_context* ctx, void** o, size_t n) { GM__CU_TRY(ctx, cudaMalloc(o, n)); }
static gm_result gm__cu_dev_free(gm_context* ctx, void* p, size_t n) {
    (void)n;
    GM__CU_TRY(ctx, cudaFree(p));
}
static gm_result gm__cu_host_alloc(gm_context* ctx, void** o, size_t n) {
    int prev;
    gm_result r = gm__cu_enter(ctx, &prev);
    if (r != GM_OK) return r;
    r = gm__cu(ctx, cudaHostAlloc(o, n, cudaHostAllocPortable), "cudaHostAlloc");
    gm__cu_leave(ctx, prev);
    return r == GM_ERR_OUT_OF_MEMORY ? GM_ERR_HOST_OUT_OF_MEMORY : r;
}
static gm_result gm__cu_host_free(gm_context* ctx, void* p, size_t n) {
    (void)n;
    GM__CU_TRY(ctx, cudaFreeHost(p));
}
static gm_result gm__cu_host_register(gm_context* ctx, void* p, size_t n) {
    GM__CU_TRY(ctx, cudaHostRegister(p, n, cudaHostRegisterPortable));
}
static gm_result gm__cu_host_unregister(gm_context* ctx, void* p) { GM__CU_TRY(ctx, cudaHostUnregister(p)); }

static gm_result gm__cu_managed_alloc(gm_context* ctx, void** o, size_t n) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    int prev;
    gm_result r = gm__cu_enter(ctx, &prev);
    if (r != GM_OK) return r;
    r = gm__cu(ctx, cudaMallocManaged(o, n, cudaMemAttachGlobal), "cudaMallocManaged");
    if (r == GM_OK && cu->cma) { /* without concurrent managed access advice is refused: the driver decides */
        gm_result a;
#if CUDART_VERSION >= 13000
        struct cudaMemLocation loc;
        loc.type = cudaMemLocationTypeDevice;
        loc.id = cu->device;
        a = gm__cu(ctx, cudaMemAdvise(*o, n, cudaMemAdviseSetPreferredLocation, loc), "cudaMemAdvise");
#else
        a = gm__cu(ctx, cudaMemAdvise(*o, n, cudaMemAdviseSetPreferredLocation, cu->device), "cudaMemAdvise");
#endif
        if (a != GM_OK) gm__log(ctx, GM_LOG_WARN, "cuda: managed memory is not advised to device %d", cu->device);
    }
    gm__cu_leave(ctx, prev);
    return r;
}
static gm_result gm__cu_managed_free(gm_context* ctx, void* p, size_t n) {
    (void)n;
    GM__CU_TRY(ctx, cudaFree(p));
}
/* A migration hint, ordered on s; nothing where the device cannot take it
   (no concurrent managed access: the pages move on demand instead). */
static gm_result gm__cu_managed_prefetch(gm_context* ctx, void* p, size_t n, int to_dev, gm_stream s) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    if (!cu->cma) return GM_OK;
    {
#if CUDART_VERSION >= 13000
        struct cudaMemLocation loc;
        loc.type = to_dev ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
        loc.id = to_dev ? cu->device : 0;
        GM__CU_TRY(ctx, cudaMemPrefetchAsync(p, n, loc, 0, (cudaStream_t)s));
#else
        GM__CU_TRY(ctx, cudaMemPrefetchAsync(p, n, to_dev ? cu->device : cudaCpuDeviceId, (cudaStream_t)s));
#endif
    }
}

static gm_result gm__cu_copy(gm_context* ctx, void* dst, const void* src, size_t n, gm_copy_kind k,
                             gm_stream s) {
    enum cudaMemcpyKind ck = k == GM_COPY_HOST_TO_DEVICE ? cudaMemcpyHostToDevice
                           : k == GM_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                           : k == GM_COPY_DEVICE_TO_DEVICE ? cudaMemcpyDeviceToDevice
                           : k == GM_COPY_HOST_TO_HOST ? cudaMemcpyHostToHost
                                                       : cudaMemcpyDefault;
    int prev;
    gm_result r = gm__cu_enter(ctx, &prev);
    if (r != GM_OK) return r;
    r = gm__cu(ctx, cudaMemcpyAsync(dst, src, n, ck, (cudaStream_t)s), "cudaMemcpyAsync");
    gm__cu_leave(ctx, prev);
    return r == GM_ERR_BACKEND ? GM_ERR_COPY_FAILED : r;
}

static gm_result gm__cu_launch_host(gm_context* ctx, gm_stream s, gm_host_fn fn, void* user) {
    GM__CU_TRY(ctx, cudaLaunchHostFunc((cudaStream_t)s, fn, user));
}
static gm_result gm__cu_stream_create(gm_context* ctx, gm_stream* out) {
    GM__CU_TRY(ctx, cudaStreamCreateWithFlags((cudaStream_t*)(void*)out, cudaStreamNonBlocking));
}
static gm_result gm__cu_stream_destroy(gm_context* ctx, gm_stream s) {
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "cuda: cannot destroy the default stream");
    GM__CU_TRY(ctx, cudaStreamDestroy((cudaStream_t)s));
}
static gm_result gm__cu_stream_sync(gm_context* ctx, gm_stream s) {
    GM__CU_TRY(ctx, cudaStreamSynchronize((cudaStream_t)s));
}
static int gm__cu_stream_valid(gm_context* ctx, gm_stream s) {
    (void)ctx; (void)s; /* streams may come from other code (PyTorch): trust them */
    return 1;
}
static gm_result gm__cu_device_sync(gm_context* ctx) { GM__CU_TRY(ctx, cudaDeviceSynchronize()); }
static gm_result gm__cu_event_create(gm_context* ctx, void** out) {
    GM__CU_TRY(ctx, cudaEventCreateWithFlags((cudaEvent_t*)(void*)out, cudaEventDisableTiming));
}
static gm_result gm__cu_event_destroy(gm_context* ctx, void* ev) {
    GM__CU_TRY(ctx, cudaEventDestroy((cudaEvent_t)ev));
}
static gm_result gm__cu_event_record(gm_context* ctx, void* ev, gm_stream s) {
    GM__CU_TRY(ctx, cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s));
}
static gm_result gm__cu_event_query(gm_context* ctx, void* ev) { GM__CU_TRY(ctx, cudaEventQuery((cudaEvent_t)ev)); }
static gm_result gm__cu_event_sync(gm_context* ctx, void* ev) { GM__CU_TRY(ctx, cudaEventSynchronize((cudaEvent_t)ev)); }
static gm_result gm__cu_stream_wait_event(gm_context* ctx, gm_stream s, void* ev) {
    GM__CU_TRY(ctx, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)ev, 0));
}

/* Expandable segments on the driver's virtual memory: an address range
   reserved with cuMemAddressReserve, pages of the recommended granularity
   made with cuMemCreate (pinned device memory), mapped with cuMemMap and
   opened to the device with cuMemSetAccess; unmapped and released one page
   at a time. 0 where the driver lacks any of it: classic segments then. */
static void gm__cu_prop(const gm__cuda* cu, CUmemAllocationProp* prop) {
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = cu->device;
}

static size_t gm__cu_va_granularity(gm_context* ctx) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    CUmemAllocationProp prop;
    size_t g = 0;
    int prev;
    if (!cu->gran || !cu->reserve || !cu->addr_free || !cu->create || !cu->release || !cu->map || !cu->unmap ||
        !cu->access)
        return 0;
    gm__cu_prop(cu, &prop);
    if (gm__cu_enter(ctx, &prev) != GM_OK) return 0;
    if (gm__cudrv(ctx, cu->gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity") != GM_OK)
        g = 0;
    gm__cu_leave(ctx, prev);
    return g;
}

static gm_result gm__cu_va_reserve(gm_context* ctx, void** base, size_t size) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    CUdeviceptr p = 0;
    gm_result r;
    int prev;
    if ((r = gm__cu_enter(ctx, &prev)) != GM_OK) return r;
    r = gm__cudrv(ctx, cu->reserve(&p, size, ctx->va_align, 0, 0), "cuMemAddressReserve");
    gm__cu_leave(ctx, prev);
    *base = (void*)(uintptr_t)p;
    return r;
}

static gm_result gm__cu_va_release(gm_context* ctx, void* base, size_t size) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    gm_result r;
    int prev;
    if ((r = gm__cu_enter(ctx, &prev)) != GM_OK) return r;
    r = gm__cudrv(ctx, cu->addr_free((CUdeviceptr)(uintptr_t)base, size), "cuMemAddressFree");
    gm__cu_leave(ctx, prev);
    return r;
}

/* size / granularity pages at addr, a handle each, all or none. */
static gm_result gm__cu_va_map(gm_context* ctx, void* addr, size_t size, void** handles) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    size_t g = ctx->va_gran, k = 0, i;
    gm_result r;
    int prev;
    if ((r = gm__cu_enter(ctx, &prev)) != GM_OK) return r;
    gm__cu_prop(cu, &prop);
    for (k = 0; k < size / g && r == GM_OK; k++) {
        CUmemGenericAllocationHandle h = 0;
        r = gm__cudrv(ctx, cu->create(&h, g, &prop, 0), "cuMemCreate");
        if (r != GM_OK) break;
        r = gm__cudrv(ctx, cu->map((CUdeviceptr)(uintptr_t)addr + k * g, g, 0, h, 0), "cuMemMap");
        if (r != GM_OK) {
            (void)cu->release(h);
            break;
        }
        handles[k] = (void*)(uintptr_t)h;
    }
    if (r == GM_OK) {
        memset(&acc, 0, sizeof acc);
        acc.location = prop.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = gm__cudrv(ctx, cu->access((CUdeviceptr)(uintptr_t)addr, size, &acc, 1), "cuMemSetAccess");
    }
    if (r != GM_OK) /* all or none: what this call mapped goes */
        for (i = 0; i < k; i++) {
            (void)cu->unmap((CUdeviceptr)(uintptr_t)addr + i * g, g);
            (void)cu->release((CUmemGenericAllocationHandle)(uintptr_t)handles[i]);
            handles[i] = NULL;
        }
    gm__cu_leave(ctx, prev);
    return r;
}

/* Page by page, as each was mapped (cuMemUnmap takes a whole mapping). */
static gm_result gm__cu_va_unmap(gm_context* ctx, void* addr, size_t size, void** handles, size_t* done) {
    const gm__cuda* cu = (const gm__cuda*)ctx->bs;
    size_t g = ctx->va_gran, k;
    gm_result r;
    int prev;
    *done = 0;
    if ((r = gm__cu_enter(ctx, &prev)) != GM_OK) return r;
    for (k = 0; k < size / g && r == GM_OK; k++) {
        r = gm__cudrv(ctx, cu->unmap((CUdeviceptr)(uintptr_t)addr + k * g, g), "cuMemUnmap");
        if (r == GM_OK)
            r = gm__cudrv(ctx, cu->release((CUmemGenericAllocationHandle)(uintptr_t)handles[k]), "cuMemRelease");
        if (r == GM_OK) *done = k + 1;
    }
    gm__cu_leave(ctx, prev);
    return r;
}

static const gm__backend gm__cuda_backend = {
    "cuda", gm__cu_init, gm__cu_shutdown, gm__cu_mem_info, gm__cu_dev_alloc, gm__cu_dev_free,
    gm__cu_host_alloc, gm__cu_host_free, gm__cu_host_register, gm__cu_host_unregister,
    gm__cu_managed_alloc, gm__cu_managed_free, gm__cu_managed_prefetch, gm__cu_copy,
    gm__cu_launch_host, gm__cu_stream_create, gm__cu_stream_destroy, gm__cu_stream_sync,
    gm__cu_stream_valid, gm__cu_device_sync, gm__cu_event_create, gm__cu_event_destroy,
    gm__cu_event_record, gm__cu_event_query, gm__cu_event_sync, gm__cu_stream_wait_event,
    gm__cu_va_granularity, gm__cu_va_reserve, gm__cu_va_release, gm__cu_va_map, gm__cu_va_unmap};
#endif /* GPUMEM_CUDA */

/* >>stat ------------------------------------------------------------------
   gm_stat updates. Every change goes to its pool's slot and to GM_STAT_ALL,
   so the ALL peak is the peak of the sum, not the sum of the peaks. */
static GM__HOT void gm__stat_one(gm_stat* s, int64_t d) {
    s->current += d;
    if (d > 0) s->allocated += d;
    else s->freed -= d;
    if (s->current > s->peak) s->peak = s->current;
}

static GM__HOT void gm__stat_add(gm_stat* s3, int pool, int64_t d) {
    if (!d) return;
    gm__stat_one(&s3[GM_STAT_ALL], d);
    gm__stat_one(&s3[pool], d);
}

/* >>arena -----------------------------------------------------------------
   An out-of-band block manager over segments of one address space (device
   memory, the pinned pool, or a file's offsets). Invariants:
   - a segment's blocks tile [base, base + size) in address order through
     prev/next, each block's size a non-zero multiple of `align`;
   - no two neighbours in a segment are both FREE (they are coalesced);
   - the treap holds exactly the FREE blocks, ordered by (key, size, addr),
     with each parent's prio >= its children's; a free block's key is its
     segment's key; nfree counts them, and nwhole those that are a whole
     segment (whether a block in the tree has neighbours changes only while
     it is out of the tree: a neighbour may be replaced, never added or
     removed), so a walk for whole-free segments is skipped in O(1) when
     there are none;
   - with `st` set: segment/reserved_bytes count the segments and
     inactive_split(_bytes) the FREE blocks of segments that have more than
     one block (PyTorch's "non-releasable" memory).
   Best fit is one lower_bound: O(log n) expected. */
/* A free block's key in the tree: its segment's owner (gm__arena_rekey
   takes a segment's blocks out of the tree while it changes). */
static uintptr_t gm__bkey(const gm__block* b) { return b->seg->key; }

static int gm__tr_cmp(const gm__block* a, uintptr_t key, size_t size, uintptr_t addr) {
    uintptr_t ak = gm__bkey(a);
    if (ak != key) return ak < key ? -1 : 1;
    if (a->size != size) return a->size < size ? -1 : 1;
    if (a->addr != addr) return a->addr < addr ? -1 : 1;
    return 0;
}

static gm__block* gm__tr_insert(gm__block* t, gm__block* n) {
    if (!t) return n;
    if (gm__tr_cmp(n, gm__bkey(t), t->size, t->addr) < 0) {
        t->l = gm__tr_insert(t->l, n);
        if (t->l->prio > t->prio) { /* rotate right */
            gm__block* x = t->l;
            t->l = x->r;
            x->r = t;
            return x;
        }
    } else {
        t->r = gm__tr_insert(t->r, n);
        if (t->r->prio > t->prio) { /* rotate left */
            gm__block* x = t->r;
            t->r = x->l;
            x->l = t;
            return x;
        }
    }
    return t;
}

static gm__block* gm__tr_merge(gm__block* a, gm__block* b) {
    if (!a) return b;
    if (!b) return a;
    if (a->prio > b->prio) {
        a->r = gm__tr_merge(a->r, b);
        return a;
    }
    b->l = gm__tr_merge(a, b->l);
    return b;
}

static gm__block* gm__tr_erase(gm__block* t, const gm__block* n) {
    if (!t) return NULL;
    if (t == n) return gm__tr_merge(t->l, t->r);
    if (gm__tr_cmp(n, gm__bkey(t), t->size, t->addr) < 0) t->l = gm__tr_erase(t->l, n);
    else t->r = gm__tr_erase(t->r, n);
    return t;
}

static void gm__arena_tree_add(gm__arena* a, gm__block* b) {
    a->rng ^= a->rng << 13;
    a->rng ^= a->rng >> 17;
    a->rng ^= a->rng << 5;
    b->prio = a->rng;
    b->l = b->r = NULL;
    a->root = gm__tr_insert(a->root, b);
    a->nfree++;
    a->nwhole += !b->prev && !b->next;
}

static void gm__arena_tree_del(gm__arena* a, gm__block* b) {
    a->root = gm__tr_erase(a->root, b);
    b->l = b->r = NULL;
    a->nfree--;
    a->nwhole -= !b->prev && !b->next;
}

static void gm__arena_init(gm__arena* a, size_t align, gm_stats* st, int pool) {
    memset(a, 0, sizeof *a);
    a->align = align;
    a->rng = 0x9e3779b9u ^ (uint32_t)pool;
    a->st = st;
    a->pool = pool;
}

#define GM__SLAB 128
/* Records lie on whole cache lines of their own: threads that use their
   own blocks through their caches (>>tcache) share no line. */
#define GM__REC_STRIDE ((sizeof(gm__block) + 63) / 64 * 64)
static gm__block* gm__arena_rec(gm__arena* a) {
    gm__block* b;
    if (!a->spare) {
        size_t i, hdr = gm__round_up(sizeof(gm__chunk), sizeof(void*) * 2), skip;
        char* mem = (char*)GPUMEM_MALLOC(hdr + 64 + GM__SLAB * GM__REC_STRIDE);
        if (!mem) return NULL;
        ((gm__chunk*)(void*)mem)->next = a->chunks;
        a->chunks = (gm__chunk*)(void*)mem;
        skip = (64 - (size_t)((uintptr_t)(mem + hdr) & 63)) & 63;
        for (i = 0; i < GM__SLAB; i++) {
            gm__block* r = (gm__block*)(void*)(mem + hdr + skip + i * GM__REC_STRIDE);
            r->tcw = 0;
            r->next = a->spare;
            a->spare = r;
        }
    }
    b = a->spare;
    a->spare = b->next;
    memset(&b->addr, 0, sizeof *b - offsetof(gm__block, addr)); /* a thread cache may still read the word of a
                                                                  record it named */
    return b;
}

static void gm__arena_unrec(gm__arena* a, gm__block* b) {
    b->next = a->spare;
    a->spare = b;
}

/* Freed-block marks tell a double free (the address was a block start
   and was freed) from a pointer never handed out; one bit per 512 bytes,
   in bitmaps of GM__MARK_SPAN bytes made when first needed. A mark that
   cannot be made (no host memory) only makes a later double free read as a
   foreign pointer: both are refused. */
#define GM__MARK_SPAN (2 * GM__MIB)
#define GM__MARK_SLOT 512
static GM__HOT void gm__mark_freed(gm__seg* s, uintptr_t addr) {
    size_t off = addr - s->base, c = off / GM__MARK_SPAN, bit = off % GM__MARK_SPAN / GM__MARK_SLOT;
    uint8_t** m;
    if (!s->freed.leaf && !gm__sparse_init(&s->freed, s->size / GM__MARK_SPAN + 1)) return;
    if ((m = (uint8_t**)gm__sparse_make(&s->freed, c, sizeof *m)) == NULL) return;
    if (!*m && !(*m = (uint8_t*)gm__calloc(GM__MARK_SPAN / GM__MARK_SLOT / 8))) return;
    (*m)[bit >> 3] = (uint8_t)((*m)[bit >> 3] | (1u << (bit & 7)));
}

static int gm__was_freed(const gm__seg* s, uintptr_t addr) {
    size_t off = addr - s->base, c = off / GM__MARK_SPAN, bit = off % GM__MARK_SPAN / GM__MARK_SLOT;
    uint8_t* const* m = s->freed.leaf ? (uint8_t* const*)gm__sparse_at(&s->freed, c, sizeof *m) : NULL;
    return off % GM__MARK_SLOT == 0 && m && *m && ((*m)[bit >> 3] >> (bit & 7) & 1);
}

static void gm__seg_free(gm__seg* s) {
    gm__sparse_free(&s->freed, 1);
    GPUMEM_FREE(s);
}

static void gm__arena_destroy(gm__arena* a) {
    gm__seg* s;
    while ((s = a->segs) != NULL) {
        gm__block *b, *n;
        for (b = s->first; b; b = n) {
            n = b->next;
            GPUMEM_FREE(b->uses);
            GPUMEM_FREE(b->events);
        }
        a->segs = s->next;
        gm__seg_free(s);
    }
    while (a->chunks) {
        gm__chunk* c = a->chunks;
        a->chunks = c->next;
        GPUMEM_FREE(c);
    }
    memset(a, 0, sizeof *a);
}

static int gm__blk_split(const gm__block* b) { return b->prev != NULL || b->next != NULL; }

static void gm__arena_split_stat(gm__arena* a, const gm__block* b, int sign) {
    if (a->st && gm__blk_split(b) && !b->seg->va) {
        gm__stat_add(a->st->inactive_split, a->pool, sign);
        gm__stat_add(a->st->inactive_split_bytes, a->pool, sign * (int64_t)b->size);
    }
}

/* A new segment as one free block, of which `mapped` bytes count as
   reserved; NULL when host memory runs out. */
static gm__seg* gm__arena_add_ex(gm__arena* a, uintptr_t base, size_t size, uintptr_t key, size_t mapped) {
    gm__seg* s = (gm__seg*)gm__calloc(sizeof *s);
    gm__block* b = s ? gm__arena_rec(a) : NULL;
    if (!b) {
        GPUMEM_FREE(s);
        return NULL;
    }
    s->base = base;
    s->size = size;
    s->arena = a;
    s->key = key;
    s->ord = a->nord++;
    s->mapped = mapped;
    s->first = b;
    s->next = a->segs;
    if (a->segs) a->segs->prev = s;
    a->segs = s;
    a->nsegs++;
    b->addr = base;
    b->size = size;
    b->seg = s;
    b->state = GM__FREE;
    gm__arena_tree_add(a, b);
    if (a->st) {
        gm__stat_add(a->st->segment, a->pool, 1);
        gm__stat_add(a->st->reserved_bytes, a->pool, (int64_t)mapped);
    }
    return s;
}

static gm__seg* gm__arena_add(gm__arena* a, uintptr_t base, size_t size, uintptr_t key) {
    return gm__arena_add_ex(a, base, size, key, size);
}

/* An expandable segment mapped or unmapped some of its pages. */
static void gm__arena_remap(gm__arena* a, gm__seg* s, int64_t delta) {
    s->mapped = (size_t)((int64_t)s->mapped + delta);
    if (a->st) gm__stat_add(a->st->reserved_bytes, a->pool, delta);
}

/* The smallest free block of `key` with size >= size (lowest address among
   equals), still in the tree; NULL if none. */
static gm__block* gm__arena_find(const gm__arena* a, uintptr_t key, size_t size) {
    gm__block *t = a->root, *best = NULL;
    while (t) {
        if (gm__tr_cmp(t, key, size, 0) >= 0) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best && gm__bkey(best) == key ? best : NULL;
}

/* The free block after b in the tree's order, of b's key; NULL if none. */
static gm__block* gm__arena_after(const gm__arena* a, const gm__block* b) {
    gm__block *t = a->root, *best = NULL;
    while (t) {
        if (gm__tr_cmp(t, gm__bkey(b), b->size, b->addr) > 0) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best && gm__bkey(best) == gm__bkey(b) ? best : NULL;
}

/* The largest free block of `key`, or NULL if none. */
static gm__block* gm__arena_largest(const gm__arena* a, uintptr_t key) {
    gm__block *t = a->root, *best = NULL;
    while (t) {
        if (gm__bkey(t) <= key) {
            if (gm__bkey(t) == key) best = t;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return best;
}

/* Takes free block b for `size` bytes; splits the rest off as a new free
   block when it is at least `min_rest` (and a record can be had). */
/* Free block b, out of the tree, keeps its first `off` bytes; record r,
   put in the tree, becomes the free block of the rest, after b. */
static void gm__arena_split(gm__arena* a, gm__block* b, gm__block* r, size_t off) {
    r->addr = b->addr + off;
    r->size = b->size - off;
    r->seg = b->seg;
    r->state = GM__FREE;
    r->ord[0] = b->ord[0];
    r->ord[1] = b->ord[1];
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = off;
    gm__arena_tree_add(a, r);
    gm__arena_split_stat(a, r, +1);
}

static gm__block* gm__arena_take(gm__arena* a, gm__block* b, size_t size, size_t min_rest) {
    GPUMEM_ASSERT(b->state == GM__FREE && b->size >= size && size % a->align == 0);
    gm__arena_tree_del(a, b);
    gm__arena_split_stat(a, b, -1);
    if (b->size - size >= min_rest && b->size > size) {
        gm__block* r = gm__arena_rec(a);
        if (r) gm__arena_split(a, b, r, size);
    }
    b->state = GM__USED;
    return b;
}

/* Splits free block b at byte `off` (a multiple of the alignment, inside
   it): b keeps the front, the block returned (NULL when no record can be
   had) is free from b->addr + off to b's old end. */
static gm__block* gm__arena_cut(gm__arena* a, gm__block* b, size_t off) {
    gm__block* r;
    GPUMEM_ASSERT(b->state == GM__FREE && off && off < b->size && off % a->align == 0);
    if ((r = gm__arena_rec(a)) == NULL) return NULL;
    gm__arena_tree_del(a, b);
    gm__arena_split_stat(a, b, -1);
    gm__arena_split(a, b, r, off);
    gm__arena_tree_add(a, b);
    gm__arena_split_stat(a, b, +1);
    return r;
}

static void gm__ord_merge(gm__block* d, const gm__block* s) {
    if (s->ord[0] > d->ord[0]) d->ord[0] = s->ord[0];
    if (s->ord[1] > d->ord[1]) d->ord[1] = s->ord[1];
}

/* Returns b to the free tree, coalesced with free neighbours; returns the
   resulting block (b's record may be recycled). */
static gm__block* gm__arena_give(gm__arena* a, gm__block* b) {
    gm__block* n;
    GPUMEM_ASSERT(b->state != GM__FREE);
    if (b->prev && b->prev->state == GM__FREE) {
        gm__block* p = b->prev;
        gm__arena_tree_del(a, p);
        gm__arena_split_stat(a, p, -1);
        gm__ord_merge(p, b);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        GPUMEM_FREE(b->uses);
        GPUMEM_FREE(b->events);
        gm__arena_unrec(a, b);
        b = p;
    }
    n = b->next;
    if (n && n->state == GM__FREE) {
        gm__arena_tree_del(a, n);
        gm__arena_split_stat(a, n, -1);
        gm__ord_merge(b, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        gm__arena_unrec(a, n);
    }
    GPUMEM_FREE(b->uses);
    GPUMEM_FREE(b->events);
    b->uses = NULL;
    b->events = NULL;
    b->nuses = b->capuses = b->nevents = 0;
    b->requested = 0;
    b->state = GM__FREE;
    gm__arena_tree_add(a, b);
    gm__arena_split_stat(a, b, +1);
    return b;
}

static int gm__seg_whole_free(const gm__seg* s) { return s->first->state == GM__FREE && !s->first->next; }

/* Gives a whole-free segment a new owner key. */
static void gm__arena_rekey(gm__arena* a, gm__seg* s, uintptr_t key) {
    GPUMEM_ASSERT(gm__seg_whole_free(s));
    gm__arena_tree_del(a, s->first);
    s->key = key;
    gm__arena_tree_add(a, s->first);
}

/* Forgets a whole-free segment; the caller returns its memory. */
static void gm__arena_drop(gm__arena* a, gm__seg* s) {
    GPUMEM_ASSERT(gm__seg_whole_free(s));
    gm__arena_tree_del(a, s->first);
    gm__arena_unrec(a, s->first);
    if (s->prev) s->prev->next = s->next;
    else a->segs = s->next;
    if (s->next) s->next->prev = s->prev;
    a->nsegs--;
    if (a->st) {
        gm__stat_add(a->st->segment, a->pool, -1);
        gm__stat_add(a->st->reserved_bytes, a->pool, -(int64_t)s->mapped);
    }
    gm__seg_free(s);
}

/* The segment holding address p, or NULL. */
static gm__seg* gm__arena_seg_of(const gm__arena* a, uintptr_t p) {
    gm__seg* s;
    for (s = a->segs; s; s = s->next)
        if (p >= s->base && p - s->base < s->size) return s;
    return NULL;
}

static const char* gm__state_name(int state) {
    return state == GM__FREE      ? "free"
           : state == GM__USED    ? "in use"
           : state == GM__PENDING ? "pending"
                                  : "in no known state";
}

static const char* const gm__pool_names[GM_STAT_POOLS] = {"all", "small", "large"};

/* Walk of the free tree: order, heap and key invariants; counts its nodes
   (and stops at a depth only a cycle reaches). */
typedef struct gm__tree_walk {
    const char* nm;
    const gm__block* last;
    size_t n;
    int cut;
} gm__tree_walk;

static void gm__arena_check_tree(gm__ck* ck, gm__tree_walk* w, const gm__block* t, int depth) {
    if (!t || w->cut) return;
    if (depth > 10000) {
        gm__broken(ck, "%s: the free tree is deeper than 10000 (a cycle?)", w->nm);
        w->cut = 1;
        return;
    }
    if (t->l && t->l->prio > t->prio)
        gm__broken(ck, "%s: free tree: block %#lx has priority %u, below its left child %#lx's %u", w->nm,
                   (unsigned long)t->addr, t->prio, (unsigned long)t->l->addr, t->l->prio);
    if (t->r && t->r->prio > t->prio)
        gm__broken(ck, "%s: free tree: block %#lx has priority %u, below its right child %#lx's %u", w->nm,
                   (unsigned long)t->addr, t->prio, (unsigned long)t->r->addr, t->r->prio);
    gm__arena_check_tree(ck, w, t->l, depth + 1);
    if (w->last && gm__tr_cmp(w->last, gm__bkey(t), t->size, t->addr) >= 0)
        gm__broken(ck, "%s: free tree out of order: block %#lx (%zu bytes, key %#lx) follows %#lx (%zu bytes, key %#lx)",
                   w->nm, (unsigned long)t->addr, t->size, (unsigned long)gm__bkey(t), (unsigned long)w->last->addr,
                   w->last->size, (unsigned long)gm__bkey(w->last));
    if (t->state != GM__FREE)
        gm__broken(ck, "%s: the free tree holds block %#lx (%zu bytes), which is %s", w->nm, (unsigned long)t->addr,
                   t->size, gm__state_name(t->state));
    w->last = t;
    w->n++;
    gm__arena_check_tree(ck, w, t->r, depth + 1);
}

/* The arena's invariants, reported as structure nm; adds USED and PENDING
   block counts and bytes to the outputs for the owner's own checks. */
static void gm__arena_check(gm__ck* ck, const gm__arena* a, const char* nm, int64_t* used_n, int64_t* used_b,
                            int64_t* pend_n, int64_t* pend_b, int64_t* req_b) {
    const gm__seg* s;
    size_t free_n = 0, nsegs = 0, whole = 0;
    int64_t reserved = 0, split_n = 0, split_b = 0;
    gm__tree_walk w;
    memset(&w, 0, sizeof w);
    w.nm = nm;
    gm__arena_check_tree(ck, &w, a->root, 0);
    for (s = a->segs; s; s = s->next, nsegs++) {
        const gm__block *b, *prev = NULL;
        uintptr_t at = s->base;
        size_t nb = 0; /* a tiled segment has at most size / align blocks: a cycle ends there */
        int tiled = s->first != NULL;
        reserved += (int64_t)s->mapped;
        whole += s->first && gm__seg_whole_free(s);
        if (s->arena != a)
            gm__broken(ck, "%s: segment %zu (%#lx) belongs to another arena", nm, nsegs, (unsigned long)s->base);
        if (s->next && s->next->prev != s)
            gm__broken(ck, "%s: segment %zu (%#lx): the next one's back link is broken", nm, nsegs,
                       (unsigned long)s->base);
        if (!s->first) gm__broken(ck, "%s: segment %zu (%#lx) has no blocks", nm, nsegs, (unsigned long)s->base);
        else if (s->first->prev)
            gm__broken(ck, "%s: the first block of segment %zu (%#lx) has a predecessor", nm, nsegs,
                       (unsigned long)s->base);
        for (b = s->first; b && nb <= s->size / a->align; prev = b, b = b->next, nb++) {
            long long off = (long long)(b->addr - s->base);
            if (tiled &&
                (b->seg != s || b->addr != at || !b->size || b->size % a->align || (b->next && b->next->prev != b))) {
                char why[96];
                if (b->seg != s) snprintf(why, sizeof why, "it names another segment");
                else if (b->addr != at)
                    snprintf(why, sizeof why, "the block before it ends at offset %lld", (long long)(at - s->base));
                else if (!b->size) snprintf(why, sizeof why, "it is empty");
                else if (b->size % a->align)
                    snprintf(why, sizeof why, "its size %zu is not a multiple of %zu", b->size, a->align);
                else snprintf(why, sizeof why, "the next block's back link is broken");
                gm__broken(ck, "%s: block at offset %lld breaks the tiling of segment %zu (%#lx): %s", nm, off, nsegs,
                           (unsigned long)s->base, why);
                tiled = 0; /* the walk goes on, counting, so that only this is said of it */
            }
            at += b->size;
            if (b->state == GM__FREE) {
                free_n++;
                if (prev && prev->state == GM__FREE)
                    gm__broken(ck, "%s: free blocks at offsets %lld and %lld of segment %zu (%#lx) are not coalesced",
                               nm, (long long)(prev->addr - s->base), off, nsegs, (unsigned long)s->base);
                if (gm__blk_split(b) && !s->va) {
                    split_n++;
                    split_b += (int64_t)b->size;
                }
            } else if (b->state == GM__USED) {
                *used_n += 1;
                *used_b += (int64_t)b->size;
                *req_b += (int64_t)b->requested;
                if (b->requested > b->size)
                    gm__broken(ck, "%s: block at offset %lld of segment %zu (%#lx) holds a request of %zu bytes in %zu",
                               nm, off, nsegs, (unsigned long)s->base, b->requested, b->size);
            } else if (b->state == GM__PENDING) {
                *pend_n += 1;
                *pend_b += (int64_t)b->size;
            } else {
                gm__broken(ck, "%s: block at offset %lld of segment %zu (%#lx) is in state %d", nm, off, nsegs,
                           (unsigned long)s->base, b->state);
            }
        }
        if (b) gm__broken(ck, "%s: segment %zu (%#lx) has more blocks than fit (a cycle?)", nm, nsegs,
                          (unsigned long)s->base);
        else if (tiled && at != s->base + s->size)
            gm__broken(ck, "%s: the blocks of segment %zu (%#lx) cover %lld of its %zu bytes", nm, nsegs,
                       (unsigned long)s->base, (long long)(at - s->base), s->size);
    }
    if (w.n != free_n || free_n != a->nfree)
        gm__broken(ck, "%s: %zu free blocks, %zu in the free tree, %zu counted", nm, free_n, w.n, a->nfree);
    if (nsegs != a->nsegs) gm__broken(ck, "%s: %zu segments, %zu counted", nm, nsegs, a->nsegs);
    if (whole != a->nwhole) gm__broken(ck, "%s: %zu segments wholly free, %zu counted", nm, whole, a->nwhole);
    if (a->st) { /* the device's pools: the context's statistics */
        const gm_stats* st = a->st;
        const char* pn = gm__pool_names[a->pool];
        if (st->segment[a->pool].current != (int64_t)nsegs)
            gm__broken(ck, "device: stat segment[%s] is %lld, the pool has %zu segments", pn,
                       (long long)st->segment[a->pool].current, nsegs);
        if (st->reserved_bytes[a->pool].current != reserved)
            gm__broken(ck, "device: stat reserved_bytes[%s] is %lld, segments sum to %lld", pn,
                       (long long)st->reserved_bytes[a->pool].current, (long long)reserved);
        if (st->inactive_split[a->pool].current != split_n)
            gm__broken(ck, "device: stat inactive_split[%s] is %lld, split segments have %lld free blocks", pn,
                       (long long)st->inactive_split[a->pool].current, (long long)split_n);
        if (st->inactive_split_bytes[a->pool].current != split_b)
            gm__broken(ck, "device: stat inactive_split_bytes[%s] is %lld, free blocks of split segments sum to %lld",
                       pn, (long long)st->inactive_split_bytes[a->pool].current, (long long)split_b);
    }
}

/* A block of n bytes (a multiple of a->align) from arena a, whose segments
   all have key 1. When none fits, the arena grows by `step` bytes, or by
   n when that is more, or by what is left below `limit` when step would
   pass it, or by just n when grow() cannot have the larger piece; grow(ctx, owner, bytes) adds a segment of that size to the arena
   and counts it in *reserved, or returns 0. NULL: no room within the limit. */
typedef int (*gm__grow_fn)(gm_context* ctx, void* owner, size_t bytes);
static gm__block* gm__pool_take(gm_context* ctx, gm__arena* a, const size_t* reserved, size_t limit, size_t step,
                                size_t n, gm__grow_fn grow, void* owner) {
    gm__block* b = gm__arena_find(a, 1, n);
    if (!b) {
        size_t g = n > step ? n : step;
        limit -= limit % a->align; /* a segment off the arena's granularity breaks its tiling */
        if (*reserved + g > limit) g = limit - *reserved; /* the rest of the limit, in one piece */
        if (*reserved + n > limit || (!grow(ctx, owner, g) && (g == n || !grow(ctx, owner, n)))) return NULL;
        b = gm__arena_find(a, 1, n);
        if (!b) return NULL;
    }
    return gm__arena_take(a, b, n, a->align);
}

/* >>streams ---------------------------------------------------------------
   The allocator's per-stream state (gm__sstate) and its recycled events.
   Entries are never removed, so a block's segment key (index + 1) stays
   valid; a stream destroyed (gm_stream_destroy) or detached
   (gm_stream_detach) is synchronized and marked dead, and a handle seen
   again after that (CUDA hands destroyed handles out again) gets a new
   entry: the old one's blocks, cached for work long done, go to others only
   as whole free segments. Invariants: safe_epoch < epoch; the
   ring's epochs increase strictly and lie in (safe_epoch, epoch); a
   segment's free_epoch <= its owner's dirty_epoch <= epoch. */
static gm_result gm__ev_get(gm_context* ctx, void** ev) {
    if (ctx->nevfree) {
        *ev = ctx->evfree[--ctx->nevfree];
        return GM_OK;
    }
    return ctx->be->event_create(ctx, ev);
}

static void gm__ev_put(gm_context* ctx, void* ev) {
    if (ctx->nevfree == ctx->capevfree) {
        uint32_t cap = ctx->capevfree ? ctx->capevfree * 2 : 16;
        void** n = (void**)gm__grow_array(ctx->evfree, ctx->capevfree * sizeof(void*), cap * sizeof(void*));
        if (!n) return; /* leaked, not destroyed: a thread may be waiting on it without the lock */
        ctx->evfree = n;
        ctx->capevfree = cap;
    }
    ctx->evfree[ctx->nevfree++] = ev;
}

/* Finds or adds the state of stream s. */
static gm_result gm__ss_index(gm_context* ctx, gm_stream s, uint32_t* out) {
    uint32_t i;
    gm__sstate* e;
    if (GM__LIKELY(ctx->last_ss < ctx->nss && ctx->ss[ctx->last_ss].stream == s && !ctx->ss[ctx->last_ss].dead)) {
        *out = ctx->last_ss;
        return GM_OK;
    }
    for (i = 0; i < ctx->nss; i++) {
        if (ctx->ss[i].stream == s && !ctx->ss[i].dead) {
            *out = ctx->last_ss = i;
            return GM_OK;
        }
    }
    /* a new handle, or one destroyed and handed out again (CUDA reuses them): a
       fresh state, which inherits nothing of the old stream's */
    if (!ctx->be->stream_valid(ctx, s))
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "unknown or destroyed stream %p", (void*)s);
    if (ctx->nss == ctx->capss) {
        uint32_t cap = ctx->capss ? ctx->capss * 2 : 8;
        gm__sstate* n = (gm__sstate*)gm__grow_array(ctx->ss, ctx->capss * sizeof *n, cap * sizeof *n);
        if (!n) return GM_ERR_HOST_OUT_OF_MEMORY;
        ctx->ss = n;
        ctx->capss = cap;
    }
    e = &ctx->ss[ctx->nss];
    memset(e, 0, sizeof *e);
    e->stream = s;
    e->epoch = 1;
    *out = ctx->last_ss = ctx->nss++;
    return GM_OK;
}

/* What the context knows of s (with mu; no backend call): GM__SS_LIVE, a
   state not dead; GM__SS_GONE, none live and one destroyed by
   gm_stream_destroy (which leaves a dead state for every handle it
   destroys), not seen since; else 0 (never seen, or only detached). */
enum { GM__SS_LIVE = 1, GM__SS_GONE = 2 };
static int gm__ss_seen(const gm_context* ctx, gm_stream s) {
    uint32_t i;
    int gone = 0;
    for (i = 0; i < ctx->nss; i++) {
        if (ctx->ss[i].stream != s) continue;
        if (!ctx->ss[i].dead) return GM__SS_LIVE;
        gone |= ctx->ss[i].dead == 2;
    }
    return gone ? GM__SS_GONE : 0;
}

/* Whether s is gone (with mu): nothing to look at until some stream was
   destroyed, so the paths that ask pay nothing in a program that never
   destroys one. */
static int gm__ss_gone(const gm_context* ctx, gm_stream s) {
    return s && __atomic_load_n(&ctx->ss_destroyed, __ATOMIC_RELAXED) && gm__ss_seen(ctx, s) == GM__SS_GONE;
}

static gm__sstate* gm__owner(gm_context* ctx, const gm__seg* seg) { return &ctx->ss[seg->key - 1]; }

static void gm__fence_pop(gm_context* ctx, gm__sstate* s) {
    s->safe_epoch = s->fep[s->fhead];
    gm__ev_put(ctx, s->fev[s->fhead]);
    s->fhead = (s->fhead + 1) % GM__FENCES;
    s->fcount--;
}

/* Retires the fences that completed. A query that fails cannot tell, so the
   device is synchronized before anything is called safe. */
static void gm__fence_poll(gm_context* ctx, gm__sstate* s) {
    while (s->fcount) {
        gm_result r = ctx->be->event_query(ctx, s->fev[s->fhead]);
        if (r == GM_NOT_READY) return;
        if (r != GM_OK) ctx->be->device_sync(ctx);
        gm__fence_pop(ctx, s);
    }
}

/* Makes sure a fence covering every free made on s so far is recorded, if
   the ring has room (else the older fences will do first). */
static void gm__fence_need(gm_context* ctx, gm__sstate* s) {
    uint64_t need = s->dirty_epoch;
    void* ev;
    uint32_t slot;
    if (s->dead || need <= s->safe_epoch || ctx->nosync) return;
    if (s->fcount && s->fep[(s->fhead + s->fcount - 1) % GM__FENCES] >= need) return;
    if (s->fcount == GM__FENCES || gm__ev_get(ctx, &ev) != GM_OK) return;
    if (ctx->be->event_record(ctx, ev, s->stream) != GM_OK) {
        gm__ev_put(ctx, ev);
        return;
    }
    slot = (s->fhead + s->fcount) % GM__FENCES;
    s->fev[slot] = ev;
    s->fep[slot] = s->epoch++;
    s->fcount++;
}

/* Waits for the newest fence, which covers all the older ones. */
static void gm__fence_wait(gm_context* ctx, gm__sstate* s) {
    if (s->fcount) {
        uint32_t last = (s->fhead + s->fcount - 1) % GM__FENCES;
        if (ctx->be->event_sync(ctx, s->fev[last]) != GM_OK) ctx->be->device_sync(ctx);
        while (s->fcount) gm__fence_pop(ctx, s);
    }
}

/* Whether the owner's last use of a whole-free segment has completed.
   Non-blocking unless wait; records a fence when one is needed. */
static int gm__epoch_safe(gm_context* ctx, gm__sstate* s, uint64_t epoch, int wait) {
    if (s->dead || epoch <= s->safe_epoch) return 1;
    gm__fence_poll(ctx, s);
    if (epoch <= s->safe_epoch) return 1;
    gm__fence_need(ctx, s);
    if (wait) gm__fence_wait(ctx, s);
    else gm__fence_poll(ctx, s);
    return epoch <= s->safe_epoch;
}

static int gm__seg_safe(gm_context* ctx, const gm__seg* seg, int wait) {
    return gm__epoch_safe(ctx, gm__owner(ctx, seg), seg->free_epoch, wait);
}

/* >>expand ----------------------------------------------------------------
   Expandable segments: one reserved address range per pool and stream,
   whose pages are mapped when a block first lands on them and unmapped when
   idle. Invariants: page p's users count the USED and PENDING blocks
   whose first or last page it is, and p is marked inner when it lies
   inside one of them, neither first nor last (then it has no users); a
   page in use (users or inner) is mapped; nmapped counts the mapped pages,
   nused those in use, and seg->mapped == nmapped * gran; every mapped
   idle page is marked queued, and the pages marked queued are those of
   the idle queue's runs, once each (the queue may hold pages used again
   since, or unmapped: they are skipped when reached); the page tables are
   made a leaf at a time (gm__sparse) before a page of it gets a user, and
   the queue has room for a run for every page of the leaves made. A page is
   unmapped only once its stream is past the free that left it idle (the
   stream's fences), and idle pages are given back
   before reserved memory grows past gm__va_keep (its peak, or the peak of
   allocated memory and a slack of 1/2048, and an allowance for pages that
   limit gave back and were needed again), so reserved memory stays close
   to the peak of live memory without unmapping and mapping again at every
   step of a loop. At that limit a request lands
   where its best-fit hole has idle mapped pages (gm__va_take) rather than
   mapping new ones while others are unmapped, and idle pages next to each
   other go back in one backend call. */

/* The page tables. A leaf covers L = 1 << pg.shift pages (at least 64) in
   GM__VPAGE_BYTES a page: an epoch for each group of 64 pages (uint64: the
   owner's epoch when a free last left pages of the group idle; epochs only
   grow, so a page is unmapped no sooner than its own free allows, and at
   worst later), each page's users (uint32: the blocks in use whose first
   or last page it is), then four bitmaps of L bits. A page inside a block
   in use, neither its first nor its last, has no other user (blocks do not
   overlap): it is marked inner instead of counted, so that a block of a
   thousand pages costs two counts and a few dozen words, not a thousand
   entries. A page is in use when it has users or is inner. */
enum { GM__VB_MAPPED, GM__VB_QUEUED, GM__VB_TRIMMED /* unmapped by gm__va_keep's limit */, GM__VB_INNER };
#define GM__VPAGE_BYTES 5 /* 8 / 64 + 4 + 4 bits, rounded up: with L >= 64, whole words for the epochs and bits */
typedef struct gm__vseg {
    size_t gran, npages, nmapped;
    unsigned gshift;        /* log2(gran) when gran is a power of two, else 0 (a division a page lookup) */
    size_t nused;           /* pages in use */
    gm__sparse pg;          /* the leaves, GM__VPAGE_BYTES a page; a page in use, mapped or queued lies in a made leaf */
    gm__sparse hd;          /* the backend's handle (void*) of each mapped page; leaves made with pg's */
    uint64_t* q;            /* idle pages, oldest first: runs (first page | count << 32) in one leaf, in a ring of
                               qcap (a power of two) >= the pages of pg's made leaves */
    size_t qcap, qhead, qlen;
} gm__vseg;

static GM__HOT size_t gm__vl_pages(const gm__vseg* v) { return (size_t)1 << v->pg.shift; }
/* The leaf of page p (NULL: never made; nothing of it is used, mapped or queued). */
static GM__HOT unsigned char* gm__vl(const gm__vseg* v, size_t p) { return v->pg.leaf[p >> v->pg.shift]; }
static GM__HOT uint64_t* gm__vl_epoch(const gm__vseg* v, unsigned char* l) { (void)v; return (uint64_t*)(void*)l; }
static GM__HOT uint32_t* gm__vl_ref(const gm__vseg* v, unsigned char* l) { return (uint32_t*)(void*)(l + gm__vl_pages(v) / 8); }
static GM__HOT uint64_t* gm__vl_bits(const gm__vseg* v, unsigned char* l, int which) {
    return (uint64_t*)(void*)(l + gm__vl_pages(v) / 8 + 4 * gm__vl_pages(v)) + (size_t)which * (gm__vl_pages(v) / 64);
}
/* The epoch of page a of leaf l (its group's). */
static uint64_t gm__vl_epoch_of(const gm__vseg* v, unsigned char* l, size_t a) { return gm__vl_epoch(v, l)[a >> 6]; }

/* Bits [a, a + n) of a bitmap: how many are set; set or cleared; the first
   from i before end where x & ~y (y may be NULL) is `one` (end if none). */
static GM__HOT uint64_t gm__bits_mask(size_t a, size_t m) {
    return (m >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << m) - 1)) << (a & 63);
}
static GM__HOT unsigned gm__popcount64(uint64_t x) {
#if defined(__POPCNT__)
    return (unsigned)__builtin_popcountll(x);
#else /* inline: without the instruction assumed, the builtin is a library call */
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}
static GM__HOT size_t gm__bits_count(const uint64_t* w, size_t a, size_t n) {
    size_t c = 0;
    while (n) {
        size_t m = 64 - (a & 63) < n ? 64 - (a & 63) : n;
        c += gm__popcount64(w[a >> 6] & gm__bits_mask(a, m));
        a += m;
        n -= m;
    }
    return c;
}
static GM__HOT void gm__bits_put(uint64_t* w, size_t a, size_t n, int on) {
    while (n) {
        size_t m = 64 - (a & 63) < n ? 64 - (a & 63) : n;
        if (on) w[a >> 6] |= gm__bits_mask(a, m);
        else w[a >> 6] &= ~gm__bits_mask(a, m);
        a += m;
        n -= m;
    }
}
static GM__HOT int gm__bit(const uint64_t* w, size_t i) { return (int)((w[i >> 6] >> (i & 63)) & 1); }
static GM__HOT size_t gm__bits_find(const uint64_t* x, const uint64_t* y, size_t i, size_t end, int one) {
    while (i < end) {
        uint64_t w = x[i >> 6] & (y ? ~y[i >> 6] : ~(uint64_t)0);
        if (!one) w = ~w;
        w &= ~(uint64_t)0 << (i & 63);
        if (w) {
            size_t j = (i & ~(size_t)63) + (size_t)__builtin_ctzll(w);
            return j < end ? j : end;
        }
        i = (i & ~(size_t)63) + 64;
    }
    return end;
}

/* Page p: mapped; in use; its users (p in a made leaf, for tests and the checker). */
static int gm__vp_mapped(const gm__vseg* v, size_t p) {
    unsigned char* l = gm__vl(v, p);
    return l && gm__bit(gm__vl_bits(v, l, GM__VB_MAPPED), p & (gm__vl_pages(v) - 1));
}
static int gm__vp_used(const gm__vseg* v, size_t p) {
    unsigned char* l = gm__vl(v, p);
    size_t a = p & (gm__vl_pages(v) - 1);
    return l && (gm__vl_ref(v, l)[a] || gm__bit(gm__vl_bits(v, l, GM__VB_INNER), a));
}
static uint32_t* gm__vref(const gm__vseg* v, size_t p) { return gm__vl_ref(v, gm__vl(v, p)) + (p & (gm__vl_pages(v) - 1)); }

/* The page holding byte `off` of the segment. */
static GM__HOT size_t gm__vpage_at(const gm__vseg* v, size_t off) { return v->gshift ? off >> v->gshift : off / v->gran; }

/* Pages [p, last] that share p's leaf: their count, and p's place in it in *a. */
static GM__HOT size_t gm__vchunk(const gm__vseg* v, size_t p, size_t last, size_t* a) {
    size_t L = gm__vl_pages(v);
    *a = p & (L - 1);
    return last - p + 1 < L - *a ? last - p + 1 : L - *a;
}

static void gm__vseg_free(gm__vseg* v) {
    if (!v) return;
    gm__sparse_free(&v->pg, 0);
    gm__sparse_free(&v->hd, 0);
    GPUMEM_FREE(v->q);
    GPUMEM_FREE(v);
}

/* The leaves of pages [first, last] made, and the idle queue grown to
   cover them: 0 when host memory ran out (what was made stays, empty). */
static int gm__vseg_make(gm__vseg* v, size_t first, size_t last) {
    size_t p, leaf = gm__vl_pages(v);
    for (p = first / leaf * leaf; p <= last; p += leaf) {
        if (gm__vl(v, p)) continue;
        if (v->qcap < (v->pg.made + 1) * leaf) { /* the ring, oldest first, into a larger one */
            size_t cap = v->qcap ? v->qcap : leaf, i;
            uint64_t* q;
            while (cap < (v->pg.made + 1) * leaf) cap *= 2;
            if ((q = (uint64_t*)GPUMEM_MALLOC(cap * sizeof *q)) == NULL) return 0;
            for (i = 0; i < v->qlen; i++) q[i] = v->q[(v->qhead + i) & (v->qcap - 1)];
            GPUMEM_FREE(v->q);
            v->q = q;
            v->qcap = cap;
            v->qhead = 0;
        }
        if (!gm__sparse_make(&v->hd, p, sizeof(void*)) || !gm__sparse_make(&v->pg, p, GM__VPAGE_BYTES)) return 0;
    }
    return 1;
}

/* The expandable segment of pool pl for stream si, reserved on first use:
   twice the budget of address space, so that address fragmentation can
   never be what runs out. Its page tables are made as pages are used. */
static gm__seg* gm__vseg_open(gm_context* ctx, int pl, uint32_t si) {
    gm__vseg* v;
    gm__seg* seg;
    void* base;
    size_t g = ctx->va_gran, size = gm__round_up(2 * (ctx->budget > g ? ctx->budget : g), g);
    if (ctx->ss[si].vseg[pl]) return ctx->ss[si].vseg[pl];
    v = (gm__vseg*)gm__calloc(sizeof *v);
    if (!v) return NULL;
    v->gran = g;
    v->npages = size / g;
    if (!(g & (g - 1)))
        while (((size_t)1 << v->gshift) < g) v->gshift++;
    /* leaves of at least 64 pages (whole words of bits), the handles' the same */
    if (!gm__sparse_init(&v->pg, v->npages < 64 ? 64 : v->npages) ||
        !gm__sparse_init(&v->hd, v->npages < 64 ? 64 : v->npages) || v->npages > 0xffffffffu ||
        ctx->be->va_reserve(ctx, &base, size) != GM_OK) {
        gm__vseg_free(v);
        return NULL;
    }
    seg = gm__arena_add_ex(&ctx->pool[pl], (uintptr_t)base, size, (uintptr_t)si + 1, 0);
    if (!seg) {
        ctx->be->va_release(ctx, base, size);
        gm__vseg_free(v);
        return NULL;
    }
    seg->va = v;
    ctx->ss[si].vseg[pl] = seg;
    return seg;
}

/* Pages [p, p + n) of one leaf (l, from a) join the idle queue: those
   mapped, idle and not queued, a run an entry. */
static GM__HOT void gm__va_queue(gm__vseg* v, unsigned char* l, size_t p, size_t a, size_t n) {
    uint64_t *m = gm__vl_bits(v, l, GM__VB_MAPPED), *qd = gm__vl_bits(v, l, GM__VB_QUEUED);
    size_t i = a, end = a + n, j;
    const uint64_t* in = gm__vl_bits(v, l, GM__VB_INNER);
    const uint32_t* r = gm__vl_ref(v, l);
    while ((i = gm__bits_find(m, qd, i, end, 1)) < end) { /* mapped, not queued */
        for (j = i; j < end && gm__bit(m, j) && !gm__bit(qd, j) && !r[j] && !gm__bit(in, j); j++) {}
        if (j == i) { /* in use */
            i++;
            continue;
        }
        gm__bits_put(qd, i, j - i, 1);
        v->q[(v->qhead + v->qlen++) & (v->qcap - 1)] = (uint64_t)(p - a + i) | (uint64_t)(j - i) << 32;
        i = j;
    }
}

/* Unmaps the n mapped pages from p on, in one backend call per leaf of
   the page tables (they stay in the idle queue, skipped when reached),
   marking them trimmed when gm__va_keep's limit asked (`trimmed`).
   Returns whether all went. */
static int gm__va_unmap_run(gm_context* ctx, gm__seg* seg, size_t p, size_t n, int trimmed) {
    gm__vseg* v = seg->va;
    while (n) {
        size_t a, m = gm__vchunk(v, p, p + n - 1, &a), done = 0, q;
        unsigned char* l = gm__vl(v, p);
        void** h = (void**)gm__sparse_at(&v->hd, p, sizeof(void*));
        gm_result r = ctx->be->va_unmap(ctx, (void*)(seg->base + p * v->gran), m * v->gran, h, &done);
        gm__bits_put(gm__vl_bits(v, l, GM__VB_MAPPED), a, done, 0);
        if (trimmed) gm__bits_put(gm__vl_bits(v, l, GM__VB_TRIMMED), a, done, 1);
        for (q = 0; q < done; q++) h[q] = NULL;
        v->nmapped -= done;
        gm__arena_remap(seg->arena, seg, -(int64_t)(done * v->gran));
        ctx->stats.num_device_free++;
        ctx->stats.num_pages_unmapped += (int64_t)done;
        if (r != GM_OK || done != m) return 0;
        p += m;
        n -= m;
    }
    return 1;
}

/* [addr, addr + size), a block's, loses its use: its first and last pages
   a user each, the pages between their inner mark; with stamp, the pages
   left idle take the owner's epoch; those mapped join the idle queue. */
static GM__HOT void gm__va_unref(gm_context* ctx, gm__seg* seg, uintptr_t addr, size_t size, int stamp) {
    gm__vseg* v = seg->va;
    size_t f = gm__vpage_at(v, addr - seg->base), last = gm__vpage_at(v, addr + size - 1 - seg->base), p, a, n, i;
    uint64_t epoch = gm__owner(ctx, seg)->epoch;
    for (p = f; p <= last; p += n) {
        unsigned char* l = gm__vl(v, p);
        uint32_t* r = gm__vl_ref(v, l);
        size_t lo, hi; /* the inner pages of this leaf: [lo, hi) */
        n = gm__vchunk(v, p, last, &a);
        lo = a, hi = a + n;
        if (p == f) v->nused -= !--r[lo++];
        if (p + n - 1 == last && last != f) v->nused -= !--r[--hi];
        if (hi > lo) {
            gm__bits_put(gm__vl_bits(v, l, GM__VB_INNER), lo, hi - lo, 0);
            v->nused -= hi - lo;
        }
        if (stamp) /* the groups of these pages: the latest free that left any of them idle */
            for (i = a >> 6; i <= (a + n - 1) >> 6; i++) gm__vl_epoch(v, l)[i] = epoch;
        gm__va_queue(v, l, p, a, n);
    }
}

/* Unmaps idle pages whose stream is past them, oldest first, until reserved
   memory is at most `target`; each with the idle pages after it that the
   target still wants, in one backend call; `trimmed`: for gm__va_keep's
   limit (the pages are marked). Returns the bytes given back. */
static size_t gm__va_trim(gm_context* ctx, int64_t target, int wait, int trimmed) {
    size_t freed = 0;
    uint32_t i;
    int pl;
    for (i = 0; i < ctx->nss; i++) {
        for (pl = 0; pl < 2; pl++) {
            gm__seg* seg = ctx->ss[i].vseg[pl];
            gm__vseg* v = seg ? seg->va : NULL;
            while (v && v->qlen && ctx->stats.reserved_bytes[GM_STAT_ALL].current > target) {
                uint64_t* ent = &v->q[v->qhead];
                size_t p = (uint32_t)*ent, L = gm__vl_pages(v);
                unsigned char* l = gm__vl(v, p);
                int idle = !gm__vp_used(v, p) && gm__vp_mapped(v, p);
                if (idle && !gm__epoch_safe(ctx, &ctx->ss[i], gm__vl_epoch_of(v, l, p & (L - 1)), wait))
                    break; /* the younger pages behind it are not safe either */
                if ((*ent >> 32) > 1) *ent = (uint64_t)(p + 1) | ((*ent >> 32) - 1) << 32; /* the run's next page */
                else {
                    v->qhead = (v->qhead + 1) & (v->qcap - 1);
                    v->qlen--;
                }
                gm__bits_put(gm__vl_bits(v, l, GM__VB_QUEUED), p & (L - 1), 1, 0);
                if (idle) {
                    size_t n = 1;
                    int64_t over = ctx->stats.reserved_bytes[GM_STAT_ALL].current - target;
                    while (p + n < v->npages && (int64_t)((n + 1) * v->gran) <= over + (int64_t)v->gran - 1 &&
                           !gm__vp_used(v, p + n) && gm__vp_mapped(v, p + n) &&
                           gm__epoch_safe(ctx, &ctx->ss[i], gm__vl_epoch_of(v, gm__vl(v, p + n), (p + n) & (L - 1)), 0))
                        n++;
                    if (!gm__va_unmap_run(ctx, seg, p, n, trimmed)) return freed;
                    freed += n * v->gran;
                }
            }
        }
    }
    return freed;
}

/* How much reserved memory idle pages may make before they go back: the
   peak of reserved memory, or, if more, the peak of allocated memory plus
   a slack of 1/GM__VA_SLACK of it (whole pages). Pages this limit gave back
   (marked trimmed) and that are mapped again are churn: a loop whose blocks
   land a little differently each step maps at its peak while others fall
   idle, and would unmap and map again step after step; on a GPU every
   page is driver calls of 30-100 us (bench/vmm, an H200). Each such page
   adds itself to va_extra, up to 1/GM__VA_EXTRA of the allocated peak, and
   while there is an extra the limit is the allocated peak, the slack and
   the extra (not the reserved peak, which the extra itself raises: that
   ratchet once took minimalloc's packing problems to 1.75x their optimum).
   Replaying PyTorch's traces three times on one context, lm2p7b mapped or
   unmapped 2.8 pages per operation on its second pass and lmmedium infer
   0.5 without the extra; with it, 0.014 and 0, and none on any trace from
   the third pass, at fragmentation 0.01-1.90% (0.01-0.65% before), still
   at or below PyTorch's expandable segments' 0.10-2.24% on the same
   traces (an H200); the packing problems stay within 1.1x. */
#define GM__VA_SLACK 2048
#define GM__VA_EXTRA 32
static int64_t gm__va_keep(const gm_context* ctx, size_t gran) {
    int64_t peak = ctx->stats.reserved_bytes[GM_STAT_ALL].peak, a = ctx->stats.allocated_bytes[GM_STAT_ALL].peak;
    int64_t slack = a / GM__VA_SLACK / (int64_t)gran * (int64_t)gran;
    if (ctx->va_extra) return a + slack + (int64_t)ctx->va_extra; /* not on the reserved peak, which the extra raises */
    return a + slack > peak ? a + slack : peak;
}

/* The limits past which mapping more first gives idle pages back, in
   order: gm__va_keep (the pages it gives back are marked trimmed), the gc
   threshold (-1: none), the budget. */
#define GM__VA_LIMITS 3
static int64_t gm__va_limit(const gm_context* ctx, size_t gran, int which) {
    if (which == 0) return gm__va_keep(ctx, gran);
    if (which == 1) return ctx->desc.gc_threshold > 0 ? (int64_t)(ctx->desc.gc_threshold * (double)ctx->budget) : -1;
    return (int64_t)ctx->budget;
}

/* Whether mapping `need` bytes more would first give idle pages back. */
static int gm__va_tight(const gm_context* ctx, int64_t need, size_t gran) {
    int64_t lim, cur = ctx->stats.reserved_bytes[GM_STAT_ALL].current + need;
    int w;
    for (w = 0; w < GM__VA_LIMITS && need > 0; w++)
        if ((lim = gm__va_limit(ctx, gran, w)) >= 0 && cur > lim) return 1;
    return 0;
}

/* Makes [addr, addr + size) of an expandable segment usable: its first
   and last pages get a user more, those between are marked inner, and the
   pages not mapped are mapped, within the budget, after idle pages went
   back if reserved memory would pass gm__va_keep. */
static gm_result gm__va_commit(gm_context* ctx, gm__seg* seg, uintptr_t addr, size_t size, int wait) {
    gm__vseg* v = seg->va;
    size_t p, k = 0, n, a, f = gm__vpage_at(v, addr - seg->base), last = gm__vpage_at(v, addr + size - 1 - seg->base);
    gm_result r = GM_OK;
    if (!gm__vseg_make(v, f, last)) {
        gm__log(ctx, GM_LOG_ERROR, "out of host memory for the page tables of an expandable segment");
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    for (p = f; p <= last; p += n) { /* users first: the trim below must not take these */
        unsigned char* l = gm__vl(v, p);
        uint32_t* u = gm__vl_ref(v, l);
        size_t lo, hi;
        n = gm__vchunk(v, p, last, &a);
        lo = a, hi = a + n;
        if (p == f) v->nused += !u[lo++]++; /* a first or last page is no other block's inner page */
        if (p + n - 1 == last && last != f) v->nused += !u[--hi]++;
        if (hi > lo) { /* inner pages: idle until now */
            gm__bits_put(gm__vl_bits(v, l, GM__VB_INNER), lo, hi - lo, 1);
            v->nused += hi - lo;
        }
        k += n - gm__bits_count(gm__vl_bits(v, l, GM__VB_MAPPED), a, n);
    }
    if (k) {
        int64_t need = (int64_t)(k * v->gran), lim;
        /* the allowance's cap: one pass that reuses its address space (a packing problem) fills it */
        size_t extra_cap = (size_t)ctx->stats.allocated_bytes[GM_STAT_ALL].peak / GM__VA_EXTRA;
        const gm_stat* res = &ctx->stats.reserved_bytes[GM_STAT_ALL];
        int w;
        if (ctx->nosync) wait = 0;
        for (w = 0; w < GM__VA_LIMITS; w++)
            if ((lim = gm__va_limit(ctx, v->gran, w)) >= 0 && res->current + need > lim)
                gm__va_trim(ctx, lim - need, wait, w == 0);
        if ((uint64_t)(res->current + need) > (uint64_t)ctx->budget) r = GM_ERR_OUT_OF_MEMORY;
        for (p = f; p <= last && r == GM_OK; p += n) { /* each run of unmapped pages in one call (per leaf) */
            unsigned char* l = gm__vl(v, p);
            uint64_t *m = gm__vl_bits(v, l, GM__VB_MAPPED), *t = gm__vl_bits(v, l, GM__VB_TRIMMED);
            size_t i, e, tr;
            n = gm__vchunk(v, p, last, &a);
            for (i = a; r == GM_OK && (i = gm__bits_find(m, NULL, i, a + n, 0)) < a + n; i = e) {
                e = gm__bits_find(m, NULL, i, a + n, 1);
                r = ctx->be->va_map(ctx, (void*)(seg->base + (p - a + i) * v->gran), (e - i) * v->gran,
                                    (void**)gm__sparse_at(&v->hd, p - a + i, sizeof(void*)));
                if (r != GM_OK) break;
                if ((tr = gm__bits_count(t, i, e - i)) != 0) { /* the limit gave them back; they are needed again */
                    ctx->va_extra = ctx->va_extra + tr * v->gran < extra_cap ? ctx->va_extra + tr * v->gran : extra_cap;
                    gm__bits_put(t, i, e - i, 0);
                }
                gm__bits_put(m, i, e - i, 1);
                v->nmapped += e - i;
                gm__arena_remap(seg->arena, seg, (int64_t)((e - i) * v->gran));
                ctx->stats.num_device_alloc++;
                ctx->stats.num_pages_mapped += (int64_t)(e - i);
            }
        }
        if (r != GM_OK) { /* undo the users; pages this call mapped stay, idle and queued */
            gm__va_unref(ctx, seg, addr, size, 0);
            return r;
        }
    }
    return GM_OK;
}

/* The page invariants of one expandable segment of pool nm, recounted from
   its blocks: one line for all the pages that disagree (naming the first). */
static void gm__vseg_check(gm__ck* ck, const char* nm, const gm__seg* seg) {
    const gm__vseg* v = seg->va;
    const gm__block* b;
    size_t leaf = gm__vl_pages(v), np = v->pg.nleaf * leaf, p, mapped = 0, queued = 0, used = 0, i, off = 0,
           nbad = 0, first = 0, unq = 0, inq = 0, made = 0;
    gm__sparse want; /* per page, recounted from the blocks: its users, and the blocks it is inside */
    if (!gm__sparse_init(&want, v->npages < 64 ? 64 : v->npages)) return; /* no host memory to recount with */
    for (b = seg->first; b; b = b->next) {
        size_t f, last;
        if (b->state == GM__FREE || !b->size || b->addr < seg->base || b->size > seg->size ||
            b->addr - seg->base > seg->size - b->size)
            continue; /* a block off its segment: the arena's own check says so */
        off = b->addr - seg->base;
        f = off / v->gran, last = (off + b->size - 1) / v->gran;
        for (p = f; p <= last && p < v->npages; p++) {
            uint32_t* w = (uint32_t*)gm__sparse_make(&want, p, 2 * sizeof *w);
            if (!w) goto out;
            w[p != f && p != last]++;
        }
    }
    for (p = 0; p < np; p += leaf) {
        size_t e;
        const uint32_t* wl = (const uint32_t*)gm__sparse_at(&want, p, 2 * sizeof *wl);
        unsigned char* l = gm__vl(v, p);
        if (!l) { /* no leaf: no users, nothing mapped */
            if (wl)
                for (e = 0; e < leaf; e++)
                    if ((wl[2 * e] || wl[2 * e + 1]) && !nbad++) first = p + e;
            continue;
        }
        made++;
        for (e = 0; e < leaf && p + e < v->npages; e++) {
            uint32_t wu = wl ? wl[2 * e] : 0, wi = wl ? wl[2 * e + 1] : 0, u = gm__vl_ref(v, l)[e];
            int m = gm__bit(gm__vl_bits(v, l, GM__VB_MAPPED), e), in = gm__bit(gm__vl_bits(v, l, GM__VB_INNER), e),
                q = gm__bit(gm__vl_bits(v, l, GM__VB_QUEUED), e);
            mapped += (size_t)m;
            used += u || in;
            queued += (size_t)q;
            if ((wu != u || wi != (uint32_t)in || (in && u) || ((u || in) && !m) || (m && !u && !in && !q)) && !nbad++)
                first = p + e;
        }
    }
    if (nbad) {
        const uint32_t* w = (const uint32_t*)gm__sparse_at(&want, first, 2 * sizeof *w);
        unsigned char* l = gm__vl(v, first);
        gm__broken(ck, "%s: expandable segment %#lx: %zu pages disagree with its blocks; page %zu has %u users, %u "
                   "counted, %s", nm, (unsigned long)seg->base, nbad, first, w ? w[0] + w[1] : 0,
                   l ? *gm__vref(v, first) + (uint32_t)gm__bit(gm__vl_bits(v, l, GM__VB_INNER), first & (leaf - 1)) : 0,
                   gm__vp_mapped(v, first) ? "mapped" : "unmapped");
    }
    for (i = 0; i < v->qlen && v->qlen <= v->qcap; i++) { /* every run's pages marked queued, once */
        uint64_t r = v->q[(v->qhead + i) & (v->qcap - 1)];
        size_t q0 = (uint32_t)r, n = (size_t)(r >> 32), a;
        unsigned char* l = q0 < v->npages ? gm__vl(v, q0) : NULL;
        if (!l || !n || gm__vchunk(v, q0, q0 + n - 1, &a) != n ||
            gm__bits_count(gm__vl_bits(v, l, GM__VB_QUEUED), a, n) != n)
            unq++;
        else
            inq += n;
    }
    if (unq)
        gm__broken(ck, "%s: expandable segment %#lx: %zu runs in its idle queue are not marked queued", nm,
                   (unsigned long)seg->base, unq);
    if (made != v->pg.made || v->qcap < made * leaf || (v->qcap & (v->qcap - 1)))
        gm__broken(ck, "%s: expandable segment %#lx: %zu page-table leaves, %zu counted, an idle queue of %zu", nm,
                   (unsigned long)seg->base, made, v->pg.made, v->qcap);
    if (mapped != v->nmapped)
        gm__broken(ck, "%s: expandable segment %#lx: %zu pages mapped, %zu counted", nm, (unsigned long)seg->base,
                   mapped, v->nmapped);
    if (used != v->nused)
        gm__broken(ck, "%s: expandable segment %#lx: %zu pages in use, %zu counted", nm, (unsigned long)seg->base,
                   used, v->nused);
    if (seg->mapped != mapped * v->gran)
        gm__broken(ck, "%s: expandable segment %#lx counts %zu bytes mapped, its pages %zu", nm,
                   (unsigned long)seg->base, seg->mapped, mapped * v->gran);
    if (!unq && queued != inq)
        gm__broken(ck, "%s: expandable segment %#lx: %zu pages marked queued, the idle queue holds %zu", nm,
                   (unsigned long)seg->base, queued, inq);
out:
    gm__sparse_free(&want, 0);
}

/* One past the last mapped page of an expandable segment (0: none). */
static size_t gm__vseg_end(const gm__vseg* v) {
    size_t leaf = gm__vl_pages(v), l = v->pg.nleaf, w;
    while (l--) {
        unsigned char* lf = v->pg.leaf[l];
        const uint64_t* m = lf ? gm__vl_bits(v, lf, GM__VB_MAPPED) : NULL;
        for (w = leaf / 64; m && w--;)
            if (m[w]) return l * leaf + w * 64 + 64 - (size_t)__builtin_clzll(m[w]);
    }
    return 0;
}

/* Unmaps every page and gives the address range back (shutdown). */
static void gm__vseg_close(gm_context* ctx, gm__seg* seg) {
    gm__vseg* v = seg->va;
    size_t p = 0, end = gm__vseg_end(v);
    while (p < end && v->nmapped) {
        size_t a, n = gm__vchunk(v, p, end - 1, &a), i, e;
        unsigned char* l = gm__vl(v, p);
        const uint64_t* m = l ? gm__vl_bits(v, l, GM__VB_MAPPED) : NULL;
        for (i = a; m && (i = gm__bits_find(m, NULL, i, a + n, 1)) < a + n; i = e) {
            e = gm__bits_find(m, NULL, i, a + n, 0);
            (void)gm__va_unmap_run(ctx, seg, p - a + i, e - i, 0);
        }
        p += n;
    }
    ctx->be->va_release(ctx, (void*)seg->base, seg->size);
    gm__vseg_free(v);
    seg->va = NULL;
}

/* >>trace -----------------------------------------------------------------
   Capture of the allocation stream, one CSV row per event, written under
   the context lock so rows are in the order the allocator saw them. */
static void gm__trace_open(gm_context* ctx) {
    const char* path = ctx->desc.trace_path;
    if (!path && !ctx->desc.ignore_env) path = getenv("GPUMEM_TRACE");
    if (!path || !*path) return;
    ctx->trace = fopen(path, "w");
    if (!ctx->trace) {
        gm__log(ctx, GM_LOG_WARN, "trace: cannot write %s: %s (no trace)", path, strerror(errno));
        return;
    }
    setvbuf(ctx->trace, NULL, _IOFBF, 1 << 16);
    fputs("Thread,Time,Action,Pointer,Size,Stream\n", ctx->trace);
}

static void gm__trace_row(gm_context* ctx, const char* action, uintptr_t p, size_t size, gm_stream s) {
    fprintf(ctx->trace, "%ld,%.3f,%s,0x%lx,%zu,%lu\n", (long)syscall(SYS_gettid),
            (double)(gm__now_ns() - ctx->t0) / 1e3, action, (unsigned long)p, size, (unsigned long)(uintptr_t)s);
}

/* planned mode (>>planned): 1 when it handled the call */
static int gm__plan_alloc(gm_context* ctx, void** out, size_t size, gm_stream stream);
static void gm__plan_note_alloc(gm_context* ctx, void* p, size_t size, gm_stream stream);
static int gm__plan_free(gm_context* ctx, void* ptr, gm_result* r);
static int gm__plan_owns(gm_context* ctx, const void* ptr, size_t* size, gm_stream* used_on, gm_result* res);
static void gm__plan_destroy(gm_context* ctx);
static void gm__plan_check(gm_context* ctx, gm__ck* ck);
static void* gm__plan_region(const gm_context* ctx);

/* >>alloc -----------------------------------------------------------------
   The caching allocator. Invariants: a USED block is in the pointer map
   under its address and nowhere else; a PENDING block (freed, with
   record_stream events outstanding) is in ctx->pending; every block of a
   segment serves the stream of its segment's key; reserved bytes never
   exceed the budget; statistics change only here and in the arena. */
#define GM__ROUND 512
#define GM__SMALL_MAX GM__MIB
#define GM__SMALL_SEG (2 * GM__MIB)
#define GM__LARGE_SEG (20 * GM__MIB)
#define GM__MIN_LARGE (10 * GM__MIB)
#define GM__MAX_REQUEST ((size_t)1 << 60)

static size_t gm__round_req(size_t n) { return n < GM__ROUND ? GM__ROUND : gm__round_up(n, GM__ROUND); }

/* Device memory given back with the lock dropped: cudaFree waits for the
   whole device, and a thread holding the lock through it stalls every other
   call (and deadlocks a host function that needs the lock). The allocator's
   accounting lets go at once; the memory follows when the lock is next
   released through gm__unlock, or at gm__flush in the ladder, before it
   asks the device again. */
typedef struct gm__dfree {
    void* p;
    size_t n;
    int managed;
} gm__dfree;

static void gm__defer_free(gm_context* ctx, void* p, size_t n, int managed) {
    if (ctx->ndfree == ctx->capdfree) {
        size_t cap = ctx->capdfree ? 2 * ctx->capdfree : 16;
        gm__dfree* d = (gm__dfree*)gm__grow_array(ctx->dfree, ctx->capdfree * sizeof *d, cap * sizeof *d);
        if (!d) { /* no room to defer it: now, with the lock */
            if (managed) ctx->be->managed_free(ctx, p, n);
            else ctx->be->dev_free(ctx, p, n);
            return;
        }
        ctx->dfree = d;
        ctx->capdfree = cap;
    }
    ctx->dfree[ctx->ndfree].p = p, ctx->dfree[ctx->ndfree].n = n, ctx->dfree[ctx->ndfree].managed = managed;
    ctx->ndfree++;
}

/* Unlocks ctx->mu, then gives back what was deferred. */
static void gm__unlock(gm_context* ctx) {
    gm__dfree* d = ctx->dfree;
    size_t n = ctx->ndfree, i;
    if (GM__LIKELY(!n)) {
        pthread_mutex_unlock(&ctx->mu);
        return;
    }
    ctx->dfree = NULL;
    ctx->ndfree = ctx->capdfree = 0;
    pthread_mutex_unlock(&ctx->mu);
    for (i = 0; i < n; i++) {
        gm_result r = d[i].managed ? ctx->be->managed_free(ctx, d[i].p, d[i].n) : ctx->be->dev_free(ctx, d[i].p, d[i].n);
        if (r != GM_OK) gm__log(ctx, GM_LOG_ERROR, "giving %zu bytes at %p back to the device failed (%s)", d[i].n, d[i].p,
                                gm_result_string(r));
    }
    GPUMEM_FREE(d);
}

/* With the lock held: gives back what was deferred (the lock is dropped and
   taken again; the callers hold no pointer across it). */
static void gm__flush(gm_context* ctx) {
    if (!ctx->ndfree) return;
    gm__unlock(ctx);
    pthread_mutex_lock(&ctx->mu);
}
static int gm__pool_of(size_t rsize) { return rsize <= GM__SMALL_MAX ? 0 : 1; }
static int gm__pool_stat(int pl) { return pl == 0 ? GM_STAT_SMALL_POOL : GM_STAT_LARGE_POOL; }

static size_t gm__seg_size(size_t rsize) {
    if (rsize <= GM__SMALL_MAX) return GM__SMALL_SEG;
    if (rsize < GM__MIN_LARGE) return GM__LARGE_SEG;
    return gm__round_up(rsize, 2 * GM__MIB);
}

/* PyTorch's max_split_size rule: big blocks are kept for big requests. */
static int gm__fits(const gm_context* ctx, int pl, size_t rsize, size_t bsize) {
    size_t ms = ctx->desc.max_split_size;
    if (!ms || pl == 0 || ctx->va_gran) return 1;
    if (rsize < ms) return bsize < ms;
    return bsize < rsize + GM__LARGE_SEG;
}

/* PyTorch's split rule: small blocks split down to 512 bytes; large ones
   only when more than 1 MiB remains and the request is below
   max_split_size (so oversize blocks are handed out whole). */
static size_t gm__min_rest(const gm_context* ctx, int pl, size_t rsize) {
    if (ctx->desc.caching == GM_TOGGLE_OFF) return (size_t)-1;
    if (pl == 0 || ctx->va_gran) return GM__ROUND; /* unmapped rest costs nothing */
    if (ctx->desc.max_split_size && rsize >= ctx->desc.max_split_size) return (size_t)-1;
    return GM__SMALL_MAX + 1;
}

static gm__block* gm__pool_find(gm_context* ctx, int pl, uint32_t si, size_t rsize) {
    gm__block* b = gm__arena_find(&ctx->pool[pl], (uintptr_t)si + 1, rsize);
    return b && gm__fits(ctx, pl, rsize, b->size) ? b : NULL;
}

/* Step 1b: a whole-free segment of another stream, once its last use there
   completed; the best fitting one moves to stream si. */
static gm__block* gm__adopt(gm_context* ctx, int pl, uint32_t si, size_t rsize, int wait) {
    gm__seg *s, *best = NULL;
    if (ctx->nss < 2 || !ctx->pool[pl].nwhole) return NULL;
    for (s = ctx->pool[pl].segs; s; s = s->next) {
        if (s->va || s->key == (uintptr_t)si + 1 || s->size < rsize || !gm__seg_whole_free(s)) continue;
        if (!gm__fits(ctx, pl, rsize, s->size) || (best && s->size >= best->size)) continue;
        if (gm__seg_safe(ctx, s, wait)) best = s;
    }
    if (!best) return NULL;
    gm__arena_rekey(&ctx->pool[pl], best, (uintptr_t)si + 1);
    best->free_epoch = 0; /* its old use is complete: safe for the new owner */
    return best->first;
}

static int gm__release_seg(gm_context* ctx, gm__seg* s) {
    void* base = (void*)(s->raw ? s->raw : s->base);
    size_t size = s->raw ? s->raw_size : s->size;
    gm__arena_drop(s->arena, s);
    gm__defer_free(ctx, base, size, 0);
    ctx->stats.num_device_free++;
    return 1;
}

static int gm__seg_older(const void* a, const void* b) {
    uint64_t x = (*(gm__seg* const*)a)->tick, y = (*(gm__seg* const*)b)->tick;
    return x < y ? -1 : x > y;
}

/* Gives back whole-free segments whose last use completed (waiting for it
   when asked), oldest first, until reserved <= target. Returns bytes.
   O(S log S) in the whole-free segments: they are sorted once by their
   last free (in list order when no memory can be had for that). */
static size_t gm__release(gm_context* ctx, int wait, int64_t target) {
    size_t freed = ctx->va_gran ? gm__va_trim(ctx, target, wait, 0) : 0, n = 0, m = 0, k;
    gm__seg **v, *s, *next;
    int pl;
    if (ctx->stats.reserved_bytes[GM_STAT_ALL].current <= target) return freed;
    for (pl = 0; pl < 2; pl++) n += ctx->pool[pl].nwhole;
    if (!n) return freed;
    v = (gm__seg**)GPUMEM_MALLOC(n * sizeof *v);
    for (pl = 0; pl < 2; pl++)
        for (s = ctx->pool[pl].nwhole ? ctx->pool[pl].segs : NULL; s; s = next) {
            next = s->next;
            if (s->va || !gm__seg_whole_free(s)) continue;
            if (v && m < n) v[m++] = s;
            else if (!v && ctx->stats.reserved_bytes[GM_STAT_ALL].current > target && gm__seg_safe(ctx, s, wait))
                freed += s->size, gm__release_seg(ctx, s);
        }
    if (v) qsort(v, m, sizeof *v, gm__seg_older);
    for (k = 0; k < m && ctx->stats.reserved_bytes[GM_STAT_ALL].current > target; k++)
        if (gm__seg_safe(ctx, v[k], wait)) {
            freed += v[k]->size;
            gm__release_seg(ctx, v[k]);
        }
    GPUMEM_FREE(v);
    return freed;
}

/* Device memory for a segment whose base is 512-byte aligned (gm_alloc's
   promise). CUDA promises 256: a base that is not (drivers give more in
   practice) is given back and the segment made 256 bytes larger, its base
   raised; *raw then says where the backend's allocation starts. */
static gm_result gm__dev_alloc512(gm_context* ctx, void** p, size_t n, uintptr_t* raw) {
    /* CUDA documents 256: ask for 256 more and raise the base, never free
       and ask again (cudaFree would wait for the whole device) */
    size_t pad = ctx->dev_align % GM__ROUND ? GM__ROUND / 2 : 0;
    uintptr_t base;
    gm_result r = ctx->be->dev_alloc(ctx, p, n + pad);
    *raw = 0;
    if (r != GM_OK) return r;
    base = (uintptr_t)*p;
    if (base % (pad ? GM__ROUND / 2 : GM__ROUND)) {
        ctx->be->dev_free(ctx, *p, n + pad);
        gm__log(ctx, GM_LOG_ERROR, "device memory at %#lx is not %zu-byte aligned", (unsigned long)base,
                pad ? (size_t)GM__ROUND / 2 : (size_t)GM__ROUND);
        return GM_ERR_BACKEND;
    }
    if (pad) {
        *raw = base;
        *p = (void*)gm__round_up(base, GM__ROUND);
    }
    return GM_OK;
}

/* Step 2: a new segment within the budget: the usual size, else the request
   rounded to 2 MiB, else the request itself, so a tight budget is used to
   the last 512 bytes. The tiered manager's requests (GM__A_PACK) take the
   request itself where the usual segment would leave over 1/64 of the
   budget unused beside it: a tensor acquired alone in a 20 MiB segment
   holds all of it against a budget of a few working sets, and its
   neighbours cannot use it. GM__A_EXACT: always the request itself. */
static gm__block* gm__grow(gm_context* ctx, int pl, uint32_t si, size_t rsize) {
    size_t cand[3];
    int i;
    cand[0] = ctx->desc.caching == GM_TOGGLE_OFF || ctx->grow_exact == 2 ? rsize : gm__seg_size(rsize);
    if (ctx->grow_exact == 1 && cand[0] - rsize > ctx->budget / 64) cand[0] = rsize;
    cand[1] = gm__round_up(rsize, 2 * GM__MIB);
    cand[2] = rsize;
    for (i = 0; i < 3; i++) {
        size_t c = cand[i];
        int64_t reserved = ctx->stats.reserved_bytes[GM_STAT_ALL].current;
        void* p = NULL;
        uintptr_t raw = 0;
        gm_result r;
        gm__seg* seg;
        if ((i && c >= cand[i - 1]) || c < rsize) continue;
        if ((uint64_t)reserved + c > (uint64_t)ctx->budget) continue;
        if (ctx->desc.gc_threshold > 0 && (double)((uint64_t)reserved + c) > ctx->desc.gc_threshold * (double)ctx->budget) {
            gm__release(ctx, 0, (int64_t)(ctx->desc.gc_threshold * (double)ctx->budget) - (int64_t)c);
            gm__flush(ctx); /* the device has it back before it is asked again */
        }
        r = gm__dev_alloc512(ctx, &p, c, &raw);
        if (r == GM_ERR_OUT_OF_MEMORY) continue;
        if (r != GM_OK) { /* a broken device is no out-of-memory: the ladder stops */
            ctx->dev_err = r;
            return NULL;
        }
        ctx->stats.num_device_alloc++;
        seg = gm__arena_add(&ctx->pool[pl], (uintptr_t)p, c, (uintptr_t)si + 1);
        if (!seg) {
            ctx->be->dev_free(ctx, (void*)(raw ? raw : (uintptr_t)p), raw ? c + GM__ROUND / 2 : c);
            ctx->stats.num_device_free++;
            return NULL;
        }
        if (raw) seg->raw = raw, seg->raw_size = c + GM__ROUND / 2;
        return seg->first;
    }
    return NULL;
}

static size_t gm__tc_steal(gm_context* ctx, int keep); /* >>tcache */
/* What closes the thread caches' fast paths (ctx->tc_gate, >>tcache). */
enum { GM__GATE_SHUT = 1, GM__GATE_PLAN = 2, GM__GATE_PENDING = 4 };
static void gm__tc_gate(gm_context* ctx, uint32_t bit, int closed); /* >>tcache */
static void gm__tc_fold_now(gm_context* ctx);
/* A fold before a call under the lock counts (its peaks see what the
   caches did): gm__tc_fold_now, which folds only when a cache's seq moved
   since the last. A macro: the test for no caches stays inline on the
   lock's path. */
#define gm__tc_fold(ctx)                                                       \
    do {                                                                       \
        if ((ctx)->tcs) gm__tc_fold_now(ctx);                                  \
    } while (0)

/* A block's last use ended (its free, or its pending events): back to the
   free tree on its segment's stream. The quiet one leaves the statistics
   (a thread cache counted the free). */
static GM__HOT void gm__free_block_quiet(gm_context* ctx, gm__block* b) {
    gm__seg* seg = b->seg;
    gm__sstate* s = gm__owner(ctx, seg);
    int pl = (int)(seg->arena - ctx->pool);
    seg->free_epoch = s->dirty_epoch = s->epoch;
    seg->tick = ++ctx->tick;
    if (seg->va) gm__va_unref(ctx, seg, b->addr, b->size, 1);
    gm__arena_give(&ctx->pool[pl], b);
    if (ctx->desc.caching == GM_TOGGLE_OFF && gm__seg_whole_free(seg) && gm__seg_safe(ctx, seg, 1))
        gm__release_seg(ctx, seg);
}

static void gm__free_block(gm_context* ctx, gm__block* b) {
    int pl = (int)(b->seg->arena - ctx->pool);
    gm__tc_fold(ctx); /* the peaks below see what the thread caches did */
    gm__stat_add(ctx->stats.active, gm__pool_stat(pl), -1);
    gm__stat_add(ctx->stats.active_bytes, gm__pool_stat(pl), -(int64_t)b->size);
    gm__free_block_quiet(ctx, b);
}

static void gm__pending_unlink(gm_context* ctx, gm__block* b) {
    if (b->l) b->l->r = b->r;
    else ctx->pending = b->r;
    if (b->r) b->r->l = b->l;
    b->l = b->r = NULL;
    if (!--ctx->npending) gm__tc_gate(ctx, GM__GATE_PENDING, 0);
}

/* Pending blocks whose events all completed become free. */
static void gm__process_pending(gm_context* ctx, int wait) {
    gm__block *b = ctx->pending, *next;
    for (; b; b = next) {
        next = b->r;
        while (b->nevents) {
            void* ev = b->events[b->nevents - 1];
            gm_result r = wait ? ctx->be->event_sync(ctx, ev) : ctx->be->event_query(ctx, ev);
            if (r == GM_NOT_READY) break;
            if (r != GM_OK) ctx->be->device_sync(ctx); /* cannot tell: be sure */
            gm__ev_put(ctx, ev);
            b->nevents--;
        }
        if (!b->nevents) {
            gm__pending_unlink(ctx, b);
            gm__free_block(ctx, b);
        }
    }
}

/* Step 4: wait for every pending free and every stream fence, with the
   lock dropped while waiting (the events stay valid: recycled ones are
   only ever recorded again, never destroyed before shutdown); then retire
   what completed. Without room for the list, it waits with the lock. */
static void gm__wait_all(gm_context* ctx) {
    uint32_t i;
    size_t n = 0, cap = ctx->nss;
    void** ev;
    gm__block* b;
    for (i = 0; i < ctx->nss; i++) gm__fence_need(ctx, &ctx->ss[i]);
    for (b = ctx->pending; b; b = b->r) cap += b->nevents;
    ev = (void**)GPUMEM_MALLOC((cap ? cap : 1) * sizeof *ev);
    if (!ev) {
        gm__process_pending(ctx, 1);
        for (i = 0; i < ctx->nss; i++) gm__fence_wait(ctx, &ctx->ss[i]);
    } else {
        uint32_t k;
        for (i = 0; i < ctx->nss; i++) /* the newest fence covers the older ones */
            if (ctx->ss[i].fcount) ev[n++] = ctx->ss[i].fev[(ctx->ss[i].fhead + ctx->ss[i].fcount - 1) % GM__FENCES];
        for (b = ctx->pending; b; b = b->r)
            for (k = 0; k < b->nevents; k++) ev[n++] = b->events[k];
        gm__unlock(ctx);
        for (k = 0; k < n; k++)
            if (ctx->be->event_sync(ctx, ev[k]) != GM_OK) ctx->be->device_sync(ctx);
        pthread_mutex_lock(&ctx->mu);
        GPUMEM_FREE(ev);
        for (i = 0; i < ctx->nss; i++) gm__fence_poll(ctx, &ctx->ss[i]);
        gm__process_pending(ctx, 0);
    }
    ctx->stats.num_sync_all_streams++;
}

/* The OOM line: an error, or information when a fallback may still serve
   the request (which logs an error itself if it does not). */
static void gm__oom_message(gm_context* ctx, size_t size, size_t rsize, int soft) {
    char a[32], b[32], c[32], d[32], e[32], f[32];
    size_t fr = 0, tot = 0;
    int64_t alloc, resv;
    int fallback = ctx->desc.fallback_fn || ctx->desc.fallback == GM_FALLBACK_MANAGED;
    gm__tc_fold_now(ctx); /* the thread caches' counts too (with mu) */
    alloc = ctx->stats.allocated_bytes[GM_STAT_ALL].current;
    resv = ctx->stats.reserved_bytes[GM_STAT_ALL].current;
    if (ctx->be->mem_info(ctx, &fr, &tot) != GM_OK) fr = tot = 0;
    gm__log(ctx, fallback || soft ? GM_LOG_INFO : GM_LOG_ERROR,
            "out of memory: tried to allocate %s (%zu bytes, rounded to %zu); device capacity %s, budget %s; "
            "%s allocated; %s reserved but unallocated; %s free on the device",
            gm__fmt_bytes(a, sizeof a, (double)size), size, rsize, gm__fmt_bytes(b, sizeof b, (double)tot),
            gm__fmt_bytes(c, sizeof c, (double)ctx->budget), gm__fmt_bytes(d, sizeof d, (double)alloc),
            gm__fmt_bytes(e, sizeof e, (double)(resv - alloc)), gm__fmt_bytes(f, sizeof f, (double)fr));
}

/* Expandable: the pages of [addr, addr + size) not mapped yet. */
static GM__HOT size_t gm__va_new_pages(const gm__seg* seg, uintptr_t addr, size_t size) {
    const gm__vseg* v = seg->va;
    size_t p = gm__vpage_at(v, addr - seg->base), last = gm__vpage_at(v, addr + size - 1 - seg->base), k = 0, n, a;
    for (; p <= last; p += n) {
        unsigned char* l = gm__vl(v, p);
        n = gm__vchunk(v, p, last, &a);
        k += n - (l ? gm__bits_count(gm__vl_bits(v, l, GM__VB_MAPPED), a, n) : 0); /* a leaf not made: none mapped */
    }
    return k;
}

/* The places of free block b (its start, first page boundary, end) that
   map fewer new pages than *best_new: the fewest, in *best_new and *off. */
static int gm__va_fewest_in(const gm__seg* seg, const gm__block* b, size_t rsize, size_t* best_new, size_t* off) {
    size_t cand[3], i;
    int found = 0;
    cand[0] = 0;
    cand[1] = gm__round_up(b->addr - seg->base, seg->va->gran) - (b->addr - seg->base);
    cand[2] = (b->size - rsize) / GM__ROUND * GM__ROUND;
    for (i = 0; i < 3; i++) {
        size_t k;
        if (cand[i] > b->size - rsize) continue;
        k = gm__va_new_pages(seg, b->addr + cand[i], rsize);
        if (k < *best_new) {
            *best_new = k;
            *off = cand[i];
            found = 1;
        }
    }
    return found;
}

/* Expandable: the free place for rsize bytes in seg that maps the fewest
   new pages (a block's start, its first page boundary, or its end, so that
   a request may fill the mapped rest of a page others use), the smaller
   block on a tie: its block, and the offset in *off. NULL when none needs
   fewer than `than` new pages. Best fit by size alone may pick a hole
   whose pages are all unmapped while the budget has room only beside
   memory in use: the budget counts pages, not bytes. */
static gm__block* gm__va_fewest(const gm__seg* seg, size_t rsize, size_t than, size_t* off) {
    gm__block *b, *best = NULL;
    size_t best_new = than;
    for (b = seg->first; b; b = b->next) {
        size_t o = 0, k = (size_t)-1;
        if (b->state != GM__FREE || b->size < rsize) continue;
        if (gm__va_fewest_in(seg, b, rsize, &k, &o) &&
            (k < best_new || (k == best_new && best && b->size < best->size))) {
            best = b;
            best_new = k;
            *off = o;
        }
    }
    return best;
}

/* Free block b, from `at` (inside it) for rsize bytes: its pages
   committed (expandable) and the place cut out of b. NULL, with nothing
   changed, when the pages cannot be had (a device error is left in
   ctx->dev_err) or no block record can be had. */
static gm__block* gm__take_at(gm_context* ctx, gm__block* b, uintptr_t at, size_t rsize, int wait) {
    gm__seg* seg = b->seg;
    gm_result r;
    if (seg->va && (r = gm__va_commit(ctx, seg, at, rsize, wait)) != GM_OK) {
        if (r != GM_ERR_OUT_OF_MEMORY) ctx->dev_err = r;
        return NULL;
    }
    if (at > b->addr && (b = gm__arena_cut(seg->arena, b, at - b->addr)) == NULL && seg->va)
        gm__va_unref(ctx, seg, at, rsize, 0); /* no record */
    return b;
}

/* Best-fit block b of an expandable segment, its pages committed: where
   mapping what its start lacks would first unmap idle pages elsewhere
   (reserved memory at gm__va_keep), the place in b that maps the fewest
   new pages (its end, say, when the pages a free left idle lie there),
   cut out of it. NULL when the pages cannot be had. */
static gm__block* gm__va_take(gm_context* ctx, gm__block* b, size_t rsize, int wait) {
    gm__seg* seg = b->seg;
    size_t k = gm__va_new_pages(seg, b->addr, rsize), off = 0;
    gm__block* c;
    if (k && b->size > rsize &&
        ctx->stats.reserved_bytes[GM_STAT_ALL].current + (int64_t)(k * seg->va->gran) > gm__va_keep(ctx, seg->va->gran) &&
        gm__va_fewest_in(seg, b, rsize, &k, &off) && off &&
        ((c = gm__take_at(ctx, b, b->addr + off, rsize, wait)) != NULL || ctx->dev_err != GM_OK))
        return c; /* there, or a device error: no more tries */
    return gm__take_at(ctx, b, b->addr, rsize, wait); /* its start */
}

/* One try at a block for rsize on stream si: the free lists, then (classic)
   another stream's whole free segment and a new segment, or (expandable)
   the stream's address range with its pages mapped. */
static gm__block* gm__attempt(gm_context* ctx, int pl, uint32_t si, size_t rsize, int wait) {
    gm__block* b = gm__pool_find(ctx, pl, si, rsize);
    if (ctx->va_gran) {
        gm__block* c;
        size_t k, off = 0;
        if (!b && !ctx->ss[si].vseg[pl] && gm__vseg_open(ctx, pl, si)) b = gm__pool_find(ctx, pl, si, rsize);
        if (!b) return NULL;
        if ((c = gm__va_take(ctx, b, rsize, wait)) != NULL) return c;
        /* the budget lacks the pages best fit needs: the place that maps the fewest */
        k = gm__va_new_pages(b->seg, b->addr, rsize);
        if (ctx->dev_err != GM_OK || !k || (c = gm__va_fewest(b->seg, rsize, k, &off)) == NULL) return NULL;
        return gm__take_at(ctx, c, c->addr + off, rsize, wait);
    }
    if (b) return b;
    if ((b = gm__adopt(ctx, pl, si, rsize, wait)) != NULL) return b;
    return gm__grow(ctx, pl, si, rsize);
}

/* Steps 1b to 7 of the ladder, with the lock held on entry and exit (it is
   dropped around the tier manager and the user hook). An expandable block
   comes back with its pages committed. */
#define GM__A_QUIET 1u  /* a speculative request (a prefetch): no user hook, no OOM counted or logged */
#define GM__A_NOSYNC 2u /* GM_ALLOC_NO_SYNC */
#define GM__A_TRY 4u    /* the first rung only, quietly: the tiered manager evicts in stream order and asks again */
#define GM__A_EXACT 8u  /* a new segment of the request's own size (the tiered manager packing a batch) */
#define GM__A_PACK 16u  /* the same where the usual segment would waste over 1/64 of the budget (the tiered manager) */
#define GM__A_FIT 32u   /* a free block of exactly the rounded size, or nothing (no split, no rung) */
#define GM__A_SOFT 64u  /* the tiered manager's last rung: it may still swap, so running out is said at info
                           (the manager says what it finally could not do) */
#define GM__A_WIDE 128u /* a user's large request the thread caches would serve once widened: its wait for
                           the lock is counted (gm__tc_contend) */
#define GM__GROW_EXACT(flags) ((flags) & GM__A_EXACT ? 2 : (flags) & GM__A_PACK ? 1 : 0)
static gm__block* gm__ladder(gm_context* ctx, int pl, uint32_t* si, size_t rsize, size_t size, gm_stream stream,
                             unsigned flags, gm_result* err) {
    gm__block* b;
    int rounds, quiet = (flags & (GM__A_QUIET | GM__A_TRY)) != 0;
    *err = GM_ERR_OUT_OF_MEMORY;
    ctx->dev_err = GM_OK;
/* a block, or on a device error no further rung */
#define GM__RUNG(cond, call)                         \
    do {                                             \
        if ((cond) && (b = (call)) != NULL) return b; \
        if (ctx->dev_err != GM_OK) goto fault;       \
    } while (0)
    for (rounds = 0; rounds < 4; rounds++) {
        GM__RUNG(1, gm__attempt(ctx, pl, *si, rsize, 0));
        GM__RUNG(gm__tc_steal(ctx, 0) > 0, gm__attempt(ctx, pl, *si, rsize, 0)); /* the thread caches' bins */
        if (flags & (GM__A_NOSYNC | GM__A_TRY)) break; /* the rest waits, records events or gives memory back */
        ctx->stats.num_alloc_retries++;
        GM__RUNG(gm__release(ctx, 0, 0) && (gm__flush(ctx), 1), gm__attempt(ctx, pl, *si, rsize, 0));
        gm__wait_all(ctx);
        GM__RUNG(1, gm__attempt(ctx, pl, *si, rsize, 1));
        GM__RUNG(gm__release(ctx, 1, 0) && (gm__flush(ctx), 1), gm__attempt(ctx, pl, *si, rsize, 1));
        if (ctx->tier_evict) {
            size_t got;
            pthread_mutex_unlock(&ctx->mu);
            got = ctx->tier_evict(ctx, rsize, ctx->tier);
            pthread_mutex_lock(&ctx->mu);
            ctx->grow_exact = GM__GROW_EXACT(flags); /* another call may have run meanwhile */
            if ((*err = gm__ss_index(ctx, stream, si)) != GM_OK) return NULL;
            *err = GM_ERR_OUT_OF_MEMORY;
            if (got) { /* progress: this round does not count */
                rounds--;
                gm__process_pending(ctx, 0);
                GM__RUNG(1, gm__attempt(ctx, pl, *si, rsize, 0));
                continue;
            }
        }
        if (ctx->desc.oom_fn && !quiet) {
            gm_oom_action act;
            ctx->stats.num_oom_hook_calls++;
            pthread_mutex_unlock(&ctx->mu);
            act = ctx->desc.oom_fn(ctx, size, stream, ctx->desc.oom_user);
            pthread_mutex_lock(&ctx->mu);
            ctx->grow_exact = GM__GROW_EXACT(flags); /* another call may have run meanwhile */
            if ((*err = gm__ss_index(ctx, stream, si)) != GM_OK) return NULL;
            *err = GM_ERR_OUT_OF_MEMORY;
            if (act == GM_OOM_RETRY) {
                gm__process_pending(ctx, 0);
                GM__RUNG(1, gm__attempt(ctx, pl, *si, rsize, 0));
                continue;
            }
        }
        break;
    }
#undef GM__RUNG
    if (!quiet) {
        ctx->stats.num_ooms++;
        gm__oom_message(ctx, size, rsize, (flags & GM__A_SOFT) != 0);
    }
    return NULL;
fault:
    *err = ctx->dev_err;
    gm__log(ctx, GM_LOG_ERROR, "the device failed while serving %zu bytes (%s, logged above): not an out-of-memory, "
            "nothing more is tried", size, gm_result_string(*err));
    return NULL;
}

/* Free block b (its pages committed, when expandable) becomes the block of
   a request of `size` bytes (rsize rounded) by `owner`: split, mapped under
   its address, counted in its pool. */
static gm_result gm__alloc_take(gm_context* ctx, gm__block* b, size_t rsize, size_t size, gm_stream stream, int owner,
                                uint32_t tag, void** out) {
    int pl, ps;
    gm__tc_fold(ctx); /* the peaks below see what the thread caches did */
    pl = (int)(b->seg->arena - ctx->pool), ps = gm__pool_stat(pl);
    gm__arena_take(&ctx->pool[pl], b, rsize, gm__min_rest(ctx, pl, rsize));
    if (!gm__map_put(&ctx->map, b->addr, b)) {
        if (b->seg->va) gm__va_unref(ctx, b->seg, b->addr, b->size, 0);
        gm__arena_give(&ctx->pool[pl], b);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    b->requested = size;
    b->owner = (uint8_t)owner;
    b->tag = tag;
    gm__stat_add(ctx->stats.allocation, ps, 1);
    gm__stat_add(ctx->stats.allocated_bytes, ps, (int64_t)b->size);
    gm__stat_add(ctx->stats.requested_bytes, ps, (int64_t)size);
    gm__stat_add(ctx->stats.active, ps, 1);
    gm__stat_add(ctx->stats.active_bytes, ps, (int64_t)b->size);
    if (ctx->trace) gm__trace_row(ctx, "allocate", b->addr, size, stream);
    *out = (void*)b->addr;
    return GM_OK;
}

/* >>tcache ----------------------------------------------------------------
   Thread caches: gm_alloc and gm_free of small blocks without the lock,
   the way jemalloc's and mimalloc's thread caches work. A thread that
   allocates from a context gets a cache for it (gm__tcache): bins of the
   blocks it freed, by (stream, block size), and a table, by address, of
   the blocks it was handed (an entry stays while its block belongs to
   the cache, handed out or binned, so neither fast operation writes the
   table). A request of at most ctx->tc_max bytes (GM__TC_MAX, the small
   pool's largest, unless desc.thread_cache_max says more) whose bin holds a block
   of its rounded size on its stream takes it there; a free of a block the
   table names as handed out puts it in its bin. Everything else goes
   through the lock as before, and a block the lock hands to a thread with
   a cache (of exactly the rounded size, at most tc_max) is entered in its
   table. A block is reused at once only on the stream it was
   allocated for, as under the lock.
   A block a cache knows is a USED block of the allocator (in the map)
   whose word tcw is (generation << 2) | state: GM__TC_NONE (an ordinary
   block), GM__TC_LIVE (handed out; the user holds it) or GM__TC_FREE (in
   its owner's bin). Invariants:
   - only the owner thread moves a block between LIVE and FREE, inside a
     fast operation: tc->seq odd, begun only while tc->frozen is clear.
     Until another thread takes a LIVE block (ctx->tc_cas clear) it does
     so with plain loads and stores (a locked instruction there costs a
     third of a pair), so nobody else writes a LIVE block's word while its
     owner may be inside a fast operation; from then on (tc_cas set, for
     the context's life) it takes LIVE -> FREE by compare-and-swap;
   - a block leaves its cache only under ctx->mu, and its generation grows
     then: LIVE -> NONE when it is freed through the lock or recorded on
     another stream, FREE -> NONE when its owner or a stealer gives it back
     to the pool. The owner takes its own LIVE block so at once; another
     thread's LIVE block is taken by compare-and-swap, against its owner's
     free of it at the same moment (a double free: one wins), once tc_cas
     is set; the first such take sets it while every cache stands still (a
     freeze), so that no owner is between the load and the store of a
     plain free as the compare-and-swaps begin. A table entry carries
     the word of its block's adoption: it is valid while the block's
     generation is that word's (LIVE or FREE), stale after, and dropped
     when met or when the table is rebuilt; every binned block has a valid
     entry. A stealer first freezes every
     cache of the context (frozen set, a memory barrier on every thread:
     membarrier(2), or the owners' own fences where it is missing, then
     each seq waited even), so bins change hands only while their owners
     stand still;
   - the table's entries fit in half the table; only the owner writes the
     table (dropping a stale entry in a fast free, adding one under mu), a
     stealer reads it while frozen; an entry names its block's size and
     bin (set as it is adopted);
     tc->cached sums the bins' bytes, at most tc->cap;
   - statistics: an owner counts its fast allocations and frees in
     monotonic counters, read consistently through seq; once it adopted a
     block over GM__TC_MAX (big), also the large pool's share (cntl) and
     each pool's high-water mark (his, hil), so that all pools and each
     pool stay exact. ctx->stats plus the
     counts not yet folded is exact; a fold (under mu, when a call under
     the lock allocates or frees and when statistics are read; nothing to
     do when no cache's seq moved since the last) adds them and raises the
     peak by each cache's high-water mark since the last fold: exact with
     one thread; with several at once the peak of the sum is taken as the
     sum of the threads' peaks since the last fold;
   - block records are never freed while the context lives (the arena
     keeps spares), and a record's reuse keeps its word, so an entry naming
     an old record reads a later generation, never freed memory. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(GPUMEM_NO_THREAD_CACHE)
#define GM__TC 1
#else
#define GM__TC 0
#endif
#define GM__TC_MAX ((size_t)1 << 20) /* the largest request a cache serves (the small pool's) */
#define GM__TC_BINS 64
#define GM__TC_DEPTH 8                  /* blocks per bin */
#define GM__TC_BYTES ((size_t)2 << 20)  /* bytes a cache holds, at most (and budget / 64) */
#define GM__TC_LIVE_MAX ((size_t)1 << 17) /* table slots, at most */
#define GM__TC_SLOTS 4                  /* contexts per thread with a cache */
enum { GM__TC_NONE = 0, GM__TC_LIVE = 1, GM__TC_FREE = 2 };
/* counters: fast allocations (count, bytes, requested bytes), then frees */
enum { GM__TCN_A = 0, GM__TCN_F = 3, GM__TCN = 6 };

typedef struct gm__tcbin {
    size_t size;
    gm_stream stream;
    uint32_t n;
    gm__block* e[GM__TC_DEPTH]; /* oldest first; each FREE (its word says its generation) */
} gm__tcbin;
/* w: the block's word at adoption (LIVE); units and bin: its size in
   GM__ROUND units and its bin (a fast free picks the bin from the entry
   alone, reading no block record first) */
typedef struct gm__tclive {
    uintptr_t p;
    gm__block* b;
    uint64_t w;
    gm_stream stream;
    uint32_t units, bin;
} gm__tclive;

typedef struct gm__tcache {
    /* the owner's; others read them through seq */
    uint64_t seq;
    int64_t cnt[GM__TCN];
    int64_t hi[3];            /* high-water of allocations - frees since fold `seen` */
    uint64_t seen;
    int64_t cntl[GM__TCN];    /* with big: the large pool's share of cnt (blocks over GM__TC_MAX) */
    int64_t hil[3], his[3];   /* with big: the high-water marks of the large and the small pool's shares */
    int big;                  /* a large block was adopted: counts go per pool (set by the owner, under mu) */
    /* the owner's in fast operations and under mu; a stealer's while frozen */
    size_t cached, cap;       /* cached: the bins' bytes (none binned when 0) */
    gm__tcbin bins[GM__TC_BINS];
    /* the owner's alone */
    gm__tclive* live;
    size_t lcap, lcount;
    size_t room_skip;         /* adoptions refused without a look after a full table was scanned */
    /* under ctx->mu */
    int frozen;               /* atomic; ctx->tc_frozen says whether all are */
    int64_t folded[GM__TCN];  /* cnt at the last fold */
    int64_t foldedl[GM__TCN]; /* cntl at the last fold */
    uint64_t fseq;            /* seq at the last fold: unchanged, the cache did nothing since */
    struct gm__tcache* next;  /* the context's list */
    /* under gm__tc_mu */
    gm_context* ctx;          /* NULL once the context is shut down */
} gm__tcache;

/* A full fence. ThreadSanitizer does not model fences: there it is a
   read-modify-write of one word, a full barrier on every machine it runs on. */
#if defined(__SANITIZE_THREAD__)
#define GM__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GM__TSAN 1
#endif
#endif
#ifdef GM__TSAN
static int gm__fence_word;
#define GM__FENCE() ((void)__atomic_fetch_add(&gm__fence_word, 0, __ATOMIC_SEQ_CST))
#define GM__FENCE_REL() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#else
#define GM__FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define GM__FENCE_REL() __atomic_thread_fence(__ATOMIC_RELEASE) /* x86: no instruction */
#endif
#define GM__LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define GM__ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* A reason to keep the fast paths shut comes or goes. The gate is
   GM__GATE_SHUT from setup until the thread caches are on (and again from
   shutdown), GM__GATE_PLAN while the context has a plan (>>plan), and
   GM__GATE_PENDING while frees wait for streams (an allocation retires
   them under the lock first); a fast allocation runs only when it is 0
   (tc_lim, beside it, is then tc_max, else 0: the size's test tells it), a
   fast free when it is 0 or PENDING: one load of the context's line with
   its serial, in place of a check of each. Written under ctx->mu (or
   before the context is shared, or as it shuts down). */
static void gm__tc_gate(gm_context* ctx, uint32_t bit, int closed) {
    uint32_t g = closed ? __atomic_or_fetch(&ctx->tc_gate, bit, __ATOMIC_RELEASE)
                        : __atomic_and_fetch(&ctx->tc_gate, ~bit, __ATOMIC_RELEASE);
    __atomic_store_n(&ctx->tc_lim, g ? 0 : ctx->tc_max, __ATOMIC_RELEASE); /* the gate's writers do not race */
}

static uint64_t gm__tc_next_gen(uint64_t w, int state) { return (((w >> 2) + 1) << 2) | (uint64_t)state; }

/* The bytes a cache may hold: GM__TC_BYTES, or 1/64 of the budget; with
   large blocks (tc_max over GM__TC_MAX), twice tc_max, or 1/16 of it. */
static size_t gm__tc_cap(const gm_context* ctx) {
    size_t want = GM__TC_BYTES, lim = ctx->budget / 64;
    if (ctx->tc_max > GM__TC_MAX) {
        want = 2 * ctx->tc_max;
        lim = ctx->budget / 16;
    }
    return lim < want ? lim : want;
}

/* desc.thread_cache_max resolved (at setup): GM__TC_MAX by default; none
   past it with expandable segments (a cached block keeps its pages
   mapped), nor past 1/32 of the budget (so the cache holds two). */
static size_t gm__tc_max(gm_context* ctx, size_t want) {
    size_t m = want ? gm__round_req(want) : GM__TC_MAX;
    if (m > GM__TC_MAX && ctx->va_gran) {
        gm__log(ctx, GM_LOG_INFO, "setup: thread_cache_max %zu: 1 MiB with expandable segments", want);
        return GM__TC_MAX;
    }
    if (m > GM__TC_MAX && m > ctx->budget / 32) {
        m = ctx->budget / 32 > GM__TC_MAX ? ctx->budget / 32 / GM__ROUND * GM__ROUND : GM__TC_MAX;
        gm__log(ctx, GM_LOG_INFO, "setup: thread_cache_max %zu is over 1/32 of the budget: %zu", want, m);
    }
    return m;
}

static GM__HOT uint32_t gm__tc_bin(size_t size, gm_stream s) {
    uint64_t h = ((uint64_t)(size >> 9) ^ ((uint64_t)(uintptr_t)s << 12)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 58); /* GM__TC_BINS = 64 */
}

/* Whether a table entry's block still belongs to the cache (its
   generation is the entry's). */
static GM__HOT int gm__tc_valid(const gm__tclive* e) { return ((GM__LD(e->b->tcw) ^ e->w) >> 2) == 0; }
/* Whether e names its block as handed out by its cache (LIVE, as adopted). */
static int gm__tc_handed(const gm__tclive* e) { return e && e->p && GM__LD(e->b->tcw) == e->w; }

static GM__HOT size_t gm__tc_slot(const gm__tcache* tc, uintptr_t p) {
    return (size_t)(((uint64_t)(p >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & (tc->lcap - 1);
}

static GM__HOT gm__tclive* gm__tc_find(const gm__tcache* tc, uintptr_t p) {
    size_t m = tc->lcap - 1, i = gm__tc_slot(tc, p);
    for (;;) {
        gm__tclive* e = &tc->live[i];
        if (e->p == p) return e;
        if (!e->p) return NULL;
        i = (i + 1) & m;
    }
}

static GM__HOT void gm__tc_put(gm__tcache* tc, const gm__tclive* n) {
    size_t m = tc->lcap - 1, i = gm__tc_slot(tc, n->p);
    while (tc->live[i].p && tc->live[i].p != n->p) i = (i + 1) & m;
    if (!tc->live[i].p) tc->lcount++;
    tc->live[i] = *n;
}

/* Removes an entry, shifting later ones of its run back (no tombstones). */
static GM__HOT void gm__tc_del(gm__tcache* tc, gm__tclive* e) {
    size_t m = tc->lcap - 1, i = (size_t)(e - tc->live), j = i;
    for (;;) {
        size_t k;
        j = (j + 1) & m;
        if (!tc->live[j].p) break;
        k = gm__tc_slot(tc, tc->live[j].p);
        if (j > i ? (k <= i || k > j) : (k <= i && k > j)) {
            tc->live[i] = tc->live[j];
            i = j;
        }
    }
    tc->live[i].p = 0;
    tc->lcount--;
}

/* Room in the table for one more block (the owner): stale entries go,
   and it doubles as needed, up to GM__TC_LIVE_MAX slots. A table at its
   largest and half full of valid entries is not scanned again for the
   next GM__TC_LIVE_MAX / 8 adoptions (they are refused: the blocks are
   served through the lock), so a thread holding that many small blocks
   pays O(1) per allocation, not a scan of the table. */
static int gm__tc_room(gm__tcache* tc) {
    size_t need = 2 * (tc->lcount + 1), cap = tc->lcap, ocap = tc->lcap, i;
    gm__tclive *old = tc->live, *n;
    if (need <= tc->lcap) return 1;
    if (tc->room_skip) {
        tc->room_skip--;
        return 0;
    }
    for (i = 0; i < ocap; i++) /* only the entries still valid count */
        if (old[i].p && !gm__tc_valid(&old[i])) need -= 2;
    while (cap < need && cap < GM__TC_LIVE_MAX) cap *= 2;
    if (cap < need) {
        tc->room_skip = GM__TC_LIVE_MAX / 8;
        return 0;
    }
    n = (gm__tclive*)gm__calloc(cap * sizeof *n);
    if (!n) return 0;
    tc->live = n;
    tc->lcap = cap;
    tc->lcount = 0;
    for (i = 0; i < ocap; i++)
        if (old[i].p && gm__tc_valid(&old[i])) gm__tc_put(tc, &old[i]);
    GPUMEM_FREE(old);
    return 1;
}

/* The process's side: the key whose destructor gives a thread's caches
   back, and whether membarrier(2) can fence the owners for a stealer. */
static pthread_mutex_t gm__tc_mu = PTHREAD_MUTEX_INITIALIZER; /* before any ctx->mu */
static pthread_key_t gm__tc_key;
static pthread_once_t gm__tc_once = PTHREAD_ONCE_INIT;
static int gm__tc_keyok, gm__tc_asym;
typedef struct gm__tls {
    uint32_t serial[GM__TC_SLOTS];
    gm__tcache* tc[GM__TC_SLOTS];
} gm__tls;
#if GM__TC
static __thread uint32_t gm__tls_serial; /* the context used last, when it has a cache here (else 0) */
static __thread gm__tcache* gm__tls_tc;  /* that cache: never NULL while the serial is set */
static __thread uint32_t gm__tls_none;   /* the context used last, when it has none */
#endif
#define GM__MEMBARRIER_PRIVATE_EXPEDITED 8
#define GM__MEMBARRIER_REGISTER_PRIVATE_EXPEDITED 16

static void gm__tc_exit(void* v);
static void gm__tc_init(void) {
    gm__tc_keyok = pthread_key_create(&gm__tc_key, gm__tc_exit) == 0;
#if defined(__linux__) && defined(SYS_membarrier)
    gm__tc_asym = syscall(SYS_membarrier, GM__MEMBARRIER_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
                  syscall(SYS_membarrier, GM__MEMBARRIER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
}

/* A stealer's half of the barrier: every thread of the process has passed
   a full fence (an owner's half is then a compiler barrier), or this
   thread's own where membarrier is missing (then owners fence too). */
static void gm__tc_barrier(void) {
#if defined(__linux__) && defined(SYS_membarrier)
    if (gm__tc_asym) { /* registered: it does not fail, but owners rely on it, so it is never skipped */
        while (syscall(SYS_membarrier, GM__MEMBARRIER_PRIVATE_EXPEDITED, 0, 0) != 0) sched_yield();
        return;
    }
#endif
    GM__FENCE();
}

/* The owner begins a fast operation: 0 when its cache is frozen. */
static GM__HOT int gm__tc_enter(gm__tcache* tc) {
    uint64_t s = GM__LD(tc->seq);
    GM__ST(tc->seq, s + 1);
    if (gm__tc_asym) GM__FENCE_REL(); /* readers of the counters see seq odd before any of them changes */
    else GM__FENCE();
    if (GM__LIKELY(!__atomic_load_n(&tc->frozen, __ATOMIC_ACQUIRE))) return 1;
    __atomic_store_n(&tc->seq, s + 2, __ATOMIC_RELEASE);
    return 0;
}

static GM__HOT void gm__tc_leave(gm__tcache* tc) { __atomic_store_n(&tc->seq, GM__LD(tc->seq) + 1, __ATOMIC_RELEASE); }

/* Every cache of ctx stands still (with mu), or goes on again. */
static void gm__tc_freeze(gm_context* ctx) {
    gm__tcache* tc;
    if (ctx->tc_frozen || !ctx->tcs) return;
    ctx->tc_frozen = 1;
    for (tc = ctx->tcs; tc; tc = tc->next) GM__ST(tc->frozen, 1);
    gm__tc_barrier();
    for (tc = ctx->tcs; tc; tc = tc->next)
        while (__atomic_load_n(&tc->seq, __ATOMIC_ACQUIRE) & 1) sched_yield();
}

static void gm__tc_thaw(gm_context* ctx) {
    gm__tcache* tc;
    ctx->tc_frozen = 0;
    for (tc = ctx->tcs; tc; tc = tc->next) __atomic_store_n(&tc->frozen, 0, __ATOMIC_RELEASE);
}

/* Widening. By default the caches keep blocks of up to 1 MiB: a single
   thread loses nothing to the lock on larger ones, and a large block held
   free by a cache is one best fit cannot use. Two threads that allocate
   large blocks on one context wait on each other for the lock instead,
   each pair taking three times as long as alone. So a context whose
   thread_cache_max was not set widens its caches to tc_wide (64 MiB, at
   most 1/32 of the budget; never with expandable segments) once
   GM__TC_WIDEN_AFTER large requests found the lock held and came from
   another thread than the request before (the tiered manager's own
   threads do not count: their requests are not the user's). tc_max then
   only grows, under mu; its one read outside (gm__alloc_slow) is atomic. */
#define GM__TC_WIDE ((size_t)64 << 20)
#define GM__TC_WIDEN_AFTER 64

static size_t gm__tc_wide(const gm_context* ctx) {
    size_t m = ctx->budget / 32 / GM__ROUND * GM__ROUND;
    if (ctx->va_gran || !ctx->tc_on) return 0;
    if (m > GM__TC_WIDE) m = GM__TC_WIDE;
    return m > GM__TC_MAX ? m : 0;
}

/* The calling thread, as an address no other thread has. */
static uintptr_t gm__tc_self(void) {
#if GM__TC
    return (uintptr_t)&gm__tls_tc;
#else
    return 0;
#endif
}

/* With mu: the caches serve requests of up to tc_wide from now on. Their
   caps change while they stand still (their owners read them in fast
   frees), as in gm_set_budget. */
static void gm__tc_widen(gm_context* ctx) {
    gm__tcache* tc;
    int frozen = ctx->tc_frozen;
    GM__ST(ctx->tc_max, ctx->tc_wide);
    gm__tc_freeze(ctx);
    for (tc = ctx->tcs; tc; tc = tc->next) tc->cap = gm__tc_cap(ctx);
    if (!frozen) gm__tc_thaw(ctx);
    gm__tc_gate(ctx, 0, 0); /* no reason changes: tc_lim follows tc_max */
    gm__log(ctx, GM_LOG_INFO,
            "thread caches: threads contend for the lock on large blocks; they keep blocks of up to %zu bytes now",
            ctx->tc_max);
}

/* A large request (GM__A_WIDE) takes mu, noting whether it waited for
   another thread; returns with mu held. */
static void gm__tc_contend(gm_context* ctx) {
    uintptr_t me = gm__tc_self();
    int waited = pthread_mutex_trylock(&ctx->mu) != 0;
    if (waited) pthread_mutex_lock(&ctx->mu);
    if (waited && ctx->tc_last != me && ++ctx->tc_contended >= GM__TC_WIDEN_AFTER && ctx->tc_max < ctx->tc_wide)
        gm__tc_widen(ctx);
    ctx->tc_last = me;
}

/* A cache's counters, consistent (any thread). */
static uint64_t gm__tc_read(const gm__tcache* tc, int64_t c[2][GM__TCN], int64_t hi[3][3], uint64_t* seen) {
    for (;;) {
        uint64_t s = __atomic_load_n(&tc->seq, __ATOMIC_ACQUIRE);
        int k;
        if (s & 1) {
            sched_yield();
            continue;
        }
        /* acquire loads: the second read of seq cannot move before them */
        for (k = 0; k < GM__TCN; k++) {
            c[0][k] = __atomic_load_n(&tc->cnt[k], __ATOMIC_ACQUIRE);
            c[1][k] = __atomic_load_n(&tc->cntl[k], __ATOMIC_ACQUIRE);
        }
        for (k = 0; k < 3; k++) {
            hi[0][k] = __atomic_load_n(&tc->hi[k], __ATOMIC_ACQUIRE);
            hi[1][k] = __atomic_load_n(&tc->his[k], __ATOMIC_ACQUIRE);
            hi[2][k] = __atomic_load_n(&tc->hil[k], __ATOMIC_ACQUIRE);
        }
        *seen = __atomic_load_n(&tc->seen, __ATOMIC_ACQUIRE);
        if (GM__LD(tc->seq) == s) return s;
    }
}

static void gm__tc_apply(gm_stat* s, int64_t up, int64_t a, int64_t f) {
    if (s->current + up > s->peak) s->peak = s->current + up;
    s->current += a - f;
    s->allocated += a;
    s->freed += f;
    if (s->current > s->peak) s->peak = s->current;
}

/* How far a cache's high-water mark `h` (of the current epoch when seen)
   lifts a share whose current value was `f` at the last fold. */
static int64_t gm__tc_up(int seen, int64_t h, int64_t f) { return (seen && h > f ? h : f) - f; }

/* The caches' counts since the last fold go into ctx->stats (with mu):
   all pools, the small pool's share, the large pool's share. Nothing is
   done when no cache's seq moved since the last fold (each fast operation
   moves it by two: a fold misses only operations that had not begun). */
static void gm__tc_fold_now(gm_context* ctx) {
    int64_t up[3][3], add[3][GM__TCN];
    uint64_t e;
    gm__tcache* tc;
    int k, j;
    for (tc = ctx->tcs; tc && __atomic_load_n(&tc->seq, __ATOMIC_ACQUIRE) == tc->fseq; tc = tc->next) {}
    if (GM__LIKELY(!tc)) return;
    memset(up, 0, sizeof up);
    memset(add, 0, sizeof add);
    e = GM__LD(ctx->tc_epoch);
    GM__ST(ctx->tc_epoch, e + 1); /* owners start their next high-water marks */
    for (tc = ctx->tcs; tc; tc = tc->next) {
        int64_t c[2][GM__TCN], hi[3][3];
        uint64_t seen;
        tc->fseq = gm__tc_read(tc, c, hi, &seen);
        for (k = 0; k < 3; k++) {
            /* a mark of this interval only: a mark left from an earlier one was
               folded then (exact with one thread; with several, a mark made
               while this fold began may be missed) */
            int64_t fa = tc->folded[GM__TCN_A + k] - tc->folded[GM__TCN_F + k];
            int64_t fl = tc->foldedl[GM__TCN_A + k] - tc->foldedl[GM__TCN_F + k];
            up[0][k] += gm__tc_up(seen == e, hi[0][k], fa);
            /* without big every count is the small pool's, and so is the mark */
            up[1][k] += gm__tc_up(seen == e, tc->big ? hi[1][k] : hi[0][k], fa - fl);
            if (tc->big) up[2][k] += gm__tc_up(seen == e, hi[2][k], fl);
        }
        for (k = 0; k < GM__TCN; k++) {
            add[0][k] += c[0][k] - tc->folded[k];
            add[2][k] += c[1][k] - tc->foldedl[k];
            tc->folded[k] = c[0][k];
            tc->foldedl[k] = c[1][k];
        }
    }
    for (k = 0; k < GM__TCN; k++) add[1][k] = add[0][k] - add[2][k];
    for (j = 0; j < 3; j++) { /* j: GM_STAT_ALL, _SMALL_POOL, _LARGE_POOL */
        gm__tc_apply(&ctx->stats.allocation[j], up[j][0], add[j][GM__TCN_A], add[j][GM__TCN_F]);
        gm__tc_apply(&ctx->stats.active[j], up[j][0], add[j][GM__TCN_A], add[j][GM__TCN_F]);
        gm__tc_apply(&ctx->stats.allocated_bytes[j], up[j][1], add[j][GM__TCN_A + 1], add[j][GM__TCN_F + 1]);
        gm__tc_apply(&ctx->stats.active_bytes[j], up[j][1], add[j][GM__TCN_A + 1], add[j][GM__TCN_F + 1]);
        gm__tc_apply(&ctx->stats.requested_bytes[j], up[j][2], add[j][GM__TCN_A + 2], add[j][GM__TCN_F + 2]);
    }
}

/* All pools' counts of a fast operation (o: GM__TCN_A or _F); 1 when it
   is an allocation that starts this fold's interval. After an allocation
   the high-water marks follow all pools' counts now (a[k] - f[k]). */
static GM__HOT int gm__tc_count_all(gm_context* ctx, gm__tcache* tc, int o, int64_t bytes, int64_t req) {
    int64_t c0 = GM__LD(tc->cnt[o]) + 1, c1 = GM__LD(tc->cnt[o + 1]) + bytes, c2 = GM__LD(tc->cnt[o + 2]) + req;
    uint64_t e;
    int64_t n0, n1, n2;
    GM__ST(tc->cnt[o], c0);
    GM__ST(tc->cnt[o + 1], c1);
    GM__ST(tc->cnt[o + 2], c2);
    if (o != GM__TCN_A) return 0;
    e = GM__LD(ctx->tc_epoch);
    n0 = c0 - GM__LD(tc->cnt[GM__TCN_F]);
    n1 = c1 - GM__LD(tc->cnt[GM__TCN_F + 1]);
    n2 = c2 - GM__LD(tc->cnt[GM__TCN_F + 2]);
    if (GM__UNLIKELY(GM__LD(tc->seen) != e)) { /* the first of the interval */
        GM__ST(tc->seen, e);
        GM__ST(tc->hi[0], n0);
        GM__ST(tc->hi[1], n1);
        GM__ST(tc->hi[2], n2);
        return 1;
    }
    if (n0 > GM__LD(tc->hi[0])) GM__ST(tc->hi[0], n0);
    if (n1 > GM__LD(tc->hi[1])) GM__ST(tc->hi[1], n1);
    if (n2 > GM__LD(tc->hi[2])) GM__ST(tc->hi[2], n2);
    return 0;
}

/* gm__tc_count once the cache holds large blocks (big): all pools as
   always, then the large pool's share (cntl) and, after an allocation,
   the mark of the pool it grew (both when fresh). Out of line, so that
   the small-only path stays as short as it was. */
static GM__NOINLINE void gm__tc_count_big(gm_context* ctx, gm__tcache* tc, int o, int large, int64_t bytes,
                                         int64_t req) {
    int fresh = gm__tc_count_all(ctx, tc, o, bytes, req), k;
    if (large) {
        GM__ST(tc->cntl[o], GM__LD(tc->cntl[o]) + 1);
        GM__ST(tc->cntl[o + 1], GM__LD(tc->cntl[o + 1]) + bytes);
        GM__ST(tc->cntl[o + 2], GM__LD(tc->cntl[o + 2]) + req);
    }
    for (k = 0; k < 3 && o == GM__TCN_A; k++) {
        int64_t n = GM__LD(tc->cnt[GM__TCN_A + k]) - GM__LD(tc->cnt[GM__TCN_F + k]); /* all pools now */
        int64_t l = GM__LD(tc->cntl[GM__TCN_A + k]) - GM__LD(tc->cntl[GM__TCN_F + k]);
        if (fresh || (large && l > GM__LD(tc->hil[k]))) GM__ST(tc->hil[k], l);
        if (fresh || (!large && n - l > GM__LD(tc->his[k]))) GM__ST(tc->his[k], n - l);
    }
    gm__tc_leave(tc);
}

/* The owner counts a fast allocation or free (of a block over GM__TC_MAX:
   large), then ends the fast operation. The big case is a call at the
   end, so that the small-only path needs no registers saved around it. */
static GM__HOT void gm__tc_count(gm_context* ctx, gm__tcache* tc, int fr, int large, int64_t bytes, int64_t req) {
    if (GM__UNLIKELY(tc->big)) gm__tc_count_big(ctx, tc, fr ? GM__TCN_F : GM__TCN_A, large, bytes, req);
    else {
        (void)gm__tc_count_all(ctx, tc, fr ? GM__TCN_F : GM__TCN_A, bytes, req);
        gm__tc_leave(tc);
    }
}

/* A request served from the calling thread's bin, without the lock: 1, or
   0 when the bin has no block of its size on its stream. */
static GM__HOT int gm__tc_alloc(gm_context* ctx, gm__tcache* tc, void** out, size_t size, gm_stream stream) {
    size_t rsize = gm__round_req(size);
    gm__tcbin* bin = &tc->bins[gm__tc_bin(rsize, stream)];
    gm__block* b;
    uint64_t w;
    if (!gm__tc_enter(tc)) return 0;
    if (!bin->n || bin->size != rsize || bin->stream != stream) {
        gm__tc_leave(tc);
        return 0;
    }
    b = bin->e[--bin->n];
    *out = (void*)b->addr; /* the line of its word, which is written next */
    GM__ST(tc->cached, tc->cached - rsize); /* others read it to see whether any cache holds blocks */
    w = GM__LD(b->tcw) - GM__TC_FREE + GM__TC_LIVE; /* FREE: only its owner or a stealer (frozen) moves it */
    b->requested = size; /* the cache's: nobody else writes it while it is LIVE */
    /* its table entry stayed; released: a double free of its last life through the lock on another thread
       (tc_cas set, its compare-and-swap acquiring) reads requested, written before */
    __atomic_store_n(&b->tcw, w, __ATOMIC_RELEASE);
    gm__tc_count(ctx, tc, 0, rsize > GM__TC_MAX, (int64_t)rsize, (int64_t)size);
    return 1;
}

/* The fast free of the block entry e names, inside a fast operation,
   which it ends; cas: ctx->tc_cas, a constant in each of its two callers. */
static GM__HOT int gm__tc_free_at(gm_context* ctx, gm__tcache* tc, gm__tclive* e, int cas) {
    gm__block* b = e->b;
    gm__tcbin* bin;
    uint64_t w = e->w;
    size_t size;
    int other;
    /* It must have the word of its adoption (LIVE), and a free of it racing
       through the lock on another thread (a double free) must win or lose
       as a whole, the loser reporting it. With tc_cas clear nobody else
       writes the word while this cache may be inside a fast operation (see
       the invariants); with it set, LIVE -> FREE by compare-and-swap,
       first. Until then nothing else of the block is read. */
    if (GM__UNLIKELY(cas ? !__atomic_compare_exchange_n(&b->tcw, &w, w - GM__TC_LIVE + GM__TC_FREE, 0,
                                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)
                         : (w = GM__LD(b->tcw)) != e->w)) {
        if ((w ^ e->w) >> 2) gm__tc_del(tc, e); /* it left this cache (freed or recorded elsewhere, and maybe
                                                    handed out again) */
        gm__tc_leave(tc); /* else it is in a bin: freed already (the lock says so) */
        return 0;
    } /* w: still the word it had */
    size = (size_t)e->units * GM__ROUND;
    bin = &tc->bins[e->bin];
    other = bin->n && (bin->size != size || bin->stream != e->stream); /* its bin serves another size or stream */
    if (other || bin->n == GM__TC_DEPTH || tc->cached + size > tc->cap) { /* it stays handed out: the lock frees it,
                                                                             or room is made and it comes again */
        if (cas) GM__ST(b->tcw, w);
        gm__tc_leave(tc);
        return other ? 0 : 2;
    }
    if (!bin->n) {
        bin->size = size;
        bin->stream = e->stream;
    }
    bin->e[bin->n++] = b;
    GM__ST(tc->cached, tc->cached + size); /* its table entry stays */
    if (!cas) GM__ST(b->tcw, w - GM__TC_LIVE + GM__TC_FREE); /* last: an atomic store makes the compiler load again
                                                                what it kept */
    gm__tc_count(ctx, tc, 1, size > GM__TC_MAX, (int64_t)size, (int64_t)b->requested);
    return 1;
}

/* Once another thread has taken a block from a cache: out of line, so
   that the plain way saves no registers for it. */
static GM__NOINLINE int gm__tc_free_cas(gm_context* ctx, gm__tcache* tc, gm__tclive* e) {
    return gm__tc_free_at(ctx, tc, e, 1);
}

/* A block the calling thread was handed into its bin, without the lock: 1;
   0 when its cache does not know it (or it is frozen); 2 when its bin or
   the cache is full (the caller gives some back under the lock, then
   tries again). */
static GM__HOT int gm__tc_free(gm_context* ctx, gm__tcache* tc, void* ptr) {
    gm__tclive* e = gm__tc_find(tc, (uintptr_t)ptr); /* only the owner writes the table: a miss needs no entering */
    if (!e || !gm__tc_enter(tc)) return 0;
    if (GM__UNLIKELY(GM__LD(ctx->tc_cas))) /* read inside: it is set while this cache stands still */
        return gm__tc_free_cas(ctx, tc, e);
    return gm__tc_free_at(ctx, tc, e, 0);
}

/* A FREE block of a cache back to the pool (with mu; its owner stands
   still or is the caller). Its free was counted by the cache. */
static void gm__tc_give(gm_context* ctx, gm__block* b) {
    GM__ST(b->tcw, gm__tc_next_gen(GM__LD(b->tcw), GM__TC_NONE));
    gm__map_del(&ctx->map, b->addr);
    gm__mark_freed(b->seg, b->addr);
    gm__free_block_quiet(ctx, b);
}

/* The oldest `n` blocks of a bin back to the pool (with mu). */
static size_t gm__tc_give_bin(gm_context* ctx, gm__tcache* tc, gm__tcbin* bin, uint32_t n) {
    uint32_t i;
    size_t got = 0;
    if (n > bin->n) n = bin->n;
    for (i = 0; i < n; i++) {
        gm__block* b = bin->e[i]; /* FREE: a binned block leaves only through here */
        got += b->size;
        gm__tc_give(ctx, b);
    }
    memmove(bin->e, bin->e + n, (bin->n - n) * sizeof bin->e[0]);
    bin->n -= n;
    GM__ST(tc->cached, tc->cached - got);
    return got;
}

/* The owner's bins back to the pool (with mu; or a stealer's, while frozen). */
static void gm__tc_give_own(gm_context* ctx, gm__tcache* tc) {
    uint32_t i;
    for (i = 0; i < GM__TC_BINS && tc->cached; i++) gm__tc_give_bin(ctx, tc, &tc->bins[i], GM__TC_DEPTH);
}

/* The owner makes room for a free that found its bin or cache full (with
   mu): half of that bin, or when the cache is full, every bin. */
static void gm__tc_make_room(gm_context* ctx, gm__tcache* tc, const void* ptr) {
    gm__tclive* e = gm__tc_find(tc, (uintptr_t)ptr);
    if (gm__tc_handed(e) && e->b->size > tc->cap) return; /* no room takes it (the cap fell since its adoption):
                                                              the lock frees it, the bins stay */
    if (gm__tc_handed(e)) {
        gm__tcbin* bin = &tc->bins[e->bin];
        if (bin->n == GM__TC_DEPTH && tc->cached + e->b->size <= tc->cap) {
            gm__tc_give_bin(ctx, tc, bin, GM__TC_DEPTH / 2);
            return;
        }
    }
    gm__tc_give_own(ctx, tc);
}

/* Every cache's bins back to the pool (with mu): the bytes given back.
   With keep, the caches stay frozen (gm__tc_thaw ends it). */
static size_t gm__tc_steal(gm_context* ctx, int keep) {
    gm__tcache* tc;
    size_t got = 0;
    uint32_t i;
    if (!keep) { /* a freeze costs every thread a barrier: not for empty caches */
        for (tc = ctx->tcs; tc && !GM__LD(tc->cached); tc = tc->next) {}
        if (!tc) return 0;
    }
    gm__tc_freeze(ctx);
    for (tc = ctx->tcs; tc; tc = tc->next)
        for (i = 0; i < GM__TC_BINS && tc->cached; i++) got += gm__tc_give_bin(ctx, tc, &tc->bins[i], GM__TC_DEPTH);
    if (!keep) gm__tc_thaw(ctx);
    return got;
}

static gm__tcache* gm__tc_get(gm_context* ctx, int create);

/* The blocks cache tc handed out (all, or those for stream s) leave it
   (with mu; tc stands still or is the caller's): they are ordinary blocks
   from now on, freed through the lock. */
static void gm__tc_revoke(gm__tcache* tc, int all, gm_stream s) {
    size_t i;
    for (i = 0; i < tc->lcap; i++)
        if ((all || tc->live[i].stream == s) && gm__tc_handed(&tc->live[i]))
            GM__ST(tc->live[i].b->tcw, gm__tc_next_gen(tc->live[i].w, GM__TC_NONE));
}

/* A block about to change hands under the lock (freed, or recorded on
   another stream): it leaves the cache that handed it out. Returns 0 when
   it lies in a bin: freed already. The calling thread's own cache stands
   still: it gives the block up at once. Another thread's may be freeing
   the same block at this moment (a double free: one wins): a
   compare-and-swap, once every owner takes its blocks so too (tc_cas). */
static int gm__tc_leave_block(gm_context* ctx, gm__block* b) {
    uint64_t w = GM__LD(b->tcw);
    gm__tcache* own;
    if ((w & 3) == GM__TC_FREE) return 0;
    if ((w & 3) != GM__TC_LIVE) return 1;
    own = gm__tc_get(ctx, 0);
    if (own && own->ctx == ctx) {
        gm__tclive* e = gm__tc_find(own, b->addr);
        if (e && e->b == b && gm__tc_handed(e)) { /* by the caller's cache: nobody else moves it now */
            GM__ST(b->tcw, gm__tc_next_gen(w, GM__TC_NONE));
            return 1;
        }
    }
    if (!GM__LD(ctx->tc_cas)) { /* the first time: every owner stands still as its frees change their way */
        int frozen = ctx->tc_frozen;
        gm__tc_freeze(ctx);
        __atomic_store_n(&ctx->tc_cas, 1, __ATOMIC_RELEASE);
        if (!frozen) gm__tc_thaw(ctx);
        gm__log(ctx, GM_LOG_DEBUG, "thread caches: a block is freed on another thread than its cache's; fast frees "
                                   "take a compare-and-swap from now on");
        w = GM__LD(b->tcw);
    }
    for (;;) {
        if ((w & 3) == GM__TC_FREE) return 0;
        if ((w & 3) != GM__TC_LIVE) return 1;
        if (__atomic_compare_exchange_n(&b->tcw, &w, gm__tc_next_gen(w, GM__TC_NONE), 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return 1;
    }
}

/* A block the lock hands to the calling thread enters its cache's table
   (with mu). */
static void gm__tc_adopt(gm_context* ctx, gm__tcache* tc, gm__block* b, size_t rsize, gm_stream stream) {
    gm__tclive n;
    int k;
    if (!tc || b->size != rsize || rsize > ctx->tc_max || rsize > tc->cap || rsize / GM__ROUND > UINT32_MAX ||
        b->seg->arena != &ctx->pool[gm__pool_of(rsize)] || !gm__tc_room(tc))
        return;
    if (rsize > GM__TC_MAX && !tc->big) { /* counts go per pool from now on; so far all were the small pool's */
        for (k = 0; k < 3; k++) {
            GM__ST(tc->his[k], GM__LD(tc->hi[k]));
            GM__ST(tc->hil[k], 0);
        }
        tc->big = 1;
    }
    n.p = b->addr;
    n.b = b;
    n.w = gm__tc_next_gen(GM__LD(b->tcw), GM__TC_LIVE);
    n.stream = stream;
    n.units = (uint32_t)(rsize / GM__ROUND);
    n.bin = gm__tc_bin(rsize, stream); /* a fast free finds the bin without hashing */
    GM__ST(b->tcw, n.w);
    gm__tc_put(tc, &n);
}

/* Stream s ends (with mu): no cache keeps or hands out its blocks any
   more (its handle may come back as another stream). */
static void gm__tc_forget_stream(gm_context* ctx, gm_stream s) {
    gm__tcache* tc;
    size_t i;
    if (!ctx->tcs) return;
    gm__tc_freeze(ctx);
    for (tc = ctx->tcs; tc; tc = tc->next) {
        for (i = 0; i < GM__TC_BINS; i++)
            if (tc->bins[i].n && tc->bins[i].stream == s) gm__tc_give_bin(ctx, tc, &tc->bins[i], GM__TC_DEPTH);
        gm__tc_revoke(tc, 0, s);
    }
    gm__tc_thaw(ctx);
}

/* The caches' invariants (with mu, frozen): for gm_check. */
static void gm__tc_check(gm_context* ctx, gm__ck* ck) {
    const gm__tcache* tc;
    int n = 0;
    for (tc = ctx->tcs; tc; tc = tc->next, n++) {
        size_t i, cached = 0, nb = 0, live = 0, fe = 0;
        for (i = 0; i < GM__TC_BINS; i++) {
            const gm__tcbin* bin = &tc->bins[i];
            uint32_t k;
            if (bin->n > GM__TC_DEPTH) gm__broken(ck, "thread cache %d: bin %zu holds %u blocks", n, i, bin->n);
            for (k = 0; k < bin->n && k < GM__TC_DEPTH; k++) {
                const gm__block* b = bin->e[k];
                const gm__tclive* e = gm__tc_find(tc, b->addr);
                if ((GM__LD(b->tcw) & 3) != GM__TC_FREE || b->state != GM__USED || !e ||
                    e->b != b || e->bin != i || /* its size: the entries' walk */
                    gm__map_get(&ctx->map, b->addr) != b || b->size != bin->size || b->size > ctx->tc_max ||
                    b->seg->arena != &ctx->pool[gm__pool_of(b->size)] || (b->size > GM__TC_MAX && !tc->big) ||
                    gm__tc_bin(b->size, bin->stream) != i)
                    gm__broken(ck, "thread cache %d: bin %zu holds block %#lx (%zu bytes), which is not its free block",
                               n, i, (unsigned long)b->addr, b->size);
                cached += b->size;
                nb++;
            }
        }
        for (i = 0; i < tc->lcap; i++) {
            const gm__tclive* e = &tc->live[i];
            uint64_t w;
            if (!e->p) continue;
            live++;
            if (!gm__tc_valid(e)) continue; /* stale: it left, dropped when met */
            w = GM__LD(e->b->tcw);
            if ((e->w & 3) != GM__TC_LIVE || e->b->addr != e->p || gm__map_get(&ctx->map, e->p) != e->b ||
                (size_t)e->units * GM__ROUND != e->b->size || e->bin != gm__tc_bin(e->b->size, e->stream) ||
                gm__tc_find(tc, e->p) != e)
                gm__broken(ck, "thread cache %d: the table names %#lx, which is not a block it handed out", n,
                           (unsigned long)e->p);
            if ((w & 3) == GM__TC_FREE) fe++;
        }
        if (cached != tc->cached || cached > tc->cap)
            gm__broken(ck, "thread cache %d: bins hold %zu blocks of %zu bytes, %zu counted (limit %zu)", n, nb,
                       cached, tc->cached, tc->cap);
        if (live != tc->lcount || 2 * tc->lcount > tc->lcap || fe != nb)
            gm__broken(ck, "thread cache %d: the table holds %zu entries (%zu of binned blocks), %zu counted, %zu "
                       "binned, in %zu slots", n, live, fe, tc->lcount, nb, tc->lcap);
    }
}

/* A cache leaves its context (with gm__tc_mu and ctx->mu; its owner is the
   caller): its counts are folded, its bins given back, and it is off the
   list. Its blocks still handed out are freed through the lock, as
   ordinary blocks. */
static void gm__tc_drop(gm_context* ctx, gm__tcache* tc) {
    gm__tcache** pp;
    gm__tc_fold_now(ctx);
    gm__tc_give_own(ctx, tc);
    gm__tc_revoke(tc, 1, NULL);
    for (pp = &ctx->tcs; *pp; pp = &(*pp)->next)
        if (*pp == tc) {
            *pp = tc->next;
            break;
        }
    tc->ctx = NULL;
}

static void gm__tc_destroy(gm__tcache* tc) {
    GPUMEM_FREE(tc->live);
    GPUMEM_FREE(tc);
}

/* The thread's destructor: each cache leaves its context, if it is live. */
static void gm__tc_exit(void* v) {
    gm__tls* t = (gm__tls*)v;
    int i;
#if GM__TC
    gm__tls_serial = gm__tls_none = 0; /* first: a log callback run by gm__unlock below may call in again */
    gm__tls_tc = NULL;
#endif
    pthread_mutex_lock(&gm__tc_mu);
    for (i = 0; i < GM__TC_SLOTS; i++) {
        gm__tcache* tc = t->tc[i];
        gm_context* ctx;
        if (!tc) continue;
        if ((ctx = tc->ctx) != NULL) {
            pthread_mutex_lock(&ctx->mu);
            gm__tc_drop(ctx, tc);
            gm__unlock(ctx);
        }
        gm__tc_destroy(tc);
    }
    pthread_mutex_unlock(&gm__tc_mu);
    GPUMEM_FREE(t);
}

/* At shutdown (without mu): the caches of ctx are orphaned; their threads
   free them. */
static void gm__tc_shutdown(gm_context* ctx) {
    gm__tcache* tc;
    gm__tc_gate(ctx, GM__GATE_SHUT, 1);
    pthread_mutex_lock(&gm__tc_mu);
    pthread_mutex_lock(&ctx->mu);
    gm__tc_steal(ctx, 0);
    gm__tc_fold_now(ctx);
    for (tc = ctx->tcs; tc; tc = tc->next) tc->ctx = NULL;
    ctx->tcs = NULL;
    gm__unlock(ctx);
    pthread_mutex_unlock(&gm__tc_mu);
}

/* The calling thread's cache for ctx, made on first use (create), or NULL
   (no cache: the lock serves every call). */
static gm__tcache* gm__tc_lookup(gm_context* ctx, int create) {
    gm__tls* t;
    gm__tcache* tc = NULL;
    int i, slot = -1;
    if (!GM__TC) return NULL; /* built without them (GPUMEM_NO_THREAD_CACHE): ctx->tc_on is 0 */
    pthread_once(&gm__tc_once, gm__tc_init);
    if (!gm__tc_keyok) return NULL;
    t = (gm__tls*)pthread_getspecific(gm__tc_key);
    for (i = 0; t && i < GM__TC_SLOTS; i++)
        if (t->tc[i] && t->serial[i] == ctx->serial) tc = t->tc[i];
    if (!tc && create) {
        if (!t) {
            t = (gm__tls*)gm__calloc(sizeof *t);
            if (!t) return NULL;
            if (pthread_setspecific(gm__tc_key, t) != 0) {
                GPUMEM_FREE(t);
                return NULL;
            }
        }
        /* a try: this may run under another context's lock (a log callback
           that allocates), and an exiting thread holds gm__tc_mu while it waits
           for context locks; no cache this time is no harm */
        if (pthread_mutex_trylock(&gm__tc_mu) != 0) return NULL;
        for (i = 0; i < GM__TC_SLOTS; i++) {
            if (t->tc[i] && !t->tc[i]->ctx) { /* its context is gone */
                gm__tc_destroy(t->tc[i]);
                t->tc[i] = NULL;
            }
            if (!t->tc[i] && slot < 0) slot = i;
        }
        if (slot >= 0 && (tc = (gm__tcache*)gm__calloc(sizeof *tc)) != NULL) {
            tc->lcap = 64;
            tc->live = (gm__tclive*)gm__calloc(tc->lcap * sizeof *tc->live);
            if (!tc->live) {
                GPUMEM_FREE(tc);
                tc = NULL;
            } else {
                tc->ctx = ctx;
                pthread_mutex_lock(&ctx->mu);
                tc->cap = gm__tc_cap(ctx);
                tc->next = ctx->tcs;
                ctx->tcs = tc;
                pthread_mutex_unlock(&ctx->mu);
                t->serial[slot] = ctx->serial;
                t->tc[slot] = tc;
            }
        }
        pthread_mutex_unlock(&gm__tc_mu);
    }
#if GM__TC
    gm__tls_serial = tc ? ctx->serial : 0; /* the fast paths test the serial alone */
    gm__tls_tc = tc;
    gm__tls_none = tc ? 0 : ctx->serial; /* none is remembered too: a thread that only frees asks once */
#endif
    return tc;
}

/* The calling thread's cache for ctx: from the last call's, at once. */
static GM__HOT gm__tcache* gm__tc_get(gm_context* ctx, int create) {
#if GM__TC
    if (GM__LIKELY(gm__tls_serial == ctx->serial)) return gm__tls_tc;
    if (!create && gm__tls_none == ctx->serial) return NULL;
#endif
    return gm__tc_lookup(ctx, create);
}

/* flags: GM__A_*. owner and tag: who will hold the block (GM__OWN_*, and a
   tensor's handle id). */
static gm_result gm__alloc_tc(gm_context* ctx, void** out, size_t size, gm_stream stream, unsigned flags, int owner,
                              uint32_t tag, gm__tcache* tc) {
    size_t rsize;
    int pl;
    uint32_t si;
    gm__block* b;
    gm_result r;
    if (GM__BAD_CTX(ctx) || !out) return GM_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (size == 0) return GM_OK;
    if (flags & GM__A_WIDE) gm__tc_contend(ctx); /* once widened, the next such request is the caches' */
    else pthread_mutex_lock(&ctx->mu);
    if (size > GM__MAX_REQUEST) {
        ctx->stats.num_ooms++;
        gm__oom_message(ctx, size, size, (flags & GM__A_SOFT) != 0);
        gm__unlock(ctx);
        return GM_ERR_OUT_OF_MEMORY;
    }
    rsize = gm__round_req(size);
    pl = gm__pool_of(rsize);
    r = gm__ss_index(ctx, stream, &si);
    if (r != GM_OK) {
        gm__unlock(ctx);
        return r;
    }
    ctx->nosync = (flags & GM__A_NOSYNC) != 0;
    ctx->grow_exact = GM__GROW_EXACT(flags);
    ctx->dev_err = GM_OK; /* this request's, from its first try on */
    /* A miss: best fit sees this thread's free blocks. A large request with
       expandable segments cannot use the cached (small) ones: it gives them
       back only when it maps pages past gm__va_keep, so that the trim may
       take their pages; giving them back at every large request made each
       step of a loop cache them again. */
    if (tc && tc->cached && !(ctx->va_gran && pl == 1)) gm__tc_give_own(ctx, tc);
    if (ctx->pending && !ctx->nosync) gm__process_pending(ctx, 0);
    b = gm__pool_find(ctx, pl, si, rsize);
    if ((flags & GM__A_FIT) && b && (b->size != rsize || b->seg->va)) b = NULL;
    if (tc && tc->cached && ctx->va_gran && pl == 1 &&
        (!b || !b->seg->va ||
         gm__va_tight(ctx, (int64_t)(gm__va_new_pages(b->seg, b->addr, rsize) * ctx->va_gran), ctx->va_gran)))
        gm__tc_give_own(ctx, tc); /* the small pool's blocks: b, in the large pool, stays as it is */
    if (b && b->seg->va) b = gm__va_take(ctx, b, rsize, 0);
    if (!b && !(flags & GM__A_FIT)) b = gm__ladder(ctx, pl, &si, rsize, size, stream, flags, &r); /* a device error stops it */
    else if (!b) r = GM_ERR_OUT_OF_MEMORY;
    ctx->nosync = ctx->grow_exact = 0;
    if (b) r = gm__alloc_take(ctx, b, rsize, size, stream, owner, tag, out);
    if (b && r == GM_OK && tc) gm__tc_adopt(ctx, tc, b, rsize, stream);
    gm__unlock(ctx);
    return r;
}

static gm_result gm__alloc(gm_context* ctx, void** out, size_t size, gm_stream stream, unsigned flags, int owner,
                           uint32_t tag) {
    return gm__alloc_tc(ctx, out, size, stream, flags, owner, tag, NULL);
}

/* Whether a request of `bytes` the device cannot hold goes to unified
   memory: desc.fallback_fn decides, else desc.fallback. */
static int gm__wants_managed(gm_context* ctx, size_t bytes) {
    gm_fallback f = ctx->desc.fallback_fn ? ctx->desc.fallback_fn(ctx, bytes, ctx->desc.fallback_user) : ctx->desc.fallback;
    return f == GM_FALLBACK_MANAGED;
}

/* >>managed ---------------------------------------------------------------
   Unified memory that gpumem hands out: gm_alloc's last rung (owner
   GM__OWN_USER) and the tiered manager's fallback (GM__OWN_TENSOR). Giving
   it back to the backend (cudaFree) waits for the whole device, so a freed
   block waits, pending, for events recorded on the streams that used it,
   then is cached for the next request of a size it fits (at most twice
   that); the cache goes back to the backend, with the lock dropped, past
   the budget in bytes when a request misses it, on gm_empty_cache and at
   shutdown, never in a free. Invariants: a
   record is in exactly one of ctx->managed (live, by address), the pending
   list or the cache; cap >= size; mcached sums the cache's caps; the
   statistics' managed_bytes sums the sizes of the live user blocks. */
#define GM__MSTREAMS 4
typedef struct gm__mblock {
    void* p;
    size_t size, cap;                 /* asked for, and what the backend gave */
    int owner;
    gm_stream streams[GM__MSTREAMS];  /* that used it (the first: where it was allocated) */
    int nstreams, overflow;           /* overflow: more than that; its free waits for the device */
    void* ev[GM__MSTREAMS];           /* pending: events still to complete */
    int nev;
    struct gm__mblock* next;
} gm__mblock;

static void gm__managed_use(gm__mblock* m, gm_stream s) {
    int i;
    for (i = 0; i < m->nstreams; i++)
        if (m->streams[i] == s) return;
    if (m->nstreams < GM__MSTREAMS) m->streams[m->nstreams++] = s;
    else m->overflow = 1;
}

/* Pending blocks whose streams are done move to the cache (with mu). */
static void gm__managed_poll(gm_context* ctx) {
    gm__mblock **pp = &ctx->mpending, *m;
    while ((m = *pp) != NULL) {
        while (m->nev) {
            gm_result r = ctx->be->event_query(ctx, m->ev[m->nev - 1]);
            if (r == GM_NOT_READY) break;
            if (r != GM_OK) ctx->be->device_sync(ctx); /* cannot tell: be sure */
            gm__ev_put(ctx, m->ev[--m->nev]);
        }
        if (m->nev) {
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        m->next = ctx->mcache;
        ctx->mcache = m;
        ctx->mcached += m->cap;
    }
}

/* Waits, with the lock dropped, for the events of the blocks pending now,
   then polls (with mu). An event recycled meanwhile is waited for at its
   newer record: longer, never too short. */
static void gm__managed_wait(gm_context* ctx) {
    gm__mblock* m;
    void** evs;
    size_t n = 0, i;
    for (m = ctx->mpending; m; m = m->next) n += (size_t)m->nev;
    if (!n) return;
    evs = (void**)gm__calloc(n * sizeof *evs);
    if (!evs) {
        pthread_mutex_unlock(&ctx->mu);
        ctx->be->device_sync(ctx);
        pthread_mutex_lock(&ctx->mu);
    } else {
        n = 0;
        for (m = ctx->mpending; m; m = m->next)
            for (i = 0; i < (size_t)m->nev; i++) evs[n++] = m->ev[i];
        pthread_mutex_unlock(&ctx->mu);
        for (i = 0; i < n; i++) (void)ctx->be->event_sync(ctx, evs[i]);
        pthread_mutex_lock(&ctx->mu);
        GPUMEM_FREE(evs);
    }
    gm__managed_poll(ctx);
}

/* The cache past `limit` bytes goes back to the backend once the lock is
   dropped (with mu). */
static void gm__managed_trim(gm_context* ctx, size_t limit) {
    gm__mblock **pp = &ctx->mcache, *m;
    size_t kept = 0;
    while ((m = *pp) != NULL) {
        if (kept + m->cap <= limit) {
            kept += m->cap;
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        ctx->mcached -= m->cap;
        gm__defer_free(ctx, m->p, m->cap, 1);
        GPUMEM_FREE(m);
    }
}

/* Unified memory for `size` bytes held by `owner`, first used on stream:
   from the cache (the smallest block that fits, at most twice the size),
   else from the backend. The caller prefetches it where it wants it. */
static gm_result gm__managed_get(gm_context* ctx, void** out, size_t size, gm_stream stream, int owner) {
    gm__mblock **pp, **best = NULL, *m;
    gm_result r;
    pthread_mutex_lock(&ctx->mu);
    gm__managed_poll(ctx);
    for (pp = &ctx->mcache; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= size && (*pp)->cap / 2 <= size && (!best || (*pp)->cap < (*best)->cap)) best = pp;
    if (best) {
        m = *best;
        *best = m->next;
        ctx->mcached -= m->cap;
    } else { /* a miss: the cache past the budget goes back first (a request may wait; a free never does) */
        gm__managed_trim(ctx, ctx->budget);
        gm__unlock(ctx);
        m = (gm__mblock*)gm__calloc(sizeof *m);
        if (!m) return GM_ERR_HOST_OUT_OF_MEMORY;
        r = ctx->be->managed_alloc(ctx, &m->p, size);
        if (r != GM_OK) {
            GPUMEM_FREE(m);
            return r;
        }
        m->cap = size;
        pthread_mutex_lock(&ctx->mu);
    }
    m->size = size;
    m->owner = owner;
    m->nstreams = m->overflow = m->nev = 0;
    m->next = NULL;
    gm__managed_use(m, stream);
    if (!gm__map_put(&ctx->managed, (uintptr_t)m->p, m)) {
        m->next = ctx->mcache; /* no room to track it: back to the cache */
        ctx->mcache = m;
        ctx->mcached += m->cap;
        gm__unlock(ctx);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    if (owner == GM__OWN_USER) {
        ctx->stats.num_managed_fallbacks++;
        ctx->stats.managed_bytes += (int64_t)size;
    }
    pthread_mutex_unlock(&ctx->mu);
    *out = m->p;
    return GM_OK;
}

/* Frees a live block of `owner` (with mu): pending until the streams that
   used it are past this point. GM_ERR_FOREIGN_POINTER (without a log line)
   when p is no such block. */
static gm_result gm__managed_put(gm_context* ctx, void* p, int owner) {
    gm__mblock* m = (gm__mblock*)gm__map_get(&ctx->managed, (uintptr_t)p);
    int i;
    if (!m || m->owner != owner) return GM_ERR_FOREIGN_POINTER;
    gm__map_del(&ctx->managed, (uintptr_t)p);
    if (owner == GM__OWN_USER) ctx->stats.managed_bytes -= (int64_t)m->size;
    for (i = 0; i < m->nstreams && !m->overflow; i++) {
        uint32_t si;
        void* ev;
        if (gm__ss_index(ctx, m->streams[i], &si) != GM_OK) continue; /* gone: synchronized when it went */
        if (gm__ev_get(ctx, &ev) != GM_OK) break;
        if (ctx->be->event_record(ctx, ev, m->streams[i]) != GM_OK) {
            gm__ev_put(ctx, ev);
            break;
        }
        m->ev[m->nev++] = ev;
    }
    if (m->overflow || i < m->nstreams) { /* streams beyond the record, or no event: the device, once */
        while (m->nev) gm__ev_put(ctx, m->ev[--m->nev]);
        gm__unlock(ctx);
        ctx->be->device_sync(ctx);
        pthread_mutex_lock(&ctx->mu);
    }
    m->next = ctx->mpending;
    ctx->mpending = m;
    gm__managed_poll(ctx); /* no trim here: cudaFree would make this free wait for the whole device */
    return GM_OK;
}

/* A tensor's device block passes to another tensor (the tier's swap): its
   tag and requested size become the new holder's; the block's usable size,
   or 0 when ptr is not a block the tier holds. */
static size_t gm__retag(gm_context* ctx, void* ptr, uint32_t tag, size_t requested) {
    gm__block* b;
    size_t n = 0;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_fold(ctx);
    b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)ptr);
    if (b && b->owner == GM__OWN_TENSOR) {
        n = b->size;
        if (tag && requested <= b->size) {
            int ps = gm__pool_stat((int)(b->seg->arena - ctx->pool));
            gm_stream st = ctx->ss[b->seg->key - 1].stream;
            if (ctx->trace) gm__trace_row(ctx, "free", b->addr, b->requested, st);
            gm__stat_add(ctx->stats.requested_bytes, ps, (int64_t)requested - (int64_t)b->requested);
            b->requested = requested;
            b->tag = tag;
            if (ctx->trace) gm__trace_row(ctx, "allocate", b->addr, b->requested, st);
        }
    }
    pthread_mutex_unlock(&ctx->mu);
    return n;
}

/* The last rung for a plain allocation: unified memory, prefetched to the
   device on `stream`, kept in ctx->managed so gm_free knows it. */
static gm_result gm__alloc_managed(gm_context* ctx, void** out, size_t size, gm_stream stream) {
    void* p = NULL;
    gm_result r;
    if (!gm__wants_managed(ctx, size)) {
        if (ctx->desc.fallback_fn)
            gm__log(ctx, GM_LOG_ERROR, "out of memory: %zu bytes, and the fallback declined unified memory", size);
        return GM_ERR_OUT_OF_MEMORY;
    }
    r = gm__managed_get(ctx, &p, size, stream, GM__OWN_USER);
    if (r != GM_OK) {
        gm__log(ctx, GM_LOG_ERROR, "out of memory: unified memory cannot serve %zu bytes either (%s)", size,
                gm_result_string(r));
        return r == GM_ERR_HOST_OUT_OF_MEMORY ? r : GM_ERR_OUT_OF_MEMORY;
    }
    (void)ctx->be->managed_prefetch(ctx, p, size, 1, stream);
    gm__log(ctx, GM_LOG_INFO, "gm_alloc: %zu bytes served by unified memory (the device is full)", size);
    *out = p;
    return GM_OK;
}

/* Whether a request is the thread caches' (the gate open: caches on, no
   plan, no pending frees; tc_lim says it with the size in one test). */
static GM__HOT int gm__tc_serves(const gm_context* ctx, void** out, size_t size) {
    return out && size - 1 < GM__LD(ctx->tc_lim);
}

/* The thread's cache serves a request at once, without the lock (pending
   frees are retired under it first): 1 when it did. Inlined into gm_alloc
   and gm_alloc_ex, whose other paths are out of line, so that this one
   saves few registers. */
static GM__HOT int gm__alloc_fast(gm_context* ctx, void** out, size_t size, gm_stream stream) {
#if GM__TC
    gm__tcache* tc = gm__tls_tc; /* the cache of the context this thread used last (another's: the slow path) */
    if (!ctx || gm__tls_serial != ctx->serial || !gm__tc_serves(ctx, out, size)) return 0; /* set: tc too */
    return gm__tc_alloc(ctx, tc, out, size, stream);
#else
    (void)ctx, (void)out, (void)size, (void)stream;
    return 0;
#endif
}

static GM__NOINLINE gm_result gm__alloc_slow(gm_context* ctx, void** out, size_t size, gm_stream stream, unsigned flags) {
    gm_result r;
    gm__tcache* tc = NULL;
    unsigned wide = 0;
    void* plan;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (flags & ~(unsigned)GM_ALLOC_NO_SYNC)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_alloc_ex: unknown flags %#x",
                          flags & ~(unsigned)GM_ALLOC_NO_SYNC);
    if (!out) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_alloc: no pointer to write");
    plan = __atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE);
    if (out && size && plan && gm__plan_alloc(ctx, out, size, stream)) return GM_OK;
    if (gm__tc_serves(ctx, out, size)) { /* the cache (the fast path tries only the last context's), then
                                                 the lock adopts the block */
        tc = gm__tc_get(ctx, 1);
        if (tc && gm__tc_alloc(ctx, tc, out, size, stream)) return GM_OK;
    } else if (ctx->tc_on && out && size && !plan) {
        if (ctx->va_gran || GM__LD(ctx->tc_max) > GM__TC_MAX)
            tc = gm__tc_get(ctx, 0); /* a larger request gives this thread's cached blocks back first (expandable:
                                        their pages; large blocks cached: best fit sees them) */
        else if (size > GM__TC_MAX && size <= ctx->tc_wide)
            wide = GM__A_WIDE; /* two threads waiting on each other for blocks like it widen the caches */
    }
    r = gm__alloc_tc(ctx, out, size, stream, (flags & GM_ALLOC_NO_SYNC ? GM__A_NOSYNC : 0) | wide, GM__OWN_USER, 0, tc);
    if (r == GM_ERR_OUT_OF_MEMORY && !(flags & GM_ALLOC_NO_SYNC)) r = gm__alloc_managed(ctx, out, size, stream);
    if (r == GM_OK && *out && __atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE)) gm__plan_note_alloc(ctx, *out, size, stream);
    return r;
}

GPUMEM_API gm_result gm_alloc_ex(gm_context* ctx, void** out, size_t size, gm_stream stream, unsigned flags) {
    if (GM__LIKELY(!(flags & ~(unsigned)GM_ALLOC_NO_SYNC)) && gm__alloc_fast(ctx, out, size, stream)) return GM_OK;
    return gm__alloc_slow(ctx, out, size, stream, flags);
}

GPUMEM_API gm_result gm_alloc(gm_context* ctx, void** out, size_t size, gm_stream stream) {
    if (gm__alloc_fast(ctx, out, size, stream)) return GM_OK;
    return gm__alloc_slow(ctx, out, size, stream, 0);
}

/* Why ptr is not a block `owner` may free, with mu held: another owner's
   block (a tensor's, the plan's region), a block freed already (its start
   carries a freed mark), an address inside a block or never handed out,
   raw memory, or nothing of this context. */
static gm_result gm__diagnose(gm_context* ctx, const void* ptr, const char* what) {
    uintptr_t p = (uintptr_t)ptr;
    int pl;
    for (pl = 0; pl < 2; pl++) {
        gm__seg* s = gm__arena_seg_of(&ctx->pool[pl], p);
        gm__block* b;
        if (!s) continue;
        for (b = s->first; b && !(p >= b->addr && p - b->addr < b->size); b = b->next) {}
        if (b && b->state == GM__USED && b->addr == p && b->owner == GM__OWN_TENSOR)
            return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER,
                              "%s: %p is the device memory of tensor %#x: the tiered manager owns it "
                              "(release or destroy the tensor instead)", what, ptr, b->tag);
        if (b && b->state == GM__USED && b->addr == p && b->owner == GM__OWN_PLAN)
            return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p is the planned mode's region, which it owns", what, ptr);
        if (gm__was_freed(s, p) ||
            (b && b->state == GM__USED && b->addr == p && (GM__LD(b->tcw) & 3) == GM__TC_FREE))
            return GM__MISUSE(ctx, GM_ERR_DOUBLE_FREE, "%s: %p was already freed", what, ptr);
        if (b && b->state == GM__USED)
            return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p points inside a block, not at its start", what, ptr);
        return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p was never handed out (it lies in cached free memory)",
                          what, ptr);
    }
    if (gm__map_get(&ctx->raw, p))
        return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p is raw memory from gm_raw_alloc (free it with gm_raw_free)",
                          what, ptr);
    return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p was not allocated by this context", what, ptr);
}

/* gm_free of a block `owner` holds (the tiered manager and the planned
   mode free theirs here, bypassing the plan's own lookup). */
static gm_result gm__free(gm_context* ctx, void* ptr, int owner) {
    gm__block* b;
    int pl, ps;
    size_t slot;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_fold(ctx);
    slot = gm__map_slot(&ctx->map, (uintptr_t)ptr);
    b = slot == (size_t)-1 ? NULL : (gm__block*)ctx->map.e[slot].v;
    if (!b || b->owner != owner || !gm__tc_leave_block(ctx, b)) { /* unified memory of the owner's, or a mistake */
        gm_result r = b ? GM_ERR_FOREIGN_POINTER : gm__managed_put(ctx, ptr, owner);
        if (r != GM_OK) r = gm__diagnose(ctx, ptr, "gm_free");
        gm__unlock(ctx);
        return r;
    }
    gm__map_del_at(&ctx->map, slot);
    gm__mark_freed(b->seg, b->addr);
    pl = (int)(b->seg->arena - ctx->pool);
    ps = gm__pool_stat(pl);
    if (ctx->trace) gm__trace_row(ctx, "free", b->addr, b->requested, ctx->ss[b->seg->key - 1].stream);
    gm__stat_add(ctx->stats.allocation, ps, -1);
    gm__stat_add(ctx->stats.allocated_bytes, ps, -(int64_t)b->size);
    gm__stat_add(ctx->stats.requested_bytes, ps, -(int64_t)b->requested);
    if (b->nuses) {
        uint32_t i;
        b->events = (void**)GPUMEM_MALLOC(b->nuses * sizeof(void*));
        for (i = 0; i < b->nuses && b->events; i++) {
            void* ev;
            gm__sstate* s = &ctx->ss[b->uses[i]];
            if (s->dead) continue;
            if (gm__ev_get(ctx, &ev) != GM_OK) break;
            if (ctx->be->event_record(ctx, ev, s->stream) != GM_OK) {
                gm__ev_put(ctx, ev);
                break;
            }
            b->events[b->nevents++] = ev;
        }
        if (i < b->nuses) { /* could not record them all: wait for the device instead */
            gm__log(ctx, GM_LOG_WARN, "gm_free: cannot record stream events; synchronizing the device");
            ctx->be->device_sync(ctx);
            while (b->nevents) gm__ev_put(ctx, b->events[--b->nevents]);
        }
    }
    if (b->nevents) {
        b->state = GM__PENDING;
        b->l = NULL;
        b->r = ctx->pending;
        if (ctx->pending) ctx->pending->l = b;
        ctx->pending = b;
        if (!ctx->npending++) gm__tc_gate(ctx, GM__GATE_PENDING, 1); /* allocations retire it under the lock first */
    } else {
        gm__free_block(ctx, b);
    }
    gm__unlock(ctx);
    return GM_OK;
}

/* tc: the thread's cache gm_free tried, and k what gm__tc_free said (2:
   the block's bin or the cache is full); NULL: none was tried (the fast
   path knows only the context this thread used last), and it is tried
   here. */
static GM__NOINLINE gm_result gm__free_slow(gm_context* ctx, void* ptr, gm__tcache* tc, int k) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!ptr) return GM_OK;
    if (__atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE)) {
        gm_result pr;
        if (gm__plan_free(ctx, ptr, &pr)) return pr;
        return gm__free(ctx, ptr, GM__OWN_USER);
    }
    if (!tc && !(GM__LD(ctx->tc_gate) & GM__GATE_SHUT) && (tc = gm__tc_get(ctx, 0)) != NULL &&
        (k = gm__tc_free(ctx, tc, ptr)) == 1)
        return GM_OK;
    if (k == 2) { /* some go back in one batch, and the cache takes it */
        pthread_mutex_lock(&ctx->mu);
        gm__tc_make_room(ctx, tc, ptr);
        gm__unlock(ctx);
        if (gm__tc_free(ctx, tc, ptr) == 1) return GM_OK;
    }
    return gm__free(ctx, ptr, GM__OWN_USER);
}

/* The thread's cache takes a block it handed out at once, without the
   lock; everything else (and a full bin) goes out of line. */
GPUMEM_API gm_result gm_free(gm_context* ctx, void* ptr) {
#if GM__TC
    gm__tcache* tc = gm__tls_tc;
    if (GM__LIKELY(ctx && ptr && gm__tls_serial == ctx->serial && /* set: tc too */
                   !(GM__LD(ctx->tc_gate) & ~(uint32_t)GM__GATE_PENDING))) {
        int k = gm__tc_free(ctx, tc, ptr);
        return k == 1 ? GM_OK : gm__free_slow(ctx, ptr, tc, k);
    }
#endif
    return gm__free_slow(ctx, ptr, NULL, 0);
}

/* gm_record_stream on a block `owner` holds. */
static gm_result gm__record_stream(gm_context* ctx, void* ptr, gm_stream stream, int owner) {
    gm__block* b;
    uint32_t si, i;
    gm_result r = GM_OK;
    pthread_mutex_lock(&ctx->mu);
    b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)ptr);
    if (!b) { /* unified memory: its free waits for this stream too */
        gm__mblock* m = (gm__mblock*)gm__map_get(&ctx->managed, (uintptr_t)ptr);
        if (m && m->owner == owner && (r = gm__ss_index(ctx, stream, &si)) == GM_OK) gm__managed_use(m, stream);
        if (m && m->owner == owner) {
            pthread_mutex_unlock(&ctx->mu);
            return r;
        }
    }
    if (!b || b->owner != owner || (GM__LD(b->tcw) & 3) == GM__TC_FREE) r = gm__diagnose(ctx, ptr, "gm_record_stream");
    else r = gm__ss_index(ctx, stream, &si);
    if (r == GM_OK && (uintptr_t)si + 1 != b->seg->key) {
        for (i = 0; i < b->nuses && b->uses[i] != si; i++) {}
        if (i == b->nuses) {
            if (!gm__tc_leave_block(ctx, b)) { /* its owner freed it into a bin meanwhile: freed already */
                pthread_mutex_unlock(&ctx->mu);
                return GM__MISUSE(ctx, GM_ERR_DOUBLE_FREE, "gm_record_stream: %p was freed as it was recorded", ptr);
            }
            /* its free waits for the stream: no thread cache keeps it */
            if (b->nuses == b->capuses) {
                uint32_t cap = b->capuses ? b->capuses * 2 : 2;
                uint32_t* n = (uint32_t*)gm__grow_array(b->uses, b->capuses * sizeof(uint32_t), cap * sizeof(uint32_t));
                if (!n) r = GM_ERR_HOST_OUT_OF_MEMORY;
                else {
                    b->uses = n;
                    b->capuses = cap;
                }
            }
            if (r == GM_OK) b->uses[b->nuses++] = si;
        }
    }
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

GPUMEM_API gm_result gm_record_stream(gm_context* ctx, void* ptr, gm_stream stream) {
    gm_result r;
    if (GM__BAD_CTX(ctx) || !ptr) return GM_ERR_INVALID_ARGUMENT;
    if (__atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE) && gm__plan_owns(ctx, ptr, NULL, &stream, &r)) return r;
    return gm__record_stream(ctx, ptr, stream, GM__OWN_USER);
}

GPUMEM_API gm_result gm_empty_cache(gm_context* ctx) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_steal(ctx, 0);
    gm__tc_fold_now(ctx);
    gm__wait_all(ctx);
    gm__release(ctx, 1, 0);
    gm__managed_wait(ctx); /* freed unified memory goes too, once its streams are done */
    gm__managed_trim(ctx, 0);
    gm__unlock(ctx);
    return GM_OK;
}

/* For the tiered manager, when a request of `size` found no block at once:
   if the budget's headroom and the cached segments that are entirely free
   together hold it, those go back to the device (oldest first, waiting for
   their last use when `wait`) so that one segment can be made for it.
   Returns whether the budget now has room for it. */
static int gm__regrow_room(gm_context* ctx, size_t size, int wait) {
    size_t rsize = gm__round_req(size), whole = 0;
    int64_t resv;
    int pl, ok;
    gm__seg* s;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_steal(ctx, 0);
    resv = ctx->stats.reserved_bytes[GM_STAT_ALL].current;
    for (pl = 0; pl < 2 && !ctx->va_gran; pl++)
        for (s = ctx->pool[pl].nwhole ? ctx->pool[pl].segs : NULL; s; s = s->next)
            if (gm__seg_whole_free(s)) whole += s->size;
    ok = (uint64_t)resv + rsize > (uint64_t)ctx->budget && (uint64_t)resv + rsize <= (uint64_t)ctx->budget + whole;
    if (ok) {
        gm__release(ctx, wait, (int64_t)(ctx->budget - rsize));
        ok = (uint64_t)ctx->stats.reserved_bytes[GM_STAT_ALL].current + rsize <= (uint64_t)ctx->budget;
    }
    gm__unlock(ctx); /* the device has them back before the caller asks again */
    return ok;
}

GPUMEM_API gm_result gm_set_budget(gm_context* ctx, size_t bytes) {
    int64_t resv;
    gm__tcache* tc;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!bytes) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_set_budget: a budget of 0 bytes");
    pthread_mutex_lock(&ctx->mu);
    ctx->budget = bytes < ctx->total ? bytes : ctx->total;
    ctx->desc.device_budget = ctx->budget;
    ctx->desc.device_budget_fraction = 0;
    gm__tc_steal(ctx, 1);
    for (tc = ctx->tcs; tc; tc = tc->next) tc->cap = gm__tc_cap(ctx);
    gm__tc_thaw(ctx);
    gm__release(ctx, 0, (int64_t)ctx->budget);
    resv = ctx->stats.reserved_bytes[GM_STAT_ALL].current;
    ctx->budget_slack = (uint64_t)resv > (uint64_t)ctx->budget ? (size_t)resv - ctx->budget : 0; /* reserved only falls */
    gm__log(ctx, GM_LOG_INFO, "budget: %zu bytes (%lld reserved)", ctx->budget, (long long)resv);
    gm__unlock(ctx);
    return GM_OK;
}

GPUMEM_API gm_result gm_block_size(gm_context* ctx, const void* ptr, size_t* size) {
    gm__block* b;
    gm_result r = GM_OK;
    if (GM__BAD_CTX(ctx) || !size) return GM_ERR_INVALID_ARGUMENT;
    if (__atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE) && gm__plan_owns(ctx, ptr, size, NULL, &r)) return r;
    pthread_mutex_lock(&ctx->mu);
    b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)ptr);
    if (b && b->owner == GM__OWN_USER && (GM__LD(b->tcw) & 3) != GM__TC_FREE) *size = b->size;
    else if (!b && gm__map_get(&ctx->managed, (uintptr_t)ptr) &&
             ((gm__mblock*)gm__map_get(&ctx->managed, (uintptr_t)ptr))->owner == GM__OWN_USER)
        *size = ((gm__mblock*)gm__map_get(&ctx->managed, (uintptr_t)ptr))->size;
    else r = gm__diagnose(ctx, ptr, "gm_block_size");
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

/* >>summary ---------------------------------------------------------------
   Statistics out: a copy, resets, and the text table. */
GPUMEM_API gm_result gm_get_stats(gm_context* ctx, gm_stats* out) {
    gm__tcache* tc;
    if (GM__BAD_CTX(ctx) || !out) return GM_ERR_INVALID_ARGUMENT;
    tc = ctx->tc_on ? gm__tc_get(ctx, 0) : NULL;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_fold_now(ctx);
    if (tc && tc->cached) gm__tc_give_own(ctx, tc); /* this thread's free blocks count as the pools' */
    *out = ctx->stats;
    pthread_mutex_unlock(&ctx->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_reset_peak_stats(gm_context* ctx) {
    int i;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_fold_now(ctx); /* and the caches' high-water marks start again */
    for (i = 0; i < GM_STAT_POOLS; i++) {
#define GM__RESET_PEAK(name, is_bytes) ctx->stats.name[i].peak = ctx->stats.name[i].current;
        GM_STAT_LIST(GM__RESET_PEAK)
#undef GM__RESET_PEAK
    }
    pthread_mutex_unlock(&ctx->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_reset_accumulated_stats(gm_context* ctx) {
    int i;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_fold_now(ctx);
    for (i = 0; i < GM_STAT_POOLS; i++) {
#define GM__RESET_ACC(name, is_bytes) ctx->stats.name[i].allocated = ctx->stats.name[i].freed = 0;
        GM_STAT_LIST(GM__RESET_ACC)
#undef GM__RESET_ACC
    }
#define GM__RESET_CTR(name) ctx->stats.name = 0;
    GM_COUNTER_LIST(GM__RESET_CTR)
#undef GM__RESET_CTR
    pthread_mutex_unlock(&ctx->mu);
    return GM_OK;
}

typedef struct gm__buf {
    char* p;
    size_t cap, len;
} gm__buf;

GM__PRINTF(2, 3) static void gm__bprintf(gm__buf* b, const char* fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(b->len < b->cap ? b->p + b->len : NULL, b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static void gm__summary_cell(gm__buf* b, int64_t v, int is_bytes) {
    char tmp[32];
    if (is_bytes) gm__fmt_bytes(tmp, sizeof tmp, (double)v);
    else snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    gm__bprintf(b, " %12s |", tmp);
}

static void gm__summary_row(gm__buf* b, const char* label, const gm_stat* s, int is_bytes) {
    static const char* pools[] = {"", "  from small pool", "  from large pool"};
    int i;
    for (i = 0; i < GM_STAT_POOLS; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s%s", i == 0 ? label : "", pools[i]);
        gm__bprintf(b, "| %-26s|", name);
        gm__summary_cell(b, s[i].current, is_bytes);
        gm__summary_cell(b, s[i].peak, is_bytes);
        gm__summary_cell(b, s[i].allocated, is_bytes);
        gm__summary_cell(b, s[i].freed, is_bytes);
        gm__bprintf(b, "\n");
    }
}

GPUMEM_API size_t gm_summary(gm_context* ctx, char* buf, size_t cap) {
    static const char* rule =
        "|---------------------------------------------------------------------------------------|\n";
    char title[128];
    gm_stats st;
    gm__buf b;
    char t1[32];
    if (!buf) cap = 0; /* sizing only */
    b.p = buf;
    b.cap = cap;
    b.len = 0;
    if (cap) buf[0] = 0;
    if (gm_get_stats(ctx, &st) != GM_OK) return 0;
    snprintf(title, sizeof title, "gpumem summary: backend %s, device %d, budget %s, caching %s", ctx->be->name,
             ctx->desc.device, gm__fmt_bytes(t1, sizeof t1, (double)ctx->budget),
             ctx->desc.caching == GM_TOGGLE_OFF ? "off" : "on");
    gm__bprintf(&b, "%s| %-85s |\n%s", rule, title, rule);
    gm__bprintf(&b, "| %-26s| %12s | %12s | %12s | %12s |\n%s", "Metric", "Cur Usage", "Peak Usage", "Tot Alloc",
                "Tot Freed", rule);
    gm__summary_row(&b, "Allocated memory", st.allocated_bytes, 1);
    gm__summary_row(&b, "Active memory", st.active_bytes, 1);
    gm__summary_row(&b, "Requested memory", st.requested_bytes, 1);
    gm__summary_row(&b, "Reserved memory", st.reserved_bytes, 1);
    gm__summary_row(&b, "Non-releasable memory", st.inactive_split_bytes, 1);
    gm__bprintf(&b, "%s", rule);
    gm__summary_row(&b, "Allocations", st.allocation, 0);
    gm__summary_row(&b, "Active allocs", st.active, 0);
    gm__summary_row(&b, "Reserved segments", st.segment, 0);
    gm__summary_row(&b, "Non-releasable allocs", st.inactive_split, 0);
    gm__bprintf(&b, "%s", rule);
#define GM__SUMMARY_CTR(name) gm__bprintf(&b, "| %-26s| %12lld | %42s |\n", #name, (long long)st.name, "");
    GM_COUNTER_LIST(GM__SUMMARY_CTR)
#undef GM__SUMMARY_CTR
    if (st.managed_bytes) gm__bprintf(&b, "| %-26s| %12lld | %42s |\n", "managed_bytes", (long long)st.managed_bytes, "");
    gm__bprintf(&b, "%s", rule);
    if (cap && b.len >= cap) buf[cap - 1] = 0;
    return b.len;
}

GPUMEM_API size_t gm_snapshot(gm_context* ctx, char* buf, size_t cap) {
    static const char* states[] = {"free", "allocated", "pending"};
    gm__buf b;
    int pl, first_seg = 1;
    if (!buf) cap = 0; /* sizing only */
    b.p = buf;
    b.cap = cap;
    b.len = 0;
    if (cap) buf[0] = 0;
    if (GM__BAD_CTX(ctx)) return 0;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_steal(ctx, 1); /* the thread caches' free blocks show as free */
    gm__tc_fold_now(ctx);
    gm__bprintf(&b, "{\"backend\":\"%s\",\"device\":%d,\"budget\":%zu,\"reserved\":%lld,\"allocated\":%lld,\"segments\":[",
                ctx->be->name, ctx->desc.device, ctx->budget, (long long)ctx->stats.reserved_bytes[GM_STAT_ALL].current,
                (long long)ctx->stats.allocated_bytes[GM_STAT_ALL].current);
    for (pl = 0; pl < 2; pl++) {
        const gm__seg* s;
        for (s = ctx->pool[pl].segs; s; s = s->next) {
            const gm__block* k;
            int first = 1;
            size_t limit = s->size; /* expandable: up to the last mapped page */
            if (s->va) {
                limit = gm__vseg_end(s->va) * s->va->gran;
                if (!limit) continue;
            }
            gm__bprintf(&b, "%s\n{\"address\":\"0x%lx\",\"size\":%zu,\"mapped\":%zu,\"pool\":\"%s\",\"expandable\":%s,"
                        "\"stream\":\"0x%lx\",%s",
                        first_seg ? "" : ",", (unsigned long)s->base, limit, s->mapped, pl ? "large" : "small",
                        s->va ? "true" : "false", (unsigned long)(uintptr_t)ctx->ss[s->key - 1].stream,
                        s->va ? "" : "\"blocks\":[");
            first_seg = 0;
            if (s->va) { /* mapped page runs, [offset, length] */
                size_t p = 0, e;
                int fr = 1;
                gm__bprintf(&b, "\"pages\":[");
                while (p < limit / s->va->gran) {
                    if (!gm__vp_mapped(s->va, p)) {
                        p++;
                        continue;
                    }
                    for (e = p; e < limit / s->va->gran && gm__vp_mapped(s->va, e); e++) {}
                    gm__bprintf(&b, "%s[%zu,%zu]", fr ? "" : ",", p * s->va->gran, (e - p) * s->va->gran);
                    fr = 0;
                    p = e;
                }
                gm__bprintf(&b, "],\"blocks\":[");
            }
            for (k = s->first; k && k->addr - s->base < limit; k = k->next) {
                size_t sz = k->addr - s->base + k->size > limit ? limit - (k->addr - s->base) : k->size;
                gm__bprintf(&b, "%s{\"offset\":%lu,\"size\":%zu,\"requested\":%zu,\"state\":\"%s\"}", first ? "" : ",",
                            (unsigned long)(k->addr - s->base), sz, k->requested, states[k->state]);
                first = 0;
            }
            gm__bprintf(&b, "]}");
        }
    }
    gm__bprintf(&b, "\n]}\n");
    gm__tc_thaw(ctx);
    pthread_mutex_unlock(&ctx->mu);
    if (cap && b.len >= cap) buf[cap - 1] = 0;
    return b.len;
}

/* Defined with the tiered manager, below. */
static void gm__tier_check(gm_context* ctx, gm__ck* ck);
static void gm__tier_shutdown(gm_context* ctx);
static gm_result gm__disk_open(gm_context* ctx);
static void gm__disk_close(gm_context* ctx);
static void gm__disk_inject(gm_context* ctx, int k, uint64_t nth);

/* >>check -----------------------------------------------------------------
   gm_check: the arenas' own invariants, then the allocator's: the map holds
   exactly the USED blocks, the pending list exactly the PENDING ones, every
   segment key names a stream state, and the statistics equal a walk; then
   the planned mode's, unified memory's and the tiered manager's. Each
   broken invariant is one line of the report (gm__broken), naming the
   structure: "device", "device small pool", "device large pool", "unified
   memory", "plan", "tier", "host pool", "spill file". */
static const char* const gm__arena_names[2] = {"device small pool", "device large pool"};

static void gm__check_device(gm_context* ctx, gm__ck* ck) {
    int pl;
    int64_t used_n[2] = {0, 0}, used_b[2] = {0, 0}, pend_n[2] = {0, 0}, pend_b[2] = {0, 0}, req_b[2] = {0, 0};
    size_t i, npend = 0, nplan = 0;
    gm__block* b;
    for (pl = 0; pl < 2; pl++) {
        const gm__seg* s;
        const char* pn = gm__pool_names[gm__pool_stat(pl)];
        const gm_stat* st;
        size_t si = 0;
        gm__arena_check(ck, &ctx->pool[pl], gm__arena_names[pl], &used_n[pl], &used_b[pl], &pend_n[pl], &pend_b[pl],
                        &req_b[pl]);
        for (s = ctx->pool[pl].segs; s; s = s->next, si++)
            if (s->key < 1 || s->key > ctx->nss)
                gm__broken(ck, "%s: segment %zu (%#lx) has owner key %lu, which names none of the %u streams",
                           gm__arena_names[pl], si, (unsigned long)s->base, (unsigned long)s->key, ctx->nss);
        st = &ctx->stats.allocation[gm__pool_stat(pl)];
        if (st->current != used_n[pl])
            gm__broken(ck, "device: stat allocation[%s] is %lld, %lld blocks are in use", pn, (long long)st->current,
                       (long long)used_n[pl]);
        st = &ctx->stats.allocated_bytes[gm__pool_stat(pl)];
        if (st->current != used_b[pl])
            gm__broken(ck, "device: stat allocated_bytes[%s] is %lld, blocks sum to %lld", pn, (long long)st->current,
                       (long long)used_b[pl]);
        st = &ctx->stats.requested_bytes[gm__pool_stat(pl)];
        if (st->current != req_b[pl])
            gm__broken(ck, "device: stat requested_bytes[%s] is %lld, requests sum to %lld", pn,
                       (long long)st->current, (long long)req_b[pl]);
        st = &ctx->stats.active[gm__pool_stat(pl)];
        if (st->current != used_n[pl] + pend_n[pl])
            gm__broken(ck, "device: stat active[%s] is %lld, %lld blocks are in use or pending", pn,
                       (long long)st->current, (long long)(used_n[pl] + pend_n[pl]));
        st = &ctx->stats.active_bytes[gm__pool_stat(pl)];
        if (st->current != used_b[pl] + pend_b[pl])
            gm__broken(ck, "device: stat active_bytes[%s] is %lld, blocks in use or pending sum to %lld", pn,
                       (long long)st->current, (long long)(used_b[pl] + pend_b[pl]));
    }
#define GM__CHECK_SUM(name, is_bytes)                                                                                \
    if (ctx->stats.name[0].current != ctx->stats.name[1].current + ctx->stats.name[2].current)                     \
        gm__broken(ck, "device: stat %s[all] is %lld, small + large is %lld", #name,                                 \
                   (long long)ctx->stats.name[0].current,                                                            \
                   (long long)(ctx->stats.name[1].current + ctx->stats.name[2].current));
    GM_STAT_LIST(GM__CHECK_SUM)
#undef GM__CHECK_SUM
    gm__plan_check(ctx, ck);
    { /* unified memory: the live blocks counted, none also a block; the cache adds up */
        int64_t m = 0;
        size_t cached = 0;
        const gm__mblock* mb;
        for (i = 0; i < ctx->managed.cap; i++) {
            uintptr_t k = ctx->managed.e[i].k;
            if (!k) continue;
            mb = (const gm__mblock*)ctx->managed.e[i].v;
            if (mb->owner == GM__OWN_USER) m += (int64_t)mb->size;
            if (gm__map_get(&ctx->map, k))
                gm__broken(ck, "unified memory: block %#lx (%zu bytes) is also a block of the device pools",
                           (unsigned long)k, mb->size);
            else if (mb->p != (void*)k)
                gm__broken(ck, "unified memory: the record of block %#lx says it is at %p", (unsigned long)k, mb->p);
            else if (mb->cap < mb->size)
                gm__broken(ck, "unified memory: block %#lx holds %zu bytes in %zu", (unsigned long)k, mb->size,
                           mb->cap);
            else if (mb->owner != GM__OWN_USER && mb->owner != GM__OWN_TENSOR)
                gm__broken(ck, "unified memory: block %#lx has owner %d", (unsigned long)k, mb->owner);
        }
        for (mb = ctx->mcache; mb; mb = mb->next) cached += mb->cap;
        for (mb = ctx->mpending; mb; mb = mb->next)
            if (gm__map_get(&ctx->managed, (uintptr_t)mb->p))
                gm__broken(ck, "unified memory: block %p waits for its streams to be freed, and is live", mb->p);
        if (m != ctx->stats.managed_bytes)
            gm__broken(ck, "unified memory: stat managed_bytes is %lld, the user's blocks sum to %lld",
                       (long long)ctx->stats.managed_bytes, (long long)m);
        if (cached != ctx->mcached)
            gm__broken(ck, "unified memory: the cache holds %zu bytes, %zu counted", cached, ctx->mcached);
    }
    if ((int64_t)ctx->map.count != used_n[0] + used_n[1])
        gm__broken(ck, "device: %zu pointers mapped, %lld blocks in use", ctx->map.count,
                   (long long)(used_n[0] + used_n[1]));
    for (i = 0; i < ctx->map.cap; i++) {
        uintptr_t k = ctx->map.e[i].k;
        if (!k) continue;
        b = (gm__block*)ctx->map.e[i].v;
        if (b->addr != k || b->state != GM__USED || (b->seg->arena != &ctx->pool[0] && b->seg->arena != &ctx->pool[1]) ||
            (gm__block*)gm__map_get(&ctx->map, k) != b) {
            const char* what = b->addr != k                      ? "its block is elsewhere"
                               : b->state != GM__USED            ? gm__state_name(b->state)
                               : gm__map_get(&ctx->map, k) != b ? "a lookup finds another block"
                                                                 : "in no device pool";
            gm__broken(ck, "device: map entry %#lx (%zu bytes) is not a block in use: %s", (unsigned long)k, b->size,
                       what);
            continue;
        }
        if (b->owner == GM__OWN_PLAN) nplan++;
        if (b->owner == GM__OWN_TENSOR && !ctx->tier)
            gm__broken(ck, "device: block %#lx (%zu bytes) is held for tensor %#x, and there is no tiered manager",
                       (unsigned long)b->addr, b->size, b->tag);
        else if (b->owner > GM__OWN_PLAN || (b->owner == GM__OWN_TENSOR) != (b->tag != 0) ||
                 (b->owner == GM__OWN_PLAN && gm__plan_region(ctx) != (void*)b->addr))
            gm__broken(ck, "device: block %#lx (%zu bytes) has owner %d (tag %#x), which does not hold it",
                       (unsigned long)b->addr, b->size, b->owner, b->tag);
    }
    if (nplan != (gm__plan_region(ctx) ? 1u : 0u))
        gm__broken(ck, "device: %zu blocks held by the planned mode, which has %s region", nplan,
                   gm__plan_region(ctx) ? "one" : "no");
    for (i = 0; i < ctx->raw.cap; i++) { /* raw memory is no block of the cache */
        uintptr_t k = ctx->raw.e[i].k;
        if (!k) continue;
        if (gm__arena_seg_of(&ctx->pool[0], k) || gm__arena_seg_of(&ctx->pool[1], k) || gm__map_get(&ctx->managed, k))
            gm__broken(ck, "device: raw memory at %#lx is also memory of the allocator", (unsigned long)k);
        else if (!ctx->raw.e[i].v)
            gm__broken(ck, "device: raw memory at %#lx has no size", (unsigned long)k);
    }
    for (b = ctx->pending; b && npend <= ctx->npending + (size_t)(pend_n[0] + pend_n[1]); b = b->r) {
        npend++;
        if (b->state != GM__PENDING || !b->nevents || (b->r && b->r->l != b))
            gm__broken(ck, "device: pending list entry %#lx (%zu bytes) %s", (unsigned long)b->addr, b->size,
                       b->state != GM__PENDING ? "is not pending"
                       : !b->nevents           ? "waits for no event"
                                               : "has a broken link to the next");
    }
    if ((int64_t)npend != pend_n[0] + pend_n[1] || npend != ctx->npending)
        gm__broken(ck, "device: the pending list holds %zu blocks, %zu counted, the pools have %lld pending", npend,
                   ctx->npending, (long long)(pend_n[0] + pend_n[1]));
    if ((uint64_t)ctx->stats.reserved_bytes[GM_STAT_ALL].current > (uint64_t)ctx->budget + ctx->budget_slack)
        gm__broken(ck, "device: %lld bytes reserved, past the budget of %zu (and %zu above it)",
                   (long long)ctx->stats.reserved_bytes[GM_STAT_ALL].current, ctx->budget, ctx->budget_slack);
    for (i = 0; i < ctx->nss; i++) {
        const gm__sstate* s = &ctx->ss[i];
        uint32_t k;
        int order = s->safe_epoch < s->epoch && s->dirty_epoch <= s->epoch && s->fcount <= GM__FENCES;
        for (k = 0; k < s->fcount && order; k++) {
            uint64_t e = s->fep[(s->fhead + k) % GM__FENCES];
            uint64_t prev = k ? s->fep[(s->fhead + k - 1) % GM__FENCES] : s->safe_epoch;
            order = e > prev && e < s->epoch;
        }
        if (!order)
            gm__broken(ck, "device: stream %zu: epochs out of order (safe %llu, last free %llu, now %llu, %u fences)",
                       i, (unsigned long long)s->safe_epoch, (unsigned long long)s->dirty_epoch,
                       (unsigned long long)s->epoch, s->fcount);
    }
    for (pl = 0; pl < 2; pl++) {
        const gm__seg* sg;
        const char* nm = gm__arena_names[pl];
        for (sg = ctx->pool[pl].segs; sg; sg = sg->next) {
            int owned = sg->key >= 1 && sg->key <= ctx->nss;
            if (owned && sg->free_epoch > ctx->ss[sg->key - 1].dirty_epoch)
                gm__broken(ck, "%s: segment %#lx was freed at epoch %llu, in its stream's future (%llu)", nm,
                           (unsigned long)sg->base, (unsigned long long)sg->free_epoch,
                           (unsigned long long)ctx->ss[sg->key - 1].dirty_epoch);
            if (sg->va) gm__vseg_check(ck, nm, sg);
            else if (sg->mapped != sg->size)
                gm__broken(ck, "%s: segment %#lx counts %zu of its %zu bytes mapped", nm, (unsigned long)sg->base,
                           sg->mapped, sg->size);
            if (sg->va && (!owned || ctx->ss[sg->key - 1].vseg[pl] != sg))
                gm__broken(ck, "%s: expandable segment %#lx is not its stream's", nm, (unsigned long)sg->base);
        }
    }
}

GPUMEM_API int gm_check_report(gm_context* ctx, char* buf, size_t size) {
    gm__ck ck;
    if (buf && size) buf[0] = 0;
    if (GM__BAD_CTX(ctx)) return -1;
    memset(&ck, 0, sizeof ck);
    ck.ctx = ctx;
    ck.buf = buf;
    ck.cap = buf ? size : 0;
    pthread_mutex_lock(&ctx->mu);
    gm__tc_freeze(ctx); /* the thread caches stand still */
    gm__tc_check(ctx, &ck);
    gm__tc_steal(ctx, 1); /* and their bins go back: the pools' free blocks are all there is */
    gm__tc_fold_now(ctx);
    gm__check_device(ctx, &ck);
    gm__tc_thaw(ctx);
    pthread_mutex_unlock(&ctx->mu);
    gm__tier_check(ctx, &ck);
    return gm__ck_end(&ck);
}

GPUMEM_API int gm_check(gm_context* ctx) { return gm_check_report(ctx, NULL, 0); }

/* >>setup -----------------------------------------------------------------
   Setup resolves the desc, starts the backend and sizes the budget;
   shutdown undoes it in reverse. Every context gets a serial number, the
   only process-wide state: tensor handles carry it. */
static uint32_t gm__ctx_serials;

GPUMEM_API gm_result gm_setup(gm_context** out, const gm_desc* desc) {
    gm_context* ctx;
    gm_result r;
    uint32_t si;
    if (!out) return GM_ERR_INVALID_ARGUMENT;
    *out = NULL;
    ctx = (gm_context*)gm__calloc(sizeof *ctx);
    if (!ctx) return GM_ERR_HOST_OUT_OF_MEMORY;
    ctx->magic = GM__CTX_LIVE;
    ctx->tc_gate = GM__GATE_SHUT; /* until the thread caches are on */
    do ctx->serial = __atomic_add_fetch(&gm__ctx_serials, 1u, __ATOMIC_RELAXED);
    while (!ctx->serial); /* 0 marks no tensor */
    ctx->desc = gm__resolve_desc(desc, ctx->disk_dir);
    if (ctx->desc.backend != GM_BACKEND_SIM && ctx->desc.backend != GM_BACKEND_CUDA) {
        gm__log(ctx, GM_LOG_ERROR, "setup: desc.backend is %d, none of gm_backend", (int)ctx->desc.backend);
        GPUMEM_FREE(ctx);
        return GM_ERR_INVALID_ARGUMENT;
    }
    if (ctx->desc.backend == GM_BACKEND_SIM) {
        ctx->be = &gm__sim_backend;
    } else {
#ifdef GPUMEM_CUDA
        ctx->be = &gm__cuda_backend;
#else
        gm__log(ctx, GM_LOG_ERROR, "setup: the CUDA backend was not built (define GPUMEM_CUDA)");
        GPUMEM_FREE(ctx);
        return GM_ERR_UNSUPPORTED;
#endif
    }
    r = ctx->be->init(ctx);
    if (r != GM_OK) {
        gm__log(ctx, GM_LOG_ERROR, "setup: backend %s: %s", ctx->be->name, gm_result_string(r));
        GPUMEM_FREE(ctx);
        return r;
    }
    if (ctx->desc.device_budget) ctx->budget = ctx->desc.device_budget;
    else if (ctx->desc.device_budget_fraction > 0)
        ctx->budget = (size_t)(ctx->desc.device_budget_fraction * (double)ctx->total);
    else ctx->budget = ctx->total;
    if (!ctx->budget) { /* as gm_set_budget(ctx, 0) is refused: a context that can hold nothing */
        gm__log(ctx, GM_LOG_ERROR, "setup: a budget of %g of the device's %zu bytes is 0 bytes",
                ctx->desc.device_budget_fraction, ctx->total);
        ctx->be->shutdown(ctx);
        GPUMEM_FREE(ctx);
        return GM_ERR_INVALID_ARGUMENT;
    }
    if (ctx->budget > ctx->total) { /* nothing past the device can be reserved; expandable ranges are sized by it */
        gm__log(ctx, GM_LOG_INFO, "setup: a budget of %zu bytes is more than the device's %zu: the device's", ctx->budget,
                ctx->total);
        ctx->budget = ctx->total;
    }
    ctx->desc.device_budget = ctx->budget;
    {   /* contended calls are short: spin a little before sleeping */
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
#if defined(__GLIBC__) && defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
        pthread_mutex_init(&ctx->mu, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    if (ctx->desc.expandable == GM_TOGGLE_ON && ctx->desc.caching != GM_TOGGLE_OFF) {
        ctx->va_align = ctx->be->va_granularity(ctx);
        if (!ctx->va_align) {
            gm__log(ctx, GM_LOG_WARN, "setup: backend %s has no virtual memory: classic segments", ctx->be->name);
            ctx->desc.expandable = GM_TOGGLE_OFF;
        } else {
            size_t want = ctx->desc.expandable_page ? ctx->desc.expandable_page : ctx->va_align;
            if (want > GM__GIB) {
                gm__log(ctx, GM_LOG_WARN, "setup: expandable_page %zu is over 1 GiB: pages of %zu bytes", want,
                        ctx->va_align);
                want = ctx->va_align;
            }
            ctx->va_gran = gm__round_up(want, ctx->va_align);
            if (ctx->va_gran != want)
                gm__log(ctx, GM_LOG_INFO, "setup: expandable pages of %zu bytes (a multiple of the granularity, %zu)",
                        ctx->va_gran, ctx->va_align);
        }
    }
    ctx->desc.expandable_page = ctx->va_gran; /* as resolved: 0 with classic segments */
    gm__arena_init(&ctx->pool[0], GM__ROUND, &ctx->stats, GM_STAT_SMALL_POOL);
    gm__arena_init(&ctx->pool[1], GM__ROUND, &ctx->stats, GM_STAT_LARGE_POOL);
    r = gm__ss_index(ctx, NULL, &si);
    if (r != GM_OK) {
        ctx->be->shutdown(ctx);
        pthread_mutex_destroy(&ctx->mu);
        GPUMEM_FREE(ctx);
        return r;
    }
    ctx->t0 = gm__now_ns();
    gm__trace_open(ctx);
    /* every allocation of a trace is a row written under the lock. With
       expandable segments a block a cache keeps holds its pages mapped past
       its free, so every allocation through the lock gives the thread's
       back first (gm__alloc_tc): their pages are idle before it maps */
    ctx->tc_on = GM__TC && ctx->desc.thread_cache != GM_TOGGLE_OFF && ctx->desc.caching != GM_TOGGLE_OFF &&
                 !ctx->trace;
    if (ctx->tc_on) pthread_once(&gm__tc_once, gm__tc_init); /* once a process: membarrier's registration can take
                                                                 milliseconds, better here than in a gm_alloc */
    ctx->tc_wide = ctx->desc.thread_cache_max ? 0 : gm__tc_wide(ctx); /* a size asked for stays */
    ctx->tc_max = gm__tc_max(ctx, ctx->desc.thread_cache_max);
    ctx->desc.thread_cache_max = ctx->tc_max;
    if (ctx->tc_on) gm__tc_gate(ctx, GM__GATE_SHUT, 0);
    r = gm__disk_open(ctx);
    if (r != GM_OK) {
        gm_shutdown(ctx);
        return r;
    }
    gm__log(ctx, GM_LOG_INFO, "setup: backend %s, device %d, %zu bytes, budget %zu", ctx->be->name,
            ctx->desc.device, ctx->total, ctx->budget);
    *out = ctx;
    return GM_OK;
}

GPUMEM_API gm_result gm_shutdown(gm_context* ctx) {
    int pl;
    uint32_t i;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    gm__tc_shutdown(ctx);
    gm__tier_shutdown(ctx);
    gm__plan_destroy(ctx);
    gm__disk_close(ctx);
    pthread_mutex_lock(&ctx->mu);
    ctx->be->device_sync(ctx);
    gm__process_pending(ctx, 1);
    gm__flush(ctx);
    if (ctx->map.count + ctx->managed.count + ctx->raw.count)
        gm__log(ctx, GM_LOG_WARN, "shutdown: %zu allocations were never freed; releasing them",
                ctx->map.count + ctx->managed.count + ctx->raw.count);
    for (i = 0; i < ctx->raw.cap; i++)
        if (ctx->raw.e[i].k) ctx->be->dev_free(ctx, (void*)ctx->raw.e[i].k, (size_t)(uintptr_t)ctx->raw.e[i].v);
    for (i = 0; i < ctx->managed.cap; i++) /* the device was synchronized above */
        if (ctx->managed.e[i].k) {
            gm__mblock* m = (gm__mblock*)ctx->managed.e[i].v;
            m->next = ctx->mcache, ctx->mcache = m;
        }
    while (ctx->mpending) {
        gm__mblock* m = ctx->mpending;
        ctx->mpending = m->next;
        while (m->nev) ctx->be->event_destroy(ctx, m->ev[--m->nev]);
        m->next = ctx->mcache, ctx->mcache = m;
    }
    while (ctx->mcache) {
        gm__mblock* m = ctx->mcache;
        ctx->mcache = m->next;
        ctx->be->managed_free(ctx, m->p, m->cap);
        GPUMEM_FREE(m);
    }
    for (pl = 0; pl < 2; pl++) {
        gm__seg* s;
        for (s = ctx->pool[pl].segs; s; s = s->next) {
            if (s->va) gm__vseg_close(ctx, s);
            else ctx->be->dev_free(ctx, (void*)(s->raw ? s->raw : s->base), s->raw ? s->raw_size : s->size);
        }
        gm__arena_destroy(&ctx->pool[pl]);
    }
    for (i = 0; i < ctx->nss; i++)
        while (ctx->ss[i].fcount) gm__fence_pop(ctx, &ctx->ss[i]);
    while (ctx->nevfree) ctx->be->event_destroy(ctx, ctx->evfree[--ctx->nevfree]);
    GPUMEM_FREE(ctx->evfree);
    GPUMEM_FREE(ctx->ss);
    GPUMEM_FREE(ctx->map.e);
    GPUMEM_FREE(ctx->managed.e);
    GPUMEM_FREE(ctx->raw.e);
    if (ctx->trace && fclose(ctx->trace) != 0) gm__log(ctx, GM_LOG_WARN, "trace: write failed: %s", strerror(errno));
    pthread_mutex_unlock(&ctx->mu);
    ctx->be->shutdown(ctx);
    pthread_mutex_destroy(&ctx->mu);
    ctx->magic = GM__CTX_DEAD;
    GPUMEM_FREE(ctx);
    return GM_OK;
}

GPUMEM_API gm_desc gm_query_desc(const gm_context* ctx) {
    gm_desc d;
    if (!GM__BAD_CTX(ctx)) return ctx->desc;
    memset(&d, 0, sizeof d);
    return d;
}

GPUMEM_API const char* gm_backend_name(const gm_context* ctx) { return GM__BAD_CTX(ctx) ? "none" : ctx->be->name; }

/* >>device ----------------------------------------------------------------
   Thin public wrappers over the backend table: argument checks, then the
   call. Streams destroyed here leave the allocator's state marked dead. */
GPUMEM_API gm_result gm_mem_info(gm_context* ctx, size_t* f, size_t* t) {
    if (GM__BAD_CTX(ctx) || !f || !t) return GM_ERR_INVALID_ARGUMENT;
    return ctx->be->mem_info(ctx, f, t);
}

GPUMEM_API gm_result gm_stream_create(gm_context* ctx, gm_stream* out) {
    gm_result r;
    uint32_t i;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!out) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_stream_create: no handle to write");
    r = ctx->be->stream_create(ctx, out); /* a reused handle gets a fresh state on first use */
    if (r != GM_OK) return r;
    pthread_mutex_lock(&ctx->mu); /* and is no longer one gm_stream_destroy destroyed */
    for (i = 0; i < ctx->nss; i++)
        if (ctx->ss[i].stream == *out && ctx->ss[i].dead) ctx->ss[i].dead = 1;
    pthread_mutex_unlock(&ctx->mu);
    return GM_OK;
}

/* Synchronizes s and marks its state dead: what gpumem cached for it is
   safe for every stream, and the handle, if it comes back, is a new
   stream. Then destroys it through the backend, when asked. */
static gm_result gm__stream_end(gm_context* ctx, gm_stream s, int destroy, const char* what) {
    gm_result r;
    uint32_t i;
    int seen, live;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "%s: not the default stream", what);
    pthread_mutex_lock(&ctx->mu);
    seen = gm__ss_seen(ctx, s);
    pthread_mutex_unlock(&ctx->mu);
    live = seen == GM__SS_LIVE;
    /* a handle gpumem destroyed and has not seen since is not touched: CUDA
       may have handed it to another stream already */
    if (!live && (seen == GM__SS_GONE || !ctx->be->stream_valid(ctx, s)))
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "%s: unknown or destroyed stream %p", what, (void*)s);
    if (!live && !destroy) return GM_OK; /* nothing of it to forget */
    r = ctx->be->stream_sync(ctx, s);
    if (r != GM_OK) return r;
    pthread_mutex_lock(&ctx->mu);
    if (!live) (void)gm__ss_index(ctx, s, &i); /* tensors may remember s: a dead entry says it is gone */
    for (i = 0; i < ctx->nss; i++) {
        gm__sstate* e = &ctx->ss[i];
        if (e->stream != s || e->dead) continue;
        gm__fence_wait(ctx, e);
        e->dead = destroy ? 2 : 1;
    }
    if (destroy) GM__ST(ctx->ss_destroyed, 1); /* gm__ss_gone looks from now on */
    gm__tc_forget_stream(ctx, s);
    if (ctx->last_ss < ctx->nss && ctx->ss[ctx->last_ss].stream == s) ctx->last_ss = ctx->nss; /* no fast path to it */
    r = destroy ? ctx->be->stream_destroy(ctx, s) : GM_OK;
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

GPUMEM_API gm_result gm_stream_destroy(gm_context* ctx, gm_stream s) { return gm__stream_end(ctx, s, 1, "gm_stream_destroy"); }

GPUMEM_API gm_result gm_stream_detach(gm_context* ctx, gm_stream s) { return gm__stream_end(ctx, s, 0, "gm_stream_detach"); }

GPUMEM_API gm_result gm_stream_synchronize(gm_context* ctx, gm_stream s) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    return ctx->be->stream_sync(ctx, s);
}

GPUMEM_API gm_result gm_device_synchronize(gm_context* ctx) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    return ctx->be->device_sync(ctx);
}

GPUMEM_API gm_result gm_memcpy_async(gm_context* ctx, void* dst, const void* src, size_t size, gm_copy_kind kind,
                                     gm_stream s) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (size && (!dst || !src))
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_memcpy_async: a NULL %s of %zu bytes",
                          dst ? "source" : "destination", size);
    if ((int)kind < 0 || (int)kind > (int)GM_COPY_DEFAULT)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_memcpy_async: kind %d is none of gm_copy_kind", (int)kind);
    if (!size) /* nothing to copy, but the stream is still checked */
        return ctx->be->stream_valid(ctx, s)
                   ? GM_OK
                   : GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "gm_memcpy_async: unknown or destroyed stream %p", (void*)s);
    return ctx->be->copy(ctx, dst, src, size, kind, s);
}

GPUMEM_API gm_result gm_launch_host(gm_context* ctx, gm_stream s, gm_host_fn fn, void* user) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!fn) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_launch_host: no function");
    return ctx->be->launch_host(ctx, s, fn, user);
}

/* gm_launch_host_copy: the argument travels in a heap block with the
   function; a trampoline calls it and frees the block. */
typedef struct gm__hostcall {
    gm_host_fn fn;
    union { long double ld; void* p; long long ll; unsigned char b[GM_LAUNCH_ARG_MAX]; } arg; /* aligned for any type */
} gm__hostcall;

static void gm__hostcall_run(void* p) {
    gm__hostcall* c = (gm__hostcall*)p;
    c->fn(c->arg.b);
    GPUMEM_FREE(c);
}

GPUMEM_API gm_result gm_launch_host_copy(gm_context* ctx, gm_stream s, gm_host_fn fn, const void* arg, size_t size) {
    gm__hostcall* c;
    gm_result r;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!fn || (size && !arg))
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_launch_host_copy: %s", fn ? "a NULL argument" : "no function");
    if (size > GM_LAUNCH_ARG_MAX)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "launch: %zu bytes of argument, more than GM_LAUNCH_ARG_MAX (%d)",
                          size, GM_LAUNCH_ARG_MAX);
    c = (gm__hostcall*)GPUMEM_MALLOC(sizeof *c);
    if (!c) return GM_ERR_HOST_OUT_OF_MEMORY;
    c->fn = fn;
    if (size) memcpy(c->arg.b, arg, size);
    r = ctx->be->launch_host(ctx, s, gm__hostcall_run, c);
    if (r != GM_OK) GPUMEM_FREE(c);
    return r;
}

/* Raw memory is kept in ctx->raw, so that gm_raw_free takes nothing else
   (a segment of the cache, a tensor's memory, pinned or managed memory)
   and gm_free refuses it, on every backend. */
GPUMEM_API gm_result gm_raw_alloc(gm_context* ctx, void** out, size_t size) {
    gm_result r;
    int kept;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!out) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_raw_alloc: no pointer to write");
    *out = NULL;
    if (!size) return GM_OK;
    if (size > GM__MAX_REQUEST) {
        gm__log(ctx, GM_LOG_ERROR, "gm_raw_alloc: %zu bytes is more than any device holds", size);
        return GM_ERR_OUT_OF_MEMORY;
    }
    r = ctx->be->dev_alloc(ctx, out, size); /* the backend logs its failures (out of memory at info) */
    if (r != GM_OK) {
        *out = NULL;
        return r;
    }
    pthread_mutex_lock(&ctx->mu);
    kept = gm__map_put(&ctx->raw, (uintptr_t)*out, (void*)(uintptr_t)size);
    pthread_mutex_unlock(&ctx->mu);
    if (!kept) {
        ctx->be->dev_free(ctx, *out, size);
        *out = NULL;
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    return GM_OK;
}

GPUMEM_API gm_result gm_raw_free(gm_context* ctx, void* ptr, size_t size) {
    size_t have;
    gm_result r;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!ptr) return GM_OK;
    pthread_mutex_lock(&ctx->mu);
    have = (size_t)(uintptr_t)gm__map_get(&ctx->raw, (uintptr_t)ptr);
    if (!have) {
        int pl, cached = 0;
        for (pl = 0; pl < 2; pl++) cached |= gm__arena_seg_of(&ctx->pool[pl], (uintptr_t)ptr) != NULL;
        r = cached ? GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "gm_raw_free: %p is memory of the caching allocator, "
                                "not from gm_raw_alloc", ptr)
            : gm__map_get(&ctx->managed, (uintptr_t)ptr)
                ? GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "gm_raw_free: %p is unified memory from gm_alloc (use gm_free)", ptr)
                : GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "gm_raw_free: %p was not allocated by gm_raw_alloc", ptr);
    } else if (have != size) {
        r = GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_raw_free: %p has %zu bytes, not %zu", ptr, have, size);
    } else {
        gm__map_del(&ctx->raw, (uintptr_t)ptr);
        r = GM_OK;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (r != GM_OK) return r;
    r = ctx->be->dev_free(ctx, ptr, size);
    if (r != GM_OK) { /* the backend kept it: so does the map */
        pthread_mutex_lock(&ctx->mu);
        gm__map_put(&ctx->raw, (uintptr_t)ptr, (void*)(uintptr_t)size);
        pthread_mutex_unlock(&ctx->mu);
    }
    return r;
}

GPUMEM_API gm_result gm_sim_link_stats(gm_context* ctx, int dir, uint64_t* bytes, uint64_t* busy_ns) {
    gm__sim* sim;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!bytes || !busy_ns || dir < 0 || dir > 1)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_sim_link_stats: %s", dir < 0 || dir > 1
                          ? "dir is neither 0 (to the device) nor 1 (to the host)" : "nowhere to write");
    if (ctx->be != &gm__sim_backend) return GM_ERR_UNSUPPORTED;
    sim = GM__SIM(ctx);
    pthread_mutex_lock(&sim->mu);
    *bytes = sim->link_bytes[dir];
    *busy_ns = sim->link_busy_ns[dir];
    pthread_mutex_unlock(&sim->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_sim_inject(gm_context* ctx, gm_sim_fault fault, uint64_t nth) {
    gm__sim* sim;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if ((int)fault < GM_SIM_FAULT_DEVICE_ALLOC || (int)fault > GM_SIM_FAULT_DISK_RING)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_sim_inject: fault %d is none of gm_sim_fault", (int)fault);
    if (fault >= GM_SIM_FAULT_DISK_WRITE) { /* the disk tier's: any backend */
        gm__disk_inject(ctx, (int)fault - (int)GM_SIM_FAULT_DISK_WRITE, nth);
        return GM_OK;
    }
    if (ctx->be != &gm__sim_backend) return GM_ERR_UNSUPPORTED;
    sim = GM__SIM(ctx);
    pthread_mutex_lock(&sim->mu);
    sim->fail_at[fault] = nth ? sim->ops[fault] + nth : 0;
    pthread_mutex_unlock(&sim->mu);
    return GM_OK;
}

/* >>crc -------------------------------------------------------------------
   CRC32C (Castagnoli), as iSCSI and ext4 use it: gm__crc32c(0, p, n) is
   the CRC of p[0..n), and gm__crc32c(crc, q, m) continues it over q. The
   SSE4.2 instruction where the CPU has it, else slicing by 8 over tables
   made once. The instruction takes 3 cycles and can start every cycle, so
   three lanes of GM__CRC_LANE bytes run side by side (8 bytes a cycle, not
   8 per 3: the disk engine checks every byte it moves, on one thread) and
   are joined by the operators that append a lane's and two lanes' worth
   of zero bytes to a CRC, as tables (the register is linear: the CRC of
   a || b is shift(crc(a), |b|) ^ crc(b) started from zero). */
static uint32_t gm__crc_tab[8][256];
static pthread_once_t gm__crc_once = PTHREAD_ONCE_INIT;

static void gm__crc_init(void) {
    uint32_t i, j, c;
    for (i = 0; i < 256; i++) {
        for (c = i, j = 0; j < 8; j++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        gm__crc_tab[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (c = gm__crc_tab[0][i], j = 1; j < 8; j++) gm__crc_tab[j][i] = c = (c >> 8) ^ gm__crc_tab[0][c & 0xff];
}

static uint32_t gm__crc32c_sw(uint32_t c, const unsigned char* p, size_t n) {
    for (; n && ((uintptr_t)p & 7); n--) c = (c >> 8) ^ gm__crc_tab[0][(c ^ *p++) & 0xff];
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c; /* little-endian, as the tables assume */
        c = gm__crc_tab[7][lo & 0xff] ^ gm__crc_tab[6][(lo >> 8) & 0xff] ^ gm__crc_tab[5][(lo >> 16) & 0xff] ^
            gm__crc_tab[4][lo >> 24] ^ gm__crc_tab[3][hi & 0xff] ^ gm__crc_tab[2][(hi >> 8) & 0xff] ^
            gm__crc_tab[1][(hi >> 16) & 0xff] ^ gm__crc_tab[0][hi >> 24];
    }
    for (; n; n--) c = (c >> 8) ^ gm__crc_tab[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GM__CRC_HW 1
#define GM__CRC_LANE 4096
static uint32_t gm__crc_lane[2][4][256]; /* appending one lane, two lanes of zeros, a byte of the CRC at a time */

static uint32_t gm__crc_shift_tab(uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t gm__crc32c_hw(uint32_t c, const unsigned char* p, size_t n) {
    uint64_t c64;
    for (; n && ((uintptr_t)p & 7); n--) c = __builtin_ia32_crc32qi(c, *p++);
    for (; n >= 3 * GM__CRC_LANE; n -= 3 * GM__CRC_LANE, p += 3 * GM__CRC_LANE) {
        uint64_t a = c, b = 0, d = 0;
        size_t i;
        for (i = 0; i < GM__CRC_LANE; i += 8) {
            uint64_t u, v, w;
            memcpy(&u, p + i, 8);
            memcpy(&v, p + GM__CRC_LANE + i, 8);
            memcpy(&w, p + 2 * GM__CRC_LANE + i, 8);
            a = __builtin_ia32_crc32di(a, u);
            b = __builtin_ia32_crc32di(b, v);
            d = __builtin_ia32_crc32di(d, w);
        }
        c = gm__crc_shift_tab(gm__crc_lane[1], (uint32_t)a) ^ gm__crc_shift_tab(gm__crc_lane[0], (uint32_t)b) ^
            (uint32_t)d;
    }
    c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static void gm__crc32c_shift(uint32_t* op, size_t len);
static uint32_t gm__gf2_times(const uint32_t* mat, uint32_t vec);
static int gm__crc_hw;
static void gm__crc_setup(void) {
    gm__crc_init();
#ifdef GM__CRC_HW
    __builtin_cpu_init();
    gm__crc_hw = __builtin_cpu_supports("sse4.2");
    if (gm__crc_hw) {
        int k, b, v;
        for (k = 0; k < 2; k++) {
            uint32_t op[32];
            gm__crc32c_shift(op, (size_t)(k + 1) * GM__CRC_LANE);
            for (b = 0; b < 4; b++)
                for (v = 0; v < 256; v++) gm__crc_lane[k][b][v] = gm__gf2_times(op, (uint32_t)v << (8 * b));
        }
    }
#endif
}

static uint32_t gm__crc32c(uint32_t crc, const void* p, size_t n) {
    uint32_t c = ~crc;
    pthread_once(&gm__crc_once, gm__crc_setup);
#ifdef GM__CRC_HW
    if (gm__crc_hw) return ~gm__crc32c_hw(c, (const unsigned char*)p, n);
#endif
    return ~gm__crc32c_sw(c, (const unsigned char*)p, n);
}

/* The CRC of a || b from crc(a), crc(b) and len(b), as zlib's
   crc32_combine (appending len(b) zero bits is a linear map over GF(2),
   applied by repeated squaring): chunks read out of order are checked
   each on its own as it lands and combined at the end. */
static uint32_t gm__gf2_times(const uint32_t* mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}
static void gm__gf2_square(uint32_t* sq, const uint32_t* mat) {
    int n;
    for (n = 0; n < 32; n++) sq[n] = gm__gf2_times(mat, mat[n]);
}
/* op: the operator that appends len zero bytes to a CRC (32 columns). */
static void gm__crc32c_shift(uint32_t* op, size_t len) {
    uint32_t even[32], odd[32], row = 1;
    int n, have = 0;
    odd[0] = 0x82F63B78u; /* the operator for one zero bit */
    for (n = 1; n < 32; n++, row <<= 1) odd[n] = row;
    gm__gf2_square(even, odd); /* two zero bits */
    gm__gf2_square(odd, even); /* four */
    for (n = 0, row = 1; n < 32; n++, row <<= 1) op[n] = row; /* identity */
    while (len) { /* a byte, then each power of two bytes */
        uint32_t* sq = have ? odd : even;
        uint32_t t[32];
        gm__gf2_square(sq, have ? even : odd);
        if (len & 1) {
            for (n = 0; n < 32; n++) t[n] = gm__gf2_times(sq, op[n]);
            memcpy(op, t, sizeof t);
        }
        len >>= 1;
        have ^= 1;
    }
}
static uint32_t gm__crc32c_combine(uint32_t c1, uint32_t c2, size_t len2) {
    uint32_t op[32];
    gm__crc32c_shift(op, len2);
    return gm__gf2_times(op, c1) ^ c2;
}

/* Pinned host memory gpumem maps itself (an anonymous mapping, registered
   with the backend: cudaHostRegister), for the disk tier's staging and the
   host tier's pool. cudaHostAlloc's memory is a shared mapping of the
   driver's device file, which io_uring refuses to register; this is not. */
static gm_result gm__pinned_alloc(gm_context* ctx, void** out, size_t n) {
    void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    gm_result r;
    if (p == MAP_FAILED) {
        gm__log(ctx, GM_LOG_WARN, "cannot map %zu bytes of host memory: %s", n, strerror(errno));
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    r = ctx->be->host_register(ctx, p, n);
    if (r != GM_OK) {
        munmap(p, n);
        return r == GM_ERR_OUT_OF_MEMORY || r == GM_ERR_BACKEND ? GM_ERR_HOST_OUT_OF_MEMORY : r;
    }
    *out = p;
    return GM_OK;
}

static void gm__pinned_free(gm_context* ctx, void* p, size_t n) {
    ctx->be->host_unregister(ctx, p);
    munmap(p, n);
}

/* >>disk ------------------------------------------------------------------
   The spill file and its I/O engine. The manager hands the engine jobs (a
   tensor's bytes between host memory and an extent of the file, or between
   device memory and the file through pinned staging) and goes on; the
   engine, a thread of its own that alone touches the ring, cuts every job
   into chunks and keeps up to `depth` of them in flight across jobs (the
   queue does not drain between tensors), urgent jobs (one a caller waits
   for) first. Finished jobs wait in a list until the manager applies them
   under its lock. Invariants:
   - the file is created unlinked (O_TMPFILE, else created and unlinked at
     once), mode 0600, O_DIRECT unless the file system refuses it; nothing
     of it outlives the process;
   - extents come from an arena whose addresses are file offsets plus
     `align` (so none is 0), every extent and offset a multiple of the
     direct-I/O alignment; the arena's segments are exactly the file space
     reserved with fallocate (or grown by ftruncate where the file system
     has no fallocate: sparse), `reserved` bytes, never above `budget`; the
     arena is the manager's (under its lock), never the engine's;
   - a job's memory and extent stay its own until it is applied: nothing
     else reads or writes them meanwhile;
   - a job starts no I/O before its gates (events) completed: the copies
     that fill its memory, or that last used it;
   - a slot carries one chunk of a job (nslot of them, each with a
     staging buffer); at most `depth` of them have an I/O in flight, the
     others wait for a staging copy, for their turn in order, or for a
     free place in the queue; a staged job's chunk uses the slot's
     buffer, and a slot whose buffer a copy into device memory still reads
     has ev_pending set: no read lands in it before that event completed,
     and a copy into it (on another stream) is queued behind that event;
   - staged chunks are written and copied onward in order (the CRC runs in
     order); a short read or write is resubmitted for the rest, one refused
     for a moment (EAGAIN) waits in its slot (again_at, counted in
     `waiting`) and goes again later; an error or a transfer of 0 bytes
     fails the job (GM_ERR_IO or GM_ERR_DISK_FULL) once its I/Os in flight
     are reaped, and a failed staged write once the copies it staged landed
     too (they read device memory that is its tensor's again after);
   - dk->mu guards the job lists, the slots and the figures; the engine
     holds it except while it waits (for a completion, an event, or work),
     and takes no other lock. */
#ifdef GPUMEM_URING
#include <liburing.h>
#endif

enum { GM__J_WRITE_MEM, GM__J_READ_MEM, GM__J_WRITE_DEV, GM__J_READ_DEV };

typedef struct gm__job gm__job;
struct gm__job {
    gm__job* next;          /* in dk->jobs (queued or running) or dk->done */
    int kind;               /* GM__J_* */
    int urgent;             /* a caller waits: its chunks go first */
    char* mem;              /* MEM kinds: host memory (pinned) */
    void* dev;              /* DEV kinds: device (or managed) memory */
    gm_copy_kind ckind;     /* READ_DEV: the kind of the copies onward */
    gm_stream copy;         /* DEV kinds: the stream of the staging copies */
    int buf_index;          /* MEM kinds: the ring's registered buffer holding mem, or -1 */
    uint64_t off;           /* file offset */
    size_t bytes, n;        /* and its chunks */
    void* gate[2];          /* to complete before any I/O (owned by the manager) */
    uint32_t crc, want;     /* write: the CRC32C of the bytes; read: the one expected */
    uint32_t* ccrc;         /* READ_MEM: each chunk's CRC32C, taken as it lands */
    size_t staged, sent, finished; /* chunks copied into staging, submitted, completed (or copied out) */
    int* fifo;              /* staged kinds: the slots of the chunks in flight, in order */
    size_t fhead;
    gm_result res;
    int done, started;
    int sync;               /* a caller waits and takes it back itself (not in dk->done) */
    int nocheck;            /* a read whose CRC the caller checks (a swap's chunk: part of a tensor) */
    int finishing;          /* over: the engine finishes it (still in dk->jobs until it is done) */
    uint64_t t0;
    /* the manager's: the tensor served (index, generation; ti = UINT32_MAX
       once it let go), and what the job frees when it is applied */
    uint32_t ti, gen;
    gm__block *ext, *hb;
    int own;
    const gm__block* hx;    /* MEM kinds with a host copy of the tier: its extents (mem is the first;
                               gm__host_size), whose chunks the engine finds with gm__job_mem */
    const gm__block* hcur;  /* the engine's: the extent of hx gm__job_mem found last (NULL: none yet), */
    size_t hcur_at;         /* and the offset in the copy where it starts */
};

typedef struct gm__dslot {
    char* buf;              /* staging, `chunk` bytes */
    void* ev;               /* the last copy out of or into buf */
    int ev_pending;
    gm__job* job;           /* the job whose I/O it carries, or NULL: free */
    int write, io_done, fixed;
    char* mem;              /* the I/O's buffer: buf, or the job's memory */
    uint64_t off;           /* file offset of the chunk */
    size_t len;             /* I/O length (aligned) */
    size_t done;            /* bytes moved so far */
    int again;              /* times its I/O went again after a transient error (EAGAIN, EINTR) */
    uint64_t again_at;      /* refused for a moment (EAGAIN): when it goes again (0: it is not waiting) */
    uint64_t sent_at;       /* when its I/O was last submitted (the modelled disk's pace) */
} gm__dslot;
#define GM__DIO_AGAIN 8     /* transient errors a chunk's I/O goes again after, at most */
#define GM__DIO_BACKOFF 1000000u /* ns before the first try again after EAGAIN, doubling: 255 ms in all */

#define GM__REGBUFS 256     /* registered buffers: 0 the staging, then host pool chunks */
#define GM__DIO_THREADS 16  /* pread/pwrite: I/O threads, at most */

typedef struct gm__disk {
    int fd;
    int uring;              /* 1: io_uring, 0: pread/pwrite */
    double pace;            /* the modelled disk's bytes per second (gm__dio_pace), 0: none */
    uint64_t pace_clock;    /* when its last I/O ends, as modelled (engine only) */
    int direct;
    int checksum;
    size_t align, chunk, budget, reserved;
    int depth, inflight;    /* I/Os in flight: at most depth */
    int nslot;              /* slots (each with a staging buffer): depth and half again, so that
                               staging copies and chunks waiting to be released in order do not
                               take I/O slots */
    char* staging;
    gm__dslot* slot;
    gm__arena ar;
    int* pend;              /* pread/pwrite: completions not yet reaped, a ring of depth (slot, result) */
    int npend, pend_head;
    /* pread/pwrite: the I/O threads (nio of them; none: each I/O runs in
       the engine as it is submitted). A submit queues (slot, length) in
       req, a ring of depth; a thread takes one, does it without dk->mu, and
       posts its completion in pend, waking the engine (dk->cv). The slot's
       buffer, offset and length do not change while its I/O is in flight. */
    pthread_t* io_th;
    int nio, io_stop;
    int* req;
    size_t* reqlen;
    int nreq, req_head;
    pthread_cond_t io_cv;   /* a request for the I/O threads */
    int broken;             /* the ring failed: no more transfers; what was in flight is still reaped
                               from the ring's memory (gm__dio_break) */
    int broken_inflight;    /* I/Os in flight when it broke, */
    int drained;            /* and those reaped since */
    uint64_t broken_log;    /* when the drain last said it waits */
    int waiting;            /* slots whose I/O waits to go again (again_at) */
    int sparse;             /* the file system cannot reserve (no fallocate): the file grows by ftruncate */
    uint64_t grow_log, grow_held; /* the file could not grow: last logged, and since (gm__quiet) */
    /* the engine */
    pthread_t th;
    int running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work for the engine */
    pthread_cond_t done_cv; /* a job finished */
    gm__job *jobs, *done;
    size_t njobs, ndone;    /* ndone is read without the lock (atomically) */
    uint64_t fault_ops[5], fault_at[5]; /* fault injection (gm_sim_inject), per gm_sim_fault disk kind */
    void* regbase[GM__REGBUFS]; /* registered buffers (NULL: slot free) */
    size_t reglen[GM__REGBUFS];
    int regsparse;          /* the table can be updated one buffer at a time */
    /* figures, copied into gm_tier_stats */
    int64_t bytes_w, bytes_r, ns_w, ns_r, ios, depth_sum, errors, crc_fail;
    int64_t busy_ns, depth_ns;
    int backlog;            /* the engine's last pass left chunks waiting for a slot */
    int64_t backlog_ns, backlog_depth_ns;
    uint64_t t_inflight;    /* when `inflight` last changed */
    gm_context* ctx;
    int fixed_buf, fixed_file; /* io_uring: the staging (and pool chunks) and the file registered */
#ifdef GPUMEM_URING
    struct io_uring ring;
#endif
} gm__disk;

#define GM__DISK_GROW (256 * GM__MIB)

/* An armed fault of the disk's kinds fires (any backend; with dk->mu). */
static int gm__disk_fault(gm__disk* dk, gm_sim_fault kind, size_t n) {
    int k = (int)kind - (int)GM_SIM_FAULT_DISK_WRITE;
    if (++dk->fault_ops[k] != dk->fault_at[k] || !dk->fault_at[k]) return 0;
    dk->fault_at[k] = 0;
    gm__log(dk->ctx, GM_LOG_INFO, "disk: injected failure of a %zu-byte chunk", n);
    return 1;
}

/* Arms the nth next chunk of fault kind k (0: none); without a disk tier,
   nothing to arm. */
static void gm__disk_inject(gm_context* ctx, int k, uint64_t nth) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    if (!dk) return;
    pthread_mutex_lock(&dk->mu);
    dk->fault_at[k] = nth ? dk->fault_ops[k] + nth : 0;
    pthread_mutex_unlock(&dk->mu);
}

/* Opens the spill file: O_TMPFILE, else a named file unlinked at once. */
static int gm__disk_create(gm_context* ctx, const char* dir, int flags) {
    int fd;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd; /* those two: no O_TMPFILE here */
#endif
    {
        char path[4096];
        mode_t old;
        if ((size_t)snprintf(path, sizeof path, "%s/.gpumem-spill-XXXXXX", dir) >= sizeof path) {
            errno = ENAMETOOLONG;
            return -1;
        }
        old = umask(077);
        fd = mkostemp(path, O_CLOEXEC); /* the flags after the unlink: a file system that refuses one
                                           (O_DIRECT) would refuse it once the file exists, leaving it */
        umask(old);
        if (fd < 0) return -1;
        unlink(path);
        if (flags) {
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl | flags) != 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
        }
        gm__log(ctx, GM_LOG_INFO, "disk: %s has no O_TMPFILE: a named file was created and unlinked", dir);
    }
    return fd;
}

#ifdef GPUMEM_URING
static int gm__uring_open(gm_context* ctx, gm__disk* dk) {
    static const unsigned tries[] = {
#if defined(IORING_SETUP_COOP_TASKRUN) && defined(IORING_SETUP_SUBMIT_ALL)
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
#endif
        0};
    struct iovec iov;
    size_t i;
    int e = -ENOSYS;
    for (i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        p.flags = tries[i];
        e = io_uring_queue_init_params((unsigned)dk->depth * 2, &dk->ring, &p);
        if (e == 0) break;
        if (e != -EINVAL) break; /* a flag this kernel lacks: try fewer */
    }
    if (e) {
        gm__log(ctx, GM_LOG_WARN, "disk: io_uring unavailable (%s): using pread/pwrite", strerror(-e));
        return 0;
    }
    iov.iov_base = dk->staging;
    iov.iov_len = dk->chunk * (size_t)dk->nslot;
    /* a sparse table (Linux 5.19), so the host pool's chunks can join it one by one */
    e = io_uring_register_buffers_sparse(&dk->ring, GM__REGBUFS);
    if (e == 0) e = io_uring_register_buffers_update_tag(&dk->ring, 0, &iov, NULL, 1) == 1 ? 0 : -EINVAL;
    dk->regsparse = e == 0;
    if (e) {
        (void)io_uring_unregister_buffers(&dk->ring);
        e = io_uring_register_buffers(&dk->ring, &iov, 1);
    }
    dk->fixed_buf = e == 0;
    if (dk->fixed_buf) {
        dk->regbase[0] = dk->staging;
        dk->reglen[0] = iov.iov_len;
    }
    if (e) gm__log(ctx, GM_LOG_INFO, "disk: io_uring refused registered buffers (%s)", strerror(-e));
    else gm__log(ctx, GM_LOG_INFO, "disk: io_uring registered its staging buffers (%zu KiB)%s", iov.iov_len >> 10,
                 dk->regsparse ? ", and will register the host pool's chunks" : "");
    e = io_uring_register_files(&dk->ring, &dk->fd, 1);
    dk->fixed_file = e == 0;
    if (e) gm__log(ctx, GM_LOG_INFO, "disk: io_uring refused a registered file (%s)", strerror(-e));
    return 1;
}
#endif

/* The host pool's chunks join the ring's registered buffers as they come
   and leave it as they go (with the manager's lock; the kernel orders the
   update against I/O in flight, and no job uses a chunk that goes). */
static void gm__disk_register(gm_context* ctx, void* p, size_t n, int add) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    int i;
    if (!dk || !dk->regsparse) return;
    pthread_mutex_lock(&dk->mu);
    for (i = 1; i < GM__REGBUFS; i++) {
        if (add ? dk->regbase[i] != NULL : dk->regbase[i] != p) continue;
#ifdef GPUMEM_URING
        {
            struct iovec iov;
            iov.iov_base = add ? p : NULL;
            iov.iov_len = add ? n : 0;
            if (io_uring_register_buffers_update_tag(&dk->ring, (unsigned)i, &iov, NULL, 1) != 1) {
                if (add) gm__log(ctx, GM_LOG_INFO, "disk: io_uring refused to register a host pool chunk (%zu bytes)", n);
                if (!add) dk->regbase[i] = NULL; /* gone anyway: never used again */
                break;
            }
        }
#endif
        dk->regbase[i] = add ? p : NULL;
        dk->reglen[i] = add ? n : 0;
        break;
    }
    pthread_mutex_unlock(&dk->mu);
}

/* The registered buffer holding [p, p + n), or -1 (with dk->mu). */
static int gm__disk_bufidx(const gm__disk* dk, const char* p, size_t n) {
    int i;
    for (i = 0; i < GM__REGBUFS; i++)
        if (dk->regbase[i] && p >= (const char*)dk->regbase[i] && p + n <= (const char*)dk->regbase[i] + dk->reglen[i])
            return i;
    return -1;
}

/* Bytes of chunk i of a job. */
static size_t gm__chunk_len(const gm__disk* dk, size_t bytes, size_t i) {
    size_t at = i * dk->chunk;
    return bytes - at < dk->chunk ? bytes - at : dk->chunk;
}

/* Starts slot k's I/O for the rest of its chunk (a fault may cut it to
   half). With dk->mu. */
/* The queue's depth over time: called before `inflight` changes. */
static void gm__dio_account(gm__disk* dk) {
    uint64_t now = gm__now_ns();
    if (dk->inflight > 0 && now > dk->t_inflight) {
        dk->busy_ns += (int64_t)(now - dk->t_inflight);
        dk->depth_ns += (int64_t)(now - dk->t_inflight) * dk->inflight;
        if (dk->backlog) {
            dk->backlog_ns += (int64_t)(now - dk->t_inflight);
            dk->backlog_depth_ns += (int64_t)(now - dk->t_inflight) * dk->inflight;
        }
    }
    dk->t_inflight = now;
}

/* The data of a request a failed submit left in the ring, made a no-op:
   its completion belongs to no slot. */
#define GM__DIO_NOP UINTPTR_MAX

/* pread/pwrite: one I/O (bytes moved, or -errno). */
static int gm__dio_rw(const gm__disk* dk, int write, char* mem, size_t len, uint64_t off) {
    ssize_t res;
    do res = write ? pwrite(dk->fd, mem, len, (off_t)off) : pread(dk->fd, mem, len, (off_t)off);
    while (res < 0 && errno == EINTR);
    return res < 0 ? -errno : (int)res;
}

/* pread/pwrite: slot k's I/O ended (with dk->mu): its completion waits in
   pend for the engine to reap it. */
static void gm__dio_post(gm__disk* dk, int k, int res) {
    int at = (dk->pend_head + dk->npend++) % dk->depth;
    GPUMEM_ASSERT(dk->npend <= dk->depth);
    dk->pend[2 * at] = k;
    dk->pend[2 * at + 1] = res;
}

static gm_result gm__dio_submit(gm_context* ctx, gm__disk* dk, int k) {
    gm__dslot* sl = &dk->slot[k];
    size_t len = sl->len - sl->done;
    char* mem = sl->mem + sl->done;
    uint64_t off = sl->off + sl->done;
    if (dk->broken) return GM_ERR_IO; /* nothing goes to a broken ring */
    if (len > dk->align && gm__disk_fault(dk, GM_SIM_FAULT_DISK_SHORT, len)) len = gm__round_up(len / 2, dk->align);
    gm__dio_account(dk);
    dk->inflight++;
    dk->ios++;
    dk->depth_sum += dk->uring || dk->nio ? dk->inflight : 1; /* pread/pwrite without threads: one at a time */
    if (dk->pace > 0) sl->sent_at = gm__now_ns();
#ifdef GPUMEM_URING
    if (dk->uring) {
        struct io_uring_sqe* sqe = io_uring_get_sqe(&dk->ring);
        int fd = dk->fixed_file ? 0 : dk->fd, e;
        int bi = dk->fixed_buf ? (sl->mem == sl->buf ? 0 : sl->fixed) : -1;
        if (!sqe) { /* the ring holds twice the depth: cannot happen, but never hang */
            dk->inflight--;
            return GM_ERR_INTERNAL;
        }
        if (sl->write && bi >= 0) io_uring_prep_write_fixed(sqe, fd, mem, (unsigned)len, off, bi);
        else if (sl->write) io_uring_prep_write(sqe, fd, mem, (unsigned)len, off);
        else if (bi >= 0) io_uring_prep_read_fixed(sqe, fd, mem, (unsigned)len, off, bi);
        else io_uring_prep_read(sqe, fd, mem, (unsigned)len, off);
        if (dk->fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data(sqe, (void*)(uintptr_t)k);
        do e = io_uring_submit(&dk->ring);
        while (e == -EINTR || e == -EAGAIN);
        if (e < 0) { /* the request stays in the ring, and a later submit would send it: it becomes a no-op
                        whose completion is passed over, so the slot is free to go again at once */
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, (void*)GM__DIO_NOP);
            dk->inflight--;
            gm__log(ctx, GM_LOG_ERROR, "disk: io_uring_submit: %s", strerror(-e));
            return GM_ERR_IO;
        }
        return GM_OK;
    }
#endif
    (void)ctx;
    if (dk->nio) { /* an I/O thread does it */
        int at = (dk->req_head + dk->nreq++) % dk->depth;
        GPUMEM_ASSERT(dk->nreq <= dk->depth);
        dk->req[at] = k;
        dk->reqlen[at] = len;
        pthread_cond_signal(&dk->io_cv);
        return GM_OK;
    }
    gm__dio_post(dk, k, gm__dio_rw(dk, sl->write, mem, len, off)); /* done now, reaped later */
    return GM_OK;
}

/* One completion: its slot and result (bytes, or -errno); the slot -1 when
   there was none (nowait), -2 when the ring broke. Called without dk->mu
   (it may block); the pread ring is read with it held by the caller.
   drain: the ring broke (the caller read dk->broken), and completions are
   only looked for, never waited for: a peek of the ring's memory, whose
   failure to enter the kernel is passed over (the kernel still posts the
   completions of what it holds there). */
static void gm__dio_wait(gm__disk* dk, int nowait, int drain, unsigned timeout_us, int* k, int* res) {
    *k = -1;
    *res = 0;
#ifdef GPUMEM_URING
    if (dk->uring) {
        struct io_uring_cqe* cqe = NULL;
        int e;
        if (drain) {
            if (io_uring_peek_cqe(&dk->ring, &cqe) != 0 || !cqe) return;
            e = 0;
        } else if (nowait) e = io_uring_peek_cqe(&dk->ring, &cqe);
        else if (timeout_us) {
            struct __kernel_timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = (long long)timeout_us * 1000;
            e = io_uring_wait_cqe_timeout(&dk->ring, &cqe, &ts);
        } else {
            do e = io_uring_wait_cqe(&dk->ring, &cqe);
            while (e == -EINTR || e == -EAGAIN);
        }
        if (e == -EAGAIN || e == -ETIME || e == -EINTR) return;
        if (e < 0 || !cqe) { /* the ring itself broke: the slot is unknown, so everything fails */
            *res = e < 0 ? e : -EIO;
            *k = -2;
            return;
        }
        {
            uintptr_t data = (uintptr_t)io_uring_cqe_get_data(cqe);
            *k = data == GM__DIO_NOP ? -1 : (int)data;
        }
        *res = cqe->res;
        io_uring_cqe_seen(&dk->ring, cqe);
        return;
    }
#endif
    (void)timeout_us, (void)drain;
    if (!dk->npend) return;
    *k = dk->pend[2 * dk->pend_head];
    *res = dk->pend[2 * dk->pend_head + 1];
    dk->pend_head = (dk->pend_head + 1) % dk->depth;
    dk->npend--;
    (void)nowait;
}

static void gm__job_fail(gm__job* j, gm_result r) {
    if (j->res == GM_OK) j->res = r;
}

/* The end of a slot's I/O (res: bytes, or -errno): the slot done, or its
   job failed; a slot that is not a staged read's is free again. */
static void gm__dio_end(gm_context* ctx, gm__disk* dk, int k, int res) {
    gm__dslot* sl = &dk->slot[k];
    gm__job* j = sl->job;
    if (res <= 0) {
        if (j->res == GM_OK)
            gm__log(ctx, GM_LOG_ERROR, "disk: %s of %zu bytes at offset %llu of the spill file in %s failed: %s",
                    sl->write ? "write" : "read", sl->len, (unsigned long long)sl->off, ctx->disk_dir,
                    res ? strerror(-res) : "no progress");
        gm__job_fail(j, res == -ENOSPC || res == -EDQUOT ? GM_ERR_DISK_FULL : GM_ERR_IO);
    } else {
        sl->done = sl->len;
    }
    sl->io_done = 1;
    if (j->kind == GM__J_READ_MEM && j->res == GM_OK && dk->checksum) { /* checked now, while the rest is in flight */
        size_t i = (size_t)(sl->off - j->off) / dk->chunk;
        j->ccrc[i] = gm__crc32c(0, sl->mem, gm__chunk_len(dk, j->bytes, i));
    }
    if (j->kind == GM__J_READ_DEV) return; /* released in order by the job (and copied onward) */
    j->finished++;
    sl->job = NULL;
}

/* The ring broke (res: its -errno), with dk->mu: nothing is sent from now
   on, and every job fails. What the kernel still holds may yet read or
   write its slot's buffer (a staging buffer, a host copy, the bounce
   buffer), so each slot stays its job's, and each job unfinished, until
   its completion is reaped: the engine keeps peeking at the ring's memory
   (gm__dio_wait's drain), where the kernel posts them whatever failed to
   enter it, and says every 10 s while any is missing. Slots waiting to go
   again end (gm__dio_again). */
static void gm__dio_break(gm_context* ctx, gm__disk* dk, int res) {
    gm__job* j;
    if (dk->broken) return;
    gm__log(ctx, GM_LOG_ERROR, "disk: io_uring: %s; the disk tier stops (its %d I/Os in flight are reaped as they end)",
            strerror(-res), dk->inflight);
    dk->broken = 1;
    dk->broken_inflight = dk->inflight;
    dk->broken_log = gm__now_ns();
    for (j = dk->jobs; j; j = j->next)
        if (j->started && !j->finishing) gm__job_fail(j, GM_ERR_IO);
}

/* The modelled disk (desc.sim.disk_bytes_per_s): an I/O of n bytes sent
   at `sent` ends no sooner than the later of that and the disk's previous
   end, plus n over the rate; the engine holds the completion until then
   (with dk->mu let go: nothing of the slot or its job has moved yet, and
   only the engine applies completions). The real disk being faster, the
   figures then follow the model, whatever the machine's disk does. */
static void gm__dio_pace(gm__disk* dk, uint64_t sent, size_t n) {
    uint64_t at = dk->pace_clock > sent ? dk->pace_clock : sent;
    at += (uint64_t)((double)n / dk->pace * 1e9);
    dk->pace_clock = at;
    if (gm__now_ns() >= at) return;
    pthread_mutex_unlock(&dk->mu);
    gm__sleep_until_ns(at);
    pthread_mutex_lock(&dk->mu);
}

/* Applies one completion to its slot and job (with dk->mu): a whole I/O
   marks the slot done, a short one goes again for the rest, an error
   fails the job; k -2: the ring broke. */
static void gm__dio_complete(gm_context* ctx, gm__disk* dk, int k, int res) {
    gm__dslot* sl;
    gm__job* j;
    if (k == -2) {
        gm__dio_break(ctx, dk, res);
        return;
    }
    if (dk->pace > 0 && res > 0 && !dk->broken) gm__dio_pace(dk, dk->slot[k].sent_at, (size_t)res);
    if (dk->uring && gm__disk_fault(dk, GM_SIM_FAULT_DISK_RING, dk->slot[k].len))
        gm__dio_break(ctx, dk, -EBADF); /* this completion is the first the drain reaps */
    if (dk->broken) dk->drained++;
    gm__dio_account(dk);
    dk->inflight--;
    sl = &dk->slot[k];
    j = sl->job;
    if (res >= 0 && gm__disk_fault(dk, sl->write ? GM_SIM_FAULT_DISK_WRITE : GM_SIM_FAULT_DISK_READ, sl->len)) res = -EIO;
    if (res >= 0 && sl->write && gm__disk_fault(dk, GM_SIM_FAULT_DISK_FULL, sl->len)) res = -ENOSPC;
    if (res > 0 && sl->done + (size_t)res < sl->len && j->res == GM_OK) {
        /* the rest goes again; with O_DIRECT from the last whole unit of the alignment (the bytes
           before it again: the same bytes), and a disk that moves less than one unit makes no progress */
        size_t done = sl->done + (size_t)res;
        if (dk->direct) done -= done % dk->align;
        if (done > sl->done) {
            sl->done = done;
            if (gm__dio_submit(ctx, dk, k) == GM_OK) return;
            res = -EIO;
        } else {
            res = 0;
        }
    }
    if ((res == -EAGAIN || res == -EINTR) && j->res == GM_OK && sl->again < GM__DIO_AGAIN) {
        /* a transient refusal (a completion may carry one: a device queue that was full, a signal):
           the same range goes again, a few times at most; after EAGAIN, once the disk had a moment
           (1 ms, then twice as long each time: the engine sends it, gm__dio_again) */
        uint64_t wait = res == -EAGAIN ? (uint64_t)GM__DIO_BACKOFF << sl->again : 0;
        char when[32] = "";
        sl->again++;
        if (wait) snprintf(when, sizeof when, " in %u ms", (unsigned)(wait / 1000000u));
        gm__log(ctx, GM_LOG_WARN, "disk: %s at offset %llu of the spill file: %s; it goes again%s",
                sl->write ? "write" : "read", (unsigned long long)(sl->off + sl->done), strerror(-res), when);
        if (wait) {
            sl->again_at = gm__now_ns() + wait;
            dk->waiting++;
            return;
        }
        if (gm__dio_submit(ctx, dk, k) == GM_OK) return;
        res = -EIO;
    }
    gm__dio_end(ctx, dk, k, res);
}

/* A slot without a job, one whose buffer no copy still reads first; -1
   when every slot is taken. */
static int gm__slot_free(const gm__disk* dk) {
    int i, any = -1;
    for (i = 0; i < dk->nslot; i++)
        if (!dk->slot[i].job) {
            if (!dk->slot[i].ev_pending) return i;
            if (any < 0) any = i;
        }
    return any;
}

/* Room in the I/O queue for one more. */
static int gm__dio_room(const gm__disk* dk) { return dk->inflight < dk->depth; }

/* Sends again the I/O of the slots whose moment after EAGAIN passed,
   while the queue has room (with dk->mu); one whose job failed meanwhile
   ends instead. *next: when the first one still waiting goes (0: none).
   Whether any moved. */
static int gm__dio_again(gm_context* ctx, gm__disk* dk, uint64_t* next) {
    uint64_t now = gm__now_ns();
    int i, did = 0;
    *next = 0;
    for (i = 0; i < dk->nslot && dk->waiting; i++) {
        gm__dslot* sl = &dk->slot[i];
        int dead;
        if (!sl->again_at) continue;
        dead = sl->job->res != GM_OK || dk->broken;
        if (dead || (sl->again_at <= now && gm__dio_room(dk))) {
            sl->again_at = 0;
            dk->waiting--;
            did = 1;
            if (dead) gm__dio_end(ctx, dk, i, -ECANCELED);
            else if (gm__dio_submit(ctx, dk, i) != GM_OK) gm__dio_end(ctx, dk, i, -EIO);
        } else if (!*next || sl->again_at < *next) {
            *next = sl->again_at;
        }
    }
    return did;
}

static const gm__block* gm__host_seek(const gm__block* h, size_t* at, size_t* off); /* >>tier */

/* A MEM job's memory at byte `at` (the start of a chunk: in one extent).
   Its chunks are asked for in order, so the walk of a host copy's extents
   goes on from the last one found: a copy in many pieces costs a step per
   piece, not one per piece for every chunk. */
static char* gm__job_mem(gm__job* j, size_t at) {
    size_t off;
    if (!j->hx) return j->mem + at;
    if (!j->hcur || at < j->hcur_at) {
        j->hcur = j->hx;
        j->hcur_at = 0;
    }
    off = at - j->hcur_at;
    j->hcur = gm__host_seek(j->hcur, &j->hcur_at, &off);
    return (char*)j->hcur->addr + off;
}

static void gm__dslot_start(gm__dslot* sl, gm__job* j, int write, char* mem, uint64_t off, size_t len) {
    sl->job = j;
    sl->io_done = 0;
    sl->write = write;
    sl->mem = mem;
    sl->off = off;
    sl->len = len;
    sl->done = 0;
    sl->again = 0;
    sl->again_at = 0;
    sl->fixed = j->buf_index;
}

/* A copy into or out of a staging buffer was queued on s, and its event
   could not be recorded: nothing could tell when it is done, so s is
   waited for now (the device, when that fails too), before the buffer or
   the device memory is given to anyone else. */
static void gm__copy_settle(gm_context* ctx, gm_stream s) {
    if (ctx->be->stream_sync(ctx, s) != GM_OK) ctx->be->device_sync(ctx);
}

/* Whether the work before event ev completed, without waiting: 0 while it
   runs; 1 once done, or when the backend cannot tell (after a wait for the
   whole device, to be sure). */
static int gm__ev_done(gm_context* ctx, void* ev) {
    gm_result q = ctx->be->event_query(ctx, ev);
    if (q == GM_NOT_READY) return 0;
    if (q != GM_OK) ctx->be->device_sync(ctx);
    return 1;
}

/* Moves a job as far as it can go now, without waiting (with dk->mu).
   Returns whether anything happened; *stuck says what it waits for: 1 a
   gate, 2 a staging copy. */
static int gm__job_pump(gm_context* ctx, gm__disk* dk, gm__job* j, int* stuck) {
    int did = 0, k;
    gm_result err;
    if (!j->started) {
        int g;
        for (g = 0; g < 2; g++)
            if (j->gate[g] && !gm__ev_done(ctx, j->gate[g])) {
                *stuck = 1;
                return 0;
            }
        j->started = 1;
        j->t0 = gm__now_ns();
        if (dk->broken) gm__job_fail(j, GM_ERR_IO);
        did = 1;
    }
    if (j->res != GM_OK) { /* no more I/O: the chunks in flight are reaped (a staged read's, in order) */
        while (j->kind == GM__J_READ_DEV && j->finished < j->sent && dk->slot[j->fifo[j->fhead]].io_done) {
            dk->slot[j->fifo[j->fhead]].job = NULL;
            j->fhead = (j->fhead + 1) % (size_t)dk->nslot;
            j->finished++;
            did = 1;
        }
        /* a staged write's copies not yet sent land first: they read the device memory the job's end lets
           its tensor free (gm__job_over waits for staged == sent) */
        while (j->kind == GM__J_WRITE_DEV && j->sent < j->staged) {
            gm__dslot* sl = &dk->slot[j->fifo[j->fhead]];
            if (!gm__ev_done(ctx, sl->ev)) {
                *stuck = 2;
                break;
            }
            sl->ev_pending = 0;
            sl->job = NULL;
            j->fhead = (j->fhead + 1) % (size_t)dk->nslot;
            j->staged--;
            did = 1;
        }
        return did;
    }
    switch (j->kind) {
    case GM__J_WRITE_MEM:
    case GM__J_READ_MEM: /* straight between host memory and the file */
        while (j->sent < j->n && gm__dio_room(dk) && (k = gm__slot_free(dk)) >= 0) {
            size_t at = j->sent * dk->chunk, len = gm__chunk_len(dk, j->bytes, j->sent);
            int w = j->kind == GM__J_WRITE_MEM;
            char* mem = gm__job_mem(j, at);
            if (w && dk->checksum) j->crc = gm__crc32c(j->crc, mem, len);
            gm__dslot_start(&dk->slot[k], j, w, mem, j->off + at, gm__round_up(len, dk->align));
            if (j->hx && dk->fixed_buf) dk->slot[k].fixed = gm__disk_bufidx(dk, mem, gm__round_up(len, dk->align));
            j->sent++;
            did = 1;
            if ((err = gm__dio_submit(ctx, dk, k)) != GM_OK) {
                dk->slot[k].job = NULL;
                j->finished++;
                gm__job_fail(j, err);
                return did;
            }
        }
        break;
    case GM__J_WRITE_DEV: /* device -> staging (copies on j->copy) -> file, in order */
        while (j->staged < j->n && j->staged - j->sent < (size_t)dk->nslot && (k = gm__slot_free(dk)) >= 0) {
            gm__dslot* sl = &dk->slot[k];
            size_t at = j->staged * dk->chunk, len = gm__chunk_len(dk, j->bytes, j->staged);
            err = sl->ev_pending ? ctx->be->stream_wait_event(ctx, j->copy, sl->ev) : GM_OK; /* a copy out goes first */
            if (err == GM_OK) err = ctx->be->copy(ctx, sl->buf, (const char*)j->dev + at, len, GM_COPY_DEVICE_TO_HOST, j->copy);
            if (err == GM_OK && (err = ctx->be->event_record(ctx, sl->ev, j->copy)) != GM_OK)
                gm__copy_settle(ctx, j->copy); /* queued, and no event says when it is done */
            if (err != GM_OK) {
                gm__job_fail(j, err);
                return 1;
            }
            sl->ev_pending = 1;
            gm__dslot_start(sl, j, 1, sl->buf, j->off + at, gm__round_up(len, dk->align));
            sl->fixed = dk->fixed_buf ? 0 : -1;
            dk->slot[k].io_done = 0;
            j->fifo[(j->fhead + (j->staged - j->sent)) % (size_t)dk->nslot] = k;
            j->staged++;
            did = 1;
        }
        while (j->sent < j->staged && gm__dio_room(dk)) { /* the copies that landed: their CRC, then the write */
            gm__dslot* sl;
            size_t len = gm__chunk_len(dk, j->bytes, j->sent);
            gm_result q;
            k = j->fifo[j->fhead];
            sl = &dk->slot[k];
            q = ctx->be->event_query(ctx, sl->ev);
            if (q == GM_NOT_READY) {
                *stuck = 2;
                break;
            }
            if (q != GM_OK && (err = ctx->be->event_sync(ctx, sl->ev)) != GM_OK) {
                gm__job_fail(j, err);
                return 1;
            }
            sl->ev_pending = 0;
            if (dk->checksum) j->crc = gm__crc32c(j->crc, sl->buf, len);
            j->fhead = (j->fhead + 1) % (size_t)dk->nslot;
            j->sent++;
            did = 1;
            if ((err = gm__dio_submit(ctx, dk, k)) != GM_OK) {
                sl->job = NULL;
                j->finished++;
                gm__job_fail(j, err);
                return did;
            }
        }
        break;
    case GM__J_READ_DEV: /* file -> staging -> device (copies on j->copy), in order */
        while (j->sent < j->n && j->sent - j->finished < (size_t)dk->nslot && gm__dio_room(dk) &&
               (k = gm__slot_free(dk)) >= 0) {
            gm__dslot* sl = &dk->slot[k];
            size_t at = j->sent * dk->chunk, len = gm__chunk_len(dk, j->bytes, j->sent);
            if (sl->ev_pending) { /* its last copy out may still read it */
                if (!gm__ev_done(ctx, sl->ev)) {
                    *stuck = 2;
                    break;
                }
                sl->ev_pending = 0;
            }
            gm__dslot_start(sl, j, 0, sl->buf, j->off + at, gm__round_up(len, dk->align));
            sl->fixed = dk->fixed_buf ? 0 : -1;
            j->fifo[(j->fhead + (j->sent - j->finished)) % (size_t)dk->nslot] = k;
            j->sent++;
            did = 1;
            if ((err = gm__dio_submit(ctx, dk, k)) != GM_OK) {
                sl->job = NULL;
                j->sent--; /* never in flight */
                gm__job_fail(j, err);
                return did;
            }
        }
        while (j->finished < j->sent && dk->slot[j->fifo[j->fhead]].io_done) { /* in order: CRC, copy onward */
            gm__dslot* sl = &dk->slot[j->fifo[j->fhead]];
            size_t at = j->finished * dk->chunk, len = gm__chunk_len(dk, j->bytes, j->finished);
            err = j->res;
            if (err == GM_OK && dk->checksum) j->crc = gm__crc32c(j->crc, sl->buf, len);
            if (err == GM_OK) err = ctx->be->copy(ctx, (char*)j->dev + at, sl->buf, len, j->ckind, j->copy);
            if (err == GM_OK && (err = ctx->be->event_record(ctx, sl->ev, j->copy)) != GM_OK)
                gm__copy_settle(ctx, j->copy); /* queued, and no event says when it is done */
            if (err == GM_OK) sl->ev_pending = 1;
            sl->job = NULL;
            j->fhead = (j->fhead + 1) % (size_t)dk->nslot;
            j->finished++;
            did = 1;
            if (err != GM_OK) gm__job_fail(j, err);
        }
        break;
    }
    return did;
}

/* A job is over once every I/O it submitted is reaped (and, for a staged
   read, released in order; for a failed staged write, once the copies it
   staged and never sent landed). */
static int gm__job_over(const gm__job* j) {
    if (!j->started || j->finishing) return 0;
    return j->res != GM_OK ? j->finished == j->sent && (j->kind != GM__J_WRITE_DEV || j->staged == j->sent)
                           : j->finished == j->n;
}

/* Its end (without dk->mu: a read's CRC may take a while): any slot still
   its own comes back, a read's checksum is checked, the
   figures counted, and it goes to dk->done (or to the caller waiting). */
static void gm__job_finish(gm__disk* dk, gm__job* j) {
    int i, bad;
    gm__job** pp;
    pthread_mutex_lock(&dk->mu);
    if (j->kind == GM__J_WRITE_DEV) /* slots still its own (none should be: each was reaped): they come back */
        for (i = 0; i < dk->nslot; i++)
            if (dk->slot[i].job == j) dk->slot[i].job = NULL;
    pthread_mutex_unlock(&dk->mu);
    if (j->res == GM_OK && j->kind == GM__J_READ_MEM && dk->checksum) { /* the chunks' CRCs, combined */
        uint32_t op[32]; /* whole chunks: one operator for all */
        size_t c;
        gm__crc32c_shift(op, dk->chunk);
        j->crc = j->ccrc[0];
        for (c = 1; c < j->n; c++)
            j->crc = gm__chunk_len(dk, j->bytes, c) == dk->chunk
                   ? gm__gf2_times(op, j->crc) ^ j->ccrc[c]
                   : gm__crc32c_combine(j->crc, j->ccrc[c], gm__chunk_len(dk, j->bytes, c));
    }
    bad = j->res == GM_OK && (j->kind == GM__J_READ_MEM || j->kind == GM__J_READ_DEV) && dk->checksum && !j->nocheck &&
          j->crc != j->want;
    pthread_mutex_lock(&dk->mu);
    if (bad) {
        dk->crc_fail++;
        j->res = GM_ERR_CHECKSUM;
    }
    if (j->res == GM_OK) {
        int w = j->kind == GM__J_WRITE_MEM || j->kind == GM__J_WRITE_DEV;
        *(w ? &dk->bytes_w : &dk->bytes_r) += (int64_t)j->bytes;
        *(w ? &dk->ns_w : &dk->ns_r) += (int64_t)(gm__now_ns() - j->t0);
    } else {
        dk->errors++;
    }
    for (pp = &dk->jobs; *pp != j; pp = &(*pp)->next) {}
    *pp = j->next;
    dk->njobs--;
    j->done = 1;
    if (!j->sync) {
        j->next = dk->done;
        dk->done = j;
        __atomic_add_fetch(&dk->ndone, 1, __ATOMIC_RELEASE);
    }
    pthread_cond_broadcast(&dk->done_cv);
    pthread_mutex_unlock(&dk->mu);
}

/* An I/O thread (pread/pwrite): takes a request, moves its bytes without
   dk->mu, posts its completion and wakes the engine. */
static void* gm__dio_thread(void* arg) {
    gm__disk* dk = (gm__disk*)arg;
    pthread_mutex_lock(&dk->mu);
    for (;;) {
        gm__dslot* sl;
        char* mem;
        uint64_t off;
        size_t len;
        int k, w, res;
        while (!dk->nreq && !dk->io_stop) pthread_cond_wait(&dk->io_cv, &dk->mu);
        if (!dk->nreq) break;
        k = dk->req[dk->req_head];
        len = dk->reqlen[dk->req_head];
        dk->req_head = (dk->req_head + 1) % dk->depth;
        dk->nreq--;
        sl = &dk->slot[k];
        mem = sl->mem + sl->done;
        off = sl->off + sl->done;
        w = sl->write;
        pthread_mutex_unlock(&dk->mu);
        res = gm__dio_rw(dk, w, mem, len, off);
        pthread_mutex_lock(&dk->mu);
        gm__dio_post(dk, k, res);
        pthread_cond_signal(&dk->cv);
    }
    pthread_mutex_unlock(&dk->mu);
    return NULL;
}

/* The engine: pumps the jobs (urgent ones come first in the list), reaps
   completions, finishes the jobs that are over, and sleeps on the I/O in
   flight, on a gate or a staging copy, or until there is work. */
static void* gm__disk_engine(void* arg) {
    gm__disk* dk = (gm__disk*)arg;
    gm_context* ctx = dk->ctx;
    pthread_mutex_lock(&dk->mu);
    for (;;) {
        gm__job **pp, *j;
        int did = 0, stuck = 0, k, res;
        void* sleep_on = NULL;
        uint64_t again_at = 0;
        for (j = dk->jobs; j; j = j->next) {
            int st = 0;
            if (j->finishing) continue;
            did |= gm__job_pump(ctx, dk, j, &st);
            if (st && !sleep_on) {
                stuck = 1;
                if (st == 1) {
                    sleep_on = j->gate[0] && ctx->be->event_query(ctx, j->gate[0]) == GM_NOT_READY ? j->gate[0] : j->gate[1];
                } else {
                    int i;
                    for (i = 0; i < dk->nslot && !sleep_on; i++)
                        if (dk->slot[i].ev_pending && (dk->slot[i].job == j || !dk->slot[i].job)) sleep_on = dk->slot[i].ev;
                }
            }
        }
        { /* chunks waiting while the queue is full or every slot taken: the disk (or the staging)
             is the bottleneck (for the figures) */
            int bl = 0, qfull = !gm__dio_room(dk);
            if (qfull || gm__slot_free(dk) < 0)
                for (j = dk->jobs; j && !bl; j = j->next)
                    bl = !j->finishing && j->res == GM_OK &&
                         (qfull || j->kind != GM__J_WRITE_DEV ? j->sent : j->staged) < j->n;
            if (bl != dk->backlog) {
                gm__dio_account(dk);
                dk->backlog = bl;
            }
        }
        while (dk->inflight) { /* completions that are there already */
            gm__dio_wait(dk, 1, dk->broken, 0, &k, &res);
            if (k == -1) break;
            gm__dio_complete(ctx, dk, k, res);
            did = 1;
        }
        if (dk->waiting) did |= gm__dio_again(ctx, dk, &again_at);
        for (pp = &dk->jobs; (j = *pp) != NULL && !gm__job_over(j); pp = &j->next) {}
        if (j) { /* one job over: finished without the lock (it stays listed until done), then around again */
            j->finishing = 1;
            pthread_mutex_unlock(&dk->mu);
            gm__job_finish(dk, j);
            pthread_mutex_lock(&dk->mu);
            continue;
        }
        if (did) continue;
        if (dk->stop && !dk->jobs && !dk->inflight) break;
        if (dk->inflight && dk->uring && dk->broken) { /* draining a broken ring: a look every ms */
            uint64_t now = gm__now_ns();
            if (now - dk->broken_log >= 10000000000ull) {
                dk->broken_log = now;
                gm__log(ctx, GM_LOG_ERROR, "disk: %d I/Os of the broken ring have not ended; their buffers stay theirs",
                        dk->inflight);
            }
            pthread_mutex_unlock(&dk->mu);
            gm__sleep_until_ns(now + 1000000);
            pthread_mutex_lock(&dk->mu);
        } else if (dk->inflight && dk->uring) { /* sleep on I/O; briefly when a gate, a copy or an I/O's moment
                                                   to go again may come meanwhile */
            pthread_mutex_unlock(&dk->mu);
            gm__dio_wait(dk, 0, 0, stuck || again_at ? 200 : 0, &k, &res);
            pthread_mutex_lock(&dk->mu);
            if (k != -1) gm__dio_complete(ctx, dk, k, res);
        } else if (dk->inflight && dk->nio) { /* sleep on the I/O threads' completions, as on the ring's */
            if (stuck || again_at) gm__cond_wait_ns(&dk->cv, &dk->mu, 200000u);
            else pthread_cond_wait(&dk->cv, &dk->mu);
        } else if (again_at) { /* an I/O goes again then: until then, or 50 us when stuck (1 ms at most) */
            uint64_t until = gm__now_ns() + (stuck ? 50000u : 1000000u);
            pthread_mutex_unlock(&dk->mu);
            gm__sleep_until_ns(again_at < until ? again_at : until);
            pthread_mutex_lock(&dk->mu);
        } else if (sleep_on) {
            pthread_mutex_unlock(&dk->mu);
            if (ctx->be->event_sync(ctx, sleep_on) != GM_OK) ctx->be->device_sync(ctx);
            pthread_mutex_lock(&dk->mu);
        } else if (stuck) { /* nothing to sleep on: a moment */
            pthread_mutex_unlock(&dk->mu);
            gm__sleep_until_ns(gm__now_ns() + 50000);
            pthread_mutex_lock(&dk->mu);
        } else {
            pthread_cond_wait(&dk->cv, &dk->mu);
        }
    }
    pthread_mutex_unlock(&dk->mu);
    return NULL;
}

/* A new job for the engine (the manager's, with its lock): urgent ones go
   after the urgent ones already queued, the others at the end. */
static gm__job* gm__job_new(gm__disk* dk, int kind, uint64_t off, size_t bytes) {
    gm__job* j = (gm__job*)gm__calloc(sizeof *j);
    if (!j) return NULL;
    if ((kind == GM__J_WRITE_DEV || kind == GM__J_READ_DEV) &&
        !(j->fifo = (int*)GPUMEM_MALLOC((size_t)dk->nslot * sizeof *j->fifo))) {
        GPUMEM_FREE(j);
        return NULL;
    }
    j->kind = kind;
    j->off = off;
    j->bytes = bytes;
    j->n = (bytes + dk->chunk - 1) / dk->chunk;
    if (kind == GM__J_READ_MEM && !(j->ccrc = (uint32_t*)gm__calloc((j->n ? j->n : 1) * sizeof *j->ccrc))) {
        GPUMEM_FREE(j->fifo);
        GPUMEM_FREE(j);
        return NULL;
    }
    j->buf_index = -1;
    j->ti = UINT32_MAX;
    return j;
}

static void gm__job_submit(gm__disk* dk, gm__job* j, int urgent) {
    gm__job** pp;
    pthread_mutex_lock(&dk->mu);
    j->urgent = urgent;
    if (j->mem) j->buf_index = dk->fixed_buf && !j->hx ? gm__disk_bufidx(dk, j->mem, j->bytes) : -1;
    for (pp = &dk->jobs; *pp && (!urgent || (*pp)->urgent); pp = &(*pp)->next) {}
    j->next = *pp;
    *pp = j;
    dk->njobs++;
    pthread_cond_signal(&dk->cv);
    pthread_mutex_unlock(&dk->mu);
}

/* A job a caller now waits for goes first (if not started) and is waited
   for; it is then in dk->done for the manager to apply. */
static void gm__job_wait(gm__disk* dk, gm__job* j) {
    pthread_mutex_lock(&dk->mu);
    if (!j->urgent && !j->done) {
        gm__job** pp;
        for (pp = &dk->jobs; *pp && *pp != j; pp = &(*pp)->next) {}
        if (*pp) {
            *pp = j->next;
            j->urgent = 1;
            for (pp = &dk->jobs; *pp && (*pp)->urgent; pp = &(*pp)->next) {}
            j->next = *pp;
            *pp = j;
        }
        pthread_cond_signal(&dk->cv);
    }
    while (!j->done) pthread_cond_wait(&dk->done_cv, &dk->mu);
    pthread_mutex_unlock(&dk->mu);
}

/* Jobs done, taken off the done list (oldest first), for the manager. */
static gm__job* gm__jobs_done(gm__disk* dk) {
    gm__job *j, *rev = NULL;
    if (!__atomic_load_n(&dk->ndone, __ATOMIC_ACQUIRE)) return NULL;
    pthread_mutex_lock(&dk->mu);
    j = dk->done;
    dk->done = NULL;
    __atomic_store_n(&dk->ndone, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&dk->mu);
    while (j) { /* the list is newest first */
        gm__job* n = j->next;
        j->next = rev;
        rev = j;
        j = n;
    }
    return rev;
}

/* Takes one finished job off the done list (it must be there), for the
   manager to apply it alone. */
static void gm__job_take(gm__disk* dk, gm__job* j) {
    gm__job** pp;
    pthread_mutex_lock(&dk->mu);
    for (pp = &dk->done; *pp != j; pp = &(*pp)->next) {}
    *pp = j->next;
    __atomic_sub_fetch(&dk->ndone, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&dk->mu);
    j->next = NULL;
}

static void gm__job_free(gm__job* j) {
    GPUMEM_FREE(j->fifo);
    GPUMEM_FREE(j->ccrc);
    GPUMEM_FREE(j);
}

/* A staged job (device memory and the file, through the staging slots,
   the copies on `copy`), not yet submitted; NULL without host memory. */
static gm__job* gm__staged_new(gm__disk* dk, int kind, uint64_t off, void* dev, size_t bytes, gm_copy_kind ckind,
                               gm_stream copy, uint32_t want) {
    gm__job* j = gm__job_new(dk, kind, off, bytes);
    if (!j) return NULL;
    j->dev = dev;
    j->ckind = ckind;
    j->copy = copy;
    j->want = want;
    return j;
}

/* Runs a staged job and waits for it: what the manager does when no host
   memory can carry the bytes. */
static gm_result gm__disk_staged(gm__disk* dk, int kind, uint64_t off, void* dev, size_t bytes,
                                 gm_copy_kind ckind, gm_stream copy, uint32_t* crc) {
    gm__job* j = gm__staged_new(dk, kind, off, dev, bytes, ckind, copy, *crc);
    gm_result r;
    if (!j) return GM_ERR_HOST_OUT_OF_MEMORY;
    j->sync = 1;
    gm__job_submit(dk, j, 1);
    gm__job_wait(dk, j);
    r = j->res;
    if (r == GM_OK && kind == GM__J_WRITE_DEV) *crc = j->crc;
    gm__job_free(j);
    return r;
}

/* A job of host memory (pinned, aligned) and the file, run now and waited
   for: a swap's chunk. *crc: the CRC32C of its bytes (with checksums on);
   a read's is not checked here, its caller checks the tensor's. */
static gm_result gm__disk_sync_mem(gm__disk* dk, int kind, uint64_t off, char* mem, size_t bytes, uint32_t* crc) {
    gm__job* j = gm__job_new(dk, kind, off, bytes);
    gm_result r;
    if (!j) return GM_ERR_HOST_OUT_OF_MEMORY;
    j->mem = mem;
    j->sync = 1;
    j->nocheck = 1;
    gm__job_submit(dk, j, 1);
    gm__job_wait(dk, j);
    r = j->res;
    *crc = j->crc;
    gm__job_free(j);
    return r;
}

static void gm__disk_close(gm_context* ctx) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    int i;
    if (!dk) return;
    if (dk->running) {
        pthread_mutex_lock(&dk->mu);
        dk->stop = 1;
        pthread_cond_signal(&dk->cv);
        pthread_mutex_unlock(&dk->mu);
        pthread_join(dk->th, NULL);
    }
    if (dk->nio) { /* after the engine: nothing is in flight */
        pthread_mutex_lock(&dk->mu);
        dk->io_stop = 1;
        pthread_cond_broadcast(&dk->io_cv);
        pthread_mutex_unlock(&dk->mu);
        for (i = 0; i < dk->nio; i++) pthread_join(dk->io_th[i], NULL);
        dk->nio = 0;
    }
    while (dk->done) {
        gm__job* j = dk->done;
        dk->done = j->next;
        gm__job_free(j);
    }
#ifdef GPUMEM_URING
    if (dk->uring) io_uring_queue_exit(&dk->ring);
#endif
    if (dk->slot)
        for (i = 0; i < dk->nslot; i++)
            if (dk->slot[i].ev) ctx->be->event_destroy(ctx, dk->slot[i].ev);
    if (dk->staging) gm__pinned_free(ctx, dk->staging, dk->chunk * (size_t)dk->nslot);
    if (dk->fd >= 0) close(dk->fd);
    gm__arena_destroy(&dk->ar);
    pthread_cond_destroy(&dk->cv);
    pthread_cond_destroy(&dk->done_cv);
    pthread_cond_destroy(&dk->io_cv);
    pthread_mutex_destroy(&dk->mu);
    GPUMEM_FREE(dk->slot);
    GPUMEM_FREE(dk->pend);
    GPUMEM_FREE(dk->req);
    GPUMEM_FREE(dk->reqlen);
    GPUMEM_FREE(dk->io_th);
    GPUMEM_FREE(dk);
    ctx->disk = NULL;
}

/* Setup of the disk tier, when desc.disk_dir names a directory. */
static gm_result gm__disk_open(gm_context* ctx) {
    const gm_desc* d = &ctx->desc;
    gm__disk* dk;
    struct statvfs vfs;
    int i;
    if (!d->disk_dir) return GM_OK;
    dk = (gm__disk*)gm__calloc(sizeof *dk);
    if (!dk) return GM_ERR_HOST_OUT_OF_MEMORY;
    ctx->disk = dk;
    dk->ctx = ctx;
    dk->fd = -1;
    pthread_mutex_init(&dk->mu, NULL);
    pthread_cond_init(&dk->cv, NULL);
    pthread_cond_init(&dk->done_cv, NULL);
    pthread_cond_init(&dk->io_cv, NULL);
    if (d->disk_dir != ctx->disk_dir) { /* keep the path: the caller's string may go */
        if (strlen(d->disk_dir) >= GM__PATH) {
            gm__log(ctx, GM_LOG_ERROR, "disk: the spill directory's path is too long");
            gm__disk_close(ctx);
            return GM_ERR_INVALID_ARGUMENT;
        }
        strcpy(ctx->disk_dir, d->disk_dir);
        ctx->desc.disk_dir = ctx->disk_dir;
    }
    dk->checksum = d->disk_checksum != GM_TOGGLE_OFF;
    dk->depth = d->disk_depth;
    dk->pace = d->sim.disk_bytes_per_s;
    dk->nslot = dk->depth + (dk->depth + 1) / 2;
    dk->fd = gm__disk_create(ctx, d->disk_dir, O_DIRECT);
    dk->direct = dk->fd >= 0;
    if (dk->fd < 0 && errno == EINVAL) { /* no O_DIRECT here (tmpfs): the page cache it is */
        dk->fd = gm__disk_create(ctx, d->disk_dir, 0);
        if (dk->fd >= 0)
            gm__log(ctx, GM_LOG_WARN, "disk: %s refuses O_DIRECT: spilling through the page cache", d->disk_dir);
    }
    if (dk->fd < 0) {
        gm__log(ctx, GM_LOG_ERROR, "disk: cannot create a spill file in %s: %s", d->disk_dir, strerror(errno));
        gm__disk_close(ctx);
        return GM_ERR_IO;
    }
    dk->align = 4096;
#if defined(STATX_DIOALIGN)
    {
        struct statx sx;
        if (statx(dk->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
            sx.stx_dio_offset_align > dk->align && sx.stx_dio_offset_align <= 1024 * 1024)
            dk->align = sx.stx_dio_offset_align;
    }
#endif
    dk->chunk = gm__round_up(d->disk_chunk, dk->align);
    if (fstatvfs(dk->fd, &vfs) != 0) memset(&vfs, 0, sizeof vfs);
    dk->budget = d->disk_budget ? d->disk_budget : (size_t)vfs.f_bavail * vfs.f_frsize;
    dk->budget -= dk->budget % dk->align;
    if (!dk->budget)
        gm__log(ctx, GM_LOG_WARN,
                "disk: a budget of %zu bytes%s is less than the file system's unit of direct I/O (%zu bytes): the "
                "disk tier can hold nothing", d->disk_budget ? d->disk_budget : (size_t)vfs.f_bavail * vfs.f_frsize,
                d->disk_budget ? "" : " (the free space)", dk->align);
    gm__arena_init(&dk->ar, dk->align, NULL, 0);
    dk->slot = (gm__dslot*)gm__calloc((size_t)dk->nslot * sizeof *dk->slot);
    dk->pend = (int*)gm__calloc((size_t)dk->depth * 2 * sizeof *dk->pend);
    dk->req = (int*)gm__calloc((size_t)dk->depth * sizeof *dk->req);
    dk->reqlen = (size_t*)gm__calloc((size_t)dk->depth * sizeof *dk->reqlen);
    if (!dk->slot || !dk->pend || !dk->req || !dk->reqlen || gm__pinned_alloc(ctx, (void**)&dk->staging, dk->chunk * (size_t)dk->nslot) != GM_OK) {
        dk->staging = NULL;
        gm__log(ctx, GM_LOG_ERROR, "disk: no host memory for %d staging buffers of %zu bytes", dk->nslot, dk->chunk);
        gm__disk_close(ctx);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    for (i = 0; i < dk->nslot; i++) {
        dk->slot[i].buf = dk->staging + (size_t)i * dk->chunk;
        if (ctx->be->event_create(ctx, &dk->slot[i].ev) != GM_OK) {
            dk->slot[i].ev = NULL;
            gm__disk_close(ctx);
            return GM_ERR_BACKEND;
        }
    }
#ifdef GPUMEM_URING
    if (d->disk_io != GM_DISK_IO_PREAD) dk->uring = gm__uring_open(ctx, dk);
#else
    if (d->disk_io == GM_DISK_IO_URING)
        gm__log(ctx, GM_LOG_WARN, "disk: io_uring was not built (define GPUMEM_URING, link -luring): using pread/pwrite");
#endif
    if (!dk->uring) { /* pread/pwrite: threads keep disk_depth I/Os in flight (GM__DIO_THREADS at most) */
        int want = dk->depth < GM__DIO_THREADS ? dk->depth : GM__DIO_THREADS;
        dk->io_th = (pthread_t*)gm__calloc((size_t)want * sizeof *dk->io_th);
        while (dk->io_th && dk->nio < want && pthread_create(&dk->io_th[dk->nio], NULL, gm__dio_thread, dk) == 0)
            dk->nio++;
        if (dk->nio < want)
            gm__log(ctx, GM_LOG_WARN, "disk: %d of %d I/O threads started%s", dk->nio, want,
                    dk->nio ? "" : ": each pread and pwrite runs in the engine, one at a time");
    }
    if (pthread_create(&dk->th, NULL, gm__disk_engine, dk) != 0) {
        gm__log(ctx, GM_LOG_ERROR, "disk: cannot start the I/O thread");
        gm__disk_close(ctx);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    dk->running = 1;
    {
        char how[40] = "";
        if (!dk->uring) snprintf(how, sizeof how, " (%d I/O threads)", dk->nio);
#ifdef GPUMEM_URING
        else snprintf(how, sizeof how, "%s", dk->fixed_buf && dk->fixed_file ? " (registered buffers and file)"
                                             : dk->fixed_buf ? " (registered buffers)"
                                             : dk->fixed_file ? " (registered file)" : "");
#endif
        gm__log(ctx, GM_LOG_INFO, "disk: spill file in %s, %s%s, %s, %d x %zu-byte chunks in flight (%d staging "
                "buffers), alignment %zu, budget %zu",
                d->disk_dir, dk->uring ? "io_uring" : "pread/pwrite", how,
                dk->direct ? "O_DIRECT" : "buffered", dk->depth, dk->chunk, dk->nslot, dk->align, dk->budget);
    }
    return GM_OK;
}

/* The file grows by fallocate: the space is really reserved, so a full
   file system shows here and not in the middle of a write. A file system
   without it (EOPNOTSUPP) gets a file grown by ftruncate instead. */
static int gm__disk_grow(gm_context* ctx, void* owner, size_t bytes) {
    gm__disk* dk = (gm__disk*)owner;
    const char* how = NULL; /* what failed */
    int e = 0;
    if (!dk->sparse && fallocate(dk->fd, 0, (off_t)dk->reserved, (off_t)bytes) != 0) {
        if (errno != EOPNOTSUPP && errno != ENOSYS) {
            how = "reserve", e = errno;
        } else {
            dk->sparse = 1; /* NFS, some FUSE and older ZFS: the file grows all the same, unreserved */
            gm__log(ctx, GM_LOG_WARN, "disk: %s cannot reserve room for the spill file (fallocate: %s): it grows "
                    "without, and a full disk shows as a failed write (GM_ERR_DISK_FULL)", ctx->disk_dir,
                    strerror(errno));
        }
    }
    if (!how && dk->sparse && ftruncate(dk->fd, (off_t)(dk->reserved + bytes)) != 0) how = "grow by", e = errno;
    if (how) {
        char note[96];
        if (gm__quiet(&dk->grow_log, &dk->grow_held, note, sizeof note))
            gm__log(ctx, GM_LOG_WARN, "disk: the spill file in %s cannot %s %zu bytes more: %s%s", ctx->disk_dir,
                    how, bytes, strerror(e), note);
        return 0;
    }
    if (!gm__arena_add(&dk->ar, (uintptr_t)(dk->reserved + dk->align), bytes, 1)) return 0;
    dk->reserved += bytes;
    return 1;
}

/* An extent for `bytes` (GM__DISK_GROW more of the file at a time); NULL
   when the budget or the file system is full. */
static gm__block* gm__disk_alloc(gm_context* ctx, gm__disk* dk, size_t bytes) {
    size_t n = gm__round_up(bytes ? bytes : 1, dk->align);
    gm__block* b = gm__pool_take(ctx, &dk->ar, &dk->reserved, dk->budget, GM__DISK_GROW, n, gm__disk_grow, dk);
    if (!b)
        gm__log(ctx, GM_LOG_INFO, "disk: no room for %zu bytes in the spill file (%zu reserved, budget %zu)", n,
                dk->reserved, dk->budget);
    return b;
}

static uint64_t gm__disk_off(const gm__disk* dk, const gm__block* b) { return (uint64_t)(b->addr - dk->align); }

/* >>tier ------------------------------------------------------------------
   The tiered manager. A tensor's bytes live in at least one tier at all
   times: on the device (dev), in the pinned host pool (host, valid when
   host_valid), in the spill file (disk, valid when disk_valid), or in
   managed memory. Copies run on two streams of the manager's own: `in`
   (host to device, and the stream every tensor's device memory is
   allocated and freed on) and `out` (device to host), so the two
   directions of the link run at once. Ordering is by marks (>>track):
   an event recorded after the work a stream was given, waited for by
   another stream on the device, never by the host unless there is no
   other way. Invariants, under tm->mu:
   - dev or managed or host_valid or disk_valid (never in no tier); a copy
     in a lower tier stays valid until the tensor is released as written,
     so leaving a tier above it costs no transfer;
   - a copy is made valid only once its transfer completed (the disk's) or
     is queued in order (a stream's), and the copy it came from is given
     up only after that: a failed transfer leaves the tensor where it was;
   - blank: the tensor was never released as written, so it holds no
     bytes: the copies it has (room in any tier) are valid without a
     transfer, nothing brings it in or copies it out, and it has no disk
     job;
   - the disk's I/O runs in its engine (>>disk) as jobs: a job in flight
     owns the host block and the extent it moves bytes between; a tensor
     that lets go of them meanwhile (written, destroyed) leaves them to the
     job, which frees them when it is applied; finished jobs are applied
     (tm->mu) at the start of every call;
   - a job that holds the device copy, a write from it or a read into it
     (a read ahead straight from disk: the tensor is then on the device,
     prefetched, its copy whole once the read is applied), ends before the
     device copy is used, moved or freed: those wait for it (gm__dev_settle);
   - when the host tier is full, host copies make room: first those that
     another tier also holds (dropped), then the coldest others (written to
     disk, then dropped);
   - acquired > 0 implies dev or managed, and the tensor is off the LRU list;
   - a released tensor with dev is on the LRU list, least recently released
     first; pinned ones are on it but never chosen;
   - device memory is allocated and freed on `in`: before it is freed, `in`
     waits for the mark after the tensor's last release (done) and for the
     last copy out of it (out_seq), so the allocator hands it out again at
     once, in stream order, and nothing on the host waits;
   - ready_seq (on `in`) follows the copy into the device memory, or its
     allocation; every acquire's stream waits for it, for out_seq (a copy
     out may still read what the caller will write) and, when the tensor
     was last released on another stream, for that release's mark;
   - a copy from the host copy runs on `in` after out_seq (the copy that
     filled it); hr_seq follows the last of them. A host block given up is
     free at once, stamped (ord) with the marks after the last copies into
     and out of it; whoever writes into it next orders itself after them,
     and a chunk goes back to the system only once they completed. */

/* >>track: marks. The manager's view of a stream's progress: events
   recorded after work it queued there, numbered 1, 2, ... per stream.
   Invariants: the n outstanding marks seq-n+1 .. seq sit in the ring,
   oldest at head; every mark up to seq-n has completed; a mark's event is
   recycled only once it completed, so the event of a mark not yet done is
   the one recorded for it. Mark 0 is "nothing to wait for". */
typedef struct gm__track {
    gm_stream s;
    void** ev;              /* ring of the outstanding marks' events */
    uint32_t head, n, cap;
    uint64_t seq;           /* the last mark made */
} gm__track;
enum { GM__TK_IN = 0, GM__TK_OUT = 1, GM__TK_USER = 2 }; /* tracks of the copy streams, then users' */
#define GM__TK_MAX_RING 65536u

typedef struct gm__tensor {
    /* 8-byte fields first, then 4: 112 bytes, no padding inside (the
       manager's whole record of a tensor; keep it small, a million of them
       may exist) */
    size_t bytes;
    void* dev;              /* device copy, or NULL */
    void* managed;          /* unified-memory copy, or NULL */
    gm__block* host;        /* host pool block, or NULL */
    gm__block* disk;        /* extent in the spill file, or NULL */
    gm__job* job;           /* disk I/O in flight: the host copy (or the device copy, through
                               staging) being written to `disk` (not yet disk_valid), or `disk`
                               being read into `host` (not yet host_valid); what it moves
                               stays the job's until it is applied */
    uint64_t stamp;         /* tier clock at the last create, acquire or release */
    union {
        uint64_t lseq;      /* on the LRU list: its place there (later pushes are higher) */
        gm_stream stream;   /* acquired: the stream of the current acquire */
    } u;
    /* marks, their low 32 bits (gm__tk_at gives the whole mark back; 0: none) */
    uint32_t done_seq;      /* the last release (on track done_tk) */
    uint32_t ready_seq;     /* in: the device copy is whole (its copy in, or its allocation) */
    uint32_t out_seq;       /* out: the last copy out of the device copy (into the host copy) finished */
    uint32_t hr_seq;        /* in: the last copy from the host copy finished */
    unsigned gen : 12;      /* the slot's generation, 1 .. 0xfff (a slot at 0xfff retires) */
    unsigned live : 1;
    unsigned host_valid : 1;
    unsigned prefetched : 2; /* 1: brought in ahead of use; 2: room only (gm__room_mark) */
    unsigned pinned : 1;
    unsigned disk_valid : 1, blank : 1; /* blank: never written (see the invariants) */
    unsigned use_wr : 1, use_ow : 1; /* the acquires since it was last not acquired: some wrote (not
                                        GM_ACCESS_READ), some overwrote (GM_ACCESS_OVERWRITE) */
    unsigned use_last : 1;  /* and every one was GM_ACCESS_READ_LAST */
    unsigned read_ahead : 1; /* its host copy was read from disk ahead of use, not used yet */
    unsigned hcq : 1;       /* its slot is on tm->hcq (kept as the slot is reused) */
    unsigned hsoon : 1;     /* counted in tm->hsoon (gm__hsoon_is) */
    unsigned lost : 1;      /* a swap that failed twice left its bytes unknown: reads are refused until
                               an acquire overwrites it */
    uint32_t acquired;
    int priority;
    uint32_t crc;           /* CRC32C of the bytes on disk */
    uint32_t done_tk;       /* the track of the last release */
    uint32_t prev, next;    /* LRU neighbours: index + 1, 0 for none (indices
                               survive the array growing) */
    uint32_t hv;            /* learned victims: the version its current heap entry carries */
} gm__tensor;
/* Whether a copy above the host tier holds x's bytes: its unified-memory
   copy, or its device copy unless that is room only (gm__room_mark). */
#define GM__HOLDS(x) (((x)->dev && (x)->prefetched != 2) || (x)->managed)
/* Whether x's only copy of its bytes is its host copy (none on disk either). */
#define GM__HOST_ONLY(x) ((x)->live && (x)->host_valid && !(x)->disk_valid && !GM__HOLDS(x))

/* A tensor's record is 112 bytes on 64-bit targets: a field more costs every tensor. */
typedef char gm__tensor_fits[sizeof(void*) != 8 || sizeof(gm__tensor) <= 112 ? 1 : -1];

/* The tuning of a phase's plan room (>>tier: plan room). */
#define GM__TUNE_K 4        /* rooms tried: 0 to 3 of the plan's largest tensors */
typedef struct gm__tune {
    int k;                  /* the room tried, or kept */
    int kept;               /* 1: k was chosen; 0: trying them in turn */
    uint32_t steps;         /* steps with room k (trying), or since it was chosen */
    uint64_t bytes[GM__TUNE_K]; /* disk bytes of each room's measured steps */
    size_t cap;             /* the fast tiers' bytes the phase's plan counts on (0: none) */
} gm__tune;

/* A learned plan (>>tier: learned order), one per phase. */
typedef struct gm__phase {
    uint32_t *plan, nplan;
    uint32_t *use_first, *use_at, nuse_first;
    uint8_t* leaves;
    uint32_t* dep;
    uint64_t used;          /* tier clock when it was last made active */
    int next;               /* the phase whose step followed this one's last time (recognised), or -1 */
    gm__tune tune;
} gm__phase;

typedef struct gm__prio {
    int prio;
    uint32_t n;
} gm__prio;

/* An entry of a host victims' heap (>>tier: host victims). */
typedef struct gm__hent {
    uint64_t key;
    uint32_t i;
    int prio;
} gm__hent;

/* An entry of the learned victims' heap (>>tier: learned victims). */
typedef struct gm__vent {
    uint64_t key, lseq;
    int prio;
    uint32_t i, hv;
} gm__vent;

typedef struct gm__tier {
    gm__rmu mu;
    gm__tensor* t;
    uint32_t n, cap;
    uint32_t* freeidx;
    uint32_t nfree;
    uint32_t lru, lru_tail; /* index + 1 of the ends, 0: empty */
    gm__prio* prios;        /* the priorities on the LRU list, ascending, with how many */
    uint32_t nprios, capprios; /* tensors have each (none with 0) */
    gm__track* tk;          /* GM__TK_IN, GM__TK_OUT, then the streams tensors were released on */
    uint32_t ntk, captk, last_tk;
    void** evs;             /* recycled events of completed marks */
    uint32_t nevs, capevs;
    gm__arena host;         /* the pinned pool: segments from host_alloc */
    size_t host_reserved;   /* pinned bytes held: the pool's segments */
    size_t host_used;       /* bytes of the pool's blocks held by tensors */
    size_t host_jobs;       /* and by disk jobs whose tensor let go of them */
    size_t host_peak;       /* the most host_used in this window */
    size_t host_split;      /* a host copy's extents but the last hold multiples of it (0: one piece) */
    void* bounce;           /* the swap's bounce buffer (GM__SWAP_CHUNK), made when first needed */
    int bounce_pinned;
    uint64_t host_window;   /* tier clock when the window began */
    gm_tier_stats st;
    /* policy */
    gm_evict_policy policy;
    int ahead;
    gm_victim_fn vfn;
    void* vuser;
    gm_tensor* cand;        /* scratch for vfn */
    uint32_t ncandcap;
    uint32_t* rank;         /* scratch for placement (>>tier: placement) */
    uint32_t caprank;
    size_t try_evicted;     /* by the current room-making for a tensor */
    int exact;              /* a batch comes in again: new segments of each tensor's own size */
    gm__tensor** batch;     /* scratch for the batch calls */
    size_t nbatchcap;
    /* learned order: this step's acquires (rec), and the last step's as a
       plan: plan[q] is the tensor of the q-th acquire; use_at/use_first
       list each tensor's positions in ascending order (CSR) */
    uint32_t *rec, nrec, caprec;
    uint32_t *plan, nplan;  /* the active phase's plan (owned by ph[cur]) */
    uint32_t *use_first, *use_at, nuse_first;
    uint8_t* leaves;        /* per use (as use_at): Belady's order, with the device and host
                               budgets as one cache, evicts the tensor before its next use */
    uint32_t* dep;          /* the tensors Belady's order moves from the device to the host tier, by
                               position (gm__plan_dep) */
    uint32_t pos;           /* the plan position of the next acquire */
    gm__phase ph[GM_TIER_PHASES];
    int cur;                /* the active phase */
    int named;              /* gm_tier_set_phase was called: no recognition by prefix */
    int rec_phase;          /* named: the phase the recording belongs to (the plan followed may be another's) */
    int lost;               /* the acquires left the plan: no prefetch, LRU victims */
    uint32_t miss, regain;  /* departures in a row; matches in a row while lost */
    uint64_t strays;        /* the last 64 acquires under a plan: a bit set for each it did not expect */
    int closed;             /* the phase of the last step that ended, or -1 */
    int64_t tune_t0;        /* disk bytes moved when the active phase began */
    uint64_t evict_after;   /* while prefetching: only victims used later */
    int64_t step_evictions; /* evictions counted when the step began, and in the last step */
    int64_t last_step_evictions;
    uint64_t clock;         /* for stamps */
    uint64_t below_log, below_held; /* no room below the device: last logged, and since (gm__quiet) */
    uint64_t oom_log, oom_held; /* no device room for an acquire: its details last logged, and since */
    uint64_t lclock;        /* for lseq */
    gm__vent* vh;           /* learned victims (>>tier: learned victims) */
    uint32_t nvh, capvh;
    int vh_ok;              /* the heap holds what its invariants say; else it is built when next asked */
    int vh_jumped;          /* it was cleared by a long jump of the position (see gm__vh_top) */
    uint64_t vh_built;      /* tm->clock at the last build */
    uint64_t vh_builds;     /* builds so far (for tests) */
    uint32_t *hcq, nhcq, caphcq; /* host copies to look at for a write behind (gm__host_clean) */
    int hc_on;              /* there is a disk tier: gm__tier_count notes them */
    int hc_all;             /* look at every tensor instead: the plan's verdicts changed */
    uint64_t hc_looks;      /* tensors gm__host_clean looked at so far (for tests) */
    gm__hent* hh[3];        /* host victims by class (>>tier: host victims) */
    uint32_t nhh[3], caphh[3];
    int hh_ok;              /* the heaps hold what their invariants say; else built when next asked */
    int hh_planned;         /* keyed by next use (learned order planning), else by stamp */
    uint32_t nhost;         /* live tensors with a valid host copy */
    uint64_t hh_builds, hh_looks, hh_pushes; /* builds, entries looked at, entries pushed (for tests) */
    size_t hsoon;           /* bytes of host copies that may go without a write (gm__hsoon_is) */
} gm__tier;

#define GM__IN(tm) ((tm)->tk[GM__TK_IN].s)
#define GM__OUT(tm) ((tm)->tk[GM__TK_OUT].s)

static void* gm__tev_get(gm_context* ctx, gm__tier* tm) {
    void* ev = NULL;
    if (tm->nevs) return tm->evs[--tm->nevs];
    return ctx->be->event_create(ctx, &ev) == GM_OK ? ev : NULL;
}

static void gm__tev_put(gm_context* ctx, gm__tier* tm, void* ev) {
    if (tm->nevs == tm->capevs) {
        uint32_t cap = tm->capevs ? tm->capevs * 2 : 64;
        void** n = (void**)gm__grow_array(tm->evs, tm->capevs * sizeof *n, cap * sizeof *n);
        if (!n) {
            ctx->be->event_destroy(ctx, ev);
            return;
        }
        tm->evs = n;
        tm->capevs = cap;
    }
    tm->evs[tm->nevs++] = ev;
}

static uint64_t gm__tk_done_upto(const gm__track* k) { return k->seq - k->n; }

/* A whole mark of track ti from its low 32 bits (0: none), as a tensor
   keeps it: the latest mark made with those bits. That is the mark kept
   unless 2^32 more were made since, and then a later one, which is done
   when that one is (a stream's work completes in order). gm__tk_mark never
   hands out a mark whose low bits are 0. */
static uint64_t gm__tk_at(const gm__tier* tm, uint32_t ti, uint32_t low) {
    uint64_t s = tm->tk[ti].seq;
    return low ? s - (uint32_t)((uint32_t)s - low) : 0;
}

/* Whether low bits a tensor keeps can be a mark of track ti (gm_check):
   every value can, once 2^32 marks were made. */
static int gm__tk_made(const gm__tier* tm, uint32_t ti, uint32_t low) {
    return tm->tk[ti].seq >> 32 || low <= tm->tk[ti].seq;
}

/* Retires the marks that completed, oldest first. A query that fails
   cannot tell: the stream is synchronized before anything is called done. */
static void gm__tk_poll(gm_context* ctx, gm__tier* tm, uint32_t ti) {
    gm__track* k = &tm->tk[ti];
    while (k->n) {
        gm_result r = ctx->be->event_query(ctx, k->ev[k->head]);
        if (r == GM_NOT_READY) return;
        if (r != GM_OK) ctx->be->stream_sync(ctx, k->s);
        gm__tev_put(ctx, tm, k->ev[k->head]);
        k->head = (k->head + 1) % k->cap;
        k->n--;
    }
}

/* Every outstanding mark of track ti completed (its stream synchronized). */
static void gm__tk_drain(gm_context* ctx, gm__tier* tm, uint32_t ti) {
    gm__track* k = &tm->tk[ti];
    if (!k->n) return;
    if (ctx->be->event_sync(ctx, k->ev[(k->head + k->n - 1) % k->cap]) != GM_OK) ctx->be->stream_sync(ctx, k->s);
    while (k->n) {
        gm__tev_put(ctx, tm, k->ev[k->head]);
        k->head = (k->head + 1) % k->cap;
        k->n--;
    }
}

/* A mark after the work queued on track ti's stream so far. Without an
   event (none to be had, or the record fails) the stream is synchronized
   instead, and the mark is done at once. */
static uint64_t gm__tk_mark(gm_context* ctx, gm__tier* tm, uint32_t ti) {
    gm__track* k = &tm->tk[ti];
    void* ev;
    if (GM__UNLIKELY(!(uint32_t)(k->seq + 1))) { /* low bits 0 read as "none" (gm__tk_at): once every 2^32
                                                    marks, that number is passed over, its stream waited for */
        gm__tk_drain(ctx, tm, ti);
        k->seq++;
    }
    if (k->n == k->cap) {
        gm__tk_poll(ctx, tm, ti);
        if (k->n == k->cap) {
            uint32_t cap = k->cap ? k->cap * 2 : 16, i;
            void** r = cap <= GM__TK_MAX_RING ? (void**)GPUMEM_MALLOC(cap * sizeof *r) : NULL;
            if (r) { /* unrolled so the oldest sits at 0 */
                for (i = 0; i < k->n; i++) r[i] = k->ev[(k->head + i) % k->cap];
                GPUMEM_FREE(k->ev);
                k->ev = r;
                k->cap = cap;
                k->head = 0;
            } else { /* the ring cannot grow: the oldest mark is waited for */
                if (ctx->be->event_sync(ctx, k->ev[k->head]) != GM_OK) ctx->be->stream_sync(ctx, k->s);
                gm__tk_poll(ctx, tm, ti);
                if (k->n == k->cap) gm__tk_drain(ctx, tm, ti);
            }
        }
    }
    ev = gm__tev_get(ctx, tm);
    if (!ev || ctx->be->event_record(ctx, ev, k->s) != GM_OK) {
        if (ev) gm__tev_put(ctx, tm, ev);
        gm__tk_drain(ctx, tm, ti);
        ctx->be->stream_sync(ctx, k->s);
        return ++k->seq; /* n stays 0: done */
    }
    k->ev[(k->head + k->n) % k->cap] = ev;
    k->n++;
    return ++k->seq;
}

static int gm__tk_done(gm_context* ctx, gm__tier* tm, uint32_t ti, uint64_t seq) {
    if (seq <= gm__tk_done_upto(&tm->tk[ti])) return 1;
    gm__tk_poll(ctx, tm, ti);
    return seq <= gm__tk_done_upto(&tm->tk[ti]);
}

/* The event of an outstanding mark. */
static void* gm__tk_event(const gm__tier* tm, uint32_t ti, uint64_t seq) {
    const gm__track* k = &tm->tk[ti];
    return k->ev[(k->head + (uint32_t)(seq - gm__tk_done_upto(k) - 1)) % k->cap];
}

/* The host waits for mark seq of track ti. */
static void gm__tk_sync(gm_context* ctx, gm__tier* tm, uint32_t ti, uint64_t seq) {
    if (gm__tk_done(ctx, tm, ti, seq)) return;
    if (ctx->be->event_sync(ctx, gm__tk_event(tm, ti, seq)) != GM_OK) ctx->be->stream_sync(ctx, tm->tk[ti].s);
    gm__tk_poll(ctx, tm, ti);
    if (!gm__tk_done(ctx, tm, ti, seq)) gm__tk_drain(ctx, tm, ti); /* a failed query: be sure */
}

/* Work queued on `waiter` from now on runs after mark seq of track ti (on
   the device; the host waits only if the backend cannot order it). */
static void gm__tk_order(gm_context* ctx, gm__tier* tm, uint32_t ti, uint64_t seq, gm_stream waiter) {
    if (!seq || tm->tk[ti].s == waiter || gm__tk_done(ctx, tm, ti, seq)) return;
    if (ctx->be->stream_wait_event(ctx, waiter, gm__tk_event(tm, ti, seq)) != GM_OK) gm__tk_sync(ctx, tm, ti, seq);
}

/* The same for a mark a tensor keeps (its low 32 bits, gm__tk_at). */
static void gm__tk_sync_at(gm_context* ctx, gm__tier* tm, uint32_t ti, uint32_t low) {
    gm__tk_sync(ctx, tm, ti, gm__tk_at(tm, ti, low));
}

static void gm__tk_order_at(gm_context* ctx, gm__tier* tm, uint32_t ti, uint32_t low, gm_stream waiter) {
    gm__tk_order(ctx, tm, ti, gm__tk_at(tm, ti, low), waiter);
}

/* The track of a user stream, made on first use. A track whose marks all
   completed may be taken over by another stream when there are many:
   marks are never renumbered, so every old mark still reads as done. */
static gm_result gm__tk_of(gm_context* ctx, gm__tier* tm, gm_stream s, uint32_t* out) {
    uint32_t i, spare = 0;
    if (tm->last_tk < tm->ntk && tm->tk[tm->last_tk].s == s && tm->last_tk >= GM__TK_USER) {
        *out = tm->last_tk;
        return GM_OK;
    }
    for (i = GM__TK_USER; i < tm->ntk; i++) {
        if (tm->tk[i].s == s) {
            *out = tm->last_tk = i;
            return GM_OK;
        }
        if (!spare && tm->ntk >= 64 && i != tm->last_tk) {
            gm__tk_poll(ctx, tm, i);
            if (!tm->tk[i].n) spare = i;
        }
    }
    if (spare) {
        tm->tk[spare].s = s;
        *out = tm->last_tk = spare;
        return GM_OK;
    }
    if (tm->ntk == tm->captk) {
        uint32_t cap = tm->captk ? tm->captk * 2 : 8;
        gm__track* n = (gm__track*)gm__grow_array(tm->tk, tm->captk * sizeof *n, cap * sizeof *n);
        if (!n) return GM_ERR_HOST_OUT_OF_MEMORY;
        tm->tk = n;
        tm->captk = cap;
    }
    memset(&tm->tk[tm->ntk], 0, sizeof *tm->tk);
    tm->tk[tm->ntk].s = s;
    *out = tm->last_tk = tm->ntk++;
    return GM_OK;
}

#define GM__HOST_CHUNK (64 * GM__MIB)
/* The host pool gives back whole free chunks past twice the peak use of
   the last GM__HOST_WINDOW tier operations (creates, acquires, releases):
   mostly empty for a while, like the device's gc threshold. */
#define GM__HOST_WINDOW 1024
#define GM__NEVER ((uint64_t)1 << 62)
#define GM__PLAN_OW 0x80000000u /* a plan entry: the tensor's index, this bit where the acquire overwrote */
#define GM__PLAN_T(e) ((e) & ~GM__PLAN_OW)
/* Learned order with a plan it follows: victims by next use (else LRU). */
#define GM__PLANNED(tm) ((tm)->policy == GM_EVICT_LEARNED && (tm)->nplan && !(tm)->lost)
static uint64_t gm__next_use(const gm__tier* tm, uint32_t i);
static int gm__leaves(const gm__tier* tm, uint32_t i);
static int gm__leaves_dev(const gm__tier* tm, uint32_t i);

#define GM__LRU(tm, k) (&(tm)->t[(k) - 1])
static uint32_t gm__lru_key(gm__tier* tm, gm__tensor* x) { return (uint32_t)(x - tm->t) + 1; }

/* The count of listed tensors of priority p changes by d (a new level is
   inserted in order; one that empties goes). */
static void gm__prio_add(gm__tier* tm, int p, int d) {
    uint32_t i;
    for (i = 0; i < tm->nprios && tm->prios[i].prio < p; i++) {}
    if (i < tm->nprios && tm->prios[i].prio == p) {
        tm->prios[i].n = (uint32_t)((int64_t)tm->prios[i].n + d);
        if (!tm->prios[i].n) {
            memmove(tm->prios + i, tm->prios + i + 1, (tm->nprios - i - 1) * sizeof *tm->prios);
            tm->nprios--;
        }
        return;
    }
    if (d <= 0) return;
    if (tm->nprios == tm->capprios) {
        uint32_t cap = tm->capprios ? tm->capprios * 2 : 4;
        gm__prio* n = (gm__prio*)gm__grow_array(tm->prios, tm->capprios * sizeof *n, cap * sizeof *n);
        if (!n) { /* no room to count it: the lowest level stands for it (victims scan on, never stop early) */
            if (tm->nprios) tm->prios[0].prio = p < tm->prios[0].prio ? p : tm->prios[0].prio, tm->prios[0].n++;
            return;
        }
        tm->prios = n;
        tm->capprios = cap;
    }
    memmove(tm->prios + i + 1, tm->prios + i, (tm->nprios - i) * sizeof *tm->prios);
    tm->prios[i].prio = p;
    tm->prios[i].n = (uint32_t)d;
    tm->nprios++;
}

static int gm__listed(const gm__tier* tm, const gm__tensor* x) {
    return x->prev || tm->lru == (uint32_t)(x - tm->t) + 1;
}

static void gm__vh_push(gm__tier* tm, gm__tensor* x);
static void gm__host_note(gm__tier* tm, gm__tensor* x);

static void gm__lru_del(gm__tier* tm, gm__tensor* x) {
    uint32_t k = gm__lru_key(tm, x);
    x->hv++; /* its heap entries are stale */
    if (x->prev) GM__LRU(tm, x->prev)->next = x->next;
    else if (tm->lru == k) tm->lru = x->next;
    else return; /* not on the list */
    gm__prio_add(tm, x->priority, -1);
    if (x->next) GM__LRU(tm, x->next)->prev = x->prev;
    else tm->lru_tail = x->prev;
    x->prev = x->next = 0;
}

static void gm__lru_push(gm__tier* tm, gm__tensor* x) {
    uint32_t k = gm__lru_key(tm, x);
    gm__lru_del(tm, x);
    gm__prio_add(tm, x->priority, 1);
    x->prev = tm->lru_tail;
    if (tm->lru_tail) GM__LRU(tm, tm->lru_tail)->next = k;
    else tm->lru = k;
    tm->lru_tail = k;
    x->u.lseq = ++tm->lclock;
    gm__vh_push(tm, x);
}

/* A handle: the index + 1 in the low 20 bits, the low 12 bits of the
   generation above them, and the context's serial number beside. */
static gm__tensor* gm__tensor_get(gm_context* ctx, gm_tensor h) {
    gm__tier* tm = (gm__tier*)ctx->tier;
    uint32_t i = (h.id & 0xfffffu) - 1, gen = h.id >> 20;
    if (!tm || !h.id || h.ctx_id != ctx->serial || i >= tm->n || !tm->t[i].live || (tm->t[i].gen & 0xfffu) != gen)
        return NULL;
    return &tm->t[i];
}

static gm_tensor gm__handle(const gm_context* ctx, uint32_t gen, uint32_t i) {
    gm_tensor h;
    h.id = ((gen & 0xfffu) << 20) | (i + 1);
    h.ctx_id = ctx->serial;
    return h;
}

/* Host pool: an arena grown in pinned chunks up to host_budget. */
static int gm__host_grow(gm_context* ctx, void* owner, size_t bytes) {
    gm__tier* tm = (gm__tier*)owner;
    void* p;
    if (gm__pinned_alloc(ctx, &p, bytes) != GM_OK) return 0;
    if (!gm__arena_add(&tm->host, (uintptr_t)p, bytes, 1)) {
        gm__pinned_free(ctx, p, bytes);
        return 0;
    }
    tm->host_reserved += bytes;
    gm__disk_register(ctx, p, bytes, 1); /* reads and writes of the disk tier go straight to it */
    return 1;
}

/* A host copy: one block of the pool or, when no free piece of the pool
   holds it whole, extents of it chained through r (a USED block's r is
   otherwise unused), in the tensor's order. Invariants: each extent holds
   the next `requested` bytes of the tensor (at most its size; together at
   least the tensor's bytes: a swap may hand a copy to a smaller tensor,
   gm__swap_in); every extent but the last
   holds a multiple of tm->host_split bytes (1 MiB, or 1/16 of a smaller
   host tier, rounded up to whole pages and disk chunks), so that a disk
   chunk lies in one extent; the copies in
   and out run one per extent, and a swap's pieces end where extents do. */
static size_t gm__host_size(const gm__block* h) { /* the pool's bytes it holds */
    size_t n = 0;
    for (; h; h = h->r) n += h->size;
    return n;
}

/* The tensor bytes host copy h holds (its extents' `requested`). */
static size_t gm__host_cap(const gm__block* h) {
    size_t n = 0;
    for (; h; h = h->r) n += h->requested;
    return n;
}

/* From extent h of a host copy, which starts at byte *at of it: the
   extent holding the byte *off bytes past h's start; *at becomes where
   that one starts, *off the offset in it. */
static const gm__block* gm__host_seek(const gm__block* h, size_t* at, size_t* off) {
    while (h->r && *off >= h->requested) {
        *off -= h->requested;
        *at += h->requested;
        h = h->r;
    }
    return h;
}

/* Byte `off` of a host copy, for a walk in order: *e is an extent of it
   that starts at byte *at (the copy's first and 0 to begin), moved on to
   the one holding `off`; *run becomes the bytes from there to that
   extent's end (past the copy's end: `most`), at most `most`. */
static char* gm__host_span(const gm__block** e, size_t* at, size_t off, size_t most, size_t* run) {
    size_t in = off - *at;
    *e = gm__host_seek(*e, at, &in);
    *run = in < (*e)->requested && (*e)->requested - in < most ? (*e)->requested - in : most;
    return (char*)(*e)->addr + in;
}

/* A copy of `bytes` between device (or managed) memory dev and host copy
   h, one per extent, on `s`: kind GM_COPY_DEVICE_TO_HOST copies out of dev,
   any other into it. When one fails after others were queued, `s` is
   waited for: the caller gives the memory back as if nothing had been
   queued, and no mark covers those copies. */
static gm_result gm__host_copy(gm_context* ctx, void* dev, const gm__block* h, size_t bytes, gm_copy_kind kind,
                               gm_stream s) {
    size_t off = 0;
    gm_result r = GM_OK;
    for (; h && off < bytes; off += h->requested, h = h->r) {
        size_t n = bytes - off < h->requested ? bytes - off : h->requested;
        char* d = (char*)dev + off;
        r = kind == GM_COPY_DEVICE_TO_HOST ? ctx->be->copy(ctx, (void*)h->addr, d, n, kind, s)
                                           : ctx->be->copy(ctx, d, (void*)h->addr, n, kind, s);
        if (r != GM_OK) {
            if (off) (void)ctx->be->stream_sync(ctx, s);
            break;
        }
    }
    return r;
}

/* The latest mark of kind k (0: in, 1: out) any extent of h waits for. */
static uint64_t gm__host_ord(const gm__block* h, int k) {
    uint64_t m = 0;
    for (; h; h = h->r)
        if (h->ord[k] > m) m = h->ord[k];
    return m;
}

/* A new writer of host copy h (a copy on `writer`) orders itself after
   the copies that used its bytes before (their marks: ord). */
static void gm__host_order(gm_context* ctx, gm__tier* tm, const gm__block* h, gm_stream writer) {
    gm__tk_order(ctx, tm, GM__TK_IN, gm__host_ord(h, 0), writer);
    gm__tk_order(ctx, tm, GM__TK_OUT, gm__host_ord(h, 1), writer);
}

/* Host copy h back to the pool, every extent: the pool's bytes it held. */
static size_t gm__host_give(gm__tier* tm, gm__block* h) {
    size_t n = 0;
    while (h) {
        gm__block* next = h->r;
        n += h->size;
        h->r = NULL;
        gm__arena_give(&tm->host, h); /* after the size is read: the record may merge into a neighbour */
        h = next;
    }
    return n;
}

/* At the end of a window, whole free chunks past twice the window's peak
   use leave the pool, once the copies that last used them completed. */
static void gm__host_trim(gm_context* ctx, gm__tier* tm) {
    gm__seg *sg, *next;
    size_t keep, held;
    if (tm->clock - tm->host_window < GM__HOST_WINDOW) return;
    keep = 2 * tm->host_peak;
    held = tm->host_reserved;
    for (sg = tm->host.segs; sg && held > keep; sg = next) {
        void* base = (void*)sg->base;
        size_t n = sg->size;
        next = sg->next;
        if (!gm__seg_whole_free(sg) || held - n < keep || !gm__tk_done(ctx, tm, GM__TK_IN, sg->first->ord[0]) ||
            !gm__tk_done(ctx, tm, GM__TK_OUT, sg->first->ord[1]))
            continue;
        held -= n;
        gm__arena_drop(&tm->host, sg);
        gm__disk_register(ctx, base, n, 0);
        gm__pinned_free(ctx, base, n);
        tm->host_reserved -= n;
        gm__log(ctx, GM_LOG_DEBUG, "tier: host pool gives back %zu bytes (peak use %zu of the last %d operations)", n,
                tm->host_peak, GM__HOST_WINDOW);
    }
    tm->host_window = tm->clock;
    tm->host_peak = tm->host_used;
}

/* `need` bytes of the pool in extents (see gm__host_size), when no free
   piece holds them whole: the largest free pieces first, cut to multiples
   of host_split, then new chunks from the rest of the budget, as many as
   the remainder takes (only when the rest is less than need: else the
   pool tried that chunk, and the system refused it); NULL (nothing taken)
   when they do not add up. */
static gm__block* gm__host_scatter(gm_context* ctx, gm__tier* tm, size_t need) {
    gm__arena* a = &tm->host;
    size_t g = tm->host_split, left = need, lim = ctx->desc.host_budget - ctx->desc.host_budget % a->align;
    gm__block *head = NULL, **tail = &head;
    int grow = tm->host_reserved + need > lim;
    size_t room = tm->host_reserved - tm->host_used - tm->host_jobs + (grow ? lim - tm->host_reserved : 0);
    if (!g || need <= g || room < need) return NULL;
    while (left) {
        gm__block* f = gm__arena_find(a, 1, left);
        size_t take = left;
        if (!f) {
            f = gm__arena_largest(a, 1);
            take = f ? f->size / g * g : 0;
        }
        if (!take) { /* no piece of a whole multiple: a new chunk of what the budget has left */
            size_t more = lim - tm->host_reserved;
            if (more > GM__HOST_CHUNK) more = GM__HOST_CHUNK;
            if (!grow || !more || (more < g && more < left) || !gm__host_grow(ctx, tm, more)) break;
            continue; /* each chunk added is taken next, or the budget runs out: the loop ends */
        }
        f = gm__arena_take(a, f, take, a->align);
        f->requested = take;
        *tail = f;
        tail = &f->r;
        left -= take;
    }
    if (left) {
        gm__host_give(tm, head);
        return NULL;
    }
    return head;
}

/* The bytes a host copy of `bytes` takes: whole pages, and with a disk
   tier whole units of the spill file's direct-I/O alignment, since a
   copy's last chunk goes to and from the file rounded up to it (a file
   system may ask for more than a page). */
static size_t gm__host_need(const gm_context* ctx, size_t bytes) {
    size_t u = GM__HOST_PAGE, al = ctx->disk ? ((const gm__disk*)ctx->disk)->align : 0;
    while (al > GM__HOST_PAGE && u % al) u += GM__HOST_PAGE; /* al is at most 1 MiB (setup) */
    return gm__round_up(bytes ? bytes : 1, u);
}

/* The host budget no copy and no disk job holds. */
static size_t gm__host_free_room(const gm_context* ctx, const gm__tier* tm) {
    size_t used = tm->host_used + tm->host_jobs, h = ctx->desc.host_budget;
    return used < h ? h - used : 0;
}

/* A host copy of `bytes` (its first writer orders itself after its ord,
   gm__host_order), or NULL when the pool is full. */
static gm__block* gm__host_alloc(gm_context* ctx, gm__tier* tm, size_t bytes) {
    size_t need = gm__host_need(ctx, bytes);
    gm__block* b = gm__pool_take(ctx, &tm->host, &tm->host_reserved, ctx->desc.host_budget, GM__HOST_CHUNK, need,
                                 gm__host_grow, tm);
    if (b) b->requested = need;
    else b = gm__host_scatter(ctx, tm, need);
    if (b) {
        tm->host_used += gm__host_size(b);
        if (tm->host_used > tm->host_peak) tm->host_peak = tm->host_used;
        if (b->r) tm->st.host_scattered++;
    }
    return b;
}

/* x lets go of its host block: the block is stamped with the marks after
   the last copies from and into it (hr_seq, out_seq), which whoever writes
   into it next orders itself after (gm__host_order), whoever holds it
   next: the pool, or a disk job x leaves it to (gm__job_detach). */
static void gm__host_stamp(gm__tier* tm, const gm__tensor* x, gm__block* b) {
    uint64_t hr = gm__tk_at(tm, GM__TK_IN, x->hr_seq), out = gm__tk_at(tm, GM__TK_OUT, x->out_seq);
    for (; b; b = b->r) {
        if (hr > b->ord[0]) b->ord[0] = hr;
        if (out > b->ord[1]) b->ord[1] = out;
    }
}

/* Gives up x's host block: free at once, stamped with the marks after the
   last copies that used it. */
static void gm__host_free(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__block* b = x->host;
    if (!b) return;
    if (x->read_ahead && x->host_valid) tm->st.read_ahead_wasted++;
    x->read_ahead = 0;
    x->host = NULL;
    x->host_valid = 0;
    gm__host_stamp(tm, x, b);
    tm->host_used -= gm__host_give(tm, b);
    gm__host_trim(ctx, tm);
}

static void gm__hc_note(gm__tier* tm, gm__tensor* x);

/* x's bytes leave (sign -1) or enter (+1) the figures of the tiers it is
   in; every change of dev, managed, host_valid or disk_valid sits between
   the two. */
static void gm__tier_count(gm__tier* tm, gm__tensor* x, int sign) {
    int64_t b = sign * (int64_t)x->bytes;
    if (x->dev) tm->st.device_bytes += b;
    else if (x->managed) tm->st.managed_bytes += b;
    if (x->host_valid) tm->st.host_bytes += b, tm->nhost += (uint32_t)sign;
    if (x->disk_valid) tm->st.disk_bytes += b;
    if (sign > 0) {
        gm_tier_stats* st = &tm->st;
        if (st->device_bytes > st->peak_device_bytes) st->peak_device_bytes = st->device_bytes;
        if (st->host_bytes > st->peak_host_bytes) st->peak_host_bytes = st->host_bytes;
        if (st->disk_bytes > st->peak_disk_bytes) st->peak_disk_bytes = st->disk_bytes;
        if (st->managed_bytes > st->peak_managed_bytes) st->peak_managed_bytes = st->managed_bytes;
        gm__host_note(tm, x); /* its host copy's class may have changed, or its only copy be there now */
    }
}

static uint32_t gm__handle_id(const gm__tier* tm, const gm__tensor* x) {
    return ((x->gen & 0xfffu) << 20) | ((uint32_t)(x - tm->t) + 1);
}

static void gm__disk_drop(gm_context* ctx, gm__tensor* x) {
    if (x->disk) gm__arena_give(&((gm__disk*)ctx->disk)->ar, x->disk);
    x->disk = NULL;
    x->disk_valid = 0;
}

/* Gives up the device copy: `in`, which owns the memory, first passes the
   tensor's last use and the last copy out of it; then the allocator may
   hand it out again at once on `in`. */
static void gm__dev_drop(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__tk_order_at(ctx, tm, x->done_tk, x->done_seq, GM__IN(tm));
    gm__tk_order_at(ctx, tm, GM__TK_OUT, x->out_seq, GM__IN(tm));
    gm__free(ctx, x->dev, GM__OWN_TENSOR);
    x->dev = NULL;
    if (x->prefetched) tm->st.prefetch_wasted++;
    x->prefetched = 0;
    x->ready_seq = 0;
}

/* Gives up the unified-memory copy once the streams that may use it are
   past this point: its last user's and the copy streams. */
static void gm__managed_drop(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    if (x->done_seq) gm__record_stream(ctx, x->managed, tm->tk[x->done_tk].s, GM__OWN_TENSOR);
    gm__record_stream(ctx, x->managed, GM__IN(tm), GM__OWN_TENSOR);
    gm__free(ctx, x->managed, GM__OWN_TENSOR);
    x->managed = NULL;
    x->ready_seq = 0;
}

/* Copies the device copy into the host block (allocated) on `out`, after
   the tensor's last use; the host copy is valid from then on (readers
   order themselves after out_seq). */
static gm_result gm__copy_out(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm_result r;
    gm__tk_order_at(ctx, tm, GM__TK_IN, x->ready_seq, GM__OUT(tm)); /* the memory is the tensor's */
    gm__tk_order_at(ctx, tm, x->done_tk, x->done_seq, GM__OUT(tm));
    gm__host_order(ctx, tm, x->host, GM__OUT(tm));
    r = gm__host_copy(ctx, x->dev, x->host, x->bytes, GM_COPY_DEVICE_TO_HOST, GM__OUT(tm));
    if (r != GM_OK) return r;
    x->out_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_OUT);
    gm__tier_count(tm, x, -1);
    x->host_valid = 1;
    gm__tier_count(tm, x, 1);
    tm->st.bytes_to_host += (int64_t)x->bytes;
    return GM_OK;
}

/* >>tier: the disk's jobs. A gate is an event recorded now on a copy
   stream, so it covers mark seq there (and what was queued after it); NULL
   when seq is done already (or, with no event to be had, once the host
   waited for it). */
static void* gm__gate_on(gm_context* ctx, gm__tier* tm, uint32_t ti, uint64_t seq) {
    void* ev;
    if (!seq || gm__tk_done(ctx, tm, ti, seq)) return NULL;
    ev = gm__tev_get(ctx, tm);
    if (ev && ctx->be->event_record(ctx, ev, tm->tk[ti].s) == GM_OK) return ev;
    if (ev) gm__tev_put(ctx, tm, ev);
    gm__tk_sync(ctx, tm, ti, seq);
    return NULL;
}

static void* gm__gate_at(gm_context* ctx, gm__tier* tm, uint32_t ti, uint32_t low) {
    return gm__gate_on(ctx, tm, ti, gm__tk_at(tm, ti, low));
}

/* A finished job takes effect: the tensor gains the copy it made, or keeps
   what it had when the job failed; a job whose tensor let go frees what it
   held. */
static void gm__job_apply(gm_context* ctx, gm__tier* tm, gm__job* j) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__tensor* x = j->ti != UINT32_MAX ? &tm->t[j->ti] : NULL;
    int g;
    for (g = 0; g < 2; g++)
        if (j->gate[g]) gm__tev_put(ctx, tm, j->gate[g]);
    if (!x) {
        if (j->ext) gm__arena_give(&dk->ar, j->ext);
        if (j->hb) {
            tm->host_jobs -= gm__host_give(tm, j->hb);
            gm__host_trim(ctx, tm);
        }
        gm__job_free(j);
        return;
    }
    GPUMEM_ASSERT(x->job == j && x->live);
    x->job = NULL;
    gm__tier_count(tm, x, -1);
    if (j->kind == GM__J_WRITE_MEM || j->kind == GM__J_WRITE_DEV) {
        if (j->res == GM_OK) {
            x->disk_valid = 1;
            x->crc = j->crc;
            tm->st.bytes_to_disk += (int64_t)x->bytes;
            gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) written to disk behind", gm__handle_id(tm, x), x->bytes);
        } else {
            gm__arena_give(&dk->ar, x->disk);
            x->disk = NULL;
            gm__log(ctx, GM_LOG_WARN, "tier: writing tensor %#x (%zu bytes) to disk failed (%s); it stays in the %s tier",
                    gm__handle_id(tm, x), x->bytes, gm_result_string(j->res), x->dev ? "device" : "host");
        }
    } else if (j->kind == GM__J_READ_DEV) { /* read ahead into the device (gm__dev_ahead) */
        if (j->res == GM_OK) {
            x->ready_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_IN); /* after every staging copy into it */
            tm->st.bytes_from_disk += (int64_t)x->bytes;
            tm->st.bytes_to_device += (int64_t)x->bytes;
            gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) read from disk into the device ahead of use",
                    gm__handle_id(tm, x), x->bytes);
        } else {
            gm__lru_del(tm, x);
            gm__free(ctx, x->dev, GM__OWN_TENSOR); /* on `in`, after the copies into it */
            x->dev = NULL;
            x->prefetched = 0;
            tm->st.prefetch_wasted++;
            gm__log(ctx, j->res == GM_ERR_CHECKSUM ? GM_LOG_ERROR : GM_LOG_WARN, "tier: reading tensor %#x (%zu bytes) "
                    "from disk into the device failed (%s); it stays on disk", gm__handle_id(tm, x), x->bytes,
                    j->res == GM_ERR_CHECKSUM ? "its checksum differs" : gm_result_string(j->res));
        }
    } else {
        if (j->res == GM_OK) {
            x->host_valid = 1;
            tm->st.bytes_from_disk += (int64_t)x->bytes;
            gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) read from disk into the host tier", gm__handle_id(tm, x),
                    x->bytes);
        } else {
            tm->host_used -= gm__host_give(tm, x->host);
            x->host = NULL;
            gm__log(ctx, j->res == GM_ERR_CHECKSUM ? GM_LOG_ERROR : GM_LOG_WARN, "tier: reading tensor %#x (%zu bytes) "
                    "from disk failed (%s); it stays on disk", gm__handle_id(tm, x), x->bytes,
                    j->res == GM_ERR_CHECKSUM ? "its checksum differs" : gm_result_string(j->res));
        }
    }
    gm__tier_count(tm, x, 1);
    gm__job_free(j);
}

/* Applies every job the engine finished. */
static void gm__io_reap(gm_context* ctx, gm__tier* tm) {
    gm__job* j = ctx->disk ? gm__jobs_done((gm__disk*)ctx->disk) : NULL;
    while (j) {
        gm__job* n = j->next;
        gm__job_apply(ctx, tm, j);
        j = n;
    }
}

/* Waits for x's job (first in line from now) and applies it, and only it:
   the caller may hold other tensors out of the byte counts (the other
   finished jobs wait for the next call); returns the job's result. */
static gm_result gm__io_wait(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__job* j = x->job;
    gm_result r;
    if (!j) return GM_OK;
    gm__job_wait((gm__disk*)ctx->disk, j);
    gm__job_take((gm__disk*)ctx->disk, j);
    r = j->res;
    gm__job_apply(ctx, tm, j);
    return r;
}

/* A disk job that holds x's device copy, a write behind reading it or a
   read ahead filling it, ends before anyone writes, moves or frees that
   copy: they wait here first (after a failed read the device copy is
   gone, and x is on disk). gm__dev_job: whether x has such a job. */
static int gm__dev_job(const gm__tensor* x) {
    return x->job && (x->job->kind == GM__J_WRITE_DEV || x->job->kind == GM__J_READ_DEV);
}
static void gm__dev_settle(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    if (gm__dev_job(x)) (void)gm__io_wait(ctx, tm, x);
}

/* x lets go of its job's host block and extent (written, or destroyed):
   they are the job's until it is applied. */
static void gm__job_detach(gm__tier* tm, gm__tensor* x) {
    gm__job* j = x->job;
    if (!j) return;
    GPUMEM_ASSERT(j->kind != GM__J_READ_DEV); /* its callers settled it: the device memory is x's */
    gm__tier_count(tm, x, -1);
    j->ti = UINT32_MAX;
    j->ext = x->disk;
    j->hb = x->host;
    if (x->host) { /* the pool takes it when the job is applied: after the copies that used it too */
        size_t n = gm__host_size(x->host);
        gm__host_stamp(tm, x, x->host);
        tm->host_used -= n;
        tm->host_jobs += n;
    }
    x->host = NULL;
    x->host_valid = 0;
    x->disk = NULL;
    x->disk_valid = 0;
    x->job = NULL;
    gm__tier_count(tm, x, 1);
}

/* Starts writing x's host copy (once whole) to a new extent; x keeps its
   host copy meanwhile, and the disk copy counts once the write is applied.
   GM_ERR_DISK_FULL without room in the file. */
static gm_result gm__disk_behind(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__block* e;
    gm__job* j;
    if (!dk || x->job || !x->host_valid || x->disk_valid) return GM_OK;
    if (!(e = gm__disk_alloc(ctx, dk, x->bytes))) return GM_ERR_DISK_FULL;
    if (x->blank) { /* no bytes: the room is the copy */
        gm__tier_count(tm, x, -1);
        x->disk = e;
        x->disk_valid = 1;
        gm__tier_count(tm, x, 1);
        return GM_OK;
    }
    if (!(j = gm__job_new(dk, GM__J_WRITE_MEM, gm__disk_off(dk, e), x->bytes))) {
        gm__arena_give(&dk->ar, e);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    j->mem = (char*)x->host->addr;
    j->hx = x->host;
    j->gate[0] = gm__gate_at(ctx, tm, GM__TK_OUT, x->out_seq); /* the copy that fills it */
    j->ti = (uint32_t)(x - tm->t);
    j->gen = x->gen;
    x->disk = e;
    x->job = j;
    gm__host_note(tm, x); /* a write under way: its host copy may go once it ends */
    gm__job_submit(dk, j, 0);
    return GM_OK;
}

/* Starts writing x's device copy to a new extent through the staging slots
   (copies on `out`, after its last use), holding no host room: for a
   written tensor that Belady's order sends to disk anyway. x stays on the
   device, and must not be written or freed until the job is applied
   (acquire, eviction and destroy wait for it). */
static gm_result gm__dev_behind(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__block* e;
    gm__job* j;
    if (!dk || x->job || !x->dev || x->host_valid || x->disk_valid || x->acquired || x->blank) return GM_OK;
    if (!(e = gm__disk_alloc(ctx, dk, x->bytes))) return GM_ERR_DISK_FULL;
    if (!(j = gm__job_new(dk, GM__J_WRITE_DEV, gm__disk_off(dk, e), x->bytes))) {
        gm__arena_give(&dk->ar, e);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    j->dev = x->dev;
    j->copy = GM__OUT(tm);
    /* the engine stages nothing before the copy in and the last use completed (gates, not a wait of
       `out` queued now: that would hold every copy queued on `out` after it, other jobs' staging
       included, behind this tensor's kernels, and the staging copies would hold slots meanwhile) */
    j->gate[0] = gm__gate_at(ctx, tm, x->done_tk, x->done_seq);
    j->gate[1] = gm__gate_at(ctx, tm, GM__TK_IN, x->ready_seq);
    j->ti = (uint32_t)(x - tm->t);
    j->gen = x->gen;
    x->disk = e;
    x->job = j;
    gm__host_note(tm, x); /* a write under way: its host copy may go once it ends */
    gm__job_submit(dk, j, 0);
    return GM_OK;
}

/* Starts reading x (on disk only) into host block hb, which x holds from
   now; its host copy counts once the read is applied. */
static gm_result gm__disk_ahead(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm__block* hb, int urgent) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__job* j = gm__job_new(dk, GM__J_READ_MEM, gm__disk_off(dk, x->disk), x->bytes);
    if (!j) {
        tm->host_used -= gm__host_give(tm, hb);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    j->mem = (char*)hb->addr;
    j->hx = hb;
    j->want = x->crc;
    j->gate[0] = gm__gate_on(ctx, tm, GM__TK_IN, gm__host_ord(hb, 0)); /* the copies that last used it */
    j->gate[1] = gm__gate_on(ctx, tm, GM__TK_OUT, gm__host_ord(hb, 1));
    j->ti = (uint32_t)(x - tm->t);
    j->gen = x->gen;
    x->host = hb;
    x->job = j;
    gm__host_note(tm, x);
    gm__job_submit(dk, j, urgent);
    return GM_OK;
}

/* Writes x to a new extent of the spill file and waits: from its host copy
   when it has one (once whole), else from the device through the staging
   slots: the write behind of either kind (gm__disk_behind, gm__dev_behind),
   then a wait for it alone. On failure the extent goes back and x is
   unchanged. asked: the caller's own request (gm_tensor_evict_to), whose
   write that cannot start (no room in the file, no host memory for the
   job) is said as a warning; one that fails says so itself. */
static gm_result gm__to_disk(gm_context* ctx, gm__tier* tm, gm__tensor* x, int asked) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__block* e;
    gm_result r;
    if (x->job) (void)gm__io_wait(ctx, tm, x); /* a write under way may do */
    if (x->disk_valid) return GM_OK;
    if (!dk) return GM_ERR_UNSUPPORTED;
    if (!x->host_valid && !x->dev) return GM__MISUSE(ctx, GM_ERR_UNSUPPORTED, "tier: a tensor in managed memory stays there");
    if (!x->host_valid && x->blank) { /* blank on the device: an extent is the copy */
        r = GM_ERR_DISK_FULL;
        if ((e = gm__disk_alloc(ctx, dk, x->bytes)) != NULL) {
            gm__tier_count(tm, x, -1);
            x->disk = e;
            x->disk_valid = 1;
            gm__tier_count(tm, x, 1);
            r = GM_OK;
        }
    } else {
        r = x->host_valid ? gm__disk_behind(ctx, tm, x) : gm__dev_behind(ctx, tm, x);
    }
    if (r != GM_OK && asked)
        gm__log(ctx, GM_LOG_WARN, "tier: tensor %#x (%zu bytes) cannot go to disk (%s); it stays where it was",
                gm__handle_id(tm, x), x->bytes, gm_result_string(r));
    if (r == GM_OK && !x->disk_valid) r = gm__io_wait(ctx, tm, x);
    return r == GM_OK && !x->disk_valid ? GM_ERR_IO : r;
}

/* >>tier: host victims. When the host tier is full, the host copy to
   give up for room is the cheapest: one the device also holds (class 0,
   dropped for free), then one on disk too (1: a read if it is wanted
   again), then one held nowhere else (2: written to disk first); within a
   class, lowest priority first, then used farthest ahead (learned order
   planning) or least recently (else), then the lowest slot. Never that of
   an acquired tensor (bringing it in may be reading its host copy, and it
   is out of the byte counts meanwhile), nor one whose disk job is under
   way. Three binary heaps, one per class, make that choice O(log n)
   amortized instead of a walk of every tensor. An entry (gm__hent) holds
   a slot, its priority and a key, lower first (gm__hh_key: the stamp, or
   GM__NEVER less the next use as a plan position, gm__vh_key). Entries
   stay when their tensor changes: the top is checked against its tensor
   as it is now (gm__hh_pick), dropped when the tensor may not be given up
   (gm__hh_can) or is of another class, and re-keyed when its priority or
   key moved.
   Invariants, while tm->hh_ok (under tm->mu):
   - every tensor that may be given up has an entry in its class's heap
     that goes no later than the tensor as it is now. Whatever makes a
     tensor one that may be given up, or moves its class, pushes an entry
     (gm__host_note: from gm__tier_count, a release or the end of a hold
     (acquired-- around a bring-in), a disk job's start, gm__room_mark, a
     change of priority, the plan position passing its use in
     gm__uses_passed); stamps only grow and a next use moves later only
     when the position passes it, so an older entry only goes earlier;
   - a push past twice the host copies plus 64 entries clears hh_ok
     instead (stale entries do not pile up);
   - the keys are of the kind hh_planned says (GM__PLANNED when built).
   A change of next uses at large (a new plan or phase, a jump of the
   position) clears hh_ok, as it clears vh_ok, and the next choice builds
   the heaps from every tensor, O(n). They are built only when a choice is
   first asked for (the host tier full): until then nothing is pushed.
   tm->hsoon: the bytes (x->bytes each) of host copies that may go without
   a write: held above too, on disk too, or with a write under way. A
   tensor's hsoon bit says whether it is counted; gm__host_note brings
   both up to date, and the calls that push entries keep them exact. */
static uint64_t gm__vh_key(const gm__tier* tm, uint32_t i);

static int gm__hclass(const gm__tensor* x) {
    return GM__HOLDS(x) ? 0 : x->disk_valid ? 1 : 2;
}

static int gm__hh_can(const gm__tensor* x) {
    return x->live && x->host_valid && x->host && !x->acquired && !x->job;
}

static int gm__hsoon_is(const gm__tensor* x) {
    return x->live && x->host_valid && (GM__HOLDS(x) || x->disk_valid || x->job);
}

static uint64_t gm__hh_key(const gm__tier* tm, const gm__tensor* x, int planned) {
    uint64_t k;
    if (!planned) return x->stamp;
    k = gm__vh_key(tm, (uint32_t)(x - tm->t));
    return k >= GM__NEVER ? 0 : GM__NEVER - k;
}

static gm__hent gm__hh_entry(const gm__tier* tm, const gm__tensor* x) {
    gm__hent e;
    e.key = gm__hh_key(tm, x, tm->hh_planned);
    e.i = (uint32_t)(x - tm->t);
    e.prio = x->priority;
    return e;
}

static int gm__hh_before(const gm__hent* a, const gm__hent* b) {
    if (a->prio != b->prio) return a->prio < b->prio;
    if (a->key != b->key) return a->key < b->key;
    return a->i < b->i;
}

/* A binary heap's two moves, for entries of type T ordered by BEFORE (the
   host victims' and the learned victims' heaps): P_sift(h, n, k) moves
   h[k] down to its place among h's n entries; P_up(h, k, e) enters e at
   the heap's end, k (it then holds k + 1 entries). */
#define GM__HEAP_MOVES(P, T, BEFORE)                                          \
    static void P##_sift(T* h, uint32_t n, uint32_t k) {                     \
        T e = h[k];                                                          \
        for (;;) {                                                           \
            uint32_t c = 2 * k + 1;                                          \
            if (c >= n) break;                                               \
            if (c + 1 < n && BEFORE(&h[c + 1], &h[c])) c++;                  \
            if (!BEFORE(&h[c], &e)) break;                                   \
            h[k] = h[c];                                                     \
            k = c;                                                           \
        }                                                                    \
        h[k] = e;                                                            \
    }                                                                        \
    static void P##_up(T* h, uint32_t k, T e) {                              \
        for (; k && BEFORE(&e, &h[(k - 1) / 2]); k = (k - 1) / 2) h[k] = h[(k - 1) / 2]; \
        h[k] = e;                                                            \
    }
GM__HEAP_MOVES(gm__hh, gm__hent, gm__hh_before)

static void gm__hh_pop(gm__tier* tm, int c) {
    tm->hh[c][0] = tm->hh[c][--tm->nhh[c]];
    gm__hh_sift(tm->hh[c], tm->nhh[c], 0);
}

/* Room for one more entry in heap c; 0 when there is no memory for it. */
static int gm__hh_room(gm__tier* tm, int c) {
    uint32_t cap;
    gm__hent* h;
    if (tm->nhh[c] < tm->caphh[c]) return 1;
    cap = tm->caphh[c] ? tm->caphh[c] * 2 : 64;
    h = (gm__hent*)gm__grow_array(tm->hh[c], tm->caphh[c] * sizeof *h, cap * sizeof *h);
    if (!h) return 0;
    tm->hh[c] = h;
    tm->caphh[c] = cap;
    return 1;
}

/* The heaps from every tensor, O(n). */
static int gm__hh_build(gm__tier* tm) {
    uint32_t i;
    int c;
    tm->hh_ok = 0;
    tm->hh_planned = GM__PLANNED(tm);
    for (c = 0; c < 3; c++) tm->nhh[c] = 0;
    for (i = 0; i < tm->n; i++) {
        const gm__tensor* x = &tm->t[i];
        if (!gm__hh_can(x)) continue;
        c = gm__hclass(x);
        if (!gm__hh_room(tm, c)) return 0;
        tm->hh[c][tm->nhh[c]++] = gm__hh_entry(tm, x);
    }
    for (c = 0; c < 3; c++)
        for (i = tm->nhh[c] / 2; i-- > 0;) gm__hh_sift(tm->hh[c], tm->nhh[c], i);
    tm->hh_ok = 1;
    tm->hh_builds++;
    tm->hh_looks += tm->n;
    return 1;
}

/* x changed in a way the host tier's choices see: its hsoon count, its
   heap entry (when it may be given up), and learned order's note of a
   copy to write (gm__hc_note). Cheap to call more often than needed. */
static void gm__host_note(gm__tier* tm, gm__tensor* x) {
    unsigned soon = (unsigned)gm__hsoon_is(x);
    if (soon != x->hsoon) {
        if (soon) tm->hsoon += x->bytes;
        else tm->hsoon -= x->bytes;
        x->hsoon = soon & 1u;
    }
    if (tm->hh_ok && gm__hh_can(x)) {
        int c = gm__hclass(x);
        if (tm->nhh[0] + tm->nhh[1] + tm->nhh[2] >= 2 * (uint64_t)tm->nhost + 64 || !gm__hh_room(tm, c))
            tm->hh_ok = 0; /* built again when next asked */
        else {
            gm__hh_up(tm->hh[c], tm->nhh[c]++, gm__hh_entry(tm, x));
            tm->hh_pushes++;
        }
    }
    gm__hc_note(tm, x);
}

/* The choice walking every tensor, O(n): where the heaps cannot be had
   (no memory), and for tests to compare with. */
static gm__tensor* gm__hh_walk(gm__tier* tm, const gm__tensor* except, int lo, int hi, uint64_t after) {
    gm__tensor* best = NULL;
    gm__hent be, e;
    int bc = 0, planned = GM__PLANNED(tm);
    uint32_t i;
    memset(&be, 0, sizeof be);
    tm->hh_looks += tm->n;
    for (i = 0; i < tm->n; i++) {
        gm__tensor* x = &tm->t[i];
        int c;
        if (!gm__hh_can(x) || x == except || (c = gm__hclass(x)) < lo || c > hi) continue;
        if (after && (!planned || gm__next_use(tm, i) <= after)) continue;
        e.key = gm__hh_key(tm, x, planned);
        e.i = i;
        e.prio = x->priority;
        if (!best || c < bc || (c == bc && gm__hh_before(&e, &be))) best = x, bc = c, be = e;
    }
    return best;
}

#define GM__HH_ASIDE 512 /* entries a choice passes over (except, or used too soon), at most */

/* The cheapest host copy of class lo .. hi to give up (NULL: none), not
   except's; with `after` (learned order), only one used later than that
   many acquires from now. The entries passed over are distinct tensors
   (twins are dropped), each used within `after` acquires: a read ahead's
   `after` is at most 256. Past GM__HH_ASIDE of them it gives up: NULL. */
static gm__tensor* gm__hh_pick(gm__tier* tm, const gm__tensor* except, int lo, int hi, uint64_t after) {
    gm__hent aside[GM__HH_ASIDE];
    gm__tensor* found = NULL;
    int c, full = 0;
    if (after && !GM__PLANNED(tm)) return NULL;
    if ((!tm->hh_ok || tm->hh_planned != GM__PLANNED(tm)) && !gm__hh_build(tm))
        return gm__hh_walk(tm, except, lo, hi, after);
    for (c = lo; c <= hi && !found && !full; c++) {
        gm__hent* h = tm->hh[c];
        uint32_t na = 0, k;
        while (tm->nhh[c]) {
            gm__tensor* x = &tm->t[h[0].i];
            gm__hent now;
            tm->hh_looks++;
            if (!gm__hh_can(x) || gm__hclass(x) != c) { /* stale: whatever made it current again pushed anew */
                gm__hh_pop(tm, c);
                continue;
            }
            now = gm__hh_entry(tm, x);
            if (now.key != h[0].key || now.prio != h[0].prio) { /* it went earlier than it is: to its place */
                h[0] = now;
                gm__hh_sift(h, tm->nhh[c], 0);
                continue;
            }
            if (x == except || (after && gm__next_use(tm, h[0].i) <= after)) {
                if (na && aside[na - 1].i == h[0].i && aside[na - 1].key == h[0].key && aside[na - 1].prio == h[0].prio) {
                    gm__hh_pop(tm, c); /* a twin of the entry just set aside (they come out one after the other) */
                    continue;
                }
                if (na == GM__HH_ASIDE) {
                    full = 1;
                    break;
                }
                aside[na++] = h[0];
                gm__hh_pop(tm, c);
                continue;
            }
            found = x;
            break;
        }
        for (k = 0; k < na; k++) gm__hh_up(h, tm->nhh[c]++, aside[k]); /* back: their room is still there */
    }
    return full ? NULL : found;
}

/* A host copy to give up for room, cheapest first (above), of class 0 or
   1, or with can_write also 2. */
static gm__tensor* gm__host_victim(gm__tier* tm, const gm__tensor* except, int can_write, uint64_t after) {
    return gm__hh_pick(tm, except, 0, can_write ? 2 : 1, after);
}

/* The tensor whose write of its host copy to disk ends soonest (the
   engine runs its jobs in their list's order; one done already first),
   of those whose host copy could then go; NULL when none. O(jobs). */
static gm__tensor* gm__write_soonest(gm_context* ctx, gm__tier* tm) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__tensor* w = NULL;
    const gm__job* j;
    int pass;
    pthread_mutex_lock(&dk->mu);
    for (pass = 0; pass < 2 && !w; pass++)
        for (j = pass ? dk->jobs : dk->done; j && !w; j = j->next) {
            gm__tensor* x = j->kind == GM__J_WRITE_MEM && j->ti < tm->n ? &tm->t[j->ti] : NULL;
            if (x && x->live && x->job == j && x->host_valid && x->host && !x->acquired) w = x;
        }
    pthread_mutex_unlock(&dk->mu);
    return w;
}

/* Learned order with a disk tier, x leaving the device and the host tier
   full: whether x goes to disk itself, the host copy v that would leave for
   it (one held nowhere else) being used sooner, as Belady's order says;
   never when the plan sends v to disk before its next use and keeps x
   (its run over the whole step knows the room better than one look
   ahead: bench/spill's transformer at 1.5x, 412-472 MiB a step through
   the disk without this, 400-448 with it; at 2x, 632 and 616-632). */
static int gm__goes_around(const gm_context* ctx, const gm__tier* tm, const gm__tensor* x, const gm__tensor* v) {
    if (!ctx->disk || !GM__PLANNED(tm) || !v || GM__HOLDS(v)) return 0;
    if (gm__leaves(tm, (uint32_t)(v - tm->t)) && !gm__leaves(tm, (uint32_t)(x - tm->t))) return 0;
    return gm__next_use(tm, (uint32_t)(v - tm->t)) < gm__next_use(tm, (uint32_t)(x - tm->t));
}

/* Room for `bytes` in the host tier: the pool, else host copies given up
   (after their write to disk when they are the only copy, waiting for it)
   until it fits. With `around`, for `except` leaving the device: none, when
   except itself should go to disk instead (gm__goes_around), asked of each
   copy before it is given up, not only the first: that one may go for free
   (the device holds it too) and the next be one used sooner than except.
   With `started` (room for a prefetch, which never waits for the disk):
   none where a write would be waited for; *started is set when one is
   under way (or starts now, behind), whose end gives the room. */
static gm__block* gm__host_room(gm_context* ctx, gm__tier* tm, size_t bytes, const gm__tensor* except, int around,
                                int* started) {
    gm__block* b;
    if (gm__host_need(ctx, bytes) > ctx->desc.host_budget) return NULL;
    while ((b = gm__host_alloc(ctx, tm, bytes)) == NULL) {
        gm__tensor* v = gm__host_victim(tm, except, ctx->disk != NULL, 0); /* the cheapest copy to give up */
        if (around && gm__goes_around(ctx, tm, except, v)) return NULL;
        if (ctx->disk && (!v || (!GM__HOLDS(v) && !v->disk_valid))) { /* none goes without a write: a write under
                                                                          way ends soonest, wait for it */
            gm__tensor* w = gm__write_soonest(ctx, tm);
            if (w && started) {
                *started = 1;
                return NULL;
            }
            if (w) {
                (void)gm__io_wait(ctx, tm, w);
                continue;
            }
        }
        if (!v) break;
        if (!GM__HOLDS(v) && !v->disk_valid && started) {
            if (gm__disk_behind(ctx, tm, v) == GM_OK) {
                tm->st.host_demotions++;
                *started = 1;
            }
            return NULL;
        }
        if (!GM__HOLDS(v) && !v->disk_valid) {
            if (gm__to_disk(ctx, tm, v, 0) != GM_OK) break;
            tm->st.host_demotions++;
            gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) written from the host tier to disk for room",
                    gm__handle_id(tm, v), v->bytes);
            if (!v->host_valid) continue; /* its copy went while it waited (a write's end applied) */
        }
        gm__tier_count(tm, v, -1);
        gm__host_free(ctx, tm, v);
        gm__tier_count(tm, v, 1);
    }
    return b;
}

/* With a disk tier, host copies held nowhere else are written to disk
   behind, so that room in the host tier comes without waiting for a write.
   In learned order, those Belady's order sends to disk before their next
   use (gm__plan_belady); else, while the free room and the copies that
   may be dropped for free (or will be, once their write under way is
   applied) are less than half the host budget, the coldest.
   Learned order looks only at the copies noted since its last look
   (tm->hcq), not at every tensor: a copy becomes one to write only by
   becoming the only copy (gm__tier_count notes it, and again when a write
   of it fails), or by a change of the plan's verdicts (a new plan or
   phase, a jump of the position or a step back, the plan followed again:
   hc_all, one walk of every tensor); the position moving on by up to 256
   passes the uses of the tensors at those positions, which
   gm__uses_passed notes (the acquired tensor's, or on a departure
   another's). Nothing is noted while learned order does not
   plan (LRU, or the plan left): hc_all is set whenever it starts again.
   Invariants: a tensor's hcq bit is set exactly
   while its slot is on tm->hcq, once; with a disk tier, under learned
   order and hc_all clear, every copy to write (gm__hc_writes) is noted,
   or has a write under way, or its tensor is acquired (noted, kept). */
static void gm__hc_note(gm__tier* tm, gm__tensor* x) {
    if (!tm->hc_on || !GM__PLANNED(tm) || !tm->leaves || x->hcq || !GM__HOST_ONLY(x)) return;
    if (tm->nhcq == tm->caphcq) {
        uint32_t cap = tm->caphcq ? tm->caphcq * 2 : 64;
        uint32_t* q = (uint32_t*)gm__grow_array(tm->hcq, tm->caphcq * sizeof *q, cap * sizeof *q);
        if (!q) { /* no room to note it: the next look walks every tensor */
            tm->hc_all = 1;
            return;
        }
        tm->hcq = q;
        tm->caphcq = cap;
    }
    tm->hcq[tm->nhcq++] = (uint32_t)(x - tm->t);
    x->hcq = 1;
}

/* Whether learned order writes x's host copy to disk behind now (when it
   is not acquired): the only copy, no write under way, and Belady's order
   sends x to disk before its next use. */
static int gm__hc_writes(const gm__tier* tm, const gm__tensor* x) {
    return GM__HOST_ONLY(x) && !x->job && gm__leaves(tm, (uint32_t)(x - tm->t));
}

static void gm__host_clean(gm_context* ctx, gm__tier* tm) {
    size_t free_room, soon;
    uint32_t i, k, r;
    int failed = 0;
    if (!ctx->disk || tm->host_reserved > ctx->desc.host_budget) return;
    if (GM__PLANNED(tm) && tm->leaves) {
        /* a known future: exactly the copies Belady's order sends to disk before their next use
           are written, and no other */
        if (tm->hc_all) { /* every copy to write is noted, then written below */
            tm->hc_all = 0;
            tm->hc_looks += tm->n;
            for (i = 0; i < tm->n; i++)
                if (gm__hc_writes(tm, &tm->t[i])) gm__hc_note(tm, &tm->t[i]);
        }
        for (r = k = 0; r < tm->nhcq; r++) { /* tm->hcq may grow meanwhile (a write's end applied) */
            uint32_t j = tm->hcq[r];
            gm__tensor* x = &tm->t[j];
            tm->hc_looks++;
            if (!failed) {
                if (!gm__hc_writes(tm, x)) { /* nothing to write: off the list */
                    x->hcq = 0;
                    continue;
                }
                if (!x->acquired) {
                    if (gm__disk_behind(ctx, tm, x) == GM_OK) {
                        tm->st.host_demotions++;
                        x->hcq = 0;
                        continue;
                    }
                    failed = 1; /* it and the rest next time */
                }
            }
            tm->hcq[k++] = j;
        }
        tm->nhcq = k;
        return;
    }
    free_room = gm__host_free_room(ctx, tm);
    if (free_room >= ctx->desc.host_budget / 2) return; /* the loop below would find enough already */
    soon = tm->hsoon;
    while (free_room + soon < ctx->desc.host_budget / 2) {
        uint64_t looks = tm->hh_looks;
        gm__tensor* v = gm__hh_pick(tm, NULL, 2, 2, 0); /* the coldest copy held nowhere else */
        tm->hc_looks += tm->hh_looks - looks;
        if (!v || gm__disk_behind(ctx, tm, v) != GM_OK) return;
        tm->st.host_demotions++;
        soon += v->bytes;
    }
}

/* Starts reading x (on disk only) into the host tier when room can be had
   there without waiting: free, or copies held elsewhere too (with `after`,
   only those used later than that). Returns whether it started. */
static int gm__read_ahead(gm_context* ctx, gm__tier* tm, gm__tensor* x, uint64_t after) {
    gm__block* hb;
    if (!ctx->disk || x->job || x->host || !x->disk_valid || x->blank || x->dev || x->managed ||
        gm__host_need(ctx, x->bytes) > ctx->desc.host_budget)
        return 0;
    while ((hb = gm__host_alloc(ctx, tm, x->bytes)) == NULL) {
        gm__tensor* v = gm__host_victim(tm, x, 0, after);
        if (!v) return 0;
        gm__tier_count(tm, v, -1);
        gm__host_free(ctx, tm, v);
        gm__tier_count(tm, v, 1);
    }
    return gm__disk_ahead(ctx, tm, x, hb, 0) == GM_OK;
}

/* Device to a lower tier: a clean tensor (a valid copy below) just drops
   the device copy; else to the host tier (making room there), else to
   disk. The device copy is dropped only when the copy below is certain to
   follow. Any failure leaves the tensor on the device. nowait (room for a
   prefetch): GM_NOT_READY where x would be written to disk and waited
   for; its write starts, and the room comes once it ended. With nowait 2
   (gm_tensor_prefetch) the same where a host copy making room for x would
   be written and waited for, or a disk job under way would be (x's own,
   or one whose end frees host room). Learned
   order's prefetches (1) wait for those: they then land in time, where
   giving up left the acquire to bring the tensor in itself, later
   (bench/spill's transformer learned+disk 2x, modelled disk: 401-477 ms a
   step waiting, 433-565 not). */
static gm_result gm__evict_at(gm_context* ctx, gm__tier* tm, gm__tensor* x, int nowait) {
    gm_result r;
    int clean, started = 0;
    if (!x->dev || x->acquired) return GM_ERR_BAD_STATE;
    if (nowait > 1 && gm__dev_job(x)) return GM_NOT_READY; /* the room comes once its job ends */
    gm__dev_settle(ctx, tm, x); /* a write behind ends soonest; a read ahead first lands */
    if (!x->dev) return GM_OK; /* its read ahead failed: it is on disk, its room given back */
    clean = x->host_valid || x->disk_valid;
    if (!clean && x->blank) { /* never written: room below is its copy, and nothing moves */
        gm__block* hb = x->host ? x->host : gm__host_alloc(ctx, tm, x->bytes);
        gm__block* e = hb || !ctx->disk ? NULL : gm__disk_alloc(ctx, (gm__disk*)ctx->disk, x->bytes);
        if (!hb && !e) hb = gm__host_room(ctx, tm, x->bytes, x, 0, nowait > 1 ? &started : NULL);
        if (!hb && !e && started) return GM_NOT_READY; /* the room comes once that write ends */
        if (!hb && !e) {
            char note[96];
            if (gm__quiet(&tm->below_log, &tm->below_held, note, sizeof note))
                gm__log(ctx, GM_LOG_WARN, "tier: no room below the device for tensor %#x (%zu bytes, never written): "
                        "it stays on the device%s", gm__handle_id(tm, x), x->bytes, note);
            return GM_ERR_HOST_OUT_OF_MEMORY;
        }
        gm__tier_count(tm, x, -1);
        if (hb) x->host = hb, x->host_valid = 1;
        else x->disk = e, x->disk_valid = 1;
        gm__tier_count(tm, x, 1);
        clean = 1;
    }
    if (!clean) {
        int fresh = !x->host;
        /* learned order: a tensor Belady's order sends to disk takes only free host room
           (else it goes straight to disk), never room other copies would have to leave */
        int away = ctx->disk && GM__PLANNED(tm) && gm__leaves(tm, (uint32_t)(x - tm->t));
        if (fresh)
            x->host = away ? gm__host_alloc(ctx, tm, x->bytes)
                           : gm__host_room(ctx, tm, x->bytes, x, 1, nowait > 1 ? &started : NULL);
        if (!x->host && started) return GM_NOT_READY; /* the room comes once that write ends */
        if (x->host) {
            r = gm__copy_out(ctx, tm, x);
            if (r != GM_OK) {
                if (fresh) gm__host_free(ctx, tm, x);
                gm__log(ctx, GM_LOG_WARN, "tier: evicting a %zu-byte tensor failed (%s); it stays on the device",
                        x->bytes, gm_result_string(r));
                return r;
            }
            gm__host_clean(ctx, tm);
        } else if (ctx->disk && nowait) {
            r = gm__dev_behind(ctx, tm, x);
            return r == GM_OK ? GM_NOT_READY : r;
        } else if (ctx->disk) {
            r = gm__to_disk(ctx, tm, x, 0);
            if (r != GM_OK) return r;
        } else {
            gm__log(ctx, GM_LOG_WARN, "tier: host tier full (%zu of %zu bytes): a %zu-byte tensor stays on the device",
                    tm->host_reserved, ctx->desc.host_budget, x->bytes);
            return GM_ERR_HOST_OUT_OF_MEMORY;
        }
    }
    gm__tier_count(tm, x, -1);
    gm__dev_drop(ctx, tm, x);
    gm__tier_count(tm, x, 1);
    if (clean) tm->st.clean_evictions++;
    gm__lru_del(tm, x);
    tm->st.evictions++;
    gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes, priority %d) left the device: %s", gm__handle_id(tm, x),
            x->bytes, x->priority, x->blank ? "never written, nothing copied"
            : clean ? "its copy below was valid, nothing copied"
            : x->host_valid ? "copied to the host tier" : "written to disk");
    return GM_OK;
}

static gm_result gm__evict_one(gm_context* ctx, gm__tier* tm, gm__tensor* x) { return gm__evict_at(ctx, tm, x, 0); }

/* Acquires from now until tensor i is used again by the plan: a position
   later in this step, or in the next; far away when the plan never uses it. */
/* Tensor i's first use in the step expected after this one (the phase
   that followed this one last time, else this one), counted from now. */
static uint64_t gm__next_step_use(const gm__tier* tm, uint32_t i) {
    int k = tm->ph[tm->cur].next >= 0 ? tm->ph[tm->cur].next : tm->cur;
    const gm__phase* f = &tm->ph[k];
    if (!f->nplan || i >= f->nuse_first || f->use_first[i] == f->use_first[i + 1]) return GM__NEVER;
    return (uint64_t)(tm->nplan > tm->pos ? tm->nplan - tm->pos : 0) + f->use_at[f->use_first[i]] + 1;
}

static uint64_t gm__next_use(const gm__tier* tm, uint32_t i) {
    uint32_t lo, hi;
    if (!tm->nplan) return GM__NEVER;
    if (i >= tm->nuse_first || tm->use_first[i] == tm->use_first[i + 1]) return gm__next_step_use(tm, i);
    lo = tm->use_first[i];
    hi = tm->use_first[i + 1];
    while (lo < hi) { /* first use after pos */
        uint32_t mid = lo + (hi - lo) / 2;
        if (tm->use_at[mid] < tm->pos) lo = mid + 1; /* pos is the index of the next acquire */
        else hi = mid;
    }
    if (lo < tm->use_first[i + 1]) return (uint64_t)(tm->use_at[lo] - tm->pos) + 1;
    return gm__next_step_use(tm, i);
}

/* >>tier: learned victims. Under learned order the victim is the released
   tensor of the lowest priority used farthest ahead (Belady's rule); a
   binary heap keeps that choice O(log n) instead of a walk of the LRU
   list. An entry's key is a tensor's next use as a plan position
   (gm__vh_key: this step's position, else the plan's length plus its
   first position in the step expected next; GM__NEVER when none), which
   stays put while the plan position advances, except for tensors whose
   use it passes. Entries are ordered by priority (lowest first), then key
   (highest first), then LRU place (lseq, oldest first): the walk's order.
   Invariants, while tm->vh_ok (under tm->mu):
   - every tensor on the LRU list that is not pinned has exactly one entry
     whose hv is its own; a tensor's hv grows when it leaves the list, when
     its priority or pin changes and when the position passes its use, so
     that its older entries are stale (dropped when they reach the top);
   - a current entry's key is never below the tensor's next use: the
     position moving forward re-enters each tensor whose use it passes (a
     long jump rebuilds instead), and moving back only lowers next uses,
     which the top's check catches and corrects;
   - a push past twice the listed tensors plus 64 entries rebuilds the heap
     instead (stale entries do not pile up).
   A new plan, another phase, or a change of the phase expected next clears
   vh_ok; the next choice rebuilds the heap from the list, O(n). So does a
   long jump, except within n/8 operations of the last build (n listed
   tensors): then the victim is the LRU list's (the lowest priority's
   least recently released) until that many have passed, so that
   acquires that keep jumping around the plan (threads interleaving their
   steps) cost O(1) amortized, not O(n) each. */
static uint64_t gm__vh_key(const gm__tier* tm, uint32_t i) {
    uint64_t nu = gm__next_use(tm, i);
    return nu == GM__NEVER ? GM__NEVER : nu + (tm->pos < tm->nplan ? tm->pos : tm->nplan) - 1;
}

static int gm__vh_before(const gm__vent* a, const gm__vent* b) {
    if (a->prio != b->prio) return a->prio < b->prio;
    if (a->key != b->key) return a->key > b->key;
    return a->lseq < b->lseq;
}

GM__HEAP_MOVES(gm__vh, gm__vent, gm__vh_before)

static gm__vent gm__vh_entry(const gm__tier* tm, const gm__tensor* x) {
    gm__vent e;
    e.i = (uint32_t)(x - tm->t);
    e.key = gm__vh_key(tm, e.i);
    e.lseq = x->u.lseq;
    e.prio = x->priority;
    e.hv = x->hv;
    return e;
}

/* Whether an entry is its tensor's current one (hv may wrap: the rest
   tells a leftover from long ago apart). */
static int gm__vh_current(const gm__tier* tm, const gm__vent* e) {
    const gm__tensor* x = &tm->t[e->i];
    return x->live && e->hv == x->hv && e->lseq == x->u.lseq && e->prio == x->priority;
}

static uint32_t gm__nlisted(const gm__tier* tm) {
    uint32_t j, n = 0;
    for (j = 0; j < tm->nprios; j++) n += tm->prios[j].n;
    return n;
}

/* Makes room for n entries; 0 when it cannot. */
static int gm__vh_room(gm__tier* tm, uint32_t n) {
    uint32_t cap;
    gm__vent* h;
    if (n <= tm->capvh) return 1;
    cap = tm->capvh ? tm->capvh : 64;
    while (cap < n) cap *= 2;
    h = (gm__vent*)gm__grow_array(tm->vh, tm->capvh * sizeof *h, cap * sizeof *h);
    if (!h) return 0;
    tm->vh = h;
    tm->capvh = cap;
    return 1;
}

/* The heap from the LRU list, in O(n). */
static int gm__vh_build(gm__tier* tm) {
    uint32_t k, n = 0;
    gm__tensor* x;
    tm->vh_ok = 0;
    if (!gm__vh_room(tm, gm__nlisted(tm) + 1)) return 0;
    for (k = tm->lru; k; k = x->next) {
        x = GM__LRU(tm, k);
        if (x->pinned) continue;
        if (n == tm->capvh && !gm__vh_room(tm, n + 1)) return 0; /* the levels' count fell short (no memory) */
        x->hv++; /* entries left from an earlier heap are stale */
        tm->vh[n++] = gm__vh_entry(tm, x);
    }
    tm->nvh = n;
    for (k = n / 2; k-- > 0;) gm__vh_sift(tm->vh, n, k);
    tm->vh_ok = 1;
    tm->vh_jumped = 0;
    tm->vh_built = tm->clock;
    tm->vh_builds++;
    return 1;
}

/* A listed tensor's entry, as it is now (its hv already made current). */
static void gm__vh_push(gm__tier* tm, gm__tensor* x) {
    if (!tm->vh_ok || x->pinned) return;
    if (tm->nvh >= 2 * gm__nlisted(tm) + 64 || !gm__vh_room(tm, tm->nvh + 1)) { /* rebuilt when next asked */
        tm->vh_ok = 0;
        return;
    }
    gm__vh_up(tm->vh, tm->nvh++, gm__vh_entry(tm, x));
}

/* The plan position moved from `was` (phase `cur`): the tensors whose uses
   it passed (whoever was acquired: a departure moves it too) get entries
   with their next uses, in the learned victims' heap and, keyed by next
   use, the host victims' heaps, and their host copies are noted for a
   write behind (their verdicts changed). A jump of more than 256
   positions, or into another phase, clears the heaps instead; the caller
   has every verdict looked at again (hc_all). Backwards, next uses only
   come sooner: nothing for the heaps. Positions from nplan on change
   nothing. */
static void gm__uses_passed(gm__tier* tm, uint32_t was, int cur) {
    uint32_t q;
    int hh = tm->hh_ok && tm->hh_planned;
    if (tm->pos <= was) return;
    if (tm->cur != cur || tm->pos - was > 256) {
        if (tm->vh_ok) tm->vh_jumped = tm->cur == cur;
        tm->vh_ok = 0;
        if (hh) tm->hh_ok = 0;
        return;
    }
    for (q = was; q < tm->pos && q < tm->nplan; q++) {
        gm__tensor* x = &tm->t[GM__PLAN_T(tm->plan[q])];
        if (tm->vh_ok && x->live && gm__listed(tm, x) && !x->pinned) {
            x->hv++;
            gm__vh_push(tm, x);
        }
        if (hh) gm__host_note(tm, x); /* gm__hc_note too */
        else gm__hc_note(tm, x);
    }
}

/* The learned victim: 1 with *out (NULL: none) and *nu, its next use from
   now; 0 when the heap cannot say (no memory for it, or the top is held
   for the moment), and the walk decides; 2 when a long jump cleared the
   heap soon after it was built: the LRU list's victim for now. */
static int gm__vh_top(gm__tier* tm, gm__tensor** out, uint64_t* nu) {
    *out = NULL;
    if (!tm->vh_ok && tm->vh_jumped && tm->clock - tm->vh_built < gm__nlisted(tm) / 8) return 2;
    if (!tm->vh_ok && !gm__vh_build(tm)) return 0;
    while (tm->nvh) {
        gm__vent* e = &tm->vh[0];
        gm__tensor* x = &tm->t[e->i];
        uint64_t key;
        if (!gm__vh_current(tm, e)) { /* stale */
            tm->vh[0] = tm->vh[--tm->nvh];
            gm__vh_sift(tm->vh, tm->nvh, 0);
            continue;
        }
        if (x->acquired || !x->dev) return 0;
        key = gm__vh_key(tm, e->i);
        if (key != e->key) { /* its next use came sooner (the position went back) */
            e->key = key;
            gm__vh_sift(tm->vh, tm->nvh, 0);
            continue;
        }
        *out = x;
        *nu = key == GM__NEVER ? GM__NEVER : key + 1 - (tm->pos < tm->nplan ? tm->pos : tm->nplan);
        return 1;
    }
    return 1;
}

/* Whether device tensor v may trade places with `swap` (a swap): it fits
   swap's room below (`below` bytes), swap fits its device memory, and it
   has no copy below (none on disk either, for a swap with disk). */
static int gm__swappable(gm_context* ctx, const gm__tensor* v, const gm__tensor* swap, size_t below) {
    return !v->job && !v->host && v->prefetched != 2 && v->bytes <= below && (swap->host || !v->disk_valid) &&
           gm__retag(ctx, v->dev, 0, 0) >= swap->bytes;
}

/* The policy's choice among released tensors on the device, or NULL.
   clean_only: only those whose host copy is still valid. swap: only those
   that can trade places with that host tensor (gm__swap_in). Learned
   order's plain choice comes from the heap; the rest walk the list. */
static gm__tensor* gm__victim(gm_context* ctx, gm__tier* tm, int clean_only, const gm__tensor* swap) {
    gm__tensor *x, *best = NULL;
    uint64_t best_next = 0;
    uint32_t k, n = 0;
    int planned = GM__PLANNED(tm), top;
    size_t below = !swap ? 0 : swap->host ? gm__host_cap(swap->host) : swap->disk->size; /* a swap's room below */
    if (planned && !clean_only && !swap && (top = gm__vh_top(tm, &x, &best_next)) != 0) {
        if (top == 2) { /* LRU order for now; a prefetch, which may evict only what is used after it, waits */
            if (tm->evict_after) return NULL;
            planned = 0;
        } else {
            if (!x || !tm->evict_after || best_next > tm->evict_after) return x;
            if (tm->nprios <= 1) return NULL; /* every one comes sooner than what room is made for */
            best_next = 0; /* another priority level may have one: the walk decides */
        }
    }
    for (k = tm->lru; k; k = x->next) {
        uint64_t nu;
        x = GM__LRU(tm, k);
        if (x->pinned || !x->dev || x->acquired || (clean_only && !x->host_valid && !x->disk_valid)) continue;
        if (swap && !gm__swappable(ctx, x, swap, below)) continue;
        if (tm->policy == GM_EVICT_CUSTOM && tm->vfn) {
            if (n == tm->ncandcap) {
                uint32_t cap = tm->ncandcap ? tm->ncandcap * 2 : 64;
                gm_tensor* c = (gm_tensor*)gm__grow_array(tm->cand, tm->ncandcap * sizeof *c, cap * sizeof *c);
                if (!c) break;
                tm->cand = c;
                tm->ncandcap = cap;
            }
            tm->cand[n++] = gm__handle(ctx, x->gen, k - 1);
            continue;
        }
        nu = planned ? gm__next_use(tm, k - 1) : 0;
        if (tm->evict_after && nu <= tm->evict_after) continue; /* needed before what we make room for */
        if (!best || x->priority < best->priority || (x->priority == best->priority && nu > best_next)) {
            best = x;
            best_next = nu;
        }
        /* none later can beat the first of the lowest priority listed: by LRU the earlier wins a tie, and
           by next use nothing is farther than never */
        if (tm->nprios && x->priority == tm->prios[0].prio && (!planned || nu == GM__NEVER)) break;
    }
    if (tm->policy == GM_EVICT_CUSTOM && tm->vfn && n) {
        size_t c = tm->vfn(ctx, tm->cand, n, tm->vuser);
        best = c < n ? &tm->t[(tm->cand[c].id & 0xfffffu) - 1] : NULL;
    }
    return best;
}

/* One victim goes: the policy's choice; if it cannot (no room below, its
   write failed), the best one that needs no copy. Returns its bytes, or 0.
   With nowait (room for a prefetch, gm__evict_at's levels): 0 and
   *started set where the victim would be written to disk and waited for
   on the host (gm__evict_at starts its write): the acquire that asked would launch its work late,
   while the device may have nothing else to do; a later acquire takes the
   room (waiting for the write if it is still under way). */
static size_t gm__evict_some(gm_context* ctx, gm__tier* tm, int nowait, int* started) {
    int clean_only;
    for (clean_only = 0; clean_only < 2; clean_only++) {
        gm__tensor* v = gm__victim(ctx, tm, clean_only, NULL);
        gm_result r;
        if (!v) return 0;
        if ((r = gm__evict_at(ctx, tm, v, nowait)) == GM_OK) return v->bytes;
        if (r == GM_NOT_READY) {
            *started = 1;
            return 0;
        }
    }
    return 0;
}

/* The allocator's OOM ladder asks for room: one released tensor goes to the
   host, lowest priority first, least recently released first; the ladder
   retries and asks again while this makes progress, so no more is evicted
   than the request needs. */
static size_t gm__tier_evict(gm_context* ctx, size_t bytes, void* tier) {
    gm__tier* tm = (gm__tier*)tier;
    size_t freed = 0;
    gm__rmu_lock(&tm->mu);
    if (bytes) freed = gm__evict_some(ctx, tm, 0, NULL);
    gm__rmu_unlock(&tm->mu);
    return freed;
}

/* >>tier: placement. Where a tensor's device memory goes, and which
   tensors leave to make it (gm__dev_get asks here first). A place is a
   range of rsize bytes in one segment of the pool of the tier's input
   stream (classic, or the expandable range) whose blocks are free or hold
   tensors that may leave. Free places come first; among them, and then
   among places that evict, the order is: the highest priority that
   leaves, then packing (the pages, expandable, or the segment, classic,
   that no anchored memory holds: an acquired, pinned or prefetched tensor,
   or a block the allocator holds for others), then the policy's rank of
   the last victim (in eighths), the bytes that leave, the pages mapped
   anew, best fit. So a layer's working set gathers where held memory
   already is instead of cutting free space into pieces, and a hole is
   made by evicting the tensors of one place, not the policy's next
   victims wherever they lie.
   Invariants: only released tensors on the device leave (not acquired,
   pinned, with disk I/O under way, or, for a prefetch, used before it);
   the plan is made with ctx->mu held and carried out with tm->mu held, so
   tensors keep their state; the allocator's blocks may change meanwhile
   (another thread's gm_alloc), so the place is checked again when taken,
   and a place that is gone costs one more round, not a failure. */
#define GM__RK_FIX 0xffffffffu /* rank of a tensor that stays */

typedef struct gm__rkey {
    int prio;
    uint64_t when; /* learned: acquires until the next use */
    uint32_t lru, i;
} gm__rkey;

static int gm__rkey_cmp(const void* pa, const void* pb) {
    const gm__rkey *a = (const gm__rkey*)pa, *b = (const gm__rkey*)pb;
    if (a->prio != b->prio) return a->prio < b->prio ? -1 : 1;
    if (a->when != b->when) return a->when > b->when ? -1 : 1;
    return a->lru < b->lru ? -1 : a->lru > b->lru;
}

/* tm->rank[i]: tensor i's place in the order gm__victim takes victims (0
   first), GM__RK_FIX where it may not leave; *nev: how many may. 0 when
   host memory runs out. */
static int gm__place_rank(gm__tier* tm, uint32_t* nev) {
    gm__rkey* key;
    gm__tensor* x;
    uint32_t i, k, n = 0, pos = 0;
    if (tm->caprank < tm->n) {
        uint32_t* r = (uint32_t*)gm__grow_array(tm->rank, tm->caprank * sizeof *r, tm->cap * sizeof *r);
        if (!r) return 0;
        tm->rank = r;
        tm->caprank = tm->cap;
    }
    key = (gm__rkey*)GPUMEM_MALLOC((tm->n ? tm->n : 1) * sizeof *key);
    if (!key) return 0;
    for (i = 0; i < tm->n; i++) tm->rank[i] = GM__RK_FIX;
    for (k = tm->lru; k; k = x->next, pos++) {
        x = GM__LRU(tm, k);
        if (!x->dev || x->acquired || x->pinned || x->job) continue;
        key[n].prio = x->priority;
        key[n].when = GM__PLANNED(tm) ? gm__next_use(tm, k - 1) : 0;
        if (tm->evict_after && key[n].when <= tm->evict_after) continue; /* needed before what we make room for */
        key[n].lru = pos;
        key[n].i = k - 1;
        n++;
    }
    qsort(key, n, sizeof *key, gm__rkey_cmp);
    for (i = 0; i < n; i++) tm->rank[key[i].i] = i;
    GPUMEM_FREE(key);
    *nev = n;
    return 1;
}

/* The live tensor whose device copy block b is (its tag names it), or
   NULL (free, another owner's, or stale). */
static gm__tensor* gm__block_tensor(const gm__tier* tm, const gm__block* b) {
    uint32_t i = (b->tag & 0xfffffu) - 1;
    if (b->state != GM__USED || b->owner != GM__OWN_TENSOR || i >= tm->n || !tm->t[i].live ||
        tm->t[i].dev != (void*)b->addr)
        return NULL;
    return &tm->t[i];
}

/* The tensor whose device copy block b is, if it may leave. */
static gm__tensor* gm__place_victim(const gm__tier* tm, const gm__block* b) {
    gm__tensor* t = gm__block_tensor(tm, b);
    return t && tm->rank[t - tm->t] != GM__RK_FIX ? t : NULL;
}

/* Memory that stays, or soon will be used: packing gathers around it (a
   block not a tensor's device copy, or an acquired, pinned or prefetched
   tensor's). Needs no ranks: a free place is found without them. */
static int gm__place_anchor(const gm__tier* tm, const gm__block* b) {
    const gm__tensor* t;
    if (b->state == GM__FREE) return 0;
    t = gm__block_tensor(tm, b);
    return !t || t->acquired || t->pinned || t->prefetched;
}

typedef struct gm__spot {
    gm__seg* seg;
    uintptr_t at;
    int evicts, pri, bucket;
    size_t claim, out, pages, fit;
    int cross; /* a small request in the large pool */
} gm__spot;

static int gm__place_better(const gm__spot* a, const gm__spot* b) {
    if (a->evicts != b->evicts) return a->evicts < b->evicts;
    if (a->pri != b->pri) return a->pri < b->pri;
    if (a->claim != b->claim) return a->claim < b->claim;
    if (a->bucket != b->bucket) return a->bucket < b->bucket;
    if (a->out != b->out) return a->out < b->out;
    if (a->pages != b->pages) return a->pages < b->pages;
    if (a->cross != b->cross) return a->cross < b->cross;
    return a->fit < b->fit;
}

/* The best place for rsize bytes in seg (ctx->mu held) into *best when
   better; `held`: of an expandable segment's first nheld pages, those
   anchored memory holds (none after them), or for a classic one whether
   it holds any; `spare`: pages the budget may
   still map. Places evict only with `evict`. */
static void gm__place_scan(const gm_context* ctx, const gm__tier* tm, gm__seg* seg, size_t rsize, const uint8_t* held,
                           size_t nheld, int any_held, size_t spare, int evict, uint32_t nev, int cross, gm__spot* best, int* found) {
    const gm__block *b, *c;
    for (b = seg->first; b; b = b->next) {
        size_t tries[2], i;
        if (b->state != GM__FREE && !(evict && gm__place_victim(tm, b))) continue;
        if (b->state == GM__FREE && !gm__fits(ctx, (int)(seg->arena - ctx->pool), rsize, b->size)) continue;
        if (b->addr + rsize > seg->base + seg->size) break;
        tries[0] = 0; /* a free block: its start, or its end (beside what follows) */
        tries[1] = b->state == GM__FREE && b->next && b->size > rsize ? (b->size - rsize) / GM__ROUND * GM__ROUND : 0;
        for (i = 0; i < 2; i++) {
            gm__spot w;
            uintptr_t end;
            size_t p, fr = 0;
            if (i && !tries[1]) break;
            memset(&w, 0, sizeof w);
            w.seg = seg;
            w.cross = cross;
            w.at = b->addr + tries[i];
            w.bucket = -1;
            w.pri = -0x7fffffff - 1;
            end = w.at + rsize;
            for (c = b; c && c->addr < end; c = c->next) {
                const gm__tensor* t;
                if (c->state == GM__FREE) {
                    fr += c->size;
                    continue;
                }
                if (!evict || (t = gm__place_victim(tm, c)) == NULL) break;
                w.evicts = 1;
                w.out += c->size;
                if (t->priority > w.pri) w.pri = t->priority;
                if ((int)((uint64_t)tm->rank[t - tm->t] * 8 / (nev ? nev : 1)) > w.bucket)
                    w.bucket = (int)((uint64_t)tm->rank[t - tm->t] * 8 / (nev ? nev : 1));
            }
            if (c && c->addr < end) continue; /* something that stays lies inside */
            if (!w.evicts) w.pri = -0x7fffffff - 1;
            w.fit = fr > rsize ? fr - rsize : 0;
            if (seg->va) {
                const gm__vseg* v = seg->va;
                for (p = (w.at - seg->base) / v->gran; p <= (end - 1 - seg->base) / v->gran; p++) {
                    w.pages += !gm__vp_mapped(v, p);
                    w.claim += p >= nheld || !held[p];
                }
                if (w.pages > spare) continue;
            } else {
                w.claim = !any_held;
            }
            if (!*found || gm__place_better(&w, best)) *best = w;
            *found = 1;
        }
    }
}

/* The best place in a classic segment: whether it holds anchored memory,
   then its places. */
static void gm__place_classic(const gm_context* ctx, const gm__tier* tm, gm__seg* s, size_t rsize, int evict,
                              uint32_t nev, gm__spot* best, int* found) {
    const gm__block* b;
    int any = 0;
    for (b = s->first; b && !any; b = b->next) any = gm__place_anchor(tm, b);
    gm__place_scan(ctx, tm, s, rsize, NULL, 0, any, 0, evict, nev, 0, best, found);
}

/* Classic segments, nothing to evict: a place lies in one free block of
   at least rsize (they are coalesced), so only the segments holding one
   are weighed, found from the free tree (up to GM__PLACE_SEGS segments and
   GM__PLACE_BLOCKS blocks; past that, 0: the caller walks them all), and
   visited in the list's order, so that ties go as the walk's would. */
#define GM__PLACE_SEGS 64
#define GM__PLACE_BLOCKS 1024
static int gm__place_indexed(const gm_context* ctx, const gm__tier* tm, int pl, uint32_t si, size_t rsize,
                             uint32_t nev, gm__spot* best, int* found) {
    gm__seg* cand[GM__PLACE_SEGS];
    size_t nc = 0, nb = 0, j, k;
    const gm__block* f;
    for (f = gm__arena_find(&ctx->pool[pl], (uintptr_t)si + 1, rsize); f; f = gm__arena_after(&ctx->pool[pl], f)) {
        if (++nb > GM__PLACE_BLOCKS) return 0;
        for (j = 0; j < nc && cand[j] != f->seg; j++) {}
        if (j < nc) continue;
        if (nc == GM__PLACE_SEGS) return 0;
        for (k = nc++; k && cand[k - 1]->ord < f->seg->ord; k--) cand[k] = cand[k - 1]; /* newest first, as listed */
        cand[k] = f->seg;
    }
    for (k = 0; k < nc; k++) gm__place_classic(ctx, tm, cand[k], rsize, 0, nev, best, found);
    return 1;
}

/* Whether seg is one of the device pools' segments still (with mu). */
static int gm__seg_listed(const gm_context* ctx, const gm__seg* seg) {
    const gm__seg* s;
    int q;
    for (q = 0; q < 2; q++)
        for (s = ctx->pool[q].segs; s; s = s->next)
            if (s == seg) return 1;
    return 0;
}

/* Places x: a free place, else (with `evict`) the best place whose
   tensors leave first. GM_OK with x->dev set; GM_ERR_OUT_OF_MEMORY when
   there is no place; *progress: tensors left (ask again). evict 2
   (gm_tensor_prefetch): they leave without waiting for the disk
   (gm__evict_at's nowait 2), GM_NOT_READY where one would. */
static gm_result gm__place(gm_context* ctx, gm__tier* tm, gm__tensor* x, int evict, int* progress) {
    size_t rsize = gm__round_req(x->bytes), spare = 0, p;
    int pl = gm__pool_of(rsize), found = 0, q;
    uint32_t si, nev = 0;
    gm__spot best;
    gm__seg* s;
    gm_result r = GM_ERR_OUT_OF_MEMORY;
    *progress = 0;
    if (tm->policy == GM_EVICT_CUSTOM && tm->vfn && evict) return r; /* the hook picks victims: gm__evict_some */
    if (evict && !gm__place_rank(tm, &nev)) return r; /* ranks only for places that evict */
    pthread_mutex_lock(&ctx->mu);
    ctx->dev_err = GM_OK;
    if (gm__ss_index(ctx, GM__IN(tm), &si) != GM_OK) goto out;
    /* classic segments, nothing to evict: only the segments the free tree
       names are weighed (none on a full device: a miss walks nothing) */
    if (!evict && !ctx->va_gran && gm__place_indexed(ctx, tm, pl, si, rsize, nev, &best, &found)) goto weighed;
    if (ctx->va_gran) { /* pages the budget may map, with idle pages given back */
        int64_t resv = ctx->stats.reserved_bytes[GM_STAT_ALL].current;
        spare = (uint64_t)resv < (uint64_t)ctx->budget ? (ctx->budget - (size_t)resv) / ctx->va_gran : 0;
        if (!ctx->ss[si].vseg[pl] && !gm__vseg_open(ctx, pl, si)) goto out;
    }
    for (q = pl; q < (ctx->va_gran ? 2 : pl + 1); q++) /* expandable: a small request may take room in the large pool */
        for (s = ctx->pool[q].segs; s; s = s->next) {
            uint8_t* held = NULL;
            const gm__block* b;
            if (s->key != (uintptr_t)si + 1 || s->size < rsize) continue;
            if (s->va) {
                const gm__vseg* v = s->va;
                size_t nheld = 0;
                for (b = s->first; b; b = b->next) /* pages past the last block in use hold nothing */
                    if (b->state != GM__FREE) nheld = (b->addr + b->size - 1 - s->base) / v->gran + 1;
                if ((held = (uint8_t*)gm__calloc(nheld ? nheld : 1)) == NULL) goto out;
                for (b = s->first; b; b = b->next)
                    if (gm__place_anchor(tm, b))
                        for (p = (b->addr - s->base) / v->gran; p <= (b->addr + b->size - 1 - s->base) / v->gran; p++)
                            held[p] = 1;
                gm__place_scan(ctx, tm, s, rsize, held, nheld, 0, spare + (v->nmapped - v->nused), evict, nev, q != pl,
                               &best, &found);
                GPUMEM_FREE(held);
            } else {
                gm__place_classic(ctx, tm, s, rsize, evict, nev, &best, &found);
            }
        }
weighed:
    if (found && best.evicts) { /* the tensors in the way leave (tm->mu held: they stay what they were) */
        const gm__block* b;
        uint32_t n = 0, k, *go;
        for (b = best.seg->first; b; b = b->next) n += b->addr < best.at + rsize && b->addr + b->size > best.at;
        go = (uint32_t*)GPUMEM_MALLOC((n ? n : 1) * sizeof *go);
        n = 0;
        for (b = best.seg->first; go && b; b = b->next) {
            const gm__tensor* t;
            if (b->addr < best.at + rsize && b->addr + b->size > best.at && (t = gm__place_victim(tm, b)) != NULL)
                go[n++] = (uint32_t)(t - tm->t);
        }
        gm__unlock(ctx);
        for (k = 0; go && k < n; k++) {
            gm__tensor* t = &tm->t[go[k]];
            gm_result e = gm__evict_at(ctx, tm, t, evict > 1 ? 2 : 0);
            if (e == GM_OK) {
                tm->try_evicted += t->bytes;
                *progress = 1;
            } else if (e == GM_NOT_READY) { /* a write the place needs started: no more tensors leave */
                r = e;
                break;
            }
        }
        GPUMEM_FREE(go);
        if (!go || k < n) return r;
        pthread_mutex_lock(&ctx->mu);
    }
    /* take it: the free block that holds it, cut there (it may be gone: another round; so may
       its segment, given back by another thread's request while the lock was let go) */
    if (found && (!best.evicts || gm__seg_listed(ctx, best.seg))) {
        gm__block* b;
        for (b = best.seg->first; b && b->addr + b->size <= best.at; b = b->next) {}
        if (b && b->state == GM__FREE && b->addr <= best.at && b->addr + b->size >= best.at + rsize &&
            (b = gm__take_at(ctx, b, best.at, rsize, 0)) != NULL)
            r = gm__alloc_take(ctx, b, rsize, x->bytes, GM__IN(tm), GM__OWN_TENSOR, gm__handle_id(tm, x), &x->dev);
    }
out:
    gm__unlock(ctx);
    if (r != GM_OK) x->dev = NULL;
    return r;
}

/* >>tier: compaction. With classic segments, the device's free room for a
   large tensor may be there but in pieces: holes between tensors of mixed
   sizes that no tensor of that size fits in, while the budget allows no
   new segment. Then released tensors move instead of leaving: a copy
   within the device (on `in`) into holes elsewhere, until one place of the
   tensor's size is free. A copy within the device costs a fraction of a
   trip over the link and back (device memory against the link's
   bandwidth), and the tensors moved stay on the device. The place is the
   range of one segment of `in` whose tensors are all movable (released,
   not pinned, no disk job) and fit, largest first, in the best-fitting
   free blocks outside it, moving the fewest bytes. Only the large pool
   (requests over GM__SMALL_MAX) and a bounded search (GM__COMPACT_VISITS
   blocks weighed), so that a miss among many small tensors stays as cheap
   as it was. Invariants (tm->mu): a moved tensor's bytes are whole in its
   new block before any acquire reads them (ready_seq, which every acquire
   waits for, follows the copy); the copy runs after the marks a free of
   the old block waits for (the last release's, the last copy out), and
   the old block is freed on `in` after it, in stream order; a copy that
   fails leaves the tensor where it was. */
#define GM__COMPACT_HOLES 256    /* free blocks weighed as destinations */
#define GM__COMPACT_MOVERS 32    /* tensors one place may move */
#define GM__COMPACT_VISITS 65536 /* blocks weighed per search */

typedef struct gm__hole {
    gm__seg* seg;
    uintptr_t at;
    size_t size;
} gm__hole;

/* A search's scratch: the holes, those outside the place weighed, the
   movers and their places (the place weighed, and the best so far). */
typedef struct gm__compact_ws {
    gm__hole holes[GM__COMPACT_HOLES], outside[GM__COMPACT_HOLES], to[GM__COMPACT_MOVERS], best_to[GM__COMPACT_MOVERS];
    uint32_t mv[GM__COMPACT_MOVERS], best_mv[GM__COMPACT_MOVERS];
} gm__compact_ws;

/* The tensor (index + 1) whose device copy block b is, if it may move; 0
   when it may not. */
static uint32_t gm__movable(const gm__tier* tm, const gm__block* b) {
    const gm__tensor* t = gm__block_tensor(tm, b);
    return t && !t->acquired && !t->pinned && !t->job ? (uint32_t)(t - tm->t) + 1 : 0;
}

/* Assigns each mover (tensor indices, largest first) a place in the holes
   (consumed from their starts) with best fit, as the allocator's split
   rule allows: 1 when all found one. */
static int gm__compact_fit(const gm_context* ctx, const gm__tier* tm, int pl, const uint32_t* mv, uint32_t nmv,
                           gm__hole* h, uint32_t nh, gm__hole* to) {
    uint32_t k, j;
    for (k = 0; k < nmv; k++) {
        size_t need = gm__round_req(tm->t[mv[k]].bytes);
        int best = -1;
        for (j = 0; j < nh; j++)
            if (h[j].size >= need && gm__fits(ctx, pl, need, h[j].size) && (best < 0 || h[j].size < h[best].size))
                best = (int)j;
        if (best < 0) return 0;
        to[k] = h[best];
        to[k].size = need;
        h[best].at += need;
        h[best].size -= need;
    }
    return 1;
}

/* Orders movers by size, largest first (insertion: there are few). */
static void gm__compact_sort(const gm__tier* tm, uint32_t* mv, uint32_t n) {
    uint32_t k, j;
    for (k = 1; k < n; k++) {
        uint32_t v = mv[k];
        for (j = k; j && tm->t[mv[j - 1]].bytes < tm->t[v].bytes; j--) mv[j] = mv[j - 1];
        mv[j] = v;
    }
}

/* Moves released tensors within the device until a place of x's size is
   free (tm->mu held, ctx->mu not): 1 when it moved any. */
static int gm__compact(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    size_t rsize = gm__round_req(x->bytes), free_total = 0, best_cost = (size_t)-1, visits = 0;
    int pl = gm__pool_of(rsize), moved = 0;
    uint32_t si, nh = 0, nmv, best_n = 0, k;
    gm__compact_ws* ws;
    gm__hole *holes, *best_to;
    uint32_t *mv, *best_mv;
    gm__seg* s;
    const gm__block* b;
    if (ctx->va_gran || pl == 0) return 0;
    if ((ws = (gm__compact_ws*)GPUMEM_MALLOC(sizeof *ws)) == NULL) return 0;
    holes = ws->holes, best_to = ws->best_to, mv = ws->mv, best_mv = ws->best_mv;
    pthread_mutex_lock(&ctx->mu);
    if (gm__ss_index(ctx, GM__IN(tm), &si) != GM_OK) goto unlock;
    for (s = ctx->pool[pl].segs; s; s = s->next) /* the holes: free blocks of `in`'s segments */
        if (s->key == (uintptr_t)si + 1 && !s->va)
            for (b = s->first; b; b = b->next)
                if (b->state == GM__FREE) {
                    free_total += b->size;
                    if (nh < GM__COMPACT_HOLES) {
                        holes[nh].seg = s;
                        holes[nh].at = b->addr;
                        holes[nh++].size = b->size;
                    }
                }
    if (free_total < rsize) goto unlock; /* moving makes no room that is not there */
    for (s = ctx->pool[pl].segs; s && visits < GM__COMPACT_VISITS; s = s->next) {
        if (s->key != (uintptr_t)si + 1 || s->va || s->size < rsize) continue;
        for (b = s->first; b && visits < GM__COMPACT_VISITS; b = b->next) {
            uintptr_t end = b->addr + rsize;
            const gm__block* c;
            size_t cost = 0;
            uint32_t j, nfree = 0;
            if (end > s->base + s->size) break;
            if (b->state != GM__FREE && !gm__movable(tm, b)) continue;
            nmv = 0;
            for (c = b; c && c->addr < end; c = c->next, visits++) {
                uint32_t t;
                if (c->state == GM__FREE) continue;
                if ((t = gm__movable(tm, c)) == 0 || nmv == GM__COMPACT_MOVERS) break;
                mv[nmv++] = t - 1;
                cost += c->size;
            }
            if (c && c->addr < end) continue; /* something that stays lies inside */
            if (!nmv || cost >= best_cost) continue; /* free already (placement had it), or no better */
            for (j = 0; j < nh; j++) /* the holes outside the place */
                if (holes[j].seg != s || holes[j].at + holes[j].size <= b->addr || holes[j].at >= end)
                    ws->outside[nfree++] = holes[j];
            gm__compact_sort(tm, mv, nmv);
            if (!gm__compact_fit(ctx, tm, pl, mv, nmv, ws->outside, nfree, ws->to)) continue;
            best_cost = cost;
            best_n = nmv;
            memcpy(best_mv, mv, nmv * sizeof *mv);
            memcpy(best_to, ws->to, nmv * sizeof *best_to);
        }
    }
    /* the new blocks, taken while the search's view holds (no segment it
       names can be given back meanwhile); best_to[k].at becomes each one's address */
    for (nmv = 0; nmv < best_n; nmv++) {
        gm__block* fb;
        void* np = NULL;
        gm__hole* d = &best_to[nmv];
        for (fb = d->seg->first; fb && fb->addr + fb->size <= d->at; fb = fb->next) {}
        if (!fb || fb->state != GM__FREE || fb->addr > d->at || fb->addr + fb->size < d->at + d->size ||
            (fb = gm__take_at(ctx, fb, d->at, d->size, 0)) == NULL ||
            gm__alloc_take(ctx, fb, d->size, tm->t[best_mv[nmv]].bytes, GM__IN(tm), GM__OWN_TENSOR,
                           gm__handle_id(tm, &tm->t[best_mv[nmv]]), &np) != GM_OK)
            break;
        d->at = (uintptr_t)np;
    }
    best_n = nmv;
unlock:
    pthread_mutex_unlock(&ctx->mu);
    for (k = 0; k < best_n; k++) { /* each mover: the copy, then its old block freed behind it */
        gm__tensor* y = &tm->t[best_mv[k]];
        void *old = y->dev, *np = (void*)best_to[k].at;
        gm_result r;
        gm__tk_order_at(ctx, tm, y->done_tk, y->done_seq, GM__IN(tm)); /* as a free of it waits */
        gm__tk_order_at(ctx, tm, GM__TK_OUT, y->out_seq, GM__IN(tm));
        r = y->blank ? GM_OK : ctx->be->copy(ctx, np, old, y->bytes, GM_COPY_DEVICE_TO_DEVICE, GM__IN(tm));
        if (r != GM_OK) {
            gm__log(ctx, GM_LOG_WARN, "tier: moving tensor %#x within the device failed (%s); it stays where it was",
                    gm__handle_id(tm, y), gm_result_string(r));
            for (; k < best_n; k++) (void)gm__free(ctx, (void*)best_to[k].at, GM__OWN_TENSOR);
            break;
        }
        y->dev = np;
        y->ready_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_IN);
        (void)gm__free(ctx, old, GM__OWN_TENSOR); /* on `in`, after the copy */
        tm->st.compactions++;
        tm->st.bytes_compacted += (int64_t)y->bytes;
        moved++;
    }
    if (moved)
        gm__log(ctx, GM_LOG_DEBUG, "tier: %d tensors moved within the device to make a place of %zu bytes", moved, rsize);
    GPUMEM_FREE(ws);
    return moved;
}

/* The context's manager, or NULL before its first tensor: set once under
   ctx->mu (gm__tier_open) and published with release, so every tier call
   reads it without taking the allocator's lock (cleared only at shutdown,
   when no other call may run). */
static gm__tier* gm__tier_of(gm_context* ctx) { return (gm__tier*)__atomic_load_n(&ctx->tier, __ATOMIC_ACQUIRE); }

static gm__tier* gm__tier_open(gm_context* ctx) {
    gm__tier* tm = gm__tier_of(ctx);
    int i;
    if (tm) return tm;
    tm = (gm__tier*)gm__calloc(sizeof *tm);
    if (!tm) return NULL;
    {
        int k;
        for (k = 0; k < GM_TIER_PHASES; k++) tm->ph[k].next = -1;
        tm->closed = -1;
    }
    tm->captk = 8;
    tm->tk = (gm__track*)gm__calloc(tm->captk * sizeof *tm->tk);
    if (!tm->tk) {
        GPUMEM_FREE(tm);
        return NULL;
    }
    for (i = 0; i < 2; i++) {
        if (ctx->be->stream_create(ctx, &tm->tk[i].s) != GM_OK) {
            if (i) ctx->be->stream_destroy(ctx, tm->tk[0].s);
            GPUMEM_FREE(tm->tk);
            GPUMEM_FREE(tm);
            return NULL;
        }
    }
    tm->ntk = GM__TK_USER;
    tm->last_tk = GM__TK_USER;
    tm->hc_on = ctx->disk != NULL;
    gm__rmu_init(&tm->mu);
    gm__arena_init(&tm->host, GM__HOST_PAGE, NULL, 0);
    { /* 1 MiB, or 1/16 of a smaller host tier, in whole pages and disk chunks */
        size_t g = ctx->desc.host_budget / 16 < GM__MIB ? ctx->desc.host_budget / 16 : GM__MIB;
        size_t c = ctx->disk ? ((gm__disk*)ctx->disk)->chunk : GM__HOST_PAGE, unit = c;
        while (unit % GM__HOST_PAGE) unit += c;
        tm->host_split = gm__round_up(g ? g : 1, unit);
    }
    pthread_mutex_lock(&ctx->mu);
    if (ctx->tier) { /* another thread got there first: use its manager */
        gm__tier* won = (gm__tier*)ctx->tier;
        pthread_mutex_unlock(&ctx->mu);
        ctx->be->stream_destroy(ctx, tm->tk[0].s);
        ctx->be->stream_destroy(ctx, tm->tk[1].s);
        pthread_mutex_destroy(&tm->mu.mu);
        GPUMEM_FREE(tm->tk);
        GPUMEM_FREE(tm);
        return won;
    }
    ctx->tier_evict = gm__tier_evict;
    __atomic_store_n(&ctx->tier, (void*)tm, __ATOMIC_RELEASE); /* whole before gm__tier_of sees it */
    pthread_mutex_unlock(&ctx->mu);
    return tm;
}

/* The out-of-memory line of the tiered manager: what it tried and what
   stood in the way (a walk of the tensors and of the pools: the failure
   path only), at most once per GM__QUIET_NS; between, a short line, so
   that a caller retrying a failed acquire in a loop does not walk every
   tensor each time. */
static void gm__dev_oom_log(gm_context* ctx, gm__tier* tm, const gm__tensor* x) {
    size_t evicted = tm->try_evicted;
    size_t evictable = 0, pinned_b = 0, acq_b = 0, free_b = 0, largest = 0, headroom = 0;
    uint32_t i, pinned = 0, acq = 0;
    int pl;
    char note[96];
    if (!gm__quiet(&tm->oom_log, &tm->oom_held, note, sizeof note)) { /* a caller retrying: the line, without the
                                                                         walk of every tensor (once per GM__QUIET_NS) */
        gm__log(ctx, GM_LOG_WARN, "tier: no device room for tensor %#x (%zu bytes): evicted %zu bytes trying (the "
                "room in detail was logged in the last 10 s)", gm__handle_id(tm, x), x->bytes, evicted);
        return;
    }
    for (i = 0; i < tm->n; i++) {
        const gm__tensor* y = &tm->t[i];
        if (!y->live || !y->dev || y == x) continue;
        if (y->acquired) acq++, acq_b += y->bytes;
        else if (y->pinned) pinned++, pinned_b += y->bytes;
        else evictable += y->bytes;
    }
    pthread_mutex_lock(&ctx->mu);
    for (pl = 0; pl < 2; pl++) {
        const gm__seg* sg;
        for (sg = ctx->pool[pl].segs; sg; sg = sg->next) {
            const gm__block* b;
            for (b = sg->first; b; b = b->next)
                if (b->state == GM__FREE) {
                    free_b += b->size;
                    if (b->size > largest) largest = b->size;
                }
        }
    }
    if (ctx->budget > (size_t)ctx->stats.reserved_bytes[GM_STAT_ALL].current)
        headroom = ctx->budget - (size_t)ctx->stats.reserved_bytes[GM_STAT_ALL].current;
    pthread_mutex_unlock(&ctx->mu);
    gm__log(ctx, GM_LOG_WARN, "tier: no device room for tensor %#x (%zu bytes): evicted %zu bytes trying, %zu bytes of "
            "released tensors still on the device; %u acquired (%zu bytes), %u pinned (%zu bytes); free in the "
            "cache %zu bytes, largest free block %zu, budget not reserved %zu%s",
            gm__handle_id(tm, x), x->bytes, evicted, evictable, acq, acq_b, pinned, pinned_b, free_b, largest, headroom,
            note);
}

/* Device memory for x on `in`: a free place, packed beside held memory
   (>>tier: placement), else a new segment or pages from the allocator;
   while there is none, with expandable segments the tensors of the place
   that costs least leave (a hole in one piece; pages need not be
   contiguous, so any place whose pages fit the budget will do), and
   otherwise, or when no such place exists, the policy's victims leave one
   by one, in stream order (no wait on the host), and free classic
   segments too small one by one are given back to make one (the room a
   classic request lacks is mostly a segment of its size, which only whole
   segments give back). A speculative request stops there (and evicts only
   tensors used after it, through tm->evict_after); others climb the
   allocator's whole ladder (waits, the cache given back, the hooks).
   how: GM__ROOM_ANY; GM__ROOM_FREE, free room only (no eviction, no
   ladder); GM__ROOM_EVICT, as ANY but the caller has just found no free
   room (GM__ROOM_FREE): the first round starts at the eviction.
   GM_ERR_OUT_OF_MEMORY when none of it finds room; GM_NOT_READY (a
   speculative request) when a victim's write to disk started instead of
   a wait for it (gm__evict_some), the room to come once it ends.
   speculative 1 is learned order's prefetch, 2 gm_tensor_prefetch's, which
   waits for no disk write at all (gm__evict_at's nowait). */
enum { GM__ROOM_ANY, GM__ROOM_FREE, GM__ROOM_EVICT };
static gm_result gm__dev_get(gm_context* ctx, gm__tier* tm, gm__tensor* x, int speculative, int how) {
    uint32_t id = gm__handle_id(tm, x);
    gm_result r = GM_ERR_OUT_OF_MEMORY, pr = GM_ERR_OUT_OF_MEMORY;
    int more = 0, compacted = 0, looked = how == GM__ROOM_EVICT, started = 0;
    size_t got;
    unsigned grow = tm->exact ? GM__A_EXACT : GM__A_PACK; /* new segments sized for the budget */
    tm->try_evicted = 0; /* for the out-of-memory line */
    for (;; looked = 0) {
        /* a free block of exactly its size: no place packs better, and it is
           found without weighing every place (the cost of a miss stays
           independent of how many tensors there are) */
        if (!looked) {
            if (gm__alloc(ctx, &x->dev, x->bytes, GM__IN(tm), GM__A_FIT, GM__OWN_TENSOR, id) == GM_OK) return GM_OK;
            if (gm__place(ctx, tm, x, 0, &more) == GM_OK) return GM_OK; /* a free place, packed */
            r = gm__alloc(ctx, &x->dev, x->bytes, GM__IN(tm), GM__A_TRY | grow, GM__OWN_TENSOR, id); /* a new segment */
        }
        if (r != GM_ERR_OUT_OF_MEMORY || how == GM__ROOM_FREE) break;
        if (ctx->va_gran && (pr = gm__place(ctx, tm, x, speculative > 1 ? 2 : 1, &more)) == GM_OK)
            return GM_OK; /* the tensors of one place leave */
        if (pr == GM_NOT_READY) { /* gm_tensor_prefetch: the room comes once the write it started ends */
            started = 1;
            break;
        }
        if (more) continue;
        /* free segments too small one by one may together make one (classic segments) */
        if (gm__regrow_room(ctx, x->bytes, !speculative)) continue;
        /* the room is there in pieces: tensors move within the device (a few times at most) */
        if (compacted < 4) {
            compacted++;
            if (gm__compact(ctx, tm, x)) continue;
        }
        if (!(got = gm__evict_some(ctx, tm, speculative, &started))) break;
        tm->try_evicted += got;
    }
    if (r == GM_ERR_OUT_OF_MEMORY && started) r = GM_NOT_READY; /* the room comes once that write ends */
    if (r == GM_ERR_OUT_OF_MEMORY && !speculative && how != GM__ROOM_FREE)
        r = gm__alloc(ctx, &x->dev, x->bytes, GM__IN(tm), grow | GM__A_SOFT, GM__OWN_TENSOR, id);
    if (r != GM_OK) x->dev = NULL;
    return r;
}

/* Room on the device for x, used next on stream s; per the fallback,
   managed memory (not for a speculative prefetch, which simply does not
   happen), prefetched to the device on s unless bytes are to be copied in
   first. */
static gm_result gm__dev_room(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, int speculative,
                              int prefetch, int how) {
    gm_result r = gm__dev_get(ctx, tm, x, speculative, how);
    if (r != GM_ERR_OUT_OF_MEMORY || speculative) return r;
    if (!gm__wants_managed(ctx, x->bytes)) return r;
    r = gm__managed_get(ctx, &x->managed, x->bytes, s, GM__OWN_TENSOR);
    if (r != GM_OK) {
        x->managed = NULL;
        return GM_ERR_OUT_OF_MEMORY;
    }
    if (prefetch) (void)ctx->be->managed_prefetch(ctx, x->managed, x->bytes, 1, s);
    tm->st.managed_fallbacks++;
    gm__log(ctx, GM_LOG_INFO, "tier: a %zu-byte tensor is served by managed memory", x->bytes);
    return GM_OK;
}

/* Device and host both full: x's host copy and a victim's device copy
   trade places (the swap), so that bringing a tensor back never fails while
   each has a slot the other fits. Chunk by chunk through a bounce buffer:
   the victim's chunk goes device -> bounce, x's chunk host -> the victim's
   device memory, then the bounce into x's host block; each step waits for
   the one before (a last resort, not the fast path). A copy that fails
   undoes the chunks already traded (the trade is its own inverse), so both
   tensors stay where they were. When undoing fails too, some bytes of one
   or both are left nowhere whole: those are marked lost (gm__swap_lost),
   and an acquire refuses them until it overwrites them, rather than hand
   out another tensor's bytes. */
#define GM__SWAP_CHUNK (4 * GM__MIB)

/* A swap that failed and could not be undone: x and v lost bytes (each
   marked when its flag says so). */
static void gm__swap_lost(gm_context* ctx, gm__tier* tm, gm__tensor* x, int lx, gm__tensor* v, int lv, gm_result r) {
    if (lx) x->lost = 1;
    if (lv) v->lost = 1;
    gm__log(ctx, GM_LOG_ERROR, "tier: swapping tensors %#x and %#x failed twice (%s); the bytes of %s are lost: "
            "reads are refused until an acquire overwrites %s", gm__handle_id(tm, x), gm__handle_id(tm, v),
            gm_result_string(r), lx && lv ? "both" : lx ? "the first" : "the second", lx && lv ? "them" : "it");
}
/* The bytes of a tensor of `bytes` in the swap's chunk at `off` of `chunk`
   bytes: 0 past its end, or when it has none to move (blank). */
static size_t gm__swap_part(size_t bytes, int blank, size_t off, size_t chunk) {
    if (blank || off >= bytes) return 0;
    return bytes - off < chunk ? bytes - off : chunk;
}
/* One chunk traded: the victim's `out` bytes device -> bounce, x's `in`
   bytes host -> device, the bounce -> host. A copy in that fails puts the
   victim's chunk back on the device from the bounce (a failed copy may have
   written part of it); *mixed says when that failed too (the device chunk
   is neither's). */
static gm_result gm__swap_chunk(gm_context* ctx, gm__tier* tm, char* dev, char* host, size_t out, size_t in, int* mixed) {
    gm_result r = GM_OK, u = GM_OK;
    *mixed = 0;
    if (out) r = ctx->be->copy(ctx, tm->bounce, dev, out, GM_COPY_DEVICE_TO_HOST, GM__OUT(tm));
    if (r == GM_OK && out) r = ctx->be->stream_sync(ctx, GM__OUT(tm));
    if (r != GM_OK) return r; /* nothing changed yet */
    if (in) r = ctx->be->copy(ctx, dev, host, in, GM_COPY_HOST_TO_DEVICE, GM__IN(tm));
    if (r == GM_OK && in) r = ctx->be->stream_sync(ctx, GM__IN(tm));
    if (r != GM_OK) {
        if (out) u = ctx->be->copy(ctx, dev, tm->bounce, out, GM_COPY_HOST_TO_DEVICE, GM__IN(tm));
        if (u == GM_OK && out) u = ctx->be->stream_sync(ctx, GM__IN(tm));
        *mixed = u != GM_OK;
        return r;
    }
    if (out) memcpy(host, tm->bounce, out);
    return GM_OK;
}

/* The start of a swap, shared by both kinds: the victim for x (NULL: none
   fits; `v`, when the caller chose it), the bounce buffer made, and every
   copy that used the victim's device copy over. */
static gm__tensor* gm__swap_begin(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm__tensor* v, gm_result* r) {
    if (!v) v = gm__victim(ctx, tm, 0, x);
    *r = GM_ERR_OUT_OF_MEMORY;
    if (!v) return NULL;
    if (!tm->bounce) {
        if (gm__pinned_alloc(ctx, &tm->bounce, GM__SWAP_CHUNK) == GM_OK) tm->bounce_pinned = 1;
        else if ((tm->bounce = GPUMEM_MALLOC(GM__SWAP_CHUNK)) == NULL) {
            *r = GM_ERR_HOST_OUT_OF_MEMORY;
            return NULL;
        }
    }
    gm__tk_sync_at(ctx, tm, v->done_tk, v->done_seq);
    gm__tk_sync_at(ctx, tm, GM__TK_IN, v->ready_seq);
    gm__tk_sync_at(ctx, tm, GM__TK_OUT, v->out_seq);
    *r = GM_OK;
    return v;
}

/* The end of a swap, shared by both kinds: x takes v's device memory
   (whole: every copy was waited for) and v leaves the device, counted as an
   eviction and a swap. The caller gives v its copy below, between
   gm__tier_count(tm, v, -1) and (tm, v, 1). */
static void gm__swap_handover(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm__tensor* v) {
    (void)gm__retag(ctx, v->dev, gm__handle_id(tm, x), x->bytes);
    x->dev = v->dev;
    x->ready_seq = 0;
    v->dev = NULL;
    if (v->prefetched) tm->st.prefetch_wasted++;
    v->prefetched = 0;
    v->ready_seq = 0;
    v->out_seq = 0;
    gm__lru_del(tm, v);
    tm->st.evictions++;
    tm->st.swaps++;
}

static gm_result gm__swap_in(gm_context* ctx, gm__tier* tm, gm__tensor* x, int blank, gm__tensor* v) {
    const gm__block* e;
    char* dev;
    size_t off, done, at, step = GM__SWAP_CHUNK;
    gm_result r = GM_OK;
    int mixed = 0;
    if (x->job || !x->host_valid || !x->host || x->dev || x->managed) return GM_ERR_OUT_OF_MEMORY; /* the caller waits
                                                                                                  for x's I/O */
    if ((v = gm__swap_begin(ctx, tm, x, v, &r)) == NULL) return r;
    /* every copy that used x's host copy is over too */
    gm__tk_sync_at(ctx, tm, GM__TK_OUT, x->out_seq);
    gm__tk_sync_at(ctx, tm, GM__TK_IN, x->hr_seq);
    gm__tk_sync(ctx, tm, GM__TK_IN, gm__host_ord(x->host, 0));
    gm__tk_sync(ctx, tm, GM__TK_OUT, gm__host_ord(x->host, 1));
    dev = (char*)v->dev;
    for (e = x->host, at = 0, off = 0; off < v->bytes || off < x->bytes; off += step) {
        size_t out, in;
        char* h = gm__host_span(&e, &at, off, GM__SWAP_CHUNK, &step);
        out = gm__swap_part(v->bytes, v->blank, off, step);
        in = gm__swap_part(x->bytes, blank, off, step);
        r = gm__swap_chunk(ctx, tm, dev + off, h, out, in, &mixed);
        if (r != GM_OK) break;
    }
    if (r != GM_OK) {
        gm_result u = GM_OK;
        int m = 0;
        for (e = x->host, at = 0, done = 0; done < off && u == GM_OK; done += step) { /* trade the traded chunks back */
            size_t out, in;
            char* h = gm__host_span(&e, &at, done, GM__SWAP_CHUNK, &step);
            out = gm__swap_part(v->bytes, v->blank, done, step);
            in = gm__swap_part(x->bytes, blank, done, step);
            u = gm__swap_chunk(ctx, tm, dev + done, h, in, out, &m);
        }
        if (u != GM_OK) /* chunks left traded: each tensor's bytes are partly in the other's place */
            gm__swap_lost(ctx, tm, x, 1, v, 1, u);
        else if (mixed) /* the victim's chunk is in the bounce alone */
            gm__swap_lost(ctx, tm, x, 0, v, 1, r);
        else
            gm__log(ctx, GM_LOG_WARN, "tier: swapping tensor %#x in failed (%s); it stays in the host tier",
                    gm__handle_id(tm, x), gm_result_string(r));
        return r;
    }
    gm__tier_count(tm, v, -1);
    gm__swap_handover(ctx, tm, x, v);
    v->host = x->host;
    v->host_valid = 1;
    x->host = NULL;
    x->host_valid = 0;
    x->read_ahead = 0; /* used, if it was read ahead */
    x->hr_seq = 0;
    x->out_seq = 0;
    gm__tier_count(tm, v, 1);
    if (!v->blank) tm->st.bytes_to_host += (int64_t)v->bytes;
    if (!blank) tm->st.bytes_to_device += (int64_t)x->bytes;
    else tm->st.bytes_not_copied += (int64_t)x->bytes;
    gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) swapped in for tensor %#x (%zu bytes): device and host full",
            gm__handle_id(tm, x), x->bytes, gm__handle_id(tm, v), v->bytes);
    return GM_OK;
}

/* Device, host and disk all full: x's copy on disk and a victim's device
   copy trade places, so that bringing a tensor back from disk never fails
   while each has a slot the other fits (the victim's bytes go into x's
   extent, x's into the victim's device memory). Chunk by chunk through the
   two halves of the bounce buffer: x's chunk from the file into one, the
   victim's from the device into the other, that one into the file, the
   first onto the device; each step waits for the one before (a last
   resort). A step that fails puts its chunk back, and the chunks already
   traded are traded back (the trade is its own inverse), so both tensors
   stay where they were; so does a read of x that fails its checksum.
   When putting back fails too, gm__swap_lost marks what is in doubt: the
   victim when its device copy may hold x's bytes, x when its extent may
   hold the victim's (unless x's checksum tells it when read). blank: x's
   bytes are not wanted (never written, or lost and overwritten now). */
#define GM__SWAP_HALF (GM__SWAP_CHUNK / 2)
/* What a chunk that failed and could not be put back left unknown:
   x's chunk in the file, the victim's on the device. */
#define GM__MIX_DISK 1
#define GM__MIX_DEV 2
static gm_result gm__swap_disk_chunk(gm_context* ctx, gm__tier* tm, gm__disk* dk, char* dev, uint64_t off, size_t out,
                                     size_t in, uint32_t* crc_out, uint32_t* crc_in, int* mixed) {
    char *a = (char*)tm->bounce, *b = (char*)tm->bounce + GM__SWAP_HALF;
    gm_result r = GM_OK, u = GM_OK;
    uint32_t c;
    *crc_out = *crc_in = 0;
    *mixed = 0;
    if (in) r = gm__disk_sync_mem(dk, GM__J_READ_MEM, off, a, in, crc_in);
    if (r == GM_OK && out) r = ctx->be->copy(ctx, b, dev, out, GM_COPY_DEVICE_TO_HOST, GM__OUT(tm));
    if (r == GM_OK && out) r = ctx->be->stream_sync(ctx, GM__OUT(tm));
    if (r != GM_OK) return r; /* nothing changed yet */
    if (out && (r = gm__disk_sync_mem(dk, GM__J_WRITE_MEM, off, b, out, crc_out)) != GM_OK) {
        if (in) u = gm__disk_sync_mem(dk, GM__J_WRITE_MEM, off, a, in, &c); /* x's chunk back */
        *mixed = u != GM_OK ? GM__MIX_DISK : 0;
        return r;
    }
    if (in) r = ctx->be->copy(ctx, dev, a, in, GM_COPY_HOST_TO_DEVICE, GM__IN(tm));
    if (r == GM_OK && in) r = ctx->be->stream_sync(ctx, GM__IN(tm));
    if (r != GM_OK) { /* both chunks back where they were, each tried whatever the other did */
        if (out) u = ctx->be->copy(ctx, dev, b, out, GM_COPY_HOST_TO_DEVICE, GM__IN(tm));
        if (u == GM_OK && out) u = ctx->be->stream_sync(ctx, GM__IN(tm));
        if (u != GM_OK) *mixed |= GM__MIX_DEV;
        if (in && gm__disk_sync_mem(dk, GM__J_WRITE_MEM, off, a, in, &c) != GM_OK) *mixed |= GM__MIX_DISK;
        return r;
    }
    return GM_OK;
}

static gm_result gm__swap_disk(gm_context* ctx, gm__tier* tm, gm__tensor* x, int blank) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__tensor* v;
    char* dev;
    uint64_t base;
    size_t off, done;
    uint32_t cv = 0, cx = 0, co, ci;
    int mixed = 0;
    gm_result r = GM_OK, u = GM_OK;
    if (!dk || x->job || !x->disk_valid || !x->disk || x->host || x->dev || x->managed) return GM_ERR_OUT_OF_MEMORY;
    if ((v = gm__swap_begin(ctx, tm, x, NULL, &r)) == NULL) return r;
    if (dk->direct && ((uintptr_t)tm->bounce % dk->align || GM__SWAP_HALF % dk->align)) {
        gm__log(ctx, GM_LOG_WARN, "tier: no swap with disk: the bounce buffer is not aligned for direct I/O (%zu bytes)",
                dk->align);
        return GM_ERR_OUT_OF_MEMORY;
    }
    if (v->disk) gm__disk_drop(ctx, v); /* a stale extent (its copy there is not valid) */
    dev = (char*)v->dev;
    base = gm__disk_off(dk, x->disk);
    for (off = 0; off < v->bytes || off < x->bytes; off += GM__SWAP_HALF) {
        size_t out = gm__swap_part(v->bytes, v->blank, off, GM__SWAP_HALF);
        size_t in = gm__swap_part(x->bytes, blank, off, GM__SWAP_HALF);
        r = gm__swap_disk_chunk(ctx, tm, dk, dev + off, base + off, out, in, &co, &ci, &mixed);
        if (r != GM_OK) break;
        if (dk->checksum && out) cv = off ? gm__crc32c_combine(cv, co, out) : co;
        if (dk->checksum && in) cx = off ? gm__crc32c_combine(cx, ci, in) : ci;
    }
    if (r == GM_OK && dk->checksum && !blank && cx != x->crc) {
        r = GM_ERR_CHECKSUM;
        pthread_mutex_lock(&dk->mu);
        dk->crc_fail++;
        dk->errors++;
        pthread_mutex_unlock(&dk->mu);
    }
    if (r != GM_OK) {
        for (done = 0; done < off && u == GM_OK; done += GM__SWAP_HALF) { /* the chunks before `off`: back */
            size_t out = gm__swap_part(x->bytes, blank, done, GM__SWAP_HALF); /* roles reversed */
            size_t in = gm__swap_part(v->bytes, v->blank, done, GM__SWAP_HALF);
            int m = 0;
            u = gm__swap_disk_chunk(ctx, tm, dk, dev + done, base + done, out, in, &co, &ci, &m); /* m: with u */
        }
        if (u != GM_OK) /* chunks left traded: each tensor's bytes are partly in the other's place */
            gm__swap_lost(ctx, tm, x, 1, v, 1, u);
        else if ((mixed & GM__MIX_DEV) || ((mixed & GM__MIX_DISK) && !dk->checksum))
            gm__swap_lost(ctx, tm, x, (mixed & GM__MIX_DISK) != 0, v, (mixed & GM__MIX_DEV) != 0, r);
        else if (mixed) /* x's chunk in the file may differ: its checksum says so when it is read */
            gm__log(ctx, GM_LOG_ERROR, "tier: swapping tensor %#x in from disk failed twice (%s); its copy there may "
                    "differ from what was written, which its checksum tells when it is read", gm__handle_id(tm, x),
                    gm_result_string(r));
        else if (r == GM_ERR_CHECKSUM)
            gm__log(ctx, GM_LOG_ERROR, "tier: tensor %#x (%zu bytes) read back from disk fails its checksum; "
                    "it stays on disk", gm__handle_id(tm, x), x->bytes);
        else
            gm__log(ctx, GM_LOG_WARN, "tier: swapping tensor %#x in from disk failed (%s); it stays on disk",
                    gm__handle_id(tm, x), gm_result_string(r));
        return r;
    }
    gm__tier_count(tm, v, -1);
    gm__swap_handover(ctx, tm, x, v);
    v->disk = x->disk;
    v->disk_valid = 1;
    v->crc = cv;
    x->disk = NULL;
    x->disk_valid = 0;
    gm__tier_count(tm, v, 1);
    if (!v->blank) tm->st.bytes_to_disk += (int64_t)v->bytes;
    if (!blank) {
        tm->st.bytes_from_disk += (int64_t)x->bytes;
        tm->st.bytes_to_device += (int64_t)x->bytes;
    } else {
        tm->st.bytes_not_copied += (int64_t)x->bytes;
    }
    gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) swapped in from disk for tensor %#x (%zu bytes): every "
            "tier full", gm__handle_id(tm, x), x->bytes, gm__handle_id(tm, v), v->bytes);
    return GM_OK;
}

/* Learned order with a disk tier: x's host copy comes to the device,
   which has no free room, and the host tier has no free room either, and
   no copy to give up without a write (none whose tensor the device holds
   too, none with a valid copy on disk). Made the usual way, the room costs
   the disk: x's host copy stays (a spare until x is written) while the
   device victim, or a host copy it pushes out, is written to disk and read
   back later. The victim the plan would evict (the heaps' top, O(log n)),
   or when it cannot trade places with x (a copy below, I/O under way, its
   bytes too many for x's host block or its device block too small for x)
   the best that can (a walk of the device's tensors), is returned: x and it trade
   instead (gm__swap_in, no disk I/O, at the cost of two copies waited
   for), and the tiers hold the same tensors as before, as Belady's order
   over device and host together counts them (bench/spill, layers at 2x:
   640 MiB a step through the disk, 512-560 with the trade, Belady's 512). NULL:
   the usual way. Cheapest tests first: a miss with room pays O(1). */
static gm__tensor* gm__swap_saves(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__tensor *v, *h;
    size_t free_room;
    if (!ctx->disk || !GM__PLANNED(tm) || !x->host_valid || !x->host || x->job || x->dev || x->managed || x->blank)
        return NULL;
    free_room = gm__host_free_room(ctx, tm);
    if (gm__host_need(ctx, x->bytes) <= free_room) return NULL; /* room for any victim that could trade */
    h = gm__host_victim(tm, x, 1, 0);
    if (h && (GM__HOLDS(h) || h->disk_valid)) return NULL; /* a copy goes without a write */
    v = gm__victim(ctx, tm, 0, NULL);
    if (v && !gm__swappable(ctx, v, x, gm__host_cap(x->host)))
        v = gm__victim(ctx, tm, 0, x); /* the top cannot trade: the best that can (a walk, only once a write is due) */
    if (!v || v->blank || v->disk_valid || gm__host_need(ctx, v->bytes) <= free_room)
        return NULL; /* none can trade, or it leaves for free, or it finds room */
    return v;
}

/* Brings x to the device for stream s: room allocated on `in`, the copy on
   `in` (from the host copy once whole, else from disk through the staging
   slots), ready_seq marked after it (or after the allocation, when there
   is nothing to copy: x is blank, or `overwrite`, its bytes not wanted).
   On failure the room goes back and x stays in the tier it was in
   (speculative: GM_NOT_READY when the room waits for a write it started,
   gm__dev_get). */
static gm_result gm__bring_in(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, int speculative,
                              int overwrite) {
    gm_result r;
    int from_disk, nocopy = x->blank || overwrite, looked = 0; /* looked: no free room was found */
    if (x->dev || x->managed) return GM_OK;
    if (!nocopy && x->job && !x->host_valid) { /* a read into the host tier is under way: it is the quickest way in */
        if (speculative) return GM_OK;
        (void)gm__io_wait(ctx, tm, x); /* failed: read again below */
    }
    if (!nocopy && speculative && !x->host_valid && x->disk_valid) { /* no wait for the disk: into the host tier */
        (void)gm__read_ahead(ctx, tm, x, tm->evict_after);
        return GM_OK;
    }
    gm__tier_count(tm, x, -1);
    from_disk = !nocopy && !x->host_valid && x->disk_valid;
    r = GM_ERR_OUT_OF_MEMORY;
    if (!nocopy && x->host_valid && ctx->disk && GM__PLANNED(tm)) { /* free room first; else a trade may save a write */
        r = gm__dev_get(ctx, tm, x, speculative, GM__ROOM_FREE);
        gm__tensor* v = r == GM_ERR_OUT_OF_MEMORY ? gm__swap_saves(ctx, tm, x) : NULL;
        if (v && gm__swap_in(ctx, tm, x, 0, v) == GM_OK) {
            gm__tier_count(tm, x, 1);
            return GM_OK;
        }
        looked = r == GM_ERR_OUT_OF_MEMORY && !v; /* a swap that failed may have left room: looked again */
    }
    if (r != GM_OK)
        r = gm__dev_room(ctx, tm, x, s, speculative, nocopy || (!x->host_valid && !from_disk),
                         looked ? GM__ROOM_EVICT : GM__ROOM_ANY);
    if (r == GM_ERR_OUT_OF_MEMORY && !speculative && x->job) { /* its I/O first (counted): a swap depends on where it is */
        gm__tier_count(tm, x, 1); /* the job's end counts it anew */
        (void)gm__io_wait(ctx, tm, x);
        gm__tier_count(tm, x, -1);
        from_disk = !nocopy && !x->host_valid && x->disk_valid;
    }
    if (r == GM_ERR_OUT_OF_MEMORY && !speculative && !x->host_valid && x->disk_valid) {
        gm_result w = gm__swap_disk(ctx, tm, x, x->blank || (overwrite && x->lost)); /* its bytes come in even for an
                                                                                       overwrite (they stay whole),
                                                                                       unless they were lost */
        if (w == GM_OK) {
            gm__tier_count(tm, x, 1);
            return GM_OK;
        }
        if (w != GM_ERR_OUT_OF_MEMORY) r = w;
    } else if (r == GM_ERR_OUT_OF_MEMORY && !speculative && !from_disk) {
        gm_result w = gm__swap_in(ctx, tm, x, x->blank || (overwrite && x->lost), NULL); /* an overwrite keeps its bytes
                                                                                     until the release */
        if (w == GM_OK) {
            gm__tier_count(tm, x, 1);
            return GM_OK;
        }
        if (w != GM_ERR_OUT_OF_MEMORY) r = w; /* a copy of the swap failed: say so */
    }
    if (r == GM_OK && !nocopy && (x->host_valid || from_disk)) {
        void* dst = x->dev ? x->dev : x->managed;
        /* into unified memory by the copy engine in stream order (a host copy would touch it from the
           CPU, which devices without concurrent managed access fault), then the prefetch after it */
        gm_copy_kind kind = x->dev ? GM_COPY_HOST_TO_DEVICE : GM_COPY_DEFAULT;
        gm__disk* dk = (gm__disk*)ctx->disk;
        if (!from_disk) {
            gm__tk_order_at(ctx, tm, GM__TK_OUT, x->out_seq, GM__IN(tm)); /* the host copy is whole */
            r = gm__host_copy(ctx, dst, x->host, x->bytes, kind, GM__IN(tm));
        } else {
            uint32_t want = x->crc;
            r = gm__disk_staged(dk, GM__J_READ_DEV, gm__disk_off(dk, x->disk), dst, x->bytes, kind, GM__IN(tm), &want);
        }
        if (r == GM_OK && x->managed) (void)ctx->be->managed_prefetch(ctx, x->managed, x->bytes, 1, GM__IN(tm));
        if (r == GM_OK) {
            x->ready_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_IN);
            if (!from_disk) x->hr_seq = x->ready_seq;
        }
        if (r != GM_OK) { /* the copy below is still whole: give the room back (in order on `in`) */
            if (x->dev) {
                gm__free(ctx, x->dev, GM__OWN_TENSOR);
                x->dev = NULL;
            } else if (x->managed) {
                gm__managed_drop(ctx, tm, x);
            }
            if (r == GM_ERR_CHECKSUM)
                gm__log(ctx, GM_LOG_ERROR, "tier: tensor %#x (%zu bytes) read back from disk fails its checksum; "
                        "it stays on disk", gm__handle_id(tm, x), x->bytes);
            else
                gm__log(ctx, GM_LOG_WARN, "tier: bringing tensor %#x (%zu bytes) in failed (%s); it stays in the %s tier",
                        gm__handle_id(tm, x), x->bytes, gm_result_string(r), from_disk ? "disk" : "host");
        } else {
            if (from_disk) tm->st.bytes_from_disk += (int64_t)x->bytes;
            tm->st.bytes_to_device += (int64_t)x->bytes;
            x->read_ahead = 0;
            gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) %s to the device from the %s tier",
                    gm__handle_id(tm, x), x->bytes, speculative ? "prefetched" : "brought", from_disk ? "disk" : "host");
        }
    } else if (r == GM_OK && x->dev) { /* nothing to copy: users wait only for `in` to own the memory */
        x->ready_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_IN);
        if (x->host_valid || x->disk_valid) tm->st.bytes_not_copied += (int64_t)x->bytes;
    }
    gm__tier_count(tm, x, 1);
    return r;
}

#define GM__TIER_ENTER(ctx, tm, x, h)                                                       \
    gm__tier* tm;                                                                           \
    gm__tensor* x;                                                                          \
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;                                   \
    tm = gm__tier_of(ctx);                                                                  \
    if (!tm) return GM__MISUSE(ctx, GM_ERR_STALE_HANDLE, "tier: no tensor was ever made"); \
    gm__rmu_lock(&tm->mu);                                                                  \
    gm__io_reap(ctx, tm);                                                                   \
    x = gm__tensor_get(ctx, h);                                                             \
    if (!x) {                                                                               \
        gm__rmu_unlock(&tm->mu);                                                            \
        return GM__MISUSE(ctx, GM_ERR_STALE_HANDLE, (h).ctx_id != (ctx)->serial                \
                          ? "tier: tensor %#x is a handle of another context" : "tier: tensor %#x is not live", \
                          (h).id);                                                          \
    }

/* Write-behind: the copy to host of a written tensor starts now, on `out`
   after its last use, while its device copy stays; when its room is needed
   later it is clean and goes without a wait. Only into free host room (no
   demotion from here). An acquire's stream waits for the copy (out_seq)
   before it may write the device copy again. A failure leaves the tensor
   as it was: dirty, on the device. */
static void gm__write_behind(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    int fresh = !x->host;
    if (!x->dev || x->acquired || x->host_valid || x->disk_valid || x->blank) return;
    if (fresh && (x->host = gm__host_alloc(ctx, tm, x->bytes)) == NULL) return;
    if (gm__copy_out(ctx, tm, x) != GM_OK && fresh) gm__host_free(ctx, tm, x);
}

/* A device copy without the tensor's bytes (prefetched == 2, "room only"):
   brought in for an overwrite while a copy below still holds them. Only
   an overwrite may take it as it is; anything else drops it and brings
   the bytes in. A blank tensor's room is never marked: it has no bytes. */
static void gm__room_mark(gm__tier* tm, gm__tensor* x) {
    if (!x->dev || x->blank || (!x->host_valid && !x->disk_valid)) return;
    x->prefetched = 2;
    gm__host_note(tm, x); /* its host copy's class changed; its only copy may be there now */
}

static void gm__room_drop(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__tier_count(tm, x, -1);
    gm__dev_drop(ctx, tm, x); /* counted as a wasted prefetch when it was one */
    gm__tier_count(tm, x, 1);
}

/* Learned order, after an acquire: note it (the plan's entries are tensor
   indices, GM__PLAN_OW set where the acquire overwrote), then bring in the
   next tensors of the plan, evicting only tensors used later than each of
   them (an overwrite's without its bytes); while the plan evicts (in this
   step or the last), the next victim's copy to host starts at once
   (write-behind) when Belady's order on the device evicts it before its
   next use. */
/* >>tier: learned order by phase. Invariants: tm->plan, use_first,
   use_at, nuse_first, leaves (Belady's verdicts, GM__LV_*) and dep (its
   moves to the host tier) are ph[cur]'s (the phase owns them); rec
   holds the acquires since the phase's step began. A step's acquires
   become a phase's plan when it ends (gm_tier_step, or gm_tier_set_phase
   leaving it): the named phase's, or without names the phase whose plan
   begins as the step did (GM__PREFIX acquires), else a free or the least
   recently used one. In a step, the first acquires choose among the
   phases by the same prefix; after that, an acquire the plan did not
   expect resynchronizes to that tensor's next use in the plan, and
   GM__LOST departures in a row mean the acquires left every plan: no
   prefetching and LRU victims until two expected acquires in a row. */
#define GM__PREFIX 8u
#define GM__LOST 4u

static void gm__phase_free(gm__phase* f) {
    GPUMEM_FREE(f->plan);
    GPUMEM_FREE(f->use_first);
    GPUMEM_FREE(f->use_at);
    GPUMEM_FREE(f->leaves);
    GPUMEM_FREE(f->dep);
    memset(f, 0, sizeof *f);
    f->next = -1;
}

static void gm__phase_activate(gm__tier* tm, int k) {
    gm__phase* f = &tm->ph[k];
    tm->vh_ok = 0; /* every next use changes */
    tm->hh_ok = 0;
    tm->hc_all = 1; /* and every verdict */
    tm->cur = k;
    tm->plan = f->plan;
    tm->nplan = f->nplan;
    tm->use_first = f->use_first;
    tm->use_at = f->use_at;
    tm->nuse_first = f->nuse_first;
    tm->leaves = f->leaves;
    tm->dep = f->dep;
    tm->tune_t0 = tm->st.bytes_to_disk + tm->st.bytes_from_disk;
    f->used = ++tm->clock;
    tm->lost = 0;
    tm->miss = tm->regain = 0;
}

/* Whether phase k's plan begins with the n entries of seq (tensors only). */
static int gm__phase_begins(const gm__tier* tm, int k, const uint32_t* seq, uint32_t n) {
    const gm__phase* f = &tm->ph[k];
    uint32_t i;
    if (!n || f->nplan < n) return 0;
    for (i = 0; i < n; i++)
        if (GM__PLAN_T(f->plan[i]) != GM__PLAN_T(seq[i])) return 0;
    return 1;
}

/* A position q of tensor i in phase k's plan right after tensor prev (a
   few of i's uses are looked at). */
static int gm__learn_find(const gm__tier* tm, int k, uint32_t i, uint32_t prev, uint32_t* q) {
    const gm__phase* f = &tm->ph[k];
    uint32_t u, end;
    if (!f->nplan || i >= f->nuse_first) return 0;
    end = f->use_first[i + 1] - f->use_first[i] > 16 ? f->use_first[i] + 16 : f->use_first[i + 1];
    for (u = f->use_first[i]; u < end; u++) {
        uint32_t at = f->use_at[u];
        if (GM__PLAN_T(f->plan[at ? at - 1 : f->nplan - 1]) == prev) {
            *q = at;
            return 1;
        }
    }
    return 0;
}

/* The plan's next position after an acquire of tensor i (see >>tier:
   learned order by phase). */
static void gm__learn_go(gm_context* ctx, gm__tier* tm, uint32_t i) {
    uint32_t lo, hi, first;
    int k;
    if (!tm->nplan) {
        tm->pos++;
        return;
    }
    if (GM__PLAN_T(tm->plan[tm->pos % tm->nplan]) == i) { /* as planned */
        tm->pos++;
        tm->miss = 0;
        tm->strays <<= 1;
        if (tm->lost && ++tm->regain >= 2) {
            tm->lost = 0;
            gm__log(ctx, GM_LOG_DEBUG, "tier: the acquires follow the plan of phase %d again", tm->cur);
        }
        return;
    }
    tm->st.plan_departures++;
    tm->strays = tm->strays << 1 | 1u;
    tm->regain = 0;
    if (!tm->named && tm->nrec <= GM__PREFIX) /* the step began as another phase's did */
        for (k = 0; k < GM_TIER_PHASES; k++)
            if (k != tm->cur && gm__phase_begins(tm, k, tm->rec, tm->nrec)) {
                gm__phase_activate(tm, k);
                tm->pos = tm->nrec;
                gm__log(ctx, GM_LOG_DEBUG, "tier: the step follows the plan of phase %d", k);
                return;
            }
    if (tm->nrec >= 2) { /* the last two acquires are consecutive in a plan: follow it from there */
        uint32_t prev = GM__PLAN_T(tm->rec[tm->nrec - 2]), q;
        for (k = 0; k < GM_TIER_PHASES; k++) {
            int kk = k == 0 ? tm->cur : k == tm->cur ? 0 : k;
            if (!gm__learn_find(tm, kk, i, prev, &q)) continue;
            if (kk != tm->cur || tm->lost) {
                gm__phase_activate(tm, kk);
                gm__log(ctx, GM_LOG_DEBUG, "tier: the acquires follow the plan of phase %d", kk);
            }
            tm->pos = q + 1;
            tm->miss = 0;
            return;
        }
    }
    /* resynchronize: the tensor's next use in the plan from here, else its first */
    if (i < tm->nuse_first && tm->use_first[i] < tm->use_first[i + 1]) {
        first = lo = tm->use_first[i];
        hi = tm->use_first[i + 1];
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (tm->use_at[mid] < tm->pos % tm->nplan) lo = mid + 1;
            else hi = mid;
        }
        tm->pos = (lo < tm->use_first[i + 1] ? tm->use_at[lo] : tm->use_at[first]) + 1;
    } else {
        tm->pos++;
    }
    if (++tm->miss >= GM__LOST && !tm->lost) {
        tm->lost = 1;
        tm->st.plan_lost++;
        gm__log(ctx, GM_LOG_DEBUG, "tier: the acquires left the plan of phase %d: no prefetch, LRU victims, "
                "until it is followed again", tm->cur);
    }
}

static void gm__uses_passed(gm__tier* tm, uint32_t was, int cur);

static void gm__learn_follow(gm_context* ctx, gm__tier* tm, uint32_t i) {
    uint32_t was = tm->pos;
    int cur = tm->cur, lost = tm->lost;
    gm__learn_go(ctx, tm, i);
    gm__uses_passed(tm, was, cur); /* notes the copies of the tensors whose uses it passed */
    if (tm->pos < was || tm->pos - was > 256 || tm->cur != cur || tm->lost != lost)
        tm->hc_all = 1; /* backwards, a jump, another phase, or planning stopped or started: every verdict */
}

static void gm__learn_note(gm_context* ctx, gm__tier* tm, gm__tensor* x, int overwrite) {
    if (tm->nrec == tm->caprec) {
        uint32_t cap = tm->caprec ? tm->caprec * 2 : 1024;
        uint32_t* r = (uint32_t*)gm__grow_array(tm->rec, tm->caprec * sizeof *r, cap * sizeof *r);
        if (!r) return;
        tm->rec = r;
        tm->caprec = cap;
    }
    tm->rec[tm->nrec++] = (uint32_t)(x - tm->t) | (overwrite ? GM__PLAN_OW : 0u);
    if (tm->named && tm->nrec == 1 && tm->closed >= 0) { /* what followed */
        tm->ph[tm->closed].next = tm->rec_phase;
        if (tm->closed == tm->cur) tm->vh_ok = tm->hh_ok = 0; /* the next step's uses change */
    }
    gm__learn_follow(ctx, tm, (uint32_t)(x - tm->t));
}

/* Starts reading x (on disk only) straight into device room made for it
   now, through the staging slots: for a tensor due within the prefetch
   window when the host tier has no room to read it into. The room is a
   prefetch's (only tensors used after `after` acquires leave for it). x is
   on the device from now, prefetched, its copy whole once the job is
   applied (ready_seq); whoever would use, move or free that copy waits for
   the job first (gm__dev_settle), and a failed read gives the room back and
   leaves x on disk. Returns whether it started. */
static int gm__dev_ahead(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, uint64_t after) {
    gm__disk* dk = (gm__disk*)ctx->disk;
    gm__job* j;
    gm_result r;
    if (!dk || x->job || x->host || !x->disk_valid || x->blank || x->dev || x->managed || x->acquired) return 0;
    gm__tier_count(tm, x, -1);
    tm->evict_after = after;
    x->acquired++; /* not a victim of its own room */
    r = gm__dev_room(ctx, tm, x, s, 1, 0, GM__ROOM_ANY);
    x->acquired--;
    gm__host_note(tm, x); /* it may be given up again */
    tm->evict_after = 0;
    j = r == GM_OK && x->dev ? gm__staged_new(dk, GM__J_READ_DEV, gm__disk_off(dk, x->disk), x->dev, x->bytes,
                                              GM_COPY_HOST_TO_DEVICE, GM__IN(tm), x->crc) : NULL;
    if (!j) { /* no room, or no job: the room (just taken on `in`, unused) goes back */
        if (x->dev) gm__free(ctx, x->dev, GM__OWN_TENSOR);
        x->dev = NULL;
        gm__tier_count(tm, x, 1);
        return 0;
    }
    j->ti = (uint32_t)(x - tm->t);
    j->gen = x->gen;
    x->job = j;
    x->prefetched = 1;
    gm__tier_count(tm, x, 1);
    gm__lru_push(tm, x);
    gm__job_submit(dk, j, 0);
    gm__log(ctx, GM_LOG_DEBUG, "tier: tensor %#x (%zu bytes) is read from disk into the device ahead of use",
            gm__handle_id(tm, x), x->bytes);
    return 1;
}

/* The host room the plan's moves to the host tier at position p still
   need: of those tensors, the ones on the device with no copy below. A
   read ahead also leaves room for the moves of the last GM__DEP_BACK
   positions not made yet (the device may hold a tensor past the position
   at which the plan let it go, while it has room). */
#define GM__DEP_BACK 64u
static int64_t gm__dep_need(gm_context* ctx, const gm__tier* tm, uint32_t p) {
    int64_t need = 0;
    uint32_t k;
    for (k = tm->dep[p]; k < tm->dep[p + 1]; k++) {
        const gm__tensor* v = &tm->t[tm->dep[k]];
        if (v->live && v->dev && !v->host_valid && !v->disk_valid) need += (int64_t)gm__host_need(ctx, v->bytes);
    }
    return need;
}

/* Whether the acquires stray from the plan too often for work ahead to pay:
   more than GM__STRAYS (half) of the last 64 were not the plan's next, and
   one of the last 8 was not either (a plan right half the time still
   prefetches: the cost of a wrong guess is a transfer, of none a wait). Lost (a run of departures) ends at the first
   two acquires found side by side in a plan, which acquires in no order
   find often enough by chance; each time, reads ahead from disk started
   for a sequence that did not come (one thread acquiring at random under
   learned order read 2.1-2.5x the bytes LRU read from disk for the same
   work, four threads 6x). Eight acquires in a row as planned, which chance does
   not give, start work ahead again at once. */
#define GM__STRAYS 32
static int gm__erratic(const gm__tier* tm) {
    return (tm->strays & 0xffu) && gm__popcount64(tm->strays) > GM__STRAYS;
}

static void gm__learn_ahead(gm_context* ctx, gm__tier* tm, gm_stream s) {
    uint32_t q, end;
    int next = tm->ph[tm->cur].next;
    if (tm->lost || !tm->nplan || gm__erratic(tm)) return;
    /* past the plan's end only when the same phase is expected to follow */
    end = next < 0 || next == tm->cur ? UINT32_MAX : tm->pos < tm->nplan ? tm->nplan - tm->pos : 0;
    for (q = 1; q <= (uint32_t)tm->ahead && q <= end; q++) {
        uint32_t e = tm->plan[(tm->pos + q - 1) % tm->nplan];
        gm__tensor* y = &tm->t[GM__PLAN_T(e)];
        int ow = (e & GM__PLAN_OW) != 0;
        gm_result r;
        if (!y->live || y->dev || y->managed || y->acquired) continue;
        if (!ow && !y->blank && !y->host_valid && (y->job || y->disk_valid)) { /* on disk: into the host tier first */
            if (!gm__read_ahead(ctx, tm, y, q)) (void)gm__dev_ahead(ctx, tm, y, s, q); /* or no room there */
            continue;
        }
        tm->evict_after = q;
        y->acquired++; /* not a victim of its own room */
        r = gm__bring_in(ctx, tm, y, s, 1, ow);
        y->acquired--;
        gm__host_note(tm, y); /* it may be given up again */
        tm->evict_after = 0;
        if (r != GM_OK || !y->dev) break; /* no room without evicting sooner needs */
        y->prefetched = 1;
        if (ow) gm__room_mark(tm, y);
        gm__lru_push(tm, y);
    }
    if (ctx->disk && tm->nplan) { /* further ahead, tensors on disk come into the host tier while it has room,
                                     less what the plan's moves to it need before their use (gm__plan_dep) */
        uint32_t far = tm->nplan < 256 ? tm->nplan : 256, qd = 0; /* qd: positions counted (0: none yet) */
        int64_t room = 0;
        for (q = 1; q <= far && q <= end; q++) {
            uint32_t e = tm->plan[(tm->pos + q - 1) % tm->nplan];
            gm__tensor* y = &tm->t[GM__PLAN_T(e)];
            if (q <= (uint32_t)tm->ahead || (e & GM__PLAN_OW) || !y->live || y->dev || y->managed || y->host || y->job ||
                !y->disk_valid || y->blank)
                continue;
            if (tm->dep) {
                if (!qd) { /* once a tensor to read is found: free room, or held by copies that go without a write,
                              less the moves due already, not made yet */
                    uint32_t back = tm->nplan - far < GM__DEP_BACK ? tm->nplan - far : GM__DEP_BACK, b;
                    room = (int64_t)gm__host_free_room(ctx, tm) + (int64_t)tm->hsoon;
                    for (b = 1; b <= back; b++) room -= gm__dep_need(ctx, tm, (tm->pos + tm->nplan - b) % tm->nplan);
                    qd = 1;
                }
                for (; qd <= q; qd++) { /* the moves up to y's use, and the copies read ahead for uses before it */
                    uint32_t p = (tm->pos + qd - 1) % tm->nplan;
                    const gm__tensor* z = &tm->t[GM__PLAN_T(tm->plan[p])];
                    room -= gm__dep_need(ctx, tm, p);
                    if (z->live && z->host_valid && !z->dev && z->hsoon) room -= (int64_t)gm__host_need(ctx, z->bytes);
                }
                if (room < (int64_t)gm__host_need(ctx, y->bytes)) break;
            }
            if (!gm__read_ahead(ctx, tm, y, q)) break;
            room -= (int64_t)gm__host_need(ctx, y->bytes);
        }
    }
    if (tm->nplan && (tm->last_step_evictions || tm->st.evictions > tm->step_evictions)) {
        gm__tensor* v = gm__victim(ctx, tm, 0, NULL);
        if (v && !v->pinned) { /* to disk when Belady's order sends it there, else to free host room */
            if (ctx->disk && gm__leaves(tm, (uint32_t)(v - tm->t))) (void)gm__dev_behind(ctx, tm, v);
            else if (gm__leaves_dev(tm, (uint32_t)(v - tm->t))) gm__write_behind(ctx, tm, v); /* it is not written
                                                                                               again first */
        }
    }
    gm__host_clean(ctx, tm);
}

GPUMEM_API gm_result gm_tier_set_policy(gm_context* ctx, gm_evict_policy policy, int prefetch_ahead, gm_victim_fn fn,
                                        void* user) {
    gm__tier* tm;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if ((int)policy < 0 || policy > GM_EVICT_CUSTOM || prefetch_ahead < 0 || (policy == GM_EVICT_CUSTOM && !fn))
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_tier_set_policy: %s",
                          (int)policy < 0 || policy > GM_EVICT_CUSTOM ? "the policy is none of gm_evict_policy"
                          : prefetch_ahead < 0                         ? "prefetch_ahead is negative"
                                                                       : "GM_EVICT_CUSTOM without a function");
    tm = gm__tier_open(ctx);
    if (!tm) return GM_ERR_HOST_OUT_OF_MEMORY;
    gm__rmu_lock(&tm->mu);
    tm->policy = policy == GM_EVICT_DEFAULT ? GM_EVICT_LRU : policy;
    tm->vh_ok = tm->hh_ok = 0; /* built when next asked */
    tm->hc_all = 1;
    tm->ahead = prefetch_ahead;
    tm->strays = 0; /* the acquires under the old policy say nothing of the plan's */
    tm->vfn = fn;
    tm->vuser = user;
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

/* >>tier: plan room. Belady's order plans the device and host tiers as
   one cache of their budgets' size, but the tiers hold less than that:
   tensors of mixed sizes leave holes no tensor fits in, and a tensor read
   from disk ahead of its use or written behind holds room while it moves.
   Planned to the brim, the tensors the plan keeps do not fit, and those
   pushed out for room come back from disk every step (bench/spill's
   transformer at 2x: 851-892 MiB per step through the disk with the whole
   budgets, 754-794 planned with 15% less; its uniform layers lose with
   less). How much less is found by trying: each phase's plan counts on
   the budgets less k of its largest tensors (k = 0 .. GM__TUNE_K-1, at
   most half the budgets), each k for GM__TUNE_STEPS steps (the first to
   settle, the others measured: a schedule may repeat every other step),
   and keeps the k that moved the fewest bytes through the disk (another
   than the fewest k only for GM__TUNE_GAIN fewer), until GM__TUNE_AGAIN
   steps later, when it tries again. A phase whose steps change, or that
   moves nothing through the disk, starts again from k = 0 (and keeps it).
   Invariant (tm->mu): a phase's tune.cap is the cache its leaves were
   planned with (gm_tier_stats.plan_cache_bytes: the active phase's). */
#define GM__TUNE_STEPS 3
#define GM__TUNE_AGAIN 1024
#define GM__TUNE_GAIN 0.95

/* The largest tensor of the active plan. */
static size_t gm__plan_big(const gm__tier* tm) {
    size_t big = 0;
    uint32_t p;
    for (p = 0; p < tm->nplan; p++)
        if (tm->t[GM__PLAN_T(tm->plan[p])].bytes > big) big = tm->t[GM__PLAN_T(tm->plan[p])].bytes;
    return big;
}

/* The end of a step of a phase tuned by u: same, whether it followed the
   plan u tunes (the same acquires as the step before); bytes, what moved
   through the disk in it. Sets u->k for the next plan. */
static void gm__tune_step(gm_context* ctx, gm__tier* tm, gm__tune* u, int same, uint64_t bytes, int phase) {
    size_t full = ctx->budget + ctx->desc.host_budget, big = gm__plan_big(tm);
    int nk = 1, k, best = 0;
    while (nk < GM__TUNE_K && (size_t)nk * big <= full / 2) nk++;
    if (!same || (u->kept && ++u->steps >= GM__TUNE_AGAIN)) {
        memset(u, 0, sizeof *u);
        return;
    }
    if (u->kept) return;
    if (++u->steps > 1) u->bytes[u->k] += bytes;
    if (u->steps < GM__TUNE_STEPS) return;
    if (u->k + 1 < nk && (u->k || u->bytes[0])) { /* the next room */
        u->k++;
        u->steps = 0;
        return;
    }
    for (k = 1; k <= u->k; k++)
        if ((double)u->bytes[k] < GM__TUNE_GAIN * (double)u->bytes[best]) best = k;
    if (u->bytes[0]) /* else nothing moved through the disk: no room to find */
        gm__log(ctx, GM_LOG_INFO,
                "tier: phase %d plans with %zu of the fast tiers' %zu bytes (%d of its largest tensors left "
                "aside): %.0f MiB through the disk per step, %.0f with all of them",
                phase, full - (size_t)best * big, full, best, (double)u->bytes[best] / (GM__TUNE_STEPS - 1) / GM__MIB,
                (double)u->bytes[0] / (GM__TUNE_STEPS - 1) / GM__MIB);
    u->k = best;
    u->kept = 1;
    u->steps = 0;
}

/* Belady's order over the plan, run twice around the step (the second
   time in steady state): for every use of every tensor, whether the tensor
   leaves the cache before its next use. Two caches: the device budget
   (GM__LV_DEV: a written tensor copied out ahead of its eviction is not
   written again first), and with a disk tier the device and host budgets
   less tu's room as one cache (GM__LV_DISK: it goes to disk). Clocks are
   absolute (pass * plan + position); the tensor used farthest ahead is the
   top of a heap of entries (the learned victims' kind, keyed by next use
   alone), stale ones dropped as they surface and the heap rebuilt from the
   held tensors when stale ones outnumber them: O(plan log plan) for each
   cache. */
#define GM__LV_DISK 1u
#define GM__LV_DEV 2u

/* Scratch of one run, sized for the plan (n uses) and its tensors (nt). */
typedef struct gm__bscr {
    uint32_t *held, *slot, *curk, *occ; /* slot: place in held + 1; 0: not held */
    uint32_t* gone[2];                  /* per use: the position at which it left the device, the fast tiers */
    uint64_t* next;                     /* when a held tensor is used next */
    gm__vent* heap;                     /* room for 2 * nt + 1 entries (key: next use; i: the tensor) */
} gm__bscr;

static void gm__belady_run(gm__tier* tm, const gm__bscr* w, size_t cap, uint8_t bit, uint32_t* gone) {
    uint32_t n = tm->nplan, nt = tm->n, p, pass, t, nheld = 0, nh = 0, k;
    size_t used = 0;
    gm__vent e;
    memset(&e, 0, sizeof e); /* one priority, no ties: the key alone orders */
    memset(w->slot, 0, (size_t)nt * sizeof *w->slot);
    memset(w->heap, 0, ((size_t)2 * nt + 1) * sizeof *w->heap);
    for (pass = 0; pass < 2; pass++) {
        for (t = 0; t < nt; t++) w->occ[t] = tm->use_first[t];
        for (p = 0; p < n; p++) {
            uint32_t u, first, end;
            t = GM__PLAN_T(tm->plan[p]);
            u = w->occ[t]++;
            first = tm->use_first[t];
            end = tm->use_first[t + 1];
            if (!w->slot[t]) {
                while (used + tm->t[t].bytes > cap && nheld) { /* the one used farthest ahead goes */
                    uint32_t v = w->heap[0].i, j;
                    int fresh = w->slot[v] && w->heap[0].key == w->next[v];
                    w->heap[0] = w->heap[--nh];
                    gm__vh_sift(w->heap, nh, 0);
                    if (!fresh) continue; /* stale: v left, or was used again since */
                    if (pass) tm->leaves[w->curk[v]] |= bit, gone[w->curk[v]] = p;
                    used -= tm->t[v].bytes;
                    j = w->slot[v] - 1;
                    w->held[j] = w->held[--nheld];
                    w->slot[w->held[j]] = j + 1;
                    w->slot[v] = 0;
                }
                if (used + tm->t[t].bytes > cap) continue; /* alone larger than the cache */
                w->held[nheld++] = t;
                w->slot[t] = nheld;
                used += tm->t[t].bytes;
            }
            w->curk[t] = u;
            w->next[t] = u + 1 < end ? (uint64_t)pass * n + tm->use_at[u + 1] : (uint64_t)(pass + 1) * n + tm->use_at[first];
            if (nh == 2 * nt) { /* as many stale entries as live ones: only the held tensors' stay */
                for (nh = 0, k = 0; k < nheld; k++) w->heap[nh].key = w->next[w->held[k]], w->heap[nh++].i = w->held[k];
                for (k = nh / 2; k-- > 0;) gm__vh_sift(w->heap, nh, k);
            }
            e.key = w->next[t];
            e.i = t;
            gm__vh_up(w->heap, nh++, e);
        }
    }
}

/* Where Belady's order moves tensors from the device to the host tier
   (GM__LV_DEV, not GM__LV_DISK): tm->dep[p] .. tm->dep[p + 1] - 1 index,
   in the same array after its n + 2 offsets, the tensors the device's run
   lets go at position p (gone[0]) to keep them in the host tier. A read
   ahead from disk leaves room for those that will need it before its
   tensor's use (gm__learn_ahead): else such a tensor, leaving the device
   with no copy below, finds the host tier full of reads ahead used sooner,
   goes to disk itself and comes back (bench/spill's transformer at 1.5x
   moved 644-752 MiB a step through the disk where its plan moves 192 to
   384, as its room is tuned).
   Left NULL when there is no memory for it: no room is left then.
   O(uses + plan). */
/* Whether use u's tensor is moved to the host tier by the device's run
   (at gone[0][u]) and kept there by the fast tiers' run. */
static int gm__moves_host(const gm__tier* tm, uint32_t* const gone[2], uint32_t u) {
    return (tm->leaves[u] & (GM__LV_DEV | GM__LV_DISK)) == GM__LV_DEV && gone[0][u] < tm->nplan;
}

static void gm__plan_dep(gm__tier* tm, uint32_t* const gone[2]) {
    uint32_t n = tm->nplan, t, u, k = 0;
    uint32_t* d;
    for (u = 0; u < n; u++) k += (uint32_t)gm__moves_host(tm, gone, u);
    d = (uint32_t*)gm__calloc(((size_t)n + 2 + k) * sizeof *d);
    if (!d) return;
    for (u = 0; u < n; u++) /* counts two on, offsets one on, then each filled: offsets in place (as gm__phase_close) */
        if (gm__moves_host(tm, gone, u)) d[gone[0][u] + 2]++;
    d[0] = d[1] = n + 2;
    for (u = 1; u <= n; u++) d[u + 1] += d[u];
    for (t = 0; t < tm->nuse_first; t++)
        for (u = tm->use_first[t]; u < tm->use_first[t + 1]; u++)
            if (gm__moves_host(tm, gone, u)) d[d[gone[0][u] + 1]++] = t;
    tm->dep = d;
}

static void gm__plan_belady(gm_context* ctx, gm__tier* tm, gm__tune* tu) {
    uint32_t n = tm->nplan, nt = tm->n, t;
    size_t cap = ctx->budget + ctx->desc.host_budget, cut, all = 0;
    gm__bscr w;
    GPUMEM_FREE(tm->leaves);
    tm->leaves = NULL;
    GPUMEM_FREE(tm->dep);
    tm->dep = NULL;
    tu->cap = 0;
    if (!n || tm->policy != GM_EVICT_LEARNED) return;
    tm->leaves = (uint8_t*)gm__calloc(n);
    w.held = (uint32_t*)GPUMEM_MALLOC((size_t)nt * sizeof *w.held);
    w.slot = (uint32_t*)GPUMEM_MALLOC((size_t)nt * sizeof *w.slot);
    w.curk = (uint32_t*)GPUMEM_MALLOC((size_t)nt * sizeof *w.curk); /* the use that last touched it */
    w.occ = (uint32_t*)GPUMEM_MALLOC((size_t)nt * sizeof *w.occ);
    w.next = (uint64_t*)GPUMEM_MALLOC((size_t)nt * sizeof *w.next);
    w.heap = (gm__vent*)GPUMEM_MALLOC(((size_t)2 * nt + 1) * sizeof *w.heap);
    w.gone[0] = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof *w.gone[0]);
    w.gone[1] = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof *w.gone[1]);
    if (!tm->leaves || !w.held || !w.slot || !w.curk || !w.occ || !w.next || !w.heap || !w.gone[0] || !w.gone[1]) {
        GPUMEM_FREE(tm->leaves);
        tm->leaves = NULL;
        goto out;
    }
    memset(w.gone[0], 0xff, (size_t)n * sizeof *w.gone[0]); /* none left */
    memset(w.gone[1], 0xff, (size_t)n * sizeof *w.gone[1]);
    for (t = 0; t < nt; t++) /* the plan's tensors: a cache that holds them all loses none */
        if (tm->use_first[t] != tm->use_first[t + 1]) all += tm->t[t].bytes;
    if (all > ctx->budget) gm__belady_run(tm, &w, ctx->budget, GM__LV_DEV, w.gone[0]);
    if (ctx->disk) {
        cut = (size_t)tu->k * gm__plan_big(tm);
        cap -= cut < cap / 2 ? cut : cap / 2;
        tu->cap = cap;
        if (all > cap) gm__belady_run(tm, &w, cap, GM__LV_DISK, w.gone[1]);
        gm__plan_dep(tm, w.gone);
    }
out:
    GPUMEM_FREE(w.held);
    GPUMEM_FREE(w.slot);
    GPUMEM_FREE(w.curk);
    GPUMEM_FREE(w.occ);
    GPUMEM_FREE(w.next);
    GPUMEM_FREE(w.heap);
    GPUMEM_FREE(w.gone[0]);
    GPUMEM_FREE(w.gone[1]);
}

/* Whether Belady's order sends tensor i out of the cache `bit` names
   before its next use, as of now: its last use (in this step, else the
   plan's last) says. A tensor the plan does not use leaves, and so does
   every tensor when there is no plan's verdict. gm__leaves: to disk;
   gm__leaves_dev: off the device. */
static int gm__leaves_by(const gm__tier* tm, uint32_t i, uint8_t bit) {
    uint32_t lo, hi, first;
    if (!tm->leaves || i >= tm->nuse_first || tm->use_first[i] == tm->use_first[i + 1]) return 1;
    first = lo = tm->use_first[i];
    hi = tm->use_first[i + 1];
    while (lo < hi) { /* the first use at or after pos */
        uint32_t mid = lo + (hi - lo) / 2;
        if (tm->use_at[mid] < tm->pos) lo = mid + 1;
        else hi = mid;
    }
    return tm->leaves[lo > first ? lo - 1 : tm->use_first[i + 1] - 1] & bit;
}

static int gm__leaves(const gm__tier* tm, uint32_t i) { return gm__leaves_by(tm, i, GM__LV_DISK) != 0; }
static int gm__leaves_dev(const gm__tier* tm, uint32_t i) { return gm__leaves_by(tm, i, GM__LV_DEV) != 0; }

/* The step's acquires become a phase's plan (positions per tensor, CSR),
   which is active from now; a new step begins. */
static gm_result gm__phase_close(gm_context* ctx, gm__tier* tm) {
    uint32_t i, *first, *at, np = tm->nrec < GM__PREFIX ? tm->nrec : GM__PREFIX;
    int k, slot = tm->named ? tm->rec_phase : tm->cur, same;
    gm__phase f;
    gm__tune u;
    tm->vh_ok = tm->hh_ok = 0; /* the plan or the position changes: every next use does */
    if (!tm->nrec) { /* nothing acquired: the plans stay, the step begins again */
        if (tm->named && tm->cur != tm->rec_phase) gm__phase_activate(tm, tm->rec_phase);
        tm->pos = 0;
        return GM_OK;
    }
    if (!tm->named) { /* the phase this step was: by its beginning, else a new one */
        slot = -1;
        for (k = 0; k < GM_TIER_PHASES && slot < 0; k++)
            if (gm__phase_begins(tm, k, tm->rec, np)) slot = k;
        for (k = 0; k < GM_TIER_PHASES && slot < 0; k++)
            if (!tm->ph[k].nplan) slot = k;
        if (slot < 0)
            for (slot = 0, k = 1; k < GM_TIER_PHASES; k++)
                if (tm->ph[k].used < tm->ph[slot].used) slot = k;
    }
    first = (uint32_t*)gm__calloc(((size_t)tm->n + 2) * sizeof *first);
    at = (uint32_t*)GPUMEM_MALLOC(((size_t)tm->nrec + 1) * sizeof *at);
    if (!first || !at) {
        GPUMEM_FREE(first);
        GPUMEM_FREE(at);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    for (i = 0; i < tm->nrec; i++) first[GM__PLAN_T(tm->rec[i]) + 2]++;
    for (i = 2; i < tm->n + 2; i++) first[i] += first[i - 1];
    for (i = 0; i < tm->nrec; i++) at[first[GM__PLAN_T(tm->rec[i]) + 1]++] = i; /* ascending, as recorded */
    tm->use_first = first; /* Belady's order reads the new plan through the active fields */
    tm->use_at = at;
    tm->nuse_first = tm->n;
    /* the step followed the plan it recorded again: its room's tuning goes on */
    same = slot == tm->cur && tm->ph[slot].nplan == tm->nrec;
    for (i = 0; same && i < tm->nrec; i++) same = GM__PLAN_T(tm->ph[slot].plan[i]) == GM__PLAN_T(tm->rec[i]);
    u = tm->ph[slot].tune;
    tm->plan = tm->rec;
    tm->nplan = tm->nrec;
    tm->leaves = NULL;
    tm->dep = NULL;
    if (ctx->disk && tm->policy == GM_EVICT_LEARNED)
        gm__tune_step(ctx, tm, &u, same, (uint64_t)(tm->st.bytes_to_disk + tm->st.bytes_from_disk - tm->tune_t0), slot);
    gm__plan_belady(ctx, tm, &u);
    f.tune = u;
    f.plan = tm->plan, f.nplan = tm->nplan;
    f.use_first = first, f.use_at = at, f.nuse_first = tm->n;
    f.leaves = tm->leaves;
    f.dep = tm->dep;
    f.used = 0;
    f.next = tm->ph[slot].next;
    gm__phase_free(&tm->ph[slot]);
    tm->ph[slot] = f;
    if (!tm->named && tm->closed >= 0) tm->ph[tm->closed].next = slot;
    tm->closed = slot;
    /* the next step: this phase again when named, else the one that followed it last time */
    k = !tm->named && f.next >= 0 && tm->ph[f.next].nplan ? f.next : slot;
    gm__phase_activate(tm, k);
    gm__log(ctx, GM_LOG_DEBUG, "tier: the step's %u acquires are the plan of phase %d; phase %d is expected next",
            tm->nrec, slot, k);
    tm->rec = NULL;
    tm->nrec = tm->caprec = 0;
    tm->pos = 0;
    tm->last_step_evictions = tm->st.evictions - tm->step_evictions;
    tm->step_evictions = tm->st.evictions;
    if (tm->policy == GM_EVICT_LEARNED) gm__learn_ahead(ctx, tm, NULL); /* its first tensors come in now */
    return GM_OK;
}

GPUMEM_API gm_result gm_tier_step(gm_context* ctx) {
    gm__tier* tm;
    gm_result r;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    tm = gm__tier_open(ctx);
    if (!tm) return GM_ERR_HOST_OUT_OF_MEMORY;
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    r = gm__phase_close(ctx, tm);
    gm__rmu_unlock(&tm->mu);
    return r;
}

GPUMEM_API gm_result gm_tier_set_phase(gm_context* ctx, int phase) {
    gm__tier* tm;
    gm_result r = GM_OK;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (phase < 0 || phase >= GM_TIER_PHASES)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "tier: phase %d is not in 0..%d", phase, GM_TIER_PHASES - 1);
    tm = gm__tier_open(ctx);
    if (!tm) return GM_ERR_HOST_OUT_OF_MEMORY;
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    if (!tm->named) { /* plans recognised before the first name mean nothing now: what was recorded is phase 0's */
        int k;
        for (k = 0; k < GM_TIER_PHASES; k++) gm__phase_free(&tm->ph[k]);
        tm->named = 1;
        tm->rec_phase = 0;
        tm->closed = -1;
        gm__phase_activate(tm, 0);
    }
    tm->ph[tm->rec_phase].next = phase;
    tm->vh_ok = tm->hh_ok = 0; /* the next step's uses change */
    if (tm->nrec) r = gm__phase_close(ctx, tm); /* the step of the phase left ends here */
    if (r == GM_OK) {
        tm->rec_phase = phase;
        gm__phase_activate(tm, phase);
        tm->pos = 0;
        if (tm->policy == GM_EVICT_LEARNED) gm__learn_ahead(ctx, tm, NULL); /* its first tensors come in now */
    }
    gm__rmu_unlock(&tm->mu);
    return r;
}

/* Free tensor slots, a min-heap: create takes the lowest, so tensors made
   again each step (activations, gradients) get the same slots whatever
   order they were destroyed in, and a learned plan, which names tensors
   by slot, still describes them. */
static void gm__tslot_put(gm__tier* tm, uint32_t i) {
    uint32_t k = tm->nfree++;
    while (k && tm->freeidx[(k - 1) / 2] > i) {
        tm->freeidx[k] = tm->freeidx[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    tm->freeidx[k] = i;
}

static uint32_t gm__tslot_take(gm__tier* tm) {
    uint32_t top = tm->freeidx[0], last = tm->freeidx[--tm->nfree], k = 0;
    for (;;) {
        uint32_t c = 2 * k + 1;
        if (c >= tm->nfree) break;
        if (c + 1 < tm->nfree && tm->freeidx[c + 1] < tm->freeidx[c]) c++;
        if (tm->freeidx[c] >= last) break;
        tm->freeidx[k] = tm->freeidx[c];
        k = c;
    }
    if (tm->nfree) tm->freeidx[k] = last;
    return top;
}

GPUMEM_API gm_result gm_tensor_create(gm_context* ctx, gm_tensor* out, size_t bytes) {
    gm__tier* tm;
    gm__tensor* x;
    uint32_t i;
    gm_result r;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!out) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_tensor_create: no handle to write");
    out->id = out->ctx_id = 0;
    if (bytes > GM__MAX_REQUEST) return GM__MISUSE(ctx, GM_ERR_OUT_OF_MEMORY, "tier: %zu bytes is no tensor", bytes);
    if (!bytes) bytes = 1; /* a tensor occupies something in some tier */
    tm = gm__tier_open(ctx);
    if (!tm) return GM_ERR_HOST_OUT_OF_MEMORY;
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    if (tm->nfree) {
        i = gm__tslot_take(tm);
    } else {
        if (tm->n == tm->cap) {
            /* a handle's 20 bits hold index + 1: at most 0xfffff tensors */
            uint32_t cap = !tm->cap ? 256 : tm->cap > 0xfffffu / 2 ? 0xfffffu : tm->cap * 2;
            gm__tensor* t = cap > tm->cap ? (gm__tensor*)gm__grow_array(tm->t, tm->cap * sizeof *t, cap * sizeof *t) : NULL;
            uint32_t* f = t ? (uint32_t*)gm__grow_array(tm->freeidx, tm->cap * sizeof *f, cap * sizeof *f) : NULL;
            if (t) tm->t = t;
            if (!f) {
                gm__rmu_unlock(&tm->mu);
                return GM_ERR_HOST_OUT_OF_MEMORY;
            }
            tm->freeidx = f;
            tm->cap = cap;
        }
        i = tm->n++;
        tm->t[i].gen = 0;
        tm->t[i].hv = 0;
        tm->t[i].hcq = 0;
    }
    x = &tm->t[i];
    {
        uint32_t gen = (uint32_t)x->gen + 1, hv = x->hv + 1; /* the slot's heap entries stay stale */
        unsigned hcq = x->hcq; /* and its place on tm->hcq */
        memset(x, 0, sizeof *x);
        x->gen = gen & 0xfffu; /* at most 0xfff: a slot retires there (destroy) */
        x->hv = hv;
        x->hcq = hcq & 1u;
    }
    x->bytes = bytes;
    x->live = 1;
    x->blank = 1; /* no bytes until written */
    /* room: the device (evicting others if needed), else the host tier,
       else the disk (nothing to write: the contents are undefined), else
       the fallback */
    r = gm__dev_get(ctx, tm, x, 0, GM__ROOM_ANY);
    if (r == GM_OK) {
        x->ready_seq = (uint32_t)gm__tk_mark(ctx, tm, GM__TK_IN); /* users wait for `in` to own the memory */
    } else if (r == GM_ERR_OUT_OF_MEMORY) {
        x->host = gm__host_room(ctx, tm, bytes, x, 0, NULL);
        if (x->host) {
            x->host_valid = 1;
            r = GM_OK;
        } else if (ctx->disk && (x->disk = gm__disk_alloc(ctx, (gm__disk*)ctx->disk, bytes)) != NULL) {
            x->disk_valid = 1;
            r = GM_OK;
        } else {
            r = gm__dev_room(ctx, tm, x, NULL, 0, 1, GM__ROOM_ANY);
        }
    }
    if (r != GM_OK) {
        if (r == GM_ERR_OUT_OF_MEMORY) gm__dev_oom_log(ctx, tm, x);
        x->live = 0;
        gm__tslot_put(tm, i);
        gm__rmu_unlock(&tm->mu);
        return r;
    }
    x->stamp = ++tm->clock;
    if (x->dev) gm__lru_push(tm, x);
    tm->st.tensors++;
    gm__tier_count(tm, x, 1);
    *out = gm__handle(ctx, x->gen, i);
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_tensor_destroy(gm_context* ctx, gm_tensor h) {
    GM__TIER_ENTER(ctx, tm, x, h)
    if (x->acquired) {
        gm__rmu_unlock(&tm->mu);
        return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "tier: destroy of tensor %#x while acquired", h.id);
    }
    gm__dev_settle(ctx, tm, x);
    gm__job_detach(tm, x); /* a disk job under way keeps what it moves */
    gm__tier_count(tm, x, -1);
    gm__lru_del(tm, x);
    if (x->dev) gm__dev_drop(ctx, tm, x);
    if (x->managed) gm__managed_drop(ctx, tm, x);
    gm__host_free(ctx, tm, x);
    gm__disk_drop(ctx, x);
    x->live = 0;
    gm__host_note(tm, x); /* out of the counts */
    if ((x->gen & 0xfffu) != 0xfffu) gm__tslot_put(tm, (uint32_t)(x - tm->t)); /* else retired: no handle repeats */
    tm->st.tensors--;
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

/* An acquire in three steps, shared by one-at-a-time and batches: checked
   (nothing changes), held (x cannot be a victim while room is made), then
   brought in, then finished (the stream ordered after what x waits for).
   A release likewise: checked, then done. */
/* Whether every use of x in the batch overwrites. */
static int gm__batch_ow(const gm_use* u, gm__tensor* const* xs, size_t n, const gm__tensor* x) {
    size_t j;
    for (j = 0; j < n; j++)
        if (xs[j] == x && u[j].access != GM_ACCESS_OVERWRITE) return 0;
    return 1;
}

static gm_result gm__access_check(gm_context* ctx, gm_tensor h, gm_access a) {
    if ((int)a < 0 || a > GM_ACCESS_READ_LAST)
        return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "tier: access %d of tensor %#x is none of gm_access", (int)a, h.id);
    return GM_OK;
}

static gm_result gm__acq_check(gm_context* ctx, const gm__tensor* x, gm_tensor h, gm_stream s, gm_access a) {
    if (gm__access_check(ctx, h, a) != GM_OK) return GM_ERR_INVALID_ARGUMENT;
    if (x->acquired && x->u.stream != s)
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "tier: tensor %#x is acquired on another stream", h.id);
    if (!ctx->be->stream_valid(ctx, s)) /* a nested acquire too: the stream may have gone since the first */
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "tier: unknown or destroyed stream %p", (void*)s);
    if (x->lost && a != GM_ACCESS_OVERWRITE) {
        gm__log(ctx, GM_LOG_ERROR, "tier: tensor %#x lost its bytes in a swap that failed twice; only an acquire "
                "that overwrites it (GM_ACCESS_OVERWRITE) is served", h.id);
        return GM_ERR_IO;
    }
    return GM_OK;
}

static void gm__acq_hold(gm_context* ctx, gm__tier* tm, gm__tensor* x) {
    gm__dev_settle(ctx, tm, x);
    if (!x->acquired++) x->use_wr = x->use_ow = 0, x->use_last = 1; /* the first of a nest */
    gm__lru_del(tm, x);
}

static void gm__acq_unhold(gm__tier* tm, gm__tensor* x) {
    x->acquired--;
    gm__host_note(tm, x); /* it may be given up again */
    if (x->dev && !x->acquired) gm__lru_push(tm, x);
}

static gm_result gm__acq_bring(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, gm_access a) {
    if (x->managed) { /* unified memory: ask for it on the device, ordered on s */
        tm->st.bytes_to_device += (int64_t)x->bytes;
        (void)ctx->be->managed_prefetch(ctx, x->managed, x->bytes, 1, s);
    } else if (x->dev && x->prefetched == 2 && a != GM_ACCESS_OVERWRITE) { /* room only: the bytes are wanted */
        gm__room_drop(ctx, tm, x);
    } else if (x->dev && x->prefetched) {
        tm->st.prefetch_hits++;
        x->prefetched = 0;
    }
    if (!x->dev && !x->managed) {
        tm->st.prefetch_misses++;
        return gm__bring_in(ctx, tm, x, s, 0, a == GM_ACCESS_OVERWRITE);
    }
    return GM_OK;
}

/* s waits, on the device, for the copy in (or for `in` to own the memory), for a copy out that may
   still read what the caller will write, and for the last release on another stream. */
static void* gm__acq_finish(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, gm_access a) {
    gm__tk_order_at(ctx, tm, GM__TK_IN, x->ready_seq, s);
    if (x->dev) gm__tk_order_at(ctx, tm, GM__TK_OUT, x->out_seq, s);
    gm__tk_order_at(ctx, tm, x->done_tk, x->done_seq, s);
    if (a != GM_ACCESS_READ_LAST) x->use_last = 0;
    if (a != GM_ACCESS_READ && a != GM_ACCESS_READ_LAST) { /* may be written from now: the room below held no bytes, and goes */
        if (x->blank && (x->host_valid || x->disk_valid)) {
            gm__tier_count(tm, x, -1);
            gm__host_free(ctx, tm, x);
            gm__disk_drop(ctx, x);
            gm__tier_count(tm, x, 1);
        }
        x->use_wr = 1;
        x->blank = 0;
    }
    if (a == GM_ACCESS_OVERWRITE) x->use_ow = 1, x->lost = 0; /* its bytes are new */
    x->u.stream = s;
    x->prefetched = 0;
    x->stamp = ++tm->clock;
    return x->dev ? x->dev : x->managed;
}

static gm_result gm__rel_check(gm_context* ctx, const gm__tensor* x, gm_tensor h, gm_stream s) {
    if (!x->acquired) return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "tier: release of tensor %#x, which is not acquired", h.id);
    if (x->u.stream != s) return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "tier: tensor %#x is released on another stream", h.id);
    return GM_OK;
}

static void gm__rel_do(gm_context* ctx, gm__tier* tm, gm__tensor* x, gm_stream s, int written) {
    uint32_t ti;
    int gone = 0;
    int discard = written == GM_DISCARD || (written == GM_AS_ACQUIRED && x->use_last);
    written = written == GM_AS_ACQUIRED ? x->use_wr : written != 0;
    written |= x->use_ow; /* an overwrite's bytes are new whatever the caller says */
    if (discard) written = 1; /* the copies below go, as for a write; then it holds no bytes */
    if (GM__LD(ctx->ss_destroyed)) {
        pthread_mutex_lock(&ctx->mu);
        gone = gm__ss_gone(ctx, s);
        pthread_mutex_unlock(&ctx->mu);
    }
    if (gone) { /* destroyed while the tensor was acquired on it: its work was waited for as it was destroyed,
                   and no mark can be made there; the tensor is released all the same, or it would stay
                   acquired for good */
        gm__log(ctx, GM_LOG_WARN, "tier: tensor %#x is released on stream %p, destroyed while it was acquired there",
                gm__handle_id(tm, x), (void*)s);
        ti = 0, x->done_seq = 0;
    } else if (gm__tk_of(ctx, tm, s, &ti) != GM_OK) { /* no mark can be kept: the stream is waited for instead */
        ctx->be->stream_sync(ctx, s);
        ti = 0, x->done_seq = 0;
    }
    if (written) {
        x->blank = 0;
        gm__job_detach(tm, x); /* a write to disk under way is stale: it keeps what it moves */
    }
    if (written && (x->host_valid || x->disk_valid)) { /* copies below are stale: their space goes back */
        gm__tier_count(tm, x, -1);
        gm__host_free(ctx, tm, x); /* kept until the copies in and out of it completed */
        gm__disk_drop(ctx, x); /* no I/O outlives the call that made it */
        gm__tier_count(tm, x, 1);
    }
    if (ti) { /* the end of this use, for whoever comes next */
        x->done_tk = ti;
        x->done_seq = (uint32_t)gm__tk_mark(ctx, tm, ti);
    }
    if (discard) x->blank = 1, x->lost = 0; /* it holds no bytes now */
    x->stamp = ++tm->clock;
    if (--x->acquired == 0 && x->dev) {
        gm__lru_push(tm, x);
        /* learned order with a disk tier: a written tensor Belady's order sends to disk before its next
           use starts its write now (it begins once this use completed), so that several such writes
           overlap the compute, and its room is free of any wait when it is needed */
        if (written && !discard && ctx->disk && GM__PLANNED(tm) && !x->pinned && gm__leaves(tm, (uint32_t)(x - tm->t)))
            (void)gm__dev_behind(ctx, tm, x);
    }
    gm__host_note(tm, x); /* it may be given up again, with a new stamp */
}

GPUMEM_API gm_result gm_tensor_acquire_as(gm_context* ctx, gm_tensor h, gm_stream s, gm_access a, void** ptr) {
    uint64_t t0 = gm__now_ns();
    gm_result r;
    GM__TIER_ENTER(ctx, tm, x, h)
    r = ptr ? gm__acq_check(ctx, x, h, s, a)
            : GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_tensor_acquire: no pointer to write for tensor %#x", h.id);
    if (r == GM_OK) {
        gm__acq_hold(ctx, tm, x); /* no eviction of x while room is made for it */
        r = gm__acq_bring(ctx, tm, x, s, a);
        if (r == GM_ERR_OUT_OF_MEMORY) gm__dev_oom_log(ctx, tm, x);
        if (r != GM_OK) gm__acq_unhold(tm, x);
    }
    if (r == GM_OK) {
        *ptr = gm__acq_finish(ctx, tm, x, s, a);
        if (tm->policy == GM_EVICT_LEARNED) {
            gm__learn_note(ctx, tm, x, a == GM_ACCESS_OVERWRITE);
            gm__learn_ahead(ctx, tm, s);
        }
        tm->st.acquire_ns += (int64_t)(gm__now_ns() - t0);
    }
    gm__rmu_unlock(&tm->mu);
    return r;
}

GPUMEM_API gm_result gm_tensor_acquire(gm_context* ctx, gm_tensor h, gm_stream s, void** ptr) {
    return gm_tensor_acquire_as(ctx, h, s, GM_ACCESS_READ_WRITE, ptr);
}

GPUMEM_API gm_result gm_tensor_release(gm_context* ctx, gm_tensor h, gm_stream s, int written) {
    gm_result r;
    GM__TIER_ENTER(ctx, tm, x, h)
    r = gm__rel_check(ctx, x, h, s);
    if (r == GM_OK) gm__rel_do(ctx, tm, x, s, written);
    gm__rmu_unlock(&tm->mu);
    return r;
}

/* The batch's tensors, looked up and checked, or the first misuse. */
static int gm__ptr_cmp(const void* a, const void* b) {
    uintptr_t x = (uintptr_t)*(gm__tensor* const*)a, y = (uintptr_t)*(gm__tensor* const*)b;
    return x < y ? -1 : x > y;
}

/* xs: room for 2n (the second half is scratch). */
static gm_result gm__batch_get(gm_context* ctx, gm__tier* tm, const gm_use* u, size_t n, gm_stream s, int acquire,
                               gm__tensor** xs) {
    size_t i;
    for (i = 0; i < n; i++) {
        gm_result r;
        gm__tensor* x = gm__tensor_get(ctx, u[i].tensor);
        if (!x)
            return GM__MISUSE(ctx, GM_ERR_STALE_HANDLE, u[i].tensor.ctx_id != ctx->serial
                              ? "tier: tensor %#x is a handle of another context" : "tier: tensor %#x is not live",
                              u[i].tensor.id);
        if (acquire) r = gm__acq_check(ctx, x, u[i].tensor, s, u[i].access);
        else if ((r = gm__access_check(ctx, u[i].tensor, u[i].access)) == GM_OK) r = gm__rel_check(ctx, x, u[i].tensor, s);
        if (r != GM_OK) return r;
        xs[i] = x;
    }
    if (!acquire) { /* a tensor released k times in the batch must be acquired k times: count runs */
        gm__tensor** sorted = xs + n;
        memcpy(sorted, xs, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, gm__ptr_cmp);
        for (i = 0; i < n;) {
            size_t k = 1;
            while (i + k < n && sorted[i + k] == sorted[i]) k++;
            if (k > sorted[i]->acquired)
                return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "tier: the batch releases tensor %#x %zu times; it is acquired %u",
                                  gm__handle_id(tm, sorted[i]), k, sorted[i]->acquired);
            i += k;
        }
    }
    return GM_OK;
}

static gm__tensor** gm__batch_scratch(gm__tier* tm, size_t n) {
    if (n > tm->nbatchcap) {
        gm__tensor** b = (gm__tensor**)gm__grow_array(tm->batch, tm->nbatchcap * sizeof *b, n * 2 * sizeof *b);
        if (!b) return NULL;
        tm->batch = b;
        tm->nbatchcap = n * 2;
    }
    return tm->batch;
}

/* The batch did not fit beside its own members already on the device
   (they hold places its other tensors cannot use, and they cannot be
   victims while it is made room for): those only this batch holds leave
   too, to the copies below (kept, or made), so that the whole batch comes
   in again, largest first, into a device holding only what others hold.
   Classic segments: the free ones go back to the device, and the batch
   takes new ones of each tensor's own size (tm->exact), packed, since
   segments cut for other sizes hold room the budget counts and the batch
   may not use. Only on the path that would fail. Returns how many left. */
static size_t gm__batch_clear(gm_context* ctx, gm__tier* tm, gm__tensor* const* xs, size_t n) {
    size_t i, j, c, left = 0;
    for (i = 0; i < n; i++) {
        gm__tensor* x = xs[i];
        unsigned held;
        if (!x->dev || x->pinned) continue;
        for (c = 0, j = 0; j < n; j++) c += xs[j] == x;
        if (x->acquired != c) continue; /* held outside this batch too: it stays */
        held = x->acquired;
        x->acquired = 0;
        x->prefetched = 0;
        if (gm__evict_one(ctx, tm, x) == GM_OK) left++;
        x->acquired = held;
        gm__lru_del(tm, x);
    }
    if (!ctx->va_gran) {
        pthread_mutex_lock(&ctx->mu);
        gm__release(ctx, 1, 0);
        gm__unlock(ctx);
    }
    return left;
}

GPUMEM_API gm_result gm_tensor_acquire_many(gm_context* ctx, gm_use* u, size_t n, gm_stream s) {
    uint64_t t0 = gm__now_ns();
    gm__tier* tm;
    gm__tensor **xs, **order;
    gm_result r = GM_OK;
    size_t i, j, nb = 0;
    int cleared;
    if (GM__BAD_CTX(ctx) || (n && !u)) return GM_ERR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++) u[i].ptr = NULL;
    if (!n) return GM_OK;
    tm = gm__tier_of(ctx);
    if (!tm) return GM__MISUSE(ctx, GM_ERR_STALE_HANDLE, "tier: no tensor was ever made");
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    xs = gm__batch_scratch(tm, 2 * n);
    if (!xs) r = GM_ERR_HOST_OUT_OF_MEMORY;
    if (r == GM_OK) r = gm__batch_get(ctx, tm, u, n, s, 1, xs);
    if (r != GM_OK) {
        gm__rmu_unlock(&tm->mu);
        return r;
    }
    order = xs + n;
    for (i = 0; i < n; i++) gm__acq_hold(ctx, tm, xs[i]); /* every one held first: none is a victim of another's room */
    for (i = 0; i < n; i++) {
        gm__tensor* x = xs[i];
        if (x->dev && x->prefetched == 2 && !gm__batch_ow(u, xs, n, x)) gm__room_drop(ctx, tm, x); /* bytes wanted */
        if (x->dev && x->prefetched) tm->st.prefetch_hits++;
        if (!x->dev && !x->managed) order[nb++] = x;
    }
    for (cleared = 0;; cleared = 1) {
        for (i = 1; i < nb; i++) { /* largest first (insertion sort: a layer's handful) */
            gm__tensor* y = order[i];
            for (j = i; j > 0 && order[j - 1]->bytes < y->bytes; j--) order[j] = order[j - 1];
            order[j] = y;
        }
        for (i = 0; i < nb && r == GM_OK; i++) {
            gm__tensor* x = order[i];
            int ow = gm__batch_ow(u, xs, n, x); /* without its bytes only if every use of it overwrites */
            if (x->dev || x->managed) continue; /* twice in the batch */
            if (!cleared) tm->st.prefetch_misses++;
            r = gm__bring_in(ctx, tm, x, s, 0, ow);
            if (r == GM_OK && ow) gm__room_mark(tm, x);
        }
        if (r != GM_ERR_OUT_OF_MEMORY || cleared || !gm__batch_clear(ctx, tm, xs, n)) break;
        tm->exact = !ctx->va_gran;
        gm__log(ctx, GM_LOG_DEBUG, "tier: a batch of %zu tensors did not fit beside its members on the device; "
                "they left, and the batch comes in again", n);
        r = GM_OK;
        for (nb = 0, i = 0; i < n; i++) /* every one not on the device now, each once */
            if (!xs[i]->dev && !xs[i]->managed) {
                for (j = 0; j < nb && order[j] != xs[i]; j++) {}
                if (j == nb) order[nb++] = xs[i];
            }
    }
    tm->exact = 0;
    if (r == GM_ERR_OUT_OF_MEMORY) gm__dev_oom_log(ctx, tm, order[i - 1]);
    if (r != GM_OK) { /* none is acquired; what came in stays as a prefetch, unless it holds no bytes */
        for (i = 0; i < nb; i++)
            if (order[i]->dev && order[i]->prefetched == 2) {
                order[i]->prefetched = 0;
                gm__room_drop(ctx, tm, order[i]);
            }
        for (i = n; i-- > 0;) gm__acq_unhold(tm, xs[i]);
        gm__rmu_unlock(&tm->mu);
        return r;
    }
    for (i = 0; i < n; i++) {
        gm__tensor* x = xs[i];
        if (x->managed) { /* unified memory: ask for it on the device, ordered on s */
            tm->st.bytes_to_device += (int64_t)x->bytes;
            (void)ctx->be->managed_prefetch(ctx, x->managed, x->bytes, 1, s);
        }
        u[i].ptr = gm__acq_finish(ctx, tm, x, s, u[i].access);
        if (tm->policy == GM_EVICT_LEARNED) gm__learn_note(ctx, tm, x, u[i].access == GM_ACCESS_OVERWRITE);
    }
    if (tm->policy == GM_EVICT_LEARNED) gm__learn_ahead(ctx, tm, s);
    tm->st.acquire_ns += (int64_t)(gm__now_ns() - t0);
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_tensor_release_many(gm_context* ctx, const gm_use* u, size_t n, gm_stream s) {
    gm__tier* tm;
    gm__tensor** xs;
    gm_result r = GM_OK;
    size_t i;
    if (GM__BAD_CTX(ctx) || (n && !u)) return GM_ERR_INVALID_ARGUMENT;
    if (!n) return GM_OK;
    tm = gm__tier_of(ctx);
    if (!tm) return GM__MISUSE(ctx, GM_ERR_STALE_HANDLE, "tier: no tensor was ever made");
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    xs = gm__batch_scratch(tm, 2 * n);
    if (!xs) r = GM_ERR_HOST_OUT_OF_MEMORY;
    if (r == GM_OK) r = gm__batch_get(ctx, tm, u, n, s, 0, xs);
    if (r == GM_OK)
        for (i = n; i-- > 0;)
            gm__rel_do(ctx, tm, xs[i], s, u[i].access == GM_ACCESS_READ_LAST ? GM_DISCARD : u[i].access != GM_ACCESS_READ);
    gm__rmu_unlock(&tm->mu);
    return r;
}

GPUMEM_API size_t gm_tensor_size(gm_context* ctx, gm_tensor h) {
    gm__tier* tm;
    gm__tensor* x;
    size_t n = 0;
    if (GM__BAD_CTX(ctx) || !(tm = gm__tier_of(ctx))) return 0;
    gm__rmu_lock(&tm->mu);
    if ((x = gm__tensor_get(ctx, h)) != NULL) n = x->bytes;
    gm__rmu_unlock(&tm->mu);
    return n;
}

GPUMEM_API gm_result gm_tensor_prefetch(gm_context* ctx, gm_tensor h, gm_stream s) {
    gm_result r = GM_OK;
    GM__TIER_ENTER(ctx, tm, x, h)
    if (!ctx->be->stream_valid(ctx, s)) {
        gm__rmu_unlock(&tm->mu);
        return GM__MISUSE(ctx, GM_ERR_INVALID_STREAM, "tier: unknown stream %p", (void*)s);
    }
    if (!x->dev && !x->managed) {
        x->acquired++; /* not a victim of the room it needs */
        r = gm__bring_in(ctx, tm, x, s, 2, 0); /* 2: no wait for the disk at all */
        if (r == GM_NOT_READY) r = GM_OK; /* a write to disk started, or is under way: the room comes once it ends */
        x->acquired--;
        gm__host_note(tm, x); /* it may be given up again */
        if (r == GM_OK && x->dev) {
            x->prefetched = 1;
            if (!x->acquired) gm__lru_push(tm, x);
        }
    }
    gm__rmu_unlock(&tm->mu);
    return r;
}

GPUMEM_API gm_result gm_tensor_evict(gm_context* ctx, gm_tensor h) {
    gm_result r = GM_OK;
    GM__TIER_ENTER(ctx, tm, x, h)
    if (x->acquired) {
        gm__rmu_unlock(&tm->mu);
        return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "tier: evict of tensor %#x while acquired", h.id);
    }
    if (x->dev) r = gm__evict_one(ctx, tm, x);
    gm__rmu_unlock(&tm->mu);
    return r;
}

GPUMEM_API gm_result gm_tensor_evict_to(gm_context* ctx, gm_tensor h, gm_tier tier) {
    gm_result r = GM_OK;
    if (tier == GM_TIER_HOST) return gm_tensor_evict(ctx, h);
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (tier != GM_TIER_DISK) return GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "tier: cannot evict to tier %d", (int)tier);
    {
        GM__TIER_ENTER(ctx, tm, x, h)
        if (x->acquired) r = GM__MISUSE(ctx, GM_ERR_BAD_STATE, "tier: evict of tensor %#x while acquired", h.id);
        else if (!ctx->disk) r = GM__MISUSE(ctx, GM_ERR_UNSUPPORTED, "tier: no disk tier (set disk_dir)");
        else {
            gm__dev_settle(ctx, tm, x);
            r = gm__to_disk(ctx, tm, x, 1);
        }
        if (r == GM_OK && x->dev) {
            gm__tier_count(tm, x, -1);
            gm__dev_drop(ctx, tm, x);
            gm__lru_del(tm, x);
            gm__tier_count(tm, x, 1);
            tm->st.evictions++;
        }
        if (r == GM_OK && x->host_valid) {
            gm__tier_count(tm, x, -1);
            gm__host_free(ctx, tm, x);
            gm__tier_count(tm, x, 1);
        }
        gm__rmu_unlock(&tm->mu);
    }
    return r;
}

GPUMEM_API gm_result gm_tensor_set_priority(gm_context* ctx, gm_tensor h, int priority, int pinned) {
    GM__TIER_ENTER(ctx, tm, x, h)
    if (gm__listed(tm, x) && x->priority != priority) {
        gm__prio_add(tm, x->priority, -1);
        gm__prio_add(tm, priority, 1);
    }
    x->priority = priority;
    x->pinned = pinned != 0;
    if (gm__listed(tm, x)) { /* its heap entry, as it is now */
        x->hv++;
        gm__vh_push(tm, x);
    }
    gm__host_note(tm, x); /* and its host copy's */
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_tensor_where(gm_context* ctx, gm_tensor h, gm_tier* tier) {
    GM__TIER_ENTER(ctx, tm, x, h)
    if (tier)
        *tier = x->dev ? GM_TIER_DEVICE
              : x->managed ? GM_TIER_MANAGED
              : x->host_valid ? GM_TIER_HOST
              : x->disk_valid ? GM_TIER_DISK : GM_TIER_NONE;
    gm__rmu_unlock(&tm->mu);
    return tier ? GM_OK : GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_tensor_where: no tier to write");
}

GPUMEM_API gm_result gm_tensor_get_info(gm_context* ctx, gm_tensor h, gm_tensor_info* out) {
    GM__TIER_ENTER(ctx, tm, x, h)
    if (out) {
        memset(out, 0, sizeof *out);
        out->bytes = x->bytes;
        out->tier = x->dev ? GM_TIER_DEVICE
                  : x->managed ? GM_TIER_MANAGED
                  : x->host_valid ? GM_TIER_HOST
                  : x->disk_valid ? GM_TIER_DISK : GM_TIER_NONE;
        out->priority = x->priority;
        out->pinned = x->pinned;
        out->acquired = x->acquired;
        out->written = !x->blank;
        out->on_host = x->host_valid;
        out->on_disk = x->disk_valid;
        out->lost = x->lost;
    }
    gm__rmu_unlock(&tm->mu);
    return out ? GM_OK : GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_tensor_get_info: no record to write");
}

GPUMEM_API gm_result gm_tier_reset_peaks(gm_context* ctx) {
    gm__tier* tm;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    if (!(tm = gm__tier_of(ctx))) return GM_OK;
    gm__rmu_lock(&tm->mu);
    tm->st.peak_device_bytes = tm->st.device_bytes;
    tm->st.peak_host_bytes = tm->st.host_bytes;
    tm->st.peak_disk_bytes = tm->st.disk_bytes;
    tm->st.peak_managed_bytes = tm->st.managed_bytes;
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

GPUMEM_API gm_result gm_tier_get_stats(gm_context* ctx, gm_tier_stats* out) {
    gm__tier* tm;
    if (GM__BAD_CTX(ctx) || !out) return GM_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    tm = gm__tier_of(ctx);
    if (!tm) return GM_OK;
    gm__rmu_lock(&tm->mu);
    gm__io_reap(ctx, tm);
    *out = tm->st;
    out->host_reserved = (int64_t)tm->host_reserved;
    out->plan_cache_bytes = (int64_t)tm->ph[tm->cur].tune.cap;
    if (ctx->disk) {
        gm__disk* dk = (gm__disk*)ctx->disk;
        out->disk_reserved = (int64_t)dk->reserved;
        pthread_mutex_lock(&dk->mu);
        out->disk_write_ns = dk->ns_w;
        out->disk_read_ns = dk->ns_r;
        out->disk_ios = dk->ios;
        out->disk_depth_sum = dk->depth_sum;
        out->disk_busy_ns = dk->busy_ns;
        out->disk_depth_ns = dk->depth_ns;
        out->disk_backlog_ns = dk->backlog_ns;
        out->disk_backlog_depth_ns = dk->backlog_depth_ns;
        out->disk_errors = dk->errors;
        out->checksum_failures = dk->crc_fail;
        pthread_mutex_unlock(&dk->mu);
    }
    gm__rmu_unlock(&tm->mu);
    return GM_OK;
}

/* The tier's invariants, for gm_check (called without ctx->mu held):
   "tier" for the tensors, their lists and figures, "host pool" and "spill
   file" for the arenas below. */
static const char* gm__job_name(int kind) {
    return kind == GM__J_WRITE_MEM ? "a write from the host copy"
           : kind == GM__J_READ_MEM ? "a read into the host copy"
           : kind == GM__J_WRITE_DEV ? "a write from the device copy"
                                     : "a read into the device copy";
}

/* A host copy's extents (a tensor's, or a disk job's it was left to):
   each a block in use of the host pool, every one but the last a multiple
   of host_split, together at least `bytes`; the walk ends at a cycle.
   Returns the bytes they take from the pool. */
static size_t gm__check_host_chain(gm__ck* ck, const gm__tier* tm, const gm__block* e, const char* what, uint64_t id,
                                   size_t bytes) {
    size_t held = 0, logical = 0, ne = 0;
    for (; e && ne++ <= tm->host_reserved / tm->host.align; e = e->r) {
        held += e->size;
        logical += e->requested;
        if (e->state != GM__USED || e->requested > e->size || !gm__arena_seg_of(&tm->host, e->addr))
            gm__broken(ck, "%s %#llx: host copy extent %zu (%zu of %zu bytes) is not a block in use of the host pool",
                       what, (unsigned long long)id, ne - 1, (size_t)e->requested, e->size);
        if (e->r && (!tm->host_split || e->requested % tm->host_split))
            gm__broken(ck, "%s %#llx: host copy extent %zu holds %zu bytes, not a multiple of %zu", what,
                       (unsigned long long)id, ne - 1, (size_t)e->requested, tm->host_split);
    }
    if (e)
        gm__broken(ck, "%s %#llx: host copy of more extents than the pool has pages (a cycle)", what,
                   (unsigned long long)id);
    if (logical < bytes)
        gm__broken(ck, "%s %#llx: host copy holds %zu bytes in %zu extents for %zu", what, (unsigned long long)id,
                   logical, ne, bytes);
    return held;
}

static void gm__tier_check(gm_context* ctx, gm__ck* ck) {
    gm__tier* tm = gm__tier_of(ctx);
    gm__tensor* x;
    uint32_t i, last = 0;
    int64_t dev = 0, host = 0, man = 0, live = 0, disk_n = 0, disk_b = 0, diskb = 0;
    size_t onlru = 0, want_lru = 0;
    if (!tm) return;
    gm__rmu_lock(&tm->mu);
    for (i = tm->lru; i && onlru <= tm->n; last = i, i = x->next) {
        if (i > tm->n) {
            gm__broken(ck, "tier: the LRU list links to tensor index %u, past the %u there are", i - 1, tm->n);
            break;
        }
        x = GM__LRU(tm, i);
        onlru++;
        if (x->prev != last)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) on the LRU list: its back link is broken",
                       gm__handle_id(tm, x), x->bytes);
        else if (!x->live)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) on the LRU list but destroyed", gm__handle_id(tm, x), x->bytes);
        else if (!x->dev)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) on the LRU list but not on the device", gm__handle_id(tm, x),
                       x->bytes);
        else if (x->acquired)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) on the LRU list but acquired", gm__handle_id(tm, x), x->bytes);
    }
    if (!i && last != tm->lru_tail)
        gm__broken(ck, "tier: the LRU list's tail names %u, the walk ends at %u (indices + 1; 0: none)", tm->lru_tail,
                   last);
    { /* the priority levels count the listed tensors: one walk, each found by bisection */
        uint32_t j, m, *have = tm->nprios ? (uint32_t*)gm__calloc(tm->nprios * sizeof *have) : NULL;
        size_t total = 0, unknown = 0;
        for (m = tm->lru; m && have && total + unknown <= tm->n; m = GM__LRU(tm, m)->next) {
            int p = GM__LRU(tm, m)->priority;
            uint32_t lo = 0, hi = tm->nprios;
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (tm->prios[mid].prio < p) lo = mid + 1;
                else hi = mid;
            }
            if (lo < tm->nprios && tm->prios[lo].prio == p) have[lo]++, total++;
            else unknown++;
        }
        for (j = 0; j < tm->nprios && have; j++)
            if (!tm->prios[j].n || have[j] != tm->prios[j].n || (j && tm->prios[j - 1].prio >= tm->prios[j].prio))
                gm__broken(ck, "tier: priority %d counts %u listed tensors, %u are (level %u of %u)", tm->prios[j].prio,
                           tm->prios[j].n, have[j], j, tm->nprios);
        GPUMEM_FREE(have);
        total = 0;
        for (j = 0; j < tm->nprios; j++) total += tm->prios[j].n;
        if (total != onlru || unknown)
            gm__broken(ck, "tier: the priority levels count %zu listed tensors, %zu are on the LRU list", total, onlru);
    }
    if (tm->vh_ok) { /* the learned victims' heap: ordered, one current entry per listed unpinned tensor, with a
                        key no lower than its next use */
        uint32_t j, *seen = (uint32_t*)gm__calloc(((size_t)tm->n + 1) * sizeof *seen);
        for (j = 0; j < tm->nvh; j++) {
            const gm__vent* e = &tm->vh[j];
            if (j && gm__vh_before(e, &tm->vh[(j - 1) / 2]))
                gm__broken(ck, "tier: the learned victims' heap is out of order at entry %u of %u", j, tm->nvh);
            if (e->i >= tm->n) {
                gm__broken(ck, "tier: a learned victims' entry names tensor index %u, past the %u there are", e->i,
                           tm->n);
                continue;
            }
            x = &tm->t[e->i];
            if (!gm__vh_current(tm, e)) continue; /* stale */
            if (seen) seen[e->i]++;
            if (e->key < gm__vh_key(tm, e->i))
                gm__broken(ck, "tier: tensor %#x's learned victims' entry has key %llu, below its next use %llu",
                           gm__handle_id(tm, x), (unsigned long long)e->key, (unsigned long long)gm__vh_key(tm, e->i));
        }
        for (j = tm->lru; seen && j; j = GM__LRU(tm, j)->next) {
            x = GM__LRU(tm, j);
            if (seen[j - 1] != (x->pinned ? 0u : 1u))
                gm__broken(ck, "tier: tensor %#x (listed%s) has %u current learned victims' entries", gm__handle_id(tm, x),
                           x->pinned ? ", pinned" : "", seen[j - 1]);
        }
        GPUMEM_FREE(seen);
    }
    { /* the host copies: their count, the bytes that may go without a write, and the host victims' heaps:
         ordered, and an entry for each tensor that may be given up, in its class's heap, going no later
         than the tensor as it is now */
        uint32_t j, nh = 0;
        size_t soon = 0;
        uint8_t* seen = tm->hh_ok ? (uint8_t*)gm__calloc((size_t)tm->n + 1) : NULL;
        int c;
        for (j = 0; j < tm->n; j++) {
            x = &tm->t[j];
            nh += x->live && x->host_valid;
            if (x->hsoon != (unsigned)gm__hsoon_is(x))
                gm__broken(ck, "tier: tensor %#x's host copy is%s counted among those that may go without a write",
                           gm__handle_id(tm, x), x->hsoon ? "" : " not");
            if (x->hsoon) soon += x->bytes;
        }
        if (nh != tm->nhost) gm__broken(ck, "tier: %u host copies counted, %u there", tm->nhost, nh);
        if (soon != tm->hsoon)
            gm__broken(ck, "tier: %zu bytes of host copies may go without a write, %zu counted", soon, tm->hsoon);
        for (c = 0; c < 3 && tm->hh_ok; c++)
            for (j = 0; j < tm->nhh[c]; j++) {
                const gm__hent* e = &tm->hh[c][j];
                gm__hent now;
                if (j && gm__hh_before(e, &tm->hh[c][(j - 1) / 2]))
                    gm__broken(ck, "tier: host victims' heap %d is out of order at entry %u of %u", c, j, tm->nhh[c]);
                if (e->i >= tm->n) {
                    gm__broken(ck, "tier: a host victims' entry names tensor index %u, past the %u there are", e->i, tm->n);
                    continue;
                }
                x = &tm->t[e->i];
                if (!gm__hh_can(x) || gm__hclass(x) != c) continue; /* stale */
                now = gm__hh_entry(tm, x);
                if (seen && !gm__hh_before(&now, e)) seen[e->i] = 1; /* goes no later than x now */
            }
        for (j = 0; seen && j < tm->n; j++)
            if (gm__hh_can(&tm->t[j]) && !seen[j] && tm->hh_planned == GM__PLANNED(tm))
                gm__broken(ck, "tier: tensor %#x's host copy (class %d) has no host victims' entry going early enough",
                           gm__handle_id(tm, &tm->t[j]), gm__hclass(&tm->t[j]));
        GPUMEM_FREE(seen);
    }
    for (i = 0; i < tm->ntk; i++) {
        const gm__track* k = &tm->tk[i];
        if (k->n > k->cap || k->n > k->seq || (k->cap && k->head >= k->cap))
            gm__broken(ck, "tier: the marks of track %u are out of order (%u outstanding, ring of %u from %u, last %llu)",
                       i, k->n, k->cap, k->head, (unsigned long long)k->seq);
    }
    for (i = 0; i < tm->n; i++) {
        uint32_t id;
        x = &tm->t[i];
        if (!x->live) continue;
        id = gm__handle_id(tm, x);
        live++;
        if (!x->dev && !x->managed && !x->host_valid && !x->disk_valid)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) is in no tier", id, x->bytes);
        if (x->host_valid && !x->host)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) has a valid host copy and no host block", id, x->bytes);
        else if (x->host && !x->host_valid && !(x->job && x->job->kind == GM__J_READ_MEM))
            gm__broken(ck, "tier: tensor %#x (%zu bytes) holds a host block with no copy in it", id, x->bytes);
        if (x->job && (x->job->ti != i || x->job->gen != x->gen || !x->disk ||
                       (x->job->kind == GM__J_WRITE_MEM ? !x->host_valid || x->disk_valid
                        : x->job->kind == GM__J_WRITE_DEV ? !x->dev || x->disk_valid || x->dev != x->job->dev
                        : x->job->kind == GM__J_READ_DEV  ? !x->dev || x->host || !x->disk_valid || x->dev != x->job->dev ||
                                                               x->blank || x->acquired
                                                          : !x->host || x->host_valid || !x->disk_valid)))
            gm__broken(ck, "tier: tensor %#x (%zu bytes) and its disk job (%s) disagree", id, x->bytes,
                       gm__job_name(x->job->kind));
        if (x->done_tk >= tm->ntk || !gm__tk_made(tm, x->done_tk, x->done_seq) ||
            !gm__tk_made(tm, GM__TK_IN, x->ready_seq) || !gm__tk_made(tm, GM__TK_IN, x->hr_seq) ||
            !gm__tk_made(tm, GM__TK_OUT, x->out_seq))
            gm__broken(ck, "tier: tensor %#x (%zu bytes) waits for a mark never made", id, x->bytes);
        if (x->disk_valid != (x->disk != NULL) && !(x->job && x->job->kind != GM__J_READ_MEM))
            gm__broken(ck, "tier: tensor %#x (%zu bytes) has %s", id, x->bytes,
                       x->disk ? "a disk extent with no copy in it" : "a valid disk copy and no extent");
        else if (x->blank && x->job)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) was never written and has a disk job", id, x->bytes);
        else if (x->disk && x->disk->size < x->bytes)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) has a disk extent of %zu bytes", id, x->bytes, x->disk->size);
        if (x->disk) disk_n++, disk_b += (int64_t)x->disk->size;
        if (x->disk_valid) diskb += (int64_t)x->bytes;
        if (x->acquired && !x->dev && !x->managed)
            gm__broken(ck, "tier: tensor %#x (%zu bytes) is acquired and not on the device", id, x->bytes);
        if (x->prefetched == 2 && (!x->dev || x->blank || (!x->host_valid && !x->disk_valid)))
            gm__broken(ck, "tier: tensor %#x (%zu bytes) has a device copy that is room only, and no copy below "
                       "holds its bytes", id, x->bytes);
        if (x->dev && !x->acquired) want_lru++;
        if (x->dev) dev += (int64_t)x->bytes;
        else if (x->managed) man += (int64_t)x->bytes;
        if (x->host_valid) host += (int64_t)x->bytes;
    }
    { /* each device copy is a block the manager holds for that tensor, and no other block is its */
        size_t held = 0, ndev = 0, k;
        pthread_mutex_lock(&ctx->mu);
        for (i = 0; i < tm->n; i++) {
            const gm__block* b;
            x = &tm->t[i];
            if (!x->live || !x->dev) continue;
            ndev++;
            b = (const gm__block*)gm__map_get(&ctx->map, (uintptr_t)x->dev);
            if (!b || b->owner != GM__OWN_TENSOR || b->tag != gm__handle_id(tm, x) || b->size < x->bytes) {
                const char* what = !b ? "not a block in use" : b->size >= x->bytes ? "a block held by someone else"
                                                                                   : "a smaller block";
                gm__broken(ck, "tier: the device copy of tensor %#x (%zu bytes) at %p is %s", gm__handle_id(tm, x),
                           x->bytes, x->dev, what);
            } else if (ctx->ss[b->seg->key - 1].stream != GM__IN(tm))
                gm__broken(ck, "tier: the device copy of tensor %#x (%zu bytes) is not memory of the manager's stream",
                           gm__handle_id(tm, x), x->bytes);
        }
        for (k = 0; k < ctx->map.cap; k++)
            if (ctx->map.e[k].k && ((const gm__block*)ctx->map.e[k].v)->owner == GM__OWN_TENSOR) held++;
        pthread_mutex_unlock(&ctx->mu);
        if (held != ndev) gm__broken(ck, "tier: %zu device blocks held for tensors, %zu tensors on the device", held, ndev);
    }
    if (onlru != want_lru)
        gm__broken(ck, "tier: %zu tensors on the LRU list, %zu on the device and released", onlru, want_lru);
    { /* the host copies noted for a write behind: each slot once, its bit set; none unnoted that needs it */
        uint32_t r, marked = 0, missed = 0;
        for (i = 0; i < tm->n; i++) marked += tm->t[i].hcq;
        for (r = 0; r < tm->nhcq; r++)
            if (tm->hcq[r] >= tm->n || !tm->t[tm->hcq[r]].hcq) break;
        if (r < tm->nhcq || marked != tm->nhcq)
            gm__broken(ck, "tier: %u host copies noted for a write behind, %u slots marked so", tm->nhcq, marked);
        if (ctx->disk && GM__PLANNED(tm) && tm->leaves && !tm->hc_all)
            for (i = 0; i < tm->n; i++)
                missed += !tm->t[i].hcq && gm__hc_writes(tm, &tm->t[i]);
        if (missed)
            gm__broken(ck, "tier: %u host copies Belady's order sends to disk are not noted for a write behind", missed);
    }
#define GM__TIER_STAT(name, walk, what)                                                                              \
    if ((walk) != tm->st.name)                                                                                       \
        gm__broken(ck, "tier: stat " #name " is %lld, " what " %lld", (long long)tm->st.name, (long long)(walk));
    GM__TIER_STAT(tensors, live, "live tensors are")
    GM__TIER_STAT(device_bytes, dev, "tensors on the device sum to")
    GM__TIER_STAT(host_bytes, host, "valid host copies sum to")
    GM__TIER_STAT(managed_bytes, man, "tensors in unified memory sum to")
    GM__TIER_STAT(disk_bytes, diskb, "valid disk copies sum to")
#undef GM__TIER_STAT
    {
        int64_t un = 0, ub = 0, pn = 0, pb = 0, rb = 0, job_ext_n = 0, job_ext_b = 0;
        size_t segb = 0, held = 0, job_host = 0, si = 0;
        const gm__seg* sg;
        if (ctx->disk) { /* what jobs hold after their tensor let go */
            gm__disk* dk = (gm__disk*)ctx->disk;
            const gm__job* j;
            int pass;
            pthread_mutex_lock(&dk->mu);
            for (pass = 0; pass < 2; pass++)
                for (j = pass ? dk->done : dk->jobs; j; j = j->next) {
                    if (j->ti != UINT32_MAX) continue;
                    if (j->ext) job_ext_n++, job_ext_b += (int64_t)j->ext->size;
                    if (j->hb) job_host += gm__check_host_chain(ck, tm, j->hb, "disk job at", j->off, 0);
                }
            pthread_mutex_unlock(&dk->mu);
        }
        gm__arena_check(ck, &tm->host, "host pool", &un, &ub, &pn, &pb, &rb);
        for (sg = tm->host.segs; sg; sg = sg->next, si++) {
            const gm__block* b;
            size_t nb = 0; /* as the arena's walk: a cycle ends */
            segb += sg->size;
            for (b = sg->first; b && nb++ <= sg->size / tm->host.align; b = b->next)
                if (b->ord[0] > tm->tk[GM__TK_IN].seq || b->ord[1] > tm->tk[GM__TK_OUT].seq)
                    gm__broken(ck, "host pool: block at offset %lld of segment %zu (%#lx) waits for a mark never made",
                               (long long)(b->addr - sg->base), si, (unsigned long)sg->base);
        }
        for (i = 0; i < tm->n; i++) /* each host copy's extents */
            if (tm->t[i].live && tm->t[i].host)
                held += gm__check_host_chain(ck, tm, tm->t[i].host, "tensor", gm__handle_id(tm, &tm->t[i]),
                                             tm->t[i].bytes);
        if ((size_t)ub != tm->host_used + tm->host_jobs)
            gm__broken(ck, "host pool: blocks in use sum to %lld, counted %zu for tensors and %zu for disk jobs",
                       (long long)ub, tm->host_used, tm->host_jobs);
        if (held != tm->host_used) gm__broken(ck, "host pool: tensors hold %zu bytes, %zu counted", held, tm->host_used);
        if (job_host != tm->host_jobs)
            gm__broken(ck, "host pool: disk jobs hold %zu bytes, %zu counted", job_host, tm->host_jobs);
        if (segb != tm->host_reserved)
            gm__broken(ck, "host pool: segments sum to %zu bytes, %zu counted reserved", segb, tm->host_reserved);
        if (tm->host_reserved > ctx->desc.host_budget)
            gm__broken(ck, "host pool: %zu bytes reserved, past host_budget %zu", tm->host_reserved,
                       ctx->desc.host_budget);
        if (tm->host_peak < tm->host_used)
            gm__broken(ck, "host pool: the peak use %zu is below the use %zu", tm->host_peak, tm->host_used);
        if (ctx->disk) { /* the extents in use are exactly the tensors' */
            gm__disk* dk = (gm__disk*)ctx->disk;
            segb = 0;
            un = ub = 0;
            gm__arena_check(ck, &dk->ar, "spill file", &un, &ub, &pn, &pb, &rb);
            for (sg = dk->ar.segs; sg; sg = sg->next) segb += sg->size;
            if (un != disk_n + job_ext_n)
                gm__broken(ck, "spill file: %lld extents in use, tensors hold %lld and disk jobs %lld", (long long)un,
                           (long long)disk_n, (long long)job_ext_n);
            else if (ub != disk_b + job_ext_b)
                gm__broken(ck, "spill file: extents in use sum to %lld bytes, tensors hold %lld and disk jobs %lld",
                           (long long)ub, (long long)disk_b, (long long)job_ext_b);
            if (segb != dk->reserved)
                gm__broken(ck, "spill file: segments sum to %zu bytes, %zu counted reserved", segb, dk->reserved);
            if (dk->reserved > dk->budget)
                gm__broken(ck, "spill file: %zu bytes reserved, past its budget %zu", dk->reserved, dk->budget);
        } else if (disk_n) {
            gm__broken(ck, "tier: %lld tensors hold disk extents, and there is no disk tier", (long long)disk_n);
        }
    }
    gm__rmu_unlock(&tm->mu);
}

/* Shutdown: waits for copies, frees what the tensors hold, the pool, the
   copy streams and the marks' events. Called before the allocator lets its
   segments go. */
static void gm__tier_shutdown(gm_context* ctx) {
    gm__tier* tm = (gm__tier*)ctx->tier;
    uint32_t i;
    gm__seg* s;
    if (!tm) return;
    if (ctx->disk) { /* every disk job ends and is applied first */
        gm__disk* dk = (gm__disk*)ctx->disk;
        gm__rmu_lock(&tm->mu);
        pthread_mutex_lock(&dk->mu);
        while (dk->jobs) pthread_cond_wait(&dk->done_cv, &dk->mu);
        pthread_mutex_unlock(&dk->mu);
        gm__io_reap(ctx, tm);
        gm__rmu_unlock(&tm->mu);
    }
    ctx->be->device_sync(ctx);
    for (i = 0; i < tm->n; i++) {
        gm__tensor* x = &tm->t[i];
        if (x->live && x->dev) gm__free(ctx, x->dev, GM__OWN_TENSOR);
        if (x->live && x->managed) gm__free(ctx, x->managed, GM__OWN_TENSOR); /* the device is idle */
    }
    for (i = 0; i < tm->ntk; i++) {
        gm__track* k = &tm->tk[i];
        while (k->n) {
            ctx->be->event_destroy(ctx, k->ev[k->head]);
            k->head = (k->head + 1) % k->cap;
            k->n--;
        }
        GPUMEM_FREE(k->ev);
    }
    while (tm->nevs) ctx->be->event_destroy(ctx, tm->evs[--tm->nevs]);
    for (s = tm->host.segs; s; s = s->next) gm__pinned_free(ctx, (void*)s->base, s->size);
    gm__arena_destroy(&tm->host);
    if (tm->bounce_pinned) gm__pinned_free(ctx, tm->bounce, GM__SWAP_CHUNK);
    else GPUMEM_FREE(tm->bounce);
    ctx->be->stream_destroy(ctx, tm->tk[GM__TK_IN].s);
    ctx->be->stream_destroy(ctx, tm->tk[GM__TK_OUT].s);
    pthread_mutex_destroy(&tm->mu.mu);
    GPUMEM_FREE(tm->t);
    GPUMEM_FREE(tm->freeidx);
    GPUMEM_FREE(tm->tk);
    GPUMEM_FREE(tm->evs);
    GPUMEM_FREE(tm->cand);
    GPUMEM_FREE(tm->vh);
    GPUMEM_FREE(tm->hcq);
    GPUMEM_FREE(tm->hh[0]);
    GPUMEM_FREE(tm->hh[1]);
    GPUMEM_FREE(tm->hh[2]);
    GPUMEM_FREE(tm->prios);
    GPUMEM_FREE(tm->rank);
    GPUMEM_FREE(tm->batch);
    GPUMEM_FREE(tm->rec);
    {
        int k;
        for (k = 0; k < GM_TIER_PHASES; k++) gm__phase_free(&tm->ph[k]);
    }
    GPUMEM_FREE(tm);
    ctx->tier = NULL;
    ctx->tier_evict = NULL;
}

/* >>plan ------------------------------------------------------------------
   Offsets for requests whose lifetimes are known. A packing's invariants:
   - every offset is a multiple of align, and offset + size <= region;
   - two requests whose lifetimes intersect have disjoint byte ranges
     (gm_plan_check counts the pairs that do not).
   gm__pack_order places the requests one by one in a given order: each
   goes to the smallest gap (lowest offset on ties) left between the placed
   requests live at the same time, else above all of them. Those it finds
   on x's overlap list (gm__pack_overlaps: the requests whose lifetimes meet
   x's, O(degree log degree) a request); where the lists would pass n^2/64
   entries there are none, and it scans every placed request, kept sorted
   by offset (O(n) a request). gm_plan_pack tries several orders, then, while the
   work stays small, perturbs the best order (a few swaps) and keeps what
   packs no worse; then, when that is more than 0.2% above the lower
   bound, an exact search (below) closes what it can of the gap. */
#ifndef GM__PLAN_WORK
#define GM__PLAN_WORK 200000000u /* about ns: n^2 a scanned packing, 64 x overlaps a listed one */
#endif
#ifndef GM__PLAN_ROUNDS
#define GM__PLAN_ROUNDS 400u
#endif
#define GM__PLAN_LIMIT ((uint64_t)1 << 62) /* the largest sum of rounded sizes gm_plan_pack takes */
#ifndef GM__PLAN_PAIRS
#define GM__PLAN_PAIRS (1u << 22) /* overlap entries past which there are no lists (and no search) */
#endif
typedef struct gm__span {
    uint64_t off, top;
} gm__span;
typedef struct gm__pack {
    gm_plan_req* r;
    size_t n;
    uint64_t* rs;      /* sizes rounded to the alignment */
    uint64_t* off;     /* offsets of the packing in progress (UINT64_MAX: not yet) */
    uint32_t* placed;  /* placed requests by offset (without overlap lists) */
    uint32_t *ovs, *ov; /* CSR: the requests whose lifetimes meet each; NULL while greedy scans */
    size_t pairs;
    int scan;          /* gm__pack_order scans the placed: the lists are too dense to pay */
    gm__span* sp;      /* scratch: the placed neighbours of the one being placed */
} gm__pack;

/* Whether two placed requests share a byte. */
static int gm__bytes_overlap(const gm_plan_req* a, const gm_plan_req* b) {
    return a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

static int gm__span_cmp(const void* a, const void* b) {
    uint64_t x = ((const gm__span*)a)->off, y = ((const gm__span*)b)->off;
    return x < y ? -1 : x > y;
}

/* The lowest offset of the smallest gap that holds sz between spans sorted
   by offset, else the top of them all. */
static uint64_t gm__pack_fit(const gm__span* sp, size_t m, uint64_t sz) {
    uint64_t prev = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    size_t i;
    for (i = 0; i < m; i++) {
        if (sp[i].off > prev && sp[i].off - prev >= sz && sp[i].off - prev < best_gap) best_gap = sp[i].off - prev, best = prev;
        if (sp[i].top > prev) prev = sp[i].top;
    }
    return best != UINT64_MAX ? best : prev;
}

static uint64_t gm__pack_order(gm__pack* pk, const uint32_t* order) {
    const gm_plan_req* r = pk->r;
    uint64_t top = 0;
    size_t np = 0, k, i, m;
    for (i = 0; i < pk->n; i++) pk->off[i] = UINT64_MAX;
    for (k = 0; k < pk->n; k++) {
        uint32_t x = order[k];
        uint64_t s = r[x].start, e = r[x].end;
        size_t lo = 0, hi;
        m = 0;
        if (!pk->scan) {
            for (i = pk->ovs[x]; i < pk->ovs[x + 1]; i++)
                if (pk->off[pk->ov[i]] != UINT64_MAX)
                    pk->sp[m].off = pk->off[pk->ov[i]], pk->sp[m].top = pk->sp[m].off + pk->rs[pk->ov[i]], m++;
            if (m > 1) qsort(pk->sp, m, sizeof(gm__span), gm__span_cmp);
        } else
            for (i = 0; i < np; i++) {
                uint32_t y = pk->placed[i];
                if (r[y].start >= e || s >= r[y].end) continue; /* not live at the same time */
                pk->sp[m].off = pk->off[y], pk->sp[m].top = pk->off[y] + pk->rs[y], m++;
            }
        pk->off[x] = gm__pack_fit(pk->sp, m, pk->rs[x]);
        if (pk->off[x] + pk->rs[x] > top) top = pk->off[x] + pk->rs[x];
        if (!pk->scan) continue;
        hi = np; /* insert by offset */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (pk->off[pk->placed[mid]] <= pk->off[x]) lo = mid + 1;
            else hi = mid;
        }
        memmove(pk->placed + lo + 1, pk->placed + lo, (np - lo) * sizeof(uint32_t));
        pk->placed[lo] = x;
        np++;
    }
    return top;
}

/* The orders tried first: size, area (size x lifetime), lifetime, start. */
static const gm_plan_req* gm__pack_reqs;
static int gm__pack_key;
static int gm__pack_cmp(const void* a, const void* b) {
    const gm_plan_req *x = &gm__pack_reqs[*(const uint32_t*)a], *y = &gm__pack_reqs[*(const uint32_t*)b];
    uint64_t lx = x->end - x->start, ly = y->end - y->start;
    double ax = (double)x->size * (double)lx, ay = (double)y->size * (double)ly;
    int c = 0;
    switch (gm__pack_key) {
    case 0: c = x->size != y->size ? (x->size > y->size ? -1 : 1) : lx != ly ? (lx > ly ? -1 : 1) : 0; break;
    case 1: c = ax != ay ? (ax > ay ? -1 : 1) : 0; break;
    case 2: c = lx != ly ? (lx > ly ? -1 : 1) : x->size != y->size ? (x->size > y->size ? -1 : 1) : 0; break;
    default: c = x->start != y->start ? (x->start < y->start ? -1 : 1) : x->size != y->size ? (x->size > y->size ? -1 : 1) : 0;
    }
    if (c) return c;
    return *(const uint32_t*)a < *(const uint32_t*)b ? -1 : *(const uint32_t*)a > *(const uint32_t*)b;
}

static pthread_mutex_t gm__pack_mu = PTHREAD_MUTEX_INITIALIZER; /* qsort has no user pointer */

/* pk's overlap lists: by start, each request with those starting before it
   ends; none (NULL) past GM__PLAN_PAIRS entries or without memory, nor,
   unless `dense`, past n^2/64, where greedy scans instead (lists that dense
   cost greedy more than they save; the search builds them when it runs). */
static void gm__pack_overlaps(gm__pack* pk, uint32_t* ord, int dense) {
    const gm_plan_req* r = pk->r;
    size_t n = pk->n, a, c, pairs = 0, limit = GM__PLAN_PAIRS;
    uint32_t *ovs, *ov, *fill;
    pk->ovs = pk->ov = NULL, pk->pairs = 0, pk->scan = 1;
    if (!dense && n * n / 64 < limit) limit = n * n / 64;
    for (a = 0; a < n; a++) ord[a] = (uint32_t)a;
    pthread_mutex_lock(&gm__pack_mu);
    gm__pack_reqs = r;
    gm__pack_key = 3;
    qsort(ord, n, sizeof(uint32_t), gm__pack_cmp);
    pthread_mutex_unlock(&gm__pack_mu);
    if (!(ovs = (uint32_t*)gm__calloc((n + 1) * sizeof(uint32_t)))) return;
    for (a = 0; a < n; a++)
        for (c = a + 1; c < n && r[ord[c]].start < r[ord[a]].end; c++) {
            ovs[ord[a] + 1]++, ovs[ord[c] + 1]++;
            if ((pairs += 2) > limit) {
                GPUMEM_FREE(ovs);
                return;
            }
        }
    for (a = 0; a < n; a++) ovs[a + 1] += ovs[a];
    ov = (uint32_t*)GPUMEM_MALLOC((pairs + 1) * sizeof(uint32_t));
    fill = (uint32_t*)GPUMEM_MALLOC((n + 1) * sizeof(uint32_t));
    if (!ov || !fill) {
        GPUMEM_FREE(ovs), GPUMEM_FREE(ov), GPUMEM_FREE(fill);
        return;
    }
    memcpy(fill, ovs, n * sizeof(uint32_t));
    for (a = 0; a < n; a++)
        for (c = a + 1; c < n && r[ord[c]].start < r[ord[a]].end; c++)
            ov[fill[ord[a]]++] = ord[c], ov[fill[ord[c]]++] = ord[a];
    GPUMEM_FREE(fill);
    pk->ovs = ovs, pk->ov = ov, pk->pairs = pairs;
    pk->scan = pairs > n * n / 64;
}

/* The exact search (MiniMalloc, Moffitt, ASPLOS 2023), for what greedy
   leaves above the lower bound. Time is cut into sections, one a run of
   starts (gm__pack_search); request x spans [s0[x], s1[x]). Any packing can be
   pushed down until each request rests on one it shares a section with
   (or on 0); taken by offset, each then sits at `minoff`, the top of those
   placed before it. So a depth-first search places requests in offset
   order (ties by a static rank), each at its minoff, and prunes
   - a request whose turn is past (offset, rank below the last placed);
   - a placement at or above the top of some unplaced request at its
     minoff: that request could drop into the hole below;
   - a state where, in some section, max(floor, offset) plus the unplaced
     sizes passes the capacity. A section's floor is at least the top of
     what is placed there and the lowest minoff of what is not.
   When a placement leaves no unplaced request crossing some section
   boundary, the sides are independent and each is searched on its own
   (nested, down to GM__BB_NEST levels). Invariants: floor, tot, cuts and
   minoff are what the placements on the frame stack made of them, and
   each undo stack holds exactly what restores them; a level's requests
   are ls[ub, ub + np), its unplaced the first nun. Every packing taken is
   complete and under the capacity, so a budget cut short costs only
   quality. */
#ifndef GPUMEM_PLAN_SEARCH
#define GPUMEM_PLAN_SEARCH 1000000000 /* sections, requests and neighbours visited: about a second */
#endif
#define GM__BB_NEST 64
typedef struct gm__bbc { /* a candidate: placed at off, ordered by (off, rank) */
    uint64_t off;
    uint32_t rank, x;
} gm__bbc;
typedef struct gm__bbf { /* a frame: candidates [lo, hi), cur next, placed the one tried */
    size_t lo, hi, cur, umin, usec;
    uint32_t placed;
} gm__bbf;
typedef struct gm__bbs { /* a section's floor before a change */
    uint32_t k;
    uint64_t v;
} gm__bbs;
typedef struct gm__bbr { /* a request's rank and tmax outside a nested level */
    uint32_t x, rank;
    uint64_t tmax;
} gm__bbr;
typedef struct gm__bb {
    const gm_plan_req* r;     /* widths in the caller's time for the orders */
    const uint64_t* rs;
    uint32_t *s0, *s1;       /* section span of each request */
    const uint32_t *ovs, *ov; /* CSR: the requests sharing a section with each (gm__pack's) */
    uint32_t *secs, *sec;    /* CSR: the requests live in each section */
    uint64_t *tot0, *tmax;   /* size live in each section; the largest over a request's span
                                (over what is left unplaced, in a nested level) */
    uint32_t *cuts0, *cuts;  /* requests (unplaced, during the search) spanning boundary k|k+1 */
    uint64_t *floor, *tot;   /* per section, during the search */
    uint64_t *minoff, *off, *sol; /* per request; off UINT64_MAX while unplaced */
    uint32_t *rank, *upos;
    uint32_t* ls; /* the levels' request lists, a stack */
    size_t nls, capls;
    gm__bbr* rsv;  /* the outer rank and tmax of nested levels' requests, a stack */
    size_t nrsv, caprsv;
    int order;     /* the static order of this run (gm__bb_cmp's keys) */
    uint32_t* umx; /* undo of minoff */
    uint64_t* umv;
    gm__bbs* usv; /* undo of floor */
    size_t numin, nusec, capusv;
    gm__bbc* cand;
    size_t ncand, capcand;
    gm__bbf* fr;
    int64_t work, work_end, nodes, node_end;
} gm__bb;

static int gm__bb_need(void** p, size_t* cap, size_t used, size_t more, size_t elem) {
    size_t c = (used + more) * 2;
    void* q;
    if (used + more <= *cap) return 1;
    if (!(q = gm__grow_array(*p, *cap * elem, c * elem))) return 0;
    *p = q, *cap = c;
    return 1;
}

/* Places x at its minoff; 0 when the floor undo stack cannot grow. */
static int gm__bb_place(gm__bb* b, gm__bbf* f, size_t ub, uint32_t* nun, uint32_t x) {
    uint64_t top = b->minoff[x] + b->rs[x];
    uint32_t k, i, y, lo = b->s0[x], hi = b->s1[x], p = b->upos[x], q = *nun - 1, *un = b->ls + ub;
    f->placed = x, f->umin = b->numin, f->usec = b->nusec;
    b->off[x] = b->minoff[x];
    for (i = b->ovs[x]; i < b->ovs[x + 1]; i++) {
        y = b->ov[i];
        if (b->off[y] != UINT64_MAX || b->minoff[y] >= top) continue;
        b->umx[b->numin] = y, b->umv[b->numin++] = b->minoff[y];
        b->minoff[y] = top;
        if (b->s0[y] < lo) lo = b->s0[y];
        if (b->s1[y] > hi) hi = b->s1[y];
    }
    if (!gm__bb_need((void**)&b->usv, &b->capusv, b->nusec, hi - lo, sizeof(gm__bbs))) return 0;
    for (k = b->s0[x]; k < b->s1[x]; k++) {
        b->tot[k] -= b->rs[x];
        if (k + 1 < b->s1[x]) b->cuts[k]--;
        if (b->floor[k] < top) b->usv[b->nusec].k = k, b->usv[b->nusec++].v = b->floor[k], b->floor[k] = top;
    }
    /* The lowest minoff of the unplaced bounds a floor. The requests raised
       to top all cross x's span, so their spans and x's make [lo, hi); the
       floor there can rise to top at most, and in x's span it already has. */
    for (k = lo; k < hi; k++) {
        uint64_t m = top;
        if (k == b->s0[x]) k = b->s1[x];
        if (k >= hi) break;
        if (b->floor[k] >= top) continue;
        for (i = b->secs[k]; i < b->secs[k + 1] && m > b->floor[k]; i++)
            if (b->off[b->sec[i]] == UINT64_MAX && b->minoff[b->sec[i]] < m) m = b->minoff[b->sec[i]];
        b->work += (int64_t)(i - b->secs[k]);
        if (m > b->floor[k]) b->usv[b->nusec].k = k, b->usv[b->nusec++].v = b->floor[k], b->floor[k] = m;
    }
    y = un[q]; /* x to the end of the unplaced; their order does not matter */
    un[p] = y, b->upos[y] = p, un[q] = x, b->upos[x] = q;
    (*nun)--;
    b->work += (int64_t)(b->ovs[x + 1] - b->ovs[x] + hi - lo);
    return 1;
}

static void gm__bb_unplace(gm__bb* b, gm__bbf* f, uint32_t* nun) {
    uint32_t x = f->placed, k;
    while (b->numin > f->umin) b->numin--, b->minoff[b->umx[b->numin]] = b->umv[b->numin];
    while (b->nusec > f->usec) b->nusec--, b->floor[b->usv[b->nusec].k] = b->usv[b->nusec].v;
    for (k = b->s0[x]; k < b->s1[x]; k++) {
        b->tot[k] += b->rs[x];
        if (k + 1 < b->s1[x]) b->cuts[k]++;
    }
    b->off[x] = UINT64_MAX;
    (*nun)++;
    f->placed = UINT32_MAX;
}

static int gm__bb_fits(gm__bb* b, uint32_t sa, uint32_t sb, uint64_t o, uint64_t cap) {
    uint32_t k;
    b->work += sb - sa;
    for (k = sa; k < sb; k++)
        if ((b->floor[k] > o ? b->floor[k] : o) + b->tot[k] > cap) return 0;
    return 1;
}

/* The candidates after a placement at last_off by rank last_rank1 - 1 (0:
   none yet); 0 when the scratch cannot grow. gm__bb_next takes them in
   order, a selection at a time: most frames try only the first few. */
static int gm__bb_expand(gm__bb* b, gm__bbf* f, size_t ub, uint32_t nun, uint64_t last_off, uint32_t last_rank1) {
    uint64_t mh = UINT64_MAX;
    const uint32_t* un = b->ls + ub;
    uint32_t i;
    for (i = 0; i < nun; i++)
        if (b->minoff[un[i]] + b->rs[un[i]] < mh) mh = b->minoff[un[i]] + b->rs[un[i]];
    if (!gm__bb_need((void**)&b->cand, &b->capcand, b->ncand, nun, sizeof(gm__bbc))) return 0;
    f->lo = f->cur = b->ncand;
    f->placed = UINT32_MAX;
    for (i = 0; i < nun; i++) {
        uint32_t x = un[i];
        uint64_t o = b->minoff[x];
        if (o >= mh || o < last_off || (o == last_off && b->rank[x] + 1 <= last_rank1)) continue;
        b->cand[b->ncand].off = o, b->cand[b->ncand].rank = b->rank[x], b->cand[b->ncand++].x = x;
    }
    f->hi = b->ncand;
    b->work += 2 * (int64_t)nun;
    return 1;
}

static uint32_t gm__bb_next(gm__bb* b, gm__bbf* f) {
    size_t j, m = f->cur;
    gm__bbc t;
    for (j = f->cur + 1; j < f->hi; j++)
        if (b->cand[j].off != b->cand[m].off ? b->cand[j].off < b->cand[m].off : b->cand[j].rank < b->cand[m].rank) m = j;
    b->work += (int64_t)(f->hi - f->cur);
    t = b->cand[m], b->cand[m] = b->cand[f->cur], b->cand[f->cur] = t;
    return b->cand[f->cur++].x;
}

static int gm__bb_dfs(gm__bb* b, size_t ub, uint32_t np, uint32_t sa, uint32_t sb, uint64_t cap, uint32_t d0, int nest);
static void gm__bb_rank(gm__bb* b, uint32_t* part, uint32_t np);

/* After x's placement cut [sa, sb) at the boundaries it alone crossed:
   each side's unplaced requests are searched alone. Returns as the search. */
static int gm__bb_split(gm__bb* b, size_t ub, uint32_t nun, uint32_t sb, uint64_t cap, uint32_t d0, int nest, uint32_t x,
                        uint32_t a) {
    uint32_t k = b->s0[x], e, i, cnt;
    int r;
    for (;; a = e) {
        while (k + 1 < b->s1[x] && b->cuts[k]) k++;
        e = k + 1 < b->s1[x] ? ++k : sb;
        if (!gm__bb_need((void**)&b->ls, &b->capls, b->nls, nun, sizeof(uint32_t))) return -2;
        for (cnt = 0, i = 0; i < nun; i++)
            if (b->s0[b->ls[ub + i]] >= a && b->s0[b->ls[ub + i]] < e) b->ls[b->nls + cnt++] = b->ls[ub + i];
        b->work += nun;
        if (cnt) {
            uint32_t* lv = b->ls + b->nls;
            gm__bbr* sv;
            size_t base = b->nrsv;
            if (!gm__bb_need((void**)&b->rsv, &b->caprsv, b->nrsv, cnt, sizeof(gm__bbr))) return -2;
            sv = b->rsv + base;
            for (i = 0; i < cnt; i++) { /* the level is ordered anew by what is left (MiniMalloc's SubSolve) */
                uint32_t y = lv[i], j;
                uint64_t m = 0;
                for (j = b->s0[y]; j < b->s1[y]; j++)
                    if (b->tot[j] > m) m = b->tot[j];
                sv[i].x = y, sv[i].rank = b->rank[y], sv[i].tmax = b->tmax[y];
                b->tmax[y] = m, b->work += b->s1[y] - b->s0[y];
            }
            b->nrsv += cnt;
            gm__bb_rank(b, lv, cnt); /* a level's list is in no order of its own */
            b->nls += cnt;
            r = gm__bb_dfs(b, b->nls - cnt, cnt, a, e, cap, d0, nest);
            b->nls -= cnt;
            b->nrsv = base;
            for (sv = b->rsv + base, i = 0; i < cnt; i++) b->rank[sv[i].x] = sv[i].rank, b->tmax[sv[i].x] = sv[i].tmax;
            if (r != 1) return r;
        }
        if (e == sb) return 1;
    }
}

/* Searches the level ls[ub, ub + np) within sections [sa, sb) from frame
   d0. 1: packed within cap (offsets in sol, the state as it was); 0:
   it cannot be; -1: the node or work limit came first; -2: no scratch. */
static int gm__bb_dfs(gm__bb* b, size_t ub, uint32_t np, uint32_t sa, uint32_t sb, uint64_t cap, uint32_t d0, int nest) {
    uint32_t d = d0, nun = np, i, x;
    int r;
    for (i = 0; i < np; i++) b->upos[b->ls[ub + i]] = i;
    if (!gm__bb_expand(b, &b->fr[d], ub, nun, 0, 0)) return -2;
    for (;;) {
        gm__bbf* f = &b->fr[d];
        if (f->placed != UINT32_MAX) gm__bb_unplace(b, f, &nun);
        if (f->cur == f->hi) {
            b->ncand = f->lo;
            if (d == d0) return 0;
            d--;
            continue;
        }
        if (++b->nodes > b->node_end || b->work > b->work_end) return -1;
        x = gm__bb_next(b, f);
        if (!gm__bb_place(b, f, ub, &nun, x)) return -2;
        if (!gm__bb_fits(b, sa, sb, b->off[x], cap)) continue;
        r = nun ? 2 : 1;
        for (i = b->s0[x]; r == 2 && nest < GM__BB_NEST && i + 1 < b->s1[x]; i++)
            if (!b->cuts[i]) {
                r = gm__bb_split(b, ub, nun, sb, cap, d + 1, nest + 1, x, sa);
                for (i = 0; i < nun; i++) b->upos[b->ls[ub + i]] = i; /* the nested levels moved them */
                if (r < 0) return r;
                break;
            }
        if (r == 0) continue;
        if (r == 1) { /* keep this level's placements, then undo them */
            for (i = 0; i < np; i++)
                if (b->off[b->ls[ub + i]] != UINT64_MAX) b->sol[b->ls[ub + i]] = b->off[b->ls[ub + i]];
            for (;; d--) {
                if (b->fr[d].placed != UINT32_MAX) gm__bb_unplace(b, &b->fr[d], &nun);
                if (d == d0) break;
            }
            b->ncand = b->fr[d0].lo;
            return 1;
        }
        if (!gm__bb_expand(b, &b->fr[++d], ub, nun, b->off[x], b->rank[x] + 1)) return -2;
    }
}

/* Static orders: the largest section total over the span (T), area (A),
   lifetime (W), in MiniMalloc's three combinations. W is in the caller's
   time: where it is real time (a compiler's schedule, a trace's clock) it
   tells more about a request's place than a count of events does. */
static const gm__bb* gm__bb_sort_b;
static int gm__bb_cmp(const void* pa, const void* pb) {
    static const char* keys[] = {"TAW", "TWA", "WAT"};
    uint32_t x = *(const uint32_t*)pa, y = *(const uint32_t*)pb;
    const gm__bb* b = gm__bb_sort_b;
    uint64_t wx = b->r[x].end - b->r[x].start, wy = b->r[y].end - b->r[y].start;
    double ax = (double)b->rs[x] * (double)wx, ay = (double)b->rs[y] * (double)wy;
    const char* k;
    for (k = keys[b->order]; *k; k++) {
        if (*k == 'T' && b->tmax[x] != b->tmax[y]) return b->tmax[x] > b->tmax[y] ? -1 : 1;
        if (*k == 'A' && ax != ay) return ax > ay ? -1 : 1;
        if (*k == 'W' && wx != wy) return wx > wy ? -1 : 1;
    }
    if (b->s0[x] != b->s0[y]) return b->s0[x] < b->s0[y] ? -1 : 1; /* not the index: the plan */
    return x < y ? -1 : x > y;                                     /* follows the lifetimes */
}

/* Sorts part by the run's order and ranks it 0, 1, ... */
static void gm__bb_rank(gm__bb* b, uint32_t* part, uint32_t np) {
    uint32_t i;
    pthread_mutex_lock(&gm__pack_mu);
    gm__bb_sort_b = b;
    qsort(part, np, sizeof(uint32_t), gm__bb_cmp);
    pthread_mutex_unlock(&gm__pack_mu);
    for (i = 0; i < np; i++) b->rank[part[i]] = i;
    b->work += (int64_t)np * 8;
}

static uint64_t gm__luby(uint64_t i) { /* 1 1 2 1 1 2 4 1 1 2 ... for i >= 1 */
    for (;;) {
        uint64_t k = 1;
        while ((1ull << k) - 1 < i) k++;
        if (i == (1ull << k) - 1) return 1ull << (k - 1);
        i -= (1ull << (k - 1)) - 1;
    }
}

/* Packs one partition within cap (offsets in sol). The search's running
   time is heavy-tailed: a run that goes wrong near the root rarely
   recovers, while another order finds a packing in a few hundred nodes. So
   it restarts, in two streams that share the nodes two to one: MiniMalloc's
   round robin (the three orders as they are, node limits 2 x np doubling
   every round), for where an order is right but needs a long run; and
   short runs (2 x np times the Luby sequence 1 1 2 1 1 2 4 ...)
   through the orders, each after the first three shuffled by np/2 swaps of
   neighbours (a fixed seed: the same input gives the same plan), for where
   none of the three is. Returns as the search. */
static int gm__bb_solve(gm__bb* b, uint32_t* part, uint32_t np, uint32_t sa, uint32_t sb, uint64_t cap) {
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    uint32_t i, k, ju = 0, js = 0;
    int64_t used[2] = {0, 0};
    int r;
    if (!gm__bb_need((void**)&b->ls, &b->capls, 0, np, sizeof(uint32_t))) return -2;
    for (;;) {
        int s = 2 * used[1] < used[0]; /* 1: the shuffled stream's turn (a third of the nodes) */
        uint32_t j = s ? js++ : ju++;
        b->order = (int)(j % 3);
        gm__bb_rank(b, part, np);
        for (i = 0; s && j >= 3 && i < np / 2; i++) {
            uint32_t x, y, t;
            rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
            x = (uint32_t)(((rng * 2685821657736338717ull) >> 33) % np);
            y = x + 1 + (uint32_t)(rng % 3);
            if (y < np) t = part[x], part[x] = part[y], part[y] = t;
        }
        for (i = 0; i < np; i++) b->rank[part[i]] = i, b->ls[i] = part[i], b->minoff[part[i]] = 0, b->off[part[i]] = UINT64_MAX;
        for (k = sa; k < sb; k++) b->floor[k] = 0, b->tot[k] = b->tot0[k], b->cuts[k] = b->cuts0[k];
        b->nls = np, b->numin = b->nusec = b->ncand = 0;
        b->nodes = 0;
        b->node_end = 2 * (int64_t)np * (s ? (int64_t)gm__luby(j + 1) : (int64_t)1 << (j / 3 < 40 ? j / 3 : 40));
        r = gm__bb_fits(b, sa, sb, 0, cap) ? gm__bb_dfs(b, 0, np, sa, sb, cap, 0, 0) : 0;
        used[s] += b->nodes;
        if (r != -1 || b->work > b->work_end) return r;
    }
}

/* An event of the time compression: key 2t for an end, 2t + 1 for a start
   (ends first at one time). */
typedef struct gm__pke {
    uint64_t key;
    uint32_t x;
} gm__pke;
static int gm__pke_cmp(const void* a, const void* b) {
    uint64_t x = ((const gm__pke*)a)->key, y = ((const gm__pke*)b)->key;
    return x < y ? -1 : x > y;
}

/* Lowers *best (offsets in best_off) by probing capacities between the
   lower bound lo (the peak live of the rounded sizes, which is the largest
   section total) and *best: the bound first, with
   a quarter of the budget, then halving the gap, each probe with half of
   what is left. A probe searches only the partitions whose current packing
   does not fit. Nothing runs when greedy is within 0.2% of the bound (the
   usual training step), or past GM__PLAN_PAIRS overlaps (the lists it builds
   when greedy went without). */
static void gm__pack_search(gm__pack* pk, uint32_t* scratch, uint64_t align, uint64_t lo, uint64_t* best_off,
                            uint64_t* best) {
    gm__bb b;
    const gm_plan_req* r = pk->r;
    const uint64_t* rs = pk->rs;
    uint64_t hi = *best, *gtop = NULL;
    gm__pke* ev = NULL;
    int64_t* diff = NULL;
    uint32_t n = (uint32_t)pk->n, nt = 0, nsec, i, k, np = 0, *pid = NULL, *pst = NULL, *plist = NULL, *psa = NULL,
             *psb = NULL;
    size_t pairs, spans = 0, a;
    int first = 1;
    int64_t budget = (int64_t)GPUMEM_PLAN_SEARCH; /* all of it up to 1000 requests, then less: a large */
    if (n > 1000) budget = budget / n * 1000;     /* step's planning stays well under a second */
    if (hi <= lo + lo / 512 || !GPUMEM_PLAN_SEARCH) return; /* greedy is within 0.2% of the bound */
    memset(&b, 0, sizeof b);
    b.r = r, b.rs = rs;
    /* Sections: only the live sets right after a run of starts matter, so
       a run of starts opens section k and the run of ends after it closes
       it at k + 1 (overlap is unchanged: a start before an end stays so). */
    ev = (gm__pke*)GPUMEM_MALLOC(2 * (size_t)n * sizeof(gm__pke));
    b.s0 = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint32_t));
    b.s1 = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint32_t));
    if (!ev || !b.s0 || !b.s1) goto done;
    for (i = 0; i < n; i++) {
        if (r[i].end >> 62) goto done;
        ev[2 * i].key = r[i].start * 2 + 1, ev[2 * i].x = i;
        ev[2 * i + 1].key = r[i].end * 2, ev[2 * i + 1].x = i;
    }
    qsort(ev, 2 * (size_t)n, sizeof(gm__pke), gm__pke_cmp);
    {
        uint32_t cur = 0;
        int last_end = 0;
        for (a = 0; a < 2 * (size_t)n; a++) {
            if (ev[a].key & 1) {
                if (last_end) cur++;
                b.s0[ev[a].x] = cur, last_end = 0;
            } else
                b.s1[ev[a].x] = cur + 1, last_end = 1;
        }
        nt = cur + 2;
    }
    nsec = nt - 1;
    b.tot0 = (uint64_t*)gm__calloc((size_t)nt * sizeof(uint64_t));
    diff = (int64_t*)gm__calloc((size_t)nt * sizeof(int64_t));
    if (!b.tot0 || !diff) goto done;
    for (i = 0; i < n; i++) spans += b.s1[i] - b.s0[i];
    for (i = 0; i < n; i++) b.tot0[b.s0[i]] += rs[i], b.tot0[b.s1[i]] -= rs[i]; /* wraps, then sums back */
    for (k = 1; k < nsec; k++) b.tot0[k] += b.tot0[k - 1];
    if (!pk->ovs) gm__pack_overlaps(pk, scratch, 1); /* greedy scanned */
    if (!pk->ovs) goto done;                          /* too many overlaps to search */
    pairs = pk->pairs, b.ovs = pk->ovs, b.ov = pk->ov;
    /* partitions: boundary k|k+1 is a cut when no request spans both */
    for (i = 0; i < n; i++)
        if (b.s1[i] - b.s0[i] > 1) diff[b.s0[i]]++, diff[b.s1[i] - 1]--;
    pid = (uint32_t*)GPUMEM_MALLOC((size_t)nsec * sizeof(uint32_t));
    psa = (uint32_t*)GPUMEM_MALLOC(((size_t)nsec + 1) * sizeof(uint32_t));
    psb = (uint32_t*)GPUMEM_MALLOC(((size_t)nsec + 1) * sizeof(uint32_t));
    pst = (uint32_t*)gm__calloc(((size_t)nsec + 2) * sizeof(uint32_t));
    plist = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint32_t));
    b.cuts0 = (uint32_t*)GPUMEM_MALLOC((size_t)nsec * sizeof(uint32_t));
    if (!pid || !psa || !psb || !pst || !plist || !b.cuts0) goto done;
    {
        int64_t cross = 0;
        psa[0] = 0;
        for (k = 0; k < nsec; k++) {
            pid[k] = np;
            cross += diff[k];
            b.cuts0[k] = (uint32_t)cross;
            if (k + 1 == nsec || !cross) psb[np] = k + 1, psa[++np] = k + 1;
        }
    }
    for (i = 0; i < n; i++) pst[pid[b.s0[i]] + 1]++;
    for (k = 0; k < np; k++) pst[k + 1] += pst[k];
    for (i = 0; i < n; i++) plist[pst[pid[b.s0[i]]]++] = i;
    for (k = np; k > 0; k--) pst[k] = pst[k - 1];
    pst[0] = 0;
    b.secs = (uint32_t*)gm__calloc(((size_t)nsec + 1) * sizeof(uint32_t));
    b.sec = (uint32_t*)GPUMEM_MALLOC((spans + 1) * sizeof(uint32_t));
    b.tmax = (uint64_t*)gm__calloc((size_t)n * sizeof(uint64_t));
    b.cuts = (uint32_t*)GPUMEM_MALLOC((size_t)nsec * sizeof(uint32_t));
    b.floor = (uint64_t*)GPUMEM_MALLOC((size_t)nsec * sizeof(uint64_t));
    b.tot = (uint64_t*)GPUMEM_MALLOC((size_t)nsec * sizeof(uint64_t));
    b.minoff = (uint64_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint64_t));
    b.off = (uint64_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint64_t));
    b.sol = (uint64_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint64_t));
    b.rank = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint32_t));
    b.upos = (uint32_t*)GPUMEM_MALLOC((size_t)n * sizeof(uint32_t));
    b.umx = (uint32_t*)GPUMEM_MALLOC((pairs + 1) * sizeof(uint32_t));
    b.umv = (uint64_t*)GPUMEM_MALLOC((pairs + 1) * sizeof(uint64_t));
    b.fr = (gm__bbf*)GPUMEM_MALLOC(((size_t)n + 1) * sizeof(gm__bbf));
    gtop = (uint64_t*)gm__calloc((size_t)np * sizeof(uint64_t));
    if (!b.secs || !b.sec || !b.tmax || !b.cuts || !b.floor || !b.tot || !b.minoff || !b.off ||
        !b.sol || !b.rank || !b.upos || !b.umx || !b.umv || !b.fr || !gtop)
        goto done;
    for (i = 0; i < n; i++)
        for (k = b.s0[i]; k < b.s1[i]; k++) {
            b.secs[k + 1]++;
            if (b.tot0[k] > b.tmax[i]) b.tmax[i] = b.tot0[k];
        }
    for (k = 0; k < nsec; k++) b.secs[k + 1] += b.secs[k];
    for (k = 0; k < nsec; k++) diff[k] = b.secs[k]; /* borrowed: where each list fills next */
    for (i = 0; i < n; i++)
        for (k = b.s0[i]; k < b.s1[i]; k++) b.sec[diff[k]++] = i;
    for (i = 0; i < n; i++) {
        uint64_t top = best_off[i] + rs[i];
        if (top > gtop[pid[b.s0[i]]]) gtop[pid[b.s0[i]]] = top;
    }
    /* probes: the bound first, then halving [lo, hi) */
    while (lo < hi && b.work < budget) {
        uint64_t cap = first ? lo : lo + (hi - lo) / 2 / align * align, top = 0;
        int ok = 1;
        b.work_end = b.work + (budget - b.work) / (first ? 4 : 2);
        first = 0;
        for (k = 0; k < np && ok; k++)
            if (gtop[k] > cap) ok = gm__bb_solve(&b, plist + pst[k], pst[k + 1] - pst[k], psa[k], psb[k], cap) == 1;
        if (!ok) {
            lo = cap + align;
            continue;
        }
        for (k = 0; k < np; k++) {
            if (gtop[k] > cap) {
                gtop[k] = 0;
                for (i = pst[k]; i < pst[k + 1]; i++) {
                    uint32_t x = plist[i];
                    best_off[x] = b.sol[x];
                    if (b.sol[x] + rs[x] > gtop[k]) gtop[k] = b.sol[x] + rs[x];
                }
            }
            if (gtop[k] > top) top = gtop[k];
        }
        hi = *best = top;
    }
done:
    GPUMEM_FREE(ev), GPUMEM_FREE(diff), GPUMEM_FREE(pid), GPUMEM_FREE(psa), GPUMEM_FREE(psb), GPUMEM_FREE(pst);
    GPUMEM_FREE(plist), GPUMEM_FREE(gtop);
    GPUMEM_FREE(b.s0), GPUMEM_FREE(b.s1), GPUMEM_FREE(b.tot0);
    GPUMEM_FREE(b.tmax), GPUMEM_FREE(b.floor), GPUMEM_FREE(b.tot), GPUMEM_FREE(b.minoff), GPUMEM_FREE(b.off);
    GPUMEM_FREE(b.rank), GPUMEM_FREE(b.upos), GPUMEM_FREE(b.umx), GPUMEM_FREE(b.umv), GPUMEM_FREE(b.usv);
    GPUMEM_FREE(b.fr), GPUMEM_FREE(b.cand), GPUMEM_FREE(b.secs), GPUMEM_FREE(b.sec), GPUMEM_FREE(b.cuts0);
    GPUMEM_FREE(b.cuts), GPUMEM_FREE(b.sol), GPUMEM_FREE(b.ls), GPUMEM_FREE(b.rsv);
}

/* Sweep over 2n events in time order, frees before allocations at one
   time (a request ending at t and one starting at t may share bytes). */
typedef struct gm__pev {
    uint64_t t, d;
    int add;
} gm__pev;
static int gm__pev_cmp(const void* a, const void* b) {
    const gm__pev *x = (const gm__pev*)a, *y = (const gm__pev*)b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->add - y->add;
}

/* The peak of sizes (rs, or the requests' own) live at one time; 0
   without memory, UINT64_MAX when it does not fit in 64 bits. Requests
   with end <= start are never live. */
static uint64_t gm__peak_live(const gm_plan_req* reqs, const uint64_t* rs, size_t n) {
    gm__pev* ev;
    uint64_t live = 0, peak = 0;
    size_t i, m = 0;
    if (!reqs || !n || n > SIZE_MAX / (2 * sizeof(gm__pev))) return 0;
    ev = (gm__pev*)GPUMEM_MALLOC(2 * n * sizeof(gm__pev));
    if (!ev) return 0;
    for (i = 0; i < n; i++) {
        uint64_t sz = rs ? rs[i] : reqs[i].size;
        if (reqs[i].end <= reqs[i].start) continue;
        ev[m].t = reqs[i].start, ev[m].d = sz, ev[m].add = 1, m++;
        ev[m].t = reqs[i].end, ev[m].d = sz, ev[m].add = 0, m++;
    }
    qsort(ev, m, sizeof(gm__pev), gm__pev_cmp);
    for (i = 0; i < m; i++) { /* frees first at one time: live never falls below 0 */
        if (ev[i].add && ev[i].d > UINT64_MAX - live) {
            peak = UINT64_MAX;
            break;
        }
        live = ev[i].add ? live + ev[i].d : live - ev[i].d;
        if (live > peak) peak = live;
    }
    GPUMEM_FREE(ev);
    return peak;
}

GPUMEM_API uint64_t gm_plan_peak_live(const gm_plan_req* reqs, size_t n) { return gm__peak_live(reqs, NULL, n); }

GPUMEM_API gm_result gm_plan_pack(gm_plan_req* reqs, size_t n, size_t align, uint64_t* region) {
    gm__pack pk;
    uint32_t *order, *best_order;
    uint64_t *best_off, best = UINT64_MAX, rng = 0x9E3779B97F4A7C15ull, lb;
    size_t i, key, rounds, work;
    if (!reqs || !region || n > UINT32_MAX) return GM_ERR_INVALID_ARGUMENT;
    *region = 0;
    if (!align) align = GM__ROUND;
    if ((uint64_t)align > GM__PLAN_LIMIT) return GM_ERR_INVALID_ARGUMENT;
    for (i = 0, lb = 0; i < n; i++) { /* rounded sizes summing to at most 2^62: no sum or offset can wrap */
        uint64_t sz = reqs[i].size;
        if (reqs[i].end <= reqs[i].start || !sz || sz > GM__PLAN_LIMIT) return GM_ERR_INVALID_ARGUMENT;
        sz = (sz + align - 1) / align * align;
        if (sz > GM__PLAN_LIMIT - lb) return GM_ERR_INVALID_ARGUMENT;
        lb += sz;
    }
    if (!n) return GM_OK;
    pk.r = reqs;
    pk.n = n;
    pk.rs = (uint64_t*)GPUMEM_MALLOC(n * sizeof(uint64_t));
    pk.off = (uint64_t*)GPUMEM_MALLOC(n * sizeof(uint64_t));
    best_off = (uint64_t*)GPUMEM_MALLOC(n * sizeof(uint64_t));
    pk.placed = (uint32_t*)GPUMEM_MALLOC(n * sizeof(uint32_t));
    order = (uint32_t*)GPUMEM_MALLOC(n * sizeof(uint32_t));
    best_order = (uint32_t*)GPUMEM_MALLOC(n * sizeof(uint32_t));
    pk.sp = (gm__span*)GPUMEM_MALLOC(n * sizeof(gm__span));
    if (!pk.rs || !pk.off || !best_off || !pk.placed || !order || !best_order || !pk.sp) {
        GPUMEM_FREE(pk.rs), GPUMEM_FREE(pk.off), GPUMEM_FREE(best_off), GPUMEM_FREE(pk.sp);
        GPUMEM_FREE(pk.placed), GPUMEM_FREE(order), GPUMEM_FREE(best_order);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    gm__pack_overlaps(&pk, order, 0);
    for (i = 0; i < n; i++) pk.rs[i] = (reqs[i].size + align - 1) / align * align;
    lb = gm__peak_live(reqs, pk.rs, n); /* a packing this small is optimal: nothing more to try */
    for (key = 0; key < 4 && best > lb; key++) {
        uint64_t top;
        for (i = 0; i < n; i++) order[i] = (uint32_t)i;
        pthread_mutex_lock(&gm__pack_mu);
        gm__pack_reqs = reqs;
        gm__pack_key = (int)key;
        qsort(order, n, sizeof(uint32_t), gm__pack_cmp);
        pthread_mutex_unlock(&gm__pack_mu);
        top = gm__pack_order(&pk, order);
        if (top < best) {
            best = top;
            memcpy(best_off, pk.off, n * sizeof(uint64_t));
            memcpy(best_order, order, n * sizeof(uint32_t));
        }
    }
    /* perturbed orders, while a packing costs little */
    work = pk.scan ? n * n : 64 * pk.pairs;
    rounds = n < 2 || !work ? 0 : work > GM__PLAN_WORK ? 0 : GM__PLAN_WORK / work; /* no overlaps: greedy is exact */
    if (rounds > GM__PLAN_ROUNDS) rounds = GM__PLAN_ROUNDS;
    for (key = 0; key < rounds && best > lb; key++) {
        uint64_t top;
        size_t swaps = 1 + key % 4, j;
        memcpy(order, best_order, n * sizeof(uint32_t));
        if (key % 3 == 2) { /* a request that reaches the top of the best packing goes earlier */
            size_t ntop = 0, pick, p = 0, q;
            uint32_t t;
            for (i = 0; i < n; i++) ntop += best_off[order[i]] + pk.rs[order[i]] == best;
            rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
            pick = ntop ? (size_t)((rng * 2685821657736338717ull) >> 33) % ntop : 0;
            for (i = 0; i < n; i++)
                if (best_off[order[i]] + pk.rs[order[i]] == best && pick-- == 0) {
                    p = i;
                    break;
                }
            q = p ? (size_t)(rng % p) : 0;
            t = order[p];
            memmove(order + q + 1, order + q, (p - q) * sizeof(uint32_t));
            order[q] = t;
        } else
            for (j = 0; j < swaps; j++) { /* swap two requests, near or anywhere */
                size_t a, b;
                uint32_t t;
                rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
                a = (size_t)((rng * 2685821657736338717ull) >> 33) % n;
                b = (key & 1) ? (size_t)(rng % n) : a >= 8 ? a - 1 - (size_t)(rng % 8) : 0;
                t = order[a], order[a] = order[b], order[b] = t;
            }
        top = gm__pack_order(&pk, order);
        if (top <= best) {
            best = top;
            memcpy(best_off, pk.off, n * sizeof(uint64_t));
            memcpy(best_order, order, n * sizeof(uint32_t));
        }
    }
    if (best > lb) gm__pack_search(&pk, order, align, lb, best_off, &best);
    for (i = 0; i < n; i++) reqs[i].offset = best_off[i];
    *region = best;
    GPUMEM_FREE(pk.rs), GPUMEM_FREE(pk.off), GPUMEM_FREE(best_off), GPUMEM_FREE(pk.sp);
    GPUMEM_FREE(pk.ovs), GPUMEM_FREE(pk.ov);
    GPUMEM_FREE(pk.placed), GPUMEM_FREE(order), GPUMEM_FREE(best_order);
    return GM_OK;
}

static const gm_plan_req* gm__ix_reqs;
static int gm__ix_offset;
static int gm__ix_cmp(const void* a, const void* b) {
    const gm_plan_req *p = &gm__ix_reqs[*(const uint32_t*)a], *q = &gm__ix_reqs[*(const uint32_t*)b];
    uint64_t x = gm__ix_offset ? p->offset : p->start, y = gm__ix_offset ? q->offset : q->start;
    return x < y ? -1 : x > y;
}
/* ix = 0 .. n-1 by start, or by offset (qsort has no user pointer). */
static void gm__sort_reqs(uint32_t* ix, size_t n, const gm_plan_req* r, int by_offset) {
    size_t i;
    for (i = 0; i < n; i++) ix[i] = (uint32_t)i;
    pthread_mutex_lock(&gm__pack_mu);
    gm__ix_reqs = r, gm__ix_offset = by_offset;
    qsort(ix, n, sizeof(uint32_t), gm__ix_cmp);
    pthread_mutex_unlock(&gm__pack_mu);
}

/* Requests sorted by start; each is compared with those that start before
   it ends. */
GPUMEM_API long long gm_plan_check(const gm_plan_req* reqs, size_t n, uint64_t region) {
    uint32_t* ix;
    long long bad = 0;
    size_t i, j;
    if ((!reqs && n) || n > UINT32_MAX) return -1;
    if (!n) return 0;
    for (i = 0; i < n; i++)
        if (reqs[i].end <= reqs[i].start || !reqs[i].size) return -1;
    ix = (uint32_t*)GPUMEM_MALLOC(n * sizeof(uint32_t));
    if (!ix) return -1;
    gm__sort_reqs(ix, n, reqs, 0);
    for (i = 0; i < n; i++) {
        const gm_plan_req* a = &reqs[ix[i]];
        if (a->offset + a->size > region || a->offset + a->size < a->offset) bad++;
        for (j = i + 1; j < n && reqs[ix[j]].start < a->end; j++) {
            const gm_plan_req* b = &reqs[ix[j]];
            if (gm__bytes_overlap(a, b)) bad++;
        }
    }
    GPUMEM_FREE(ix);
    return bad;
}


/* >>planned ---------------------------------------------------------------
   Serving repeating steps from a plan. Everything here is under ctx->mu
   (but for gm_plan_mark's peek at `recording`, stored atomically).
   Invariants:
   - a planned request k is live (live[k]) exactly when its address,
     base + off[k], is in livemap (-> k + 1), and nlive counts them;
   - no two live planned requests overlap: k is served only when none of
     conf[k] (the requests whose bytes overlap k's) is live;
   - the region is one block of the caching allocator, held while the plan
     exists, and is not given back while a planned block is live;
   - a live planned block is "carried" when it was served before the last
     gm_plan_step, "overdue" when the cursor has passed the point where the
     recording freed it; carried and overdue count them. A live block that
     is neither was live beside k in the recording too, so it cannot
     overlap k: only when carried or overdue is non-zero are k's conflicts
     looked at (the fast path is O(1));
   - while recording, recmap holds the recorded blocks still live
     (address -> index + 1) and serving is off. */
typedef struct gm__prec {
    uint64_t size, start, end; /* events 1, 2, ... of the recording; end 0: not freed in it */
    uint64_t tstart, tend;     /* their marks (gm_plan_mark; UINT64_MAX: before the first) */
    uint64_t end_alloc;        /* allocations recorded before its free */
    gm_stream stream;
} gm__prec;

typedef struct gm__plan {
    int recording, enabled, rerecord;
    gm__prec* rec;
    size_t nrec, caprec;
    uint64_t clock;               /* events recorded */
    uint64_t mark;                /* the caller's time (UINT64_MAX: not marked yet) */
    gm__ptrmap recmap;
    size_t n;                     /* requests of a step */
    uint64_t *size, *off;
    gm_stream* strm;              /* the recorded stream of each request */
    uint8_t *online, *live, *elsewhere;
    uint32_t *cstart, *conf;      /* the conflicts of k: conf[cstart[k] .. cstart[k + 1]) */
    uint32_t *dstart, *due;       /* due at cursor k: due[dstart[k] .. dstart[k + 1]) */
    uint32_t* gen;                /* the step a live planned block was served in */
    uint8_t* late;                /* counted in overdue */
    uint8_t* served;              /* served at least once (a later free of it is a double free) */
    uint32_t step_gen;
    size_t carried, overdue;
    gm_stream stream;
    void* base;
    uint64_t region;
    size_t cursor, nlive;
    int64_t step_departures;
    gm__ptrmap livemap;
    gm_plan_stats st;
} gm__plan;

static void gm__plan_drop_arrays(gm__plan* pl) {
    GPUMEM_FREE(pl->size), GPUMEM_FREE(pl->off), GPUMEM_FREE(pl->online), GPUMEM_FREE(pl->live), GPUMEM_FREE(pl->strm);
    pl->strm = NULL;
    GPUMEM_FREE(pl->elsewhere), GPUMEM_FREE(pl->cstart), GPUMEM_FREE(pl->conf);
    GPUMEM_FREE(pl->dstart), GPUMEM_FREE(pl->due), GPUMEM_FREE(pl->gen), GPUMEM_FREE(pl->late);
    GPUMEM_FREE(pl->served);
    pl->size = pl->off = NULL;
    pl->online = pl->live = pl->elsewhere = pl->late = pl->served = NULL;
    pl->cstart = pl->conf = pl->dstart = pl->due = pl->gen = NULL;
    pl->n = 0;
}

static int gm__plan_alloc(gm_context* ctx, void** out, size_t size, gm_stream stream) {
    gm__plan* pl;
    size_t k;
    uint32_t c;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (!pl || !pl->enabled || !pl->base) goto online;
    k = pl->cursor++;
    if (k < pl->n) /* blocks the recording had freed by now */
        for (c = pl->dstart[k]; c < pl->dstart[k + 1]; c++) {
            uint32_t j = pl->due[c];
            if (pl->live[j] && pl->gen[j] == pl->step_gen && !pl->late[j]) {
                pl->late[j] = 1;
                pl->overdue++;
            }
        }
    if (k >= pl->n || pl->size[k] != size || stream != pl->strm[k]) goto departure;
    if (gm__ss_gone(ctx, stream)) goto departure; /* destroyed since it was recorded: the lock's path refuses it */
    if (pl->online[k]) {
        pl->st.online++;
        goto online;
    }
    if (pl->carried || pl->overdue) { /* something lives longer than it did: look */
        if (pl->live[k]) goto departure; /* its last step's block was never freed */
        for (c = pl->cstart[k]; c < pl->cstart[k + 1]; c++)
            if (pl->live[pl->conf[c]]) goto departure; /* its bytes are still in use */
    }
    if (!gm__map_put(&pl->livemap, (uintptr_t)pl->base + pl->off[k], (void*)(uintptr_t)(k + 1))) goto departure;
    pl->live[k] = 1;
    pl->served[k] = 1;
    pl->gen[k] = pl->step_gen;
    pl->nlive++;
    pl->st.hits++;
    *out = (char*)pl->base + pl->off[k];
    pthread_mutex_unlock(&ctx->mu);
    return 1;
departure:
    pl->st.departures++;
    pl->step_departures++;
online:
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

static void gm__plan_note_alloc(gm_context* ctx, void* p, size_t size, gm_stream stream) {
    gm__plan* pl;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (pl && pl->recording) {
        if (pl->nrec == pl->caprec) {
            size_t cap = pl->caprec ? 2 * pl->caprec : 1024;
            gm__prec* n = (gm__prec*)gm__grow_array(pl->rec, pl->caprec * sizeof(gm__prec), cap * sizeof(gm__prec));
            if (!n) goto out; /* not recorded: it will be a departure */
            pl->rec = n;
            pl->caprec = cap;
        }
        if (gm__map_put(&pl->recmap, (uintptr_t)p, (void*)(uintptr_t)(pl->nrec + 1))) {
            gm__prec* r = &pl->rec[pl->nrec++];
            r->size = size;
            r->start = ++pl->clock;
            r->tstart = pl->mark;
            r->end = 0;
            r->stream = stream;
        }
    }
out:
    pthread_mutex_unlock(&ctx->mu);
}

/* A pointer inside the region that is not a live planned block: freed
   already, or never a block start. (With mu held.) */
static int gm__plan_in_region(const gm__plan* pl, const void* ptr) {
    return pl && pl->base && (uintptr_t)ptr >= (uintptr_t)pl->base && (uintptr_t)ptr - (uintptr_t)pl->base < pl->region;
}

/* Misuse of such a pointer: a double free when a planned block was served
   there (an O(n) look, on the error path only), else a foreign pointer. */
static gm_result gm__plan_misuse(gm_context* ctx, const gm__plan* pl, const void* ptr, const char* what) {
    size_t k;
    for (k = 0; k < pl->n; k++)
        if (pl->served[k] && !pl->online[k] && (uintptr_t)pl->base + pl->off[k] == (uintptr_t)ptr)
            return GM__MISUSE(ctx, GM_ERR_DOUBLE_FREE, "%s: %p, a planned block, was already freed", what, ptr);
    return GM__MISUSE(ctx, GM_ERR_FOREIGN_POINTER, "%s: %p is in the plan's region but was never handed out", what,
                      ptr);
}

static int gm__plan_free(gm_context* ctx, void* ptr, gm_result* res) {
    gm__plan* pl;
    uintptr_t v;
    *res = GM_OK;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    v = pl ? (uintptr_t)gm__map_get(&pl->livemap, (uintptr_t)ptr) : 0;
    if (v && pl->elsewhere[v - 1]) { /* another stream used it: wait before its bytes can be reused */
        pthread_mutex_unlock(&ctx->mu);
        ctx->be->device_sync(ctx);
        pthread_mutex_lock(&ctx->mu);
        pl = (gm__plan*)ctx->plan;
        v = pl ? (uintptr_t)gm__map_get(&pl->livemap, (uintptr_t)ptr) : 0;
    }
    if (v) {
        size_t k = v - 1;
        gm__map_del(&pl->livemap, (uintptr_t)ptr);
        pl->live[k] = 0;
        pl->nlive--;
        pl->elsewhere[k] = 0;
        if (pl->gen[k] != pl->step_gen) pl->carried--;
        else if (pl->late[k]) pl->overdue--;
        pl->late[k] = 0;
    } else if (gm__plan_in_region(pl, ptr)) {
        *res = gm__plan_misuse(ctx, pl, ptr, "gm_free");
        v = 1;
    } else if (pl && pl->recording) {
        uintptr_t i = (uintptr_t)gm__map_del(&pl->recmap, (uintptr_t)ptr);
        if (i) {
            gm__prec* r = &pl->rec[i - 1];
            r->end = ++pl->clock, r->tend = pl->mark, r->end_alloc = pl->nrec;
        }
    }
    pthread_mutex_unlock(&ctx->mu);
    return v != 0;
}

/* gm_block_size (size) and gm_record_stream (used_on) on a planned block;
   a pointer inside the region that is not one is refused. */
static int gm__plan_owns(gm_context* ctx, const void* ptr, size_t* size, gm_stream* used_on, gm_result* res) {
    gm__plan* pl;
    uintptr_t v;
    int mine;
    *res = GM_OK;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    v = pl ? (uintptr_t)gm__map_get(&pl->livemap, (uintptr_t)ptr) : 0;
    if (v && size) *size = gm__round_req((size_t)pl->size[v - 1]);
    if (v && used_on) { /* gm_record_stream: a stream it can wait for */
        uint32_t si;
        *res = gm__ss_index(ctx, *used_on, &si);
        if (*res == GM_OK && *used_on != pl->stream) pl->elsewhere[v - 1] = 1;
    }
    mine = v || gm__plan_in_region(pl, ptr);
    if (!v && mine) *res = gm__plan_misuse(ctx, pl, ptr, size ? "gm_block_size" : "gm_record_stream");
    pthread_mutex_unlock(&ctx->mu);
    return mine;
}

/* The plan's region (a block it holds), or NULL. With mu held. */
static void* gm__plan_region(const gm_context* ctx) {
    const gm__plan* pl = (const gm__plan*)ctx->plan;
    return pl ? pl->base : NULL;
}

/* Live planned blocks: in the region, counted, and disjoint. With mu held. */
static void gm__plan_check(gm_context* ctx, gm__ck* ck) {
    gm__plan* pl = (gm__plan*)ctx->plan;
    size_t k, live = 0;
    uint32_t c;
    if (!pl) return;
    if (pl->base) {
        const gm__block* b = (const gm__block*)gm__map_get(&ctx->map, (uintptr_t)pl->base);
        if (!b || b->size < pl->region)
            gm__broken(ck, "plan: the region at %p (%llu bytes) is %s", pl->base, (unsigned long long)pl->region,
                       b ? "larger than its block" : "not a block in use");
    }
    for (k = 0; k < pl->n; k++) {
        if (!pl->live[k]) continue;
        live++;
        if (pl->off[k] + pl->size[k] > pl->region ||
            (uintptr_t)gm__map_get(&pl->livemap, (uintptr_t)pl->base + pl->off[k]) != k + 1)
            gm__broken(ck, "plan: request %zu (%llu bytes at offset %llu) is not where the plan put it", k,
                       (unsigned long long)pl->size[k], (unsigned long long)pl->off[k]);
        for (c = pl->cstart[k]; c < pl->cstart[k + 1]; c++)
            if (pl->live[pl->conf[c]])
                gm__broken(ck, "plan: requests %zu and %u overlap and are both live", k, pl->conf[c]);
    }
    {
        size_t carried = 0, overdue = 0;
        for (k = 0; k < pl->n; k++) {
            carried += pl->live[k] && pl->gen[k] != pl->step_gen;
            overdue += pl->live[k] && pl->gen[k] == pl->step_gen && pl->late[k];
        }
        if (carried != pl->carried)
            gm__broken(ck, "plan: %zu blocks carried over from the last step, %zu counted", carried, pl->carried);
        if (overdue != pl->overdue)
            gm__broken(ck, "plan: %zu blocks overdue, %zu counted", overdue, pl->overdue);
    }
    if (live != pl->nlive || live != pl->livemap.count)
        gm__broken(ck, "plan: %zu blocks live, %zu counted, %zu mapped", live, pl->nlive, pl->livemap.count);
}

static gm__plan* gm__plan_get(gm_context* ctx) {
    gm__plan* pl = (gm__plan*)ctx->plan;
    if (pl) return pl;
    pl = (gm__plan*)GPUMEM_MALLOC(sizeof *pl);
    if (!pl) return NULL;
    memset(pl, 0, sizeof *pl);
    gm__tc_gate(ctx, GM__GATE_PLAN, 1); /* first: no fast path runs once the plan is seen */
    __atomic_store_n(&ctx->plan, (void*)pl, __ATOMIC_RELEASE);
    return pl;
}

/* Starts a recording (with mu held): serving stops, and the old region,
   when nothing of it is live, is returned (*old) so the recorded step sees
   the memory it will have. */
static void gm__plan_record(gm__plan* pl, void** old) {
    size_t i;
    __atomic_store_n(&pl->recording, 1, __ATOMIC_RELAXED); /* gm_plan_mark peeks without mu */
    pl->rerecord = 0;
    pl->enabled = 0;
    pl->nrec = 0;
    pl->clock = 0;
    pl->mark = UINT64_MAX;
    for (i = 0; i < pl->recmap.cap; i++) pl->recmap.e[i].k = 0;
    pl->recmap.count = 0;
    *old = NULL;
    if (!pl->nlive) {
        *old = pl->base;
        pl->base = NULL;
    }
}

GPUMEM_API gm_result gm_plan_begin(gm_context* ctx) {
    gm__plan* pl;
    void* old = NULL;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    pl = gm__plan_get(ctx);
    if (pl) gm__plan_record(pl, &old);
    pthread_mutex_unlock(&ctx->mu);
    if (old) gm__free(ctx, old, GM__OWN_PLAN);
    return pl ? GM_OK : GM_ERR_HOST_OUT_OF_MEMORY;
}

/* Lifetimes for the packer from a recording of nev events (1..nev): t[e]
   is event e's mark (UINT64_MAX: before the first; all of them: unmarked,
   and the event's index serves as its time) and fr[e] whether it is a
   free. On return t[e] is a key that never falls and that rises from an
   allocation to any later free, so two requests' [key(start), key(end))
   meet exactly when their events interleave. Beyond that it follows the
   marks, key = (mark - first mark) * s + c, c counting the turns from an
   allocation to a free at one mark (s > every c where the span allows), so
   the search measures lifetimes in the caller's time. Keys stay below
   2^62: marks are shifted down until their span is below 2^40. */
static void gm__plan_keys(uint64_t* t, const uint8_t* fr, size_t nev) {
    uint64_t first = UINT64_MAX, span, s, prev = 0, c = 0, turns = 0;
    size_t e;
    int sh = 0;
    for (e = 1; e <= nev && first == UINT64_MAX; e++) first = t[e];
    if (first == UINT64_MAX) {
        for (e = 1; e <= nev; e++) t[e] = e;
        return;
    }
    span = t[nev] - first; /* marks never fall (gm_plan_mark) */
    while ((span >> sh) >= (1ull << 40)) sh++;
    for (e = 1; e <= nev; e++) {
        t[e] = t[e] == UINT64_MAX ? 0 : (t[e] - first) >> sh;
        turns += e > 1 && fr[e] && !fr[e - 1] && t[e] == t[e - 1];
    }
    s = (1ull << 61) / ((span >> sh) + 1);
    if (s > turns + 1) s = turns + 1;
    for (e = 1; e <= nev; e++) {
        uint64_t m = t[e];
        c += e > 1 && fr[e] && !fr[e - 1] && m == prev;
        prev = m;
        t[e] = m * s + c;
    }
}

/* The planned pairs whose bytes overlap (their lifetimes do not), by a
   sweep over ox (q's requests by offset; O(m + pairs)): counted per
   request into cnt, or, given cf, written to cf at the cursors in cnt as
   step indices (idx). Returns the entries. */
static size_t gm__plan_conflicts(const gm_plan_req* q, const uint32_t* ox, size_t m, uint32_t* cnt, uint32_t* cf,
                                 const uint64_t* idx) {
    size_t p, u, nc = 0;
    for (p = 0; p < m; p++)
        for (u = p + 1; u < m && q[ox[u]].offset < q[ox[p]].offset + q[ox[p]].size; u++, nc += 2) {
            if (cf) cf[cnt[ox[p]]] = (uint32_t)idx[ox[u]], cf[cnt[ox[u]]] = (uint32_t)idx[ox[p]];
            cnt[ox[p]]++, cnt[ox[u]]++;
        }
    return nc;
}

/* Packs the recording and installs the plan (called without mu). */
static gm_result gm__plan_build(gm_context* ctx) {
    gm__plan* pl;
    gm_plan_req* q = NULL;
    gm__prec* rec;
    size_t n, i, m = 0, nc = 0, nev;
    uint64_t region = 0, *tk = NULL;
    uint8_t* fr = NULL;
    gm_stream stream = NULL;
    void* base = NULL;
    gm_result r = GM_OK;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (!pl || !pl->recording) {
        pthread_mutex_unlock(&ctx->mu);
        return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "gm_plan_end: nothing is being recorded");
    }
    if (pl->nlive) {
        pthread_mutex_unlock(&ctx->mu);
        return GM__MISUSE(ctx, GM_ERR_BAD_STATE, "gm_plan_end: %zu blocks of the old plan are still live", pl->nlive);
    }
    __atomic_store_n(&pl->recording, 0, __ATOMIC_RELAXED);
    pl->rerecord = 0;
    pl->enabled = 0;
    n = pl->nrec;
    nev = (size_t)pl->clock;
    rec = (gm__prec*)GPUMEM_MALLOC((n ? n : 1) * sizeof *rec); /* a copy: a new recording may start meanwhile */
    if (rec && n) memcpy(rec, pl->rec, n * sizeof *rec);
    base = pl->base; /* the old region goes first: nothing of it is live */
    pl->base = NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (base) gm__free(ctx, base, GM__OWN_PLAN);
    base = NULL;
    q = (gm_plan_req*)GPUMEM_MALLOC((n ? n : 1) * sizeof *q);
    tk = (uint64_t*)GPUMEM_MALLOC((nev + 1) * sizeof *tk);
    fr = (uint8_t*)GPUMEM_MALLOC(nev + 1);
    if (!q || !rec || !tk || !fr) {
        GPUMEM_FREE(q), GPUMEM_FREE(rec), GPUMEM_FREE(tk), GPUMEM_FREE(fr);
        return GM_ERR_HOST_OUT_OF_MEMORY;
    }
    for (i = 0; i <= nev; i++) tk[i] = UINT64_MAX, fr[i] = 0;
    for (i = 0; i < n; i++) {
        tk[rec[i].start] = rec[i].tstart;
        if (rec[i].end) tk[rec[i].end] = rec[i].tend, fr[rec[i].end] = 1;
    }
    gm__plan_keys(tk, fr, nev);
    for (i = 0; i < n; i++) { /* the planned ones: freed in the step, on the first request's stream */
        if (!rec[i].end) continue;
        if (!m) stream = rec[i].stream;
        if (rec[i].stream != stream) continue;
        q[m].size = rec[i].size, q[m].start = tk[rec[i].start], q[m].end = tk[rec[i].end], q[m].offset = i;
        m++;
    }
    GPUMEM_FREE(tk), GPUMEM_FREE(fr);
    {
        uint64_t* idx = (uint64_t*)GPUMEM_MALLOC((m ? m : 1) * sizeof(uint64_t));
        uint32_t* cnt = (uint32_t*)GPUMEM_MALLOC((m ? m : 1) * sizeof(uint32_t));
        uint32_t* ox = (uint32_t*)GPUMEM_MALLOC((m ? m : 1) * sizeof(uint32_t));
        if (!idx || !cnt || !ox) r = GM_ERR_HOST_OUT_OF_MEMORY;
        for (i = 0; idx && i < m; i++) idx[i] = q[i].offset; /* gm_plan_pack overwrites it */
        if (r == GM_OK && m) r = gm_plan_pack(q, m, GM__ROUND, &region);
        if (r == GM_OK && m) { /* the recorded step's blocks wait in the cache: the region replaces them */
            gm_empty_cache(ctx);
            r = gm__alloc(ctx, &base, (size_t)region, stream, 0u, GM__OWN_PLAN, 0);
        }
        /* conflicts, counted per request (cnt, in idx's order) */
        if (r == GM_OK) {
            gm__sort_reqs(ox, m, q, 1);
            for (i = 0; i < m; i++) cnt[i] = 0;
            nc = gm__plan_conflicts(q, ox, m, cnt, NULL, NULL);
        }
        if (nc >= UINT32_MAX) r = GM_ERR_HOST_OUT_OF_MEMORY; /* conflict offsets are 32-bit */
        if (r == GM_OK) { /* install: arrays by request index of the step */
            uint64_t *sz = (uint64_t*)GPUMEM_MALLOC((n + 1) * sizeof(uint64_t)), *off = (uint64_t*)GPUMEM_MALLOC((n + 1) * sizeof(uint64_t));
            uint8_t *onl = (uint8_t*)GPUMEM_MALLOC(n + 1), *live = (uint8_t*)GPUMEM_MALLOC(n + 1), *els = (uint8_t*)GPUMEM_MALLOC(n + 1);
            uint32_t* cs = (uint32_t*)GPUMEM_MALLOC((n + 2) * sizeof(uint32_t));
            uint32_t* cf = (uint32_t*)GPUMEM_MALLOC((nc + 1) * sizeof(uint32_t));
            uint32_t* ds = (uint32_t*)GPUMEM_MALLOC((n + 2) * sizeof(uint32_t));
            uint32_t* du = (uint32_t*)GPUMEM_MALLOC((m + 1) * sizeof(uint32_t));
            uint32_t* gen = (uint32_t*)GPUMEM_MALLOC((n + 1) * sizeof(uint32_t));
            uint8_t* late = (uint8_t*)GPUMEM_MALLOC(n + 1);
            uint8_t* served = (uint8_t*)gm__calloc(n + 1);
            gm_stream* strm = (gm_stream*)GPUMEM_MALLOC((n + 1) * sizeof(gm_stream));
            if (!sz || !off || !onl || !live || !els || !cs || !cf || !ds || !du || !gen || !late || !served || !strm) {
                GPUMEM_FREE(sz), GPUMEM_FREE(off), GPUMEM_FREE(onl), GPUMEM_FREE(live), GPUMEM_FREE(els), GPUMEM_FREE(strm);
                GPUMEM_FREE(served);
                GPUMEM_FREE(cs), GPUMEM_FREE(cf), GPUMEM_FREE(ds), GPUMEM_FREE(du), GPUMEM_FREE(gen), GPUMEM_FREE(late);
                r = GM_ERR_HOST_OUT_OF_MEMORY;
            } else {
                size_t pos = 0;
                for (i = 0; i < n; i++)
                    sz[i] = rec[i].size, off[i] = 0, onl[i] = 1, live[i] = els[i] = 0, cs[i] = 0, strm[i] = rec[i].stream;
                for (i = 0; i < m; i++) off[idx[i]] = q[i].offset, onl[idx[i]] = 0;
                /* the conflicts, laid out by request index: counts, starts, entries */
                for (i = 0; i < m; i++) cs[idx[i]] = cnt[i];
                for (i = 0; i <= n; i++) {
                    size_t t = i < n ? cs[i] : 0;
                    cs[i] = (uint32_t)pos;
                    pos += t;
                }
                for (i = 0; i < m; i++) cnt[i] = cs[idx[i]]; /* now each one's fill cursor */
                gm__plan_conflicts(q, ox, m, cnt, cf, idx);
                /* due lists: planned requests by the cursor at which the recording
                   had freed them (end_alloc in 0..n: n + 1 buckets) */
                for (i = 0; i < n; i++) gen[i] = 0, late[i] = 0;
                for (i = 0; i <= n + 1; i++) ds[i] = 0;
                for (i = 0; i < m; i++) ds[(rec[idx[i]].end_alloc < n ? rec[idx[i]].end_alloc : n) + 1]++;
                for (i = 1; i <= n + 1; i++) ds[i] += ds[i - 1]; /* ds[p]: where bucket p starts */
                for (i = 0; i < m; i++) { /* fill, using ds[p] as bucket p's cursor ... */
                    size_t e = rec[idx[i]].end_alloc < n ? rec[idx[i]].end_alloc : n;
                    du[ds[e]++] = (uint32_t)idx[i];
                }
                for (i = n + 1; i > 0; i--) ds[i] = ds[i - 1]; /* ... then shift back */
                ds[0] = 0;
                pthread_mutex_lock(&ctx->mu);
                gm__plan_drop_arrays(pl);
                pl->n = n, pl->size = sz, pl->off = off, pl->online = onl, pl->live = live, pl->elsewhere = els;
                pl->cstart = cs, pl->conf = cf, pl->dstart = ds, pl->due = du, pl->gen = gen, pl->late = late;
                pl->strm = strm;
                pl->served = served;
                pl->carried = pl->overdue = 0;
                pl->base = base, pl->region = region, pl->stream = stream;
                pl->cursor = 0, pl->nlive = 0, pl->step_departures = 0;
                pl->enabled = 1;
                pl->st.requests = (int64_t)n;
                pl->st.planned = (int64_t)m;
                pl->st.region = (int64_t)region;
                pl->st.peak_live = (int64_t)gm_plan_peak_live(q, m);
                pthread_mutex_unlock(&ctx->mu);
                base = NULL;
                gm__log(ctx, GM_LOG_INFO, "plan: %zu requests, %zu planned into %llu bytes (peak live %lld)", n, m,
                        (unsigned long long)region, (long long)pl->st.peak_live);
            }
        }
        GPUMEM_FREE(idx);
        GPUMEM_FREE(cnt);
        GPUMEM_FREE(ox);
    }
    if (base) gm__free(ctx, base, GM__OWN_PLAN);
    GPUMEM_FREE(q);
    GPUMEM_FREE(rec);
    return r;
}

GPUMEM_API gm_result gm_plan_end(gm_context* ctx) {
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    return gm__plan_build(ctx);
}

GPUMEM_API gm_result gm_plan_mark(gm_context* ctx, uint64_t time) {
    gm__plan* pl;
    gm_result r = GM_OK;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pl = (gm__plan*)__atomic_load_n(&ctx->plan, __ATOMIC_ACQUIRE);
    if (!pl || !__atomic_load_n(&pl->recording, __ATOMIC_RELAXED)) return GM_OK; /* serving: a load, no lock */
    pthread_mutex_lock(&ctx->mu);
    if (pl->recording) {
        if (time == UINT64_MAX)
            r = GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_plan_mark: UINT64_MAX is not a time");
        else if (pl->mark != UINT64_MAX && time < pl->mark)
            r = GM__MISUSE(ctx, GM_ERR_INVALID_ARGUMENT, "gm_plan_mark: time %llu is before the last mark, %llu",
                           (unsigned long long)time, (unsigned long long)pl->mark);
        else
            pl->mark = time;
    }
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

GPUMEM_API gm_result gm_plan_enable(gm_context* ctx, int on) {
    gm__plan* pl;
    gm_result r = GM_OK;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (on && (!pl || !pl->base || pl->recording))
        r = GM__MISUSE(ctx, GM_ERR_BAD_STATE, "gm_plan_enable: %s", pl && pl->recording ? "a step is being recorded" : "there is no plan");
    else if (pl)
        pl->enabled = on != 0;
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

GPUMEM_API gm_result gm_plan_step(gm_context* ctx) {
    gm__plan* pl;
    void* old = NULL;
    int build = 0;
    if (GM__BAD_CTX(ctx)) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (pl) {
        pl->st.steps++;
        if (pl->recording && pl->rerecord) { /* the re-recorded step is over: plan it */
            pl->rerecord = 0;
            build = 1;
        } else if (pl->enabled && pl->step_departures * 8 > (int64_t)pl->n && !pl->nlive) {
            gm__plan_record(pl, &old); /* too many departures: record this step, plan at the next */
            pl->rerecord = 1;
        }
        pl->cursor = 0;
        pl->step_departures = 0;
        pl->step_gen++;
        pl->carried = pl->nlive; /* what is still live was served in an earlier step */
        pl->overdue = 0;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (old) gm__free(ctx, old, GM__OWN_PLAN);
    if (build) {
        gm_result r = gm__plan_build(ctx);
        if (r == GM_OK) {
            pthread_mutex_lock(&ctx->mu);
            pl->st.replans++;
            pthread_mutex_unlock(&ctx->mu);
        }
        return r;
    }
    return GM_OK;
}

GPUMEM_API gm_result gm_plan_get_stats(gm_context* ctx, gm_plan_stats* out) {
    gm__plan* pl;
    if (GM__BAD_CTX(ctx) || !out) return GM_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&ctx->mu);
    pl = (gm__plan*)ctx->plan;
    if (pl) *out = pl->st;
    else memset(out, 0, sizeof *out);
    pthread_mutex_unlock(&ctx->mu);
    return GM_OK;
}

static void gm__plan_destroy(gm_context* ctx) {
    gm__plan* pl = (gm__plan*)ctx->plan;
    if (!pl) return;
    if (pl->nlive) gm__log(ctx, GM_LOG_WARN, "shutdown: %zu planned blocks were never freed", pl->nlive);
    __atomic_store_n(&ctx->plan, NULL, __ATOMIC_RELEASE);
    gm__tc_gate(ctx, GM__GATE_PLAN, 0);
    if (pl->base) gm__free(ctx, pl->base, GM__OWN_PLAN);
    gm__plan_drop_arrays(pl);
    GPUMEM_FREE(pl->rec);
    GPUMEM_FREE(pl->recmap.e);
    GPUMEM_FREE(pl->livemap.e);
    GPUMEM_FREE(pl);
}

#endif /* GPUMEM_IMPLEMENTATION_DONE */
#endif /* GPUMEM_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the gpumem authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/
