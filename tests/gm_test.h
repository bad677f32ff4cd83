/* A tiny test harness: checks count passes and failures; t_done() prints
   "N passed, N failed" as the last line and gives the exit code. Built with
   GM_TEST_CUDA the programs run on the CUDA backend and exit 77 (skip)
   when there is no device. */
#ifndef GM_TEST_H
#define GM_TEST_H
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GM_TEST_CUDA
static const int t_sim = 0;
/* The CUDA runtime stand-in's controls (tests/cudart/gm_cudart.h), where
   the tests link it; NULL against the real runtime (weak symbols). */
extern int gmcudart_violations(void) __attribute__((weak));
extern const char* gmcudart_last_violation(void) __attribute__((weak));
extern size_t gmcudart_set_capacity(int device, size_t bytes) __attribute__((weak));
extern void gmcudart_reset_violations(void) __attribute__((weak));
extern int gmcudart_contexts(int device) __attribute__((weak));
extern void gmcudart_set_cma(int on) __attribute__((weak));
extern void gmcudart_set_driver_version(int version) __attribute__((weak));
extern void gmcudart_inject_sticky(int error) __attribute__((weak));
extern void gmcudart_reset(void) __attribute__((weak));
extern int gmcudart_in_host_func(void) __attribute__((weak));
static inline int t_standin(void) { return gmcudart_violations != NULL; }
static inline int t_violations(void) { return gmcudart_violations ? gmcudart_violations() : 0; }
static inline const char* t_last_violation(void) { return gmcudart_last_violation ? gmcudart_last_violation() : ""; }
#else
static const int t_sim = 1;
static inline int t_standin(void) { return 0; }
static inline int t_violations(void) { return 0; }
static inline const char* t_last_violation(void) { return ""; }
#endif

static int t_pass, t_fail;

#define T_CHECK(c) t_check_((c) ? 1 : 0, #c, __FILE__, __LINE__)
#define T_EQ(a, b) t_eq_((long long)(a), (long long)(b), #a, #b, __FILE__, __LINE__)
#define T_OK(r) t_eq_((long long)(r), 0, #r, "GM_OK", __FILE__, __LINE__)

static inline int t_check_(int ok, const char* what, const char* file, int line) {
    if (ok) t_pass++;
    else {
        t_fail++;
        printf("FAIL %s:%d: %s\n", file, line, what);
    }
    return ok;
}

static inline int t_eq_(long long a, long long b, const char* sa, const char* sb, const char* file, int line) {
    if (a == b) t_pass++;
    else {
        t_fail++;
        printf("FAIL %s:%d: %s == %s (%lld != %lld)\n", file, line, sa, sb, a, b);
    }
    return a == b;
}

static inline int t_done(void) {
    if (t_violations()) { /* the stand-in saw CUDA's rules broken: a failure, whatever else passed */
        t_fail++;
        printf("FAIL: %d violations of CUDA's rules (the last: %s)\n", t_violations(), t_last_violation());
    }
    printf("%d passed, %d failed\n", t_pass, t_fail);
    return t_fail ? 1 : 0;
}

/* Log capture: the last message at or above warn, and a count. The disk
   tier's engine thread logs too: writers take t_log_mu. */
static char t_last_log[1024];
static int t_log_count;
static pthread_mutex_t t_log_mu = PTHREAD_MUTEX_INITIALIZER;
static inline void t_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level <= GM_LOG_WARN) {
        pthread_mutex_lock(&t_log_mu);
        snprintf(t_last_log, sizeof t_last_log, "%s", msg);
        t_log_count++;
        pthread_mutex_unlock(&t_log_mu);
    }
    if (getenv("GM_TEST_VERBOSE")) gm_log_stderr(level, msg, NULL);
}


/* A context on the backend under test; the desc's other fields are kept.
   Skips the whole program (exit 77) when the backend has no device. */
static inline gm_context* t_setup(gm_desc d) {
    gm_context* ctx = NULL;
    gm_result r;
    d.backend = t_sim ? GM_BACKEND_SIM : GM_BACKEND_CUDA;
    d.ignore_env = 1;
    if (!d.log_fn) d.log_fn = t_log;
    r = gm_setup(&ctx, &d);
    if (r == GM_ERR_NO_DEVICE) { /* no GPU, and the real runtime linked (CUDART=real) */
        printf("skipped: no CUDA device\n");
        exit(77);
    }
    if (r != GM_OK) { /* a driver too old for the runtime included: a failure, not a skip */
        printf("FAIL setup: %s (%s)\n", gm_result_string(r), t_last_log);
        exit(1);
    }
    return ctx;
}

static inline gm_stats t_stats(gm_context* ctx) {
    gm_stats s;
    memset(&s, 0, sizeof s);
    gm_get_stats(ctx, &s);
    return s;
}

static inline gm_desc t_desc(void) {
    gm_desc d;
    memset(&d, 0, sizeof d);
    return d;
}

/* xorshift64* for reproducible random walks: t_rand on one shared state,
   t_rand_r on the caller's (one per thread) */
static inline unsigned long long t_rand_r(unsigned long long* s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static unsigned long long t_rng_state = 88172645463325252ull;
static inline unsigned long long t_rand(void) { return t_rand_r(&t_rng_state); }

/* A block's first bytes carry a tag (sim: device memory is host memory),
   so a block handed out twice shows as a tag overwritten. */
static inline void t_tag_put(void* p, size_t n, unsigned long long tag) {
    if (t_sim) memcpy(p, &tag, n < 8 ? n : 8);
}
static inline int t_tag_ok(const void* p, size_t n, unsigned long long tag) {
    unsigned long long got = 0, want = 0;
    if (!t_sim) return 1;
    memcpy(&got, p, n < 8 ? n : 8);
    memcpy(&want, &tag, n < 8 ? n : 8);
    return got == want;
}
#endif

/* A gate: a host function that blocks its stream until the test opens it,
   so "this stream is still busy" is a state a test can hold. t_open_later
   opens it from another thread after a delay and notes when. */
#include <pthread.h>
#include <time.h>
typedef struct t_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    long delay_ms;
    double opened_at;
    pthread_t th;
} t_gate;

static inline double t_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void t_gate_init(t_gate* g) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

static inline void t_gate_wait(void* arg) {
    t_gate* g = (t_gate*)arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static inline void t_gate_open(t_gate* g) {
    pthread_mutex_lock(&g->mu);
    g->opened_at = t_now();
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static inline void* t_gate_opener(void* arg) {
    t_gate* g = (t_gate*)arg;
    struct timespec ts;
    ts.tv_sec = g->delay_ms / 1000;
    ts.tv_nsec = (g->delay_ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
    t_gate_open(g);
    return NULL;
}

static inline void t_open_later(t_gate* g, long ms) {
    g->delay_ms = ms;
    pthread_create(&g->th, NULL, t_gate_opener, g);
}

static inline void t_gate_done(t_gate* g, int joined) {
    if (joined) pthread_join(g->th, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}
