/* gm_trace.h -- reading allocation traces into one event stream, for the
   replay tool, the visualiser and the benchmarks. Not part of gpumem.h.

   Formats (chosen by content, or forced):
     rmm        RMM's logging_resource_adaptor CSV:
                Thread,Time,Action,Pointer,Size,Stream (gpumem's own trace
                capture writes this too). Frees name a live pointer.
     lifetimes  "start end size" per line: live from step start to end.
     packing    minimalloc's "id,lower,upper,size": live in [lower, upper).
   Lifetimes and packing become a stream: at each time, frees first, then
   allocations. Sizes may be scaled (packing problems ×512 look like GPU
   tensors).

   A malformed line, a free of a pointer that is not live, a free whose size
   differs from its allocation, or an allocation of a pointer already live is
   an error naming the line; nothing crashes. */
#ifndef GM_TRACE_H
#define GM_TRACE_H
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gmt_event {
    uint32_t id;      /* dense: the n-th allocation of the trace */
    uint32_t is_free; /* 0: allocate, 1: free */
    uint64_t size;    /* requested bytes */
    uint64_t stream;  /* the trace's stream id */
    double time_us;   /* from the trace, 0 where unknown */
} gmt_event;

typedef struct gmt_trace {
    gmt_event* ev;
    size_t n, cap;
    uint32_t nids;        /* allocations */
    uint64_t peak_live;   /* largest sum of live requested sizes */
    uint64_t total_bytes; /* sum of all allocation sizes */
    size_t live_at_end;
    char format[16];
    char error[256];
} gmt_trace;

static inline int gmt_push(gmt_trace* t, uint32_t id, int is_free, uint64_t size, uint64_t stream, double tus) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        gmt_event* e = (gmt_event*)realloc(t->ev, cap * sizeof *e);
        if (!e) {
            snprintf(t->error, sizeof t->error, "out of host memory");
            return 0;
        }
        t->ev = e;
        t->cap = cap;
    }
    t->ev[t->n].id = id;
    t->ev[t->n].is_free = (uint32_t)is_free;
    t->ev[t->n].size = size;
    t->ev[t->n].stream = stream;
    t->ev[t->n].time_us = tus;
    t->n++;
    return 1;
}

static inline void gmt_free(gmt_trace* t) {
    free(t->ev);
    memset(t, 0, sizeof *t);
}

/* Peak live and the live count at the end, from the event stream. */
static inline void gmt_finish(gmt_trace* t) {
    uint64_t live = 0;
    size_t i, nlive = 0;
    uint64_t* sz = (uint64_t*)calloc(t->nids ? t->nids : 1, sizeof *sz);
    t->peak_live = 0;
    t->total_bytes = 0;
    for (i = 0; i < t->n; i++) {
        gmt_event* e = &t->ev[i];
        if (!e->is_free) {
            if (sz) sz[e->id] = e->size;
            live += e->size;
            t->total_bytes += e->size;
            nlive++;
            if (live > t->peak_live) t->peak_live = live;
        } else {
            live -= e->size;
            nlive--;
        }
    }
    t->live_at_end = nlive;
    free(sz);
}

/* Splits a line into at most `max` fields on commas or white space. */
static inline int gmt_fields(char* line, char** f, int max) {
    int n = 0;
    char* p = line;
    while (*p && n < max) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (!*p || *p == '\n' || *p == '\r') break;
        f[n++] = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
        if (*p) *p++ = 0;
    }
    return n;
}

static inline int gmt_u64(const char* s, int base, uint64_t* out) {
    char* end;
    unsigned long long v;
    if (!*s || *s == '-') return 0;
    v = strtoull(s, &end, base);
    if (*end) return 0;
    *out = v;
    return 1;
}

/* Open-addressing map from the trace's pointer to the live id. */
typedef struct gmt_pmap {
    uint64_t* key;
    uint32_t* val;
    size_t cap, n;
} gmt_pmap;

static inline size_t gmt_slot(const gmt_pmap* m, uint64_t k) {
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & (m->cap - 1);
    while (m->key[i] && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    return i;
}

static inline int gmt_pmap_put(gmt_pmap* m, uint64_t k, uint32_t v) {
    size_t i;
    if ((m->n + 1) * 2 > m->cap) {
        gmt_pmap o = *m;
        size_t j;
        m->cap = o.cap ? o.cap * 2 : 1024;
        m->key = (uint64_t*)calloc(m->cap, sizeof *m->key);
        m->val = (uint32_t*)calloc(m->cap, sizeof *m->val);
        m->n = 0;
        if (!m->key || !m->val) return 0;
        for (j = 0; j < o.cap; j++)
            if (o.key[j] && o.key[j] != ~0ull) {
                i = gmt_slot(m, o.key[j]);
                m->key[i] = o.key[j];
                m->val[i] = o.val[j];
                m->n++;
            }
        free(o.key);
        free(o.val);
    }
    i = gmt_slot(m, k);
    m->key[i] = k;
    m->val[i] = v;
    m->n++;
    return 1;
}

/* Linear probing without tombstones: rebuild the probe run after a delete. */
static inline void gmt_pmap_del(gmt_pmap* m, uint64_t k) {
    size_t i = gmt_slot(m, k), j;
    if (!m->key[i]) return;
    m->key[i] = 0;
    m->n--;
    for (j = (i + 1) & (m->cap - 1); m->key[j]; j = (j + 1) & (m->cap - 1)) {
        uint64_t kk = m->key[j];
        uint32_t vv = m->val[j];
        m->key[j] = 0;
        m->n--;
        gmt_pmap_put(m, kk, vv);
    }
}

static inline int gmt_read_rmm(FILE* f, gmt_trace* t) {
    char line[512];
    char* fl[8];
    long ln = 0;
    gmt_pmap m;
    uint64_t* sizes = NULL;
    size_t cap_sizes = 0;
    int ok = 1;
    memset(&m, 0, sizeof m);
    while (fgets(line, sizeof line, f)) {
        uint64_t ptr, size, stream = 0, th;
        double tus;
        int nf, is_free;
        ln++;
        if (ln == 1 && strncmp(line, "Thread", 6) == 0) continue;
        nf = gmt_fields(line, fl, 8);
        if (nf == 0) continue;
        if (nf < 5 || !gmt_u64(fl[0], 10, &th) || !gmt_u64(fl[4], 10, &size) ||
            (nf >= 6 && !gmt_u64(fl[5], 0, &stream))) {
            snprintf(t->error, sizeof t->error, "line %ld: expected Thread,Time,Action,Pointer,Size,Stream", ln);
            ok = 0;
            break;
        }
        tus = strtod(fl[1], NULL);
        if (strcmp(fl[2], "allocate") == 0) is_free = 0;
        else if (strcmp(fl[2], "free") == 0) is_free = 1;
        else {
            snprintf(t->error, sizeof t->error, "line %ld: action '%.32s' is neither allocate nor free", ln, fl[2]);
            ok = 0;
            break;
        }
        if (!gmt_u64(fl[3][0] == '0' && (fl[3][1] == 'x' || fl[3][1] == 'X') ? fl[3] + 2 : fl[3], 16, &ptr) || !ptr) {
            snprintf(t->error, sizeof t->error, "line %ld: bad pointer '%.32s'", ln, fl[3]);
            ok = 0;
            break;
        }
        if (!is_free) {
            size_t i = m.cap ? gmt_slot(&m, ptr) : 0;
            if (m.cap && m.key[i]) {
                snprintf(t->error, sizeof t->error, "line %ld: pointer %s allocated again while live", ln, fl[3]);
                ok = 0;
                break;
            }
            if (t->nids == cap_sizes) {
                cap_sizes = cap_sizes ? cap_sizes * 2 : 4096;
                sizes = (uint64_t*)realloc(sizes, cap_sizes * sizeof *sizes);
                if (!sizes) {
                    ok = 0;
                    break;
                }
            }
            sizes[t->nids] = size;
            if (!gmt_pmap_put(&m, ptr, t->nids) || !gmt_push(t, t->nids, 0, size, stream, tus)) {
                ok = 0;
                break;
            }
            t->nids++;
        } else {
            size_t i = m.cap ? gmt_slot(&m, ptr) : 0;
            uint32_t id;
            if (!m.cap || !m.key[i]) {
                snprintf(t->error, sizeof t->error, "line %ld: free of %s, which is not live", ln, fl[3]);
                ok = 0;
                break;
            }
            id = m.val[i];
            if (sizes[id] != size) {
                snprintf(t->error, sizeof t->error, "line %ld: free of %s with size %llu, allocated with %llu", ln,
                         fl[3], (unsigned long long)size, (unsigned long long)sizes[id]);
                ok = 0;
                break;
            }
            gmt_pmap_del(&m, ptr);
            if (!gmt_push(t, id, 1, size, stream, tus)) {
                ok = 0;
                break;
            }
        }
    }
    free(m.key);
    free(m.val);
    free(sizes);
    return ok;
}

/* Lifetimes and packing problems: buffers with [lower, upper) lifetimes. */
typedef struct gmt_life {
    uint64_t lo, hi, size;
} gmt_life;
typedef struct gmt_point {
    uint64_t time;
    uint32_t id;
    uint32_t is_free;
} gmt_point;

static inline int gmt_point_cmp(const void* a, const void* b) {
    const gmt_point *x = (const gmt_point*)a, *y = (const gmt_point*)b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    if (x->is_free != y->is_free) return x->is_free ? -1 : 1; /* frees first */
    return x->id < y->id ? -1 : x->id > y->id;
}

static inline int gmt_read_lives(FILE* f, gmt_trace* t, int packing, uint64_t scale) {
    char line[512];
    char* fl[8];
    long ln = 0;
    gmt_life* l = NULL;
    gmt_point* p;
    size_t n = 0, cap = 0, i;
    int ok = 1;
    while (fgets(line, sizeof line, f)) {
        uint64_t v[4];
        int nf, want = packing ? 4 : 3, k;
        ln++;
        if (ln == 1 && isalpha((unsigned char)line[0])) continue; /* header */
        nf = gmt_fields(line, fl, 8);
        if (nf == 0) continue;
        for (k = 0; k < want && k < nf; k++)
            if (!gmt_u64(fl[k], 10, &v[k])) break;
        if (nf != want || k != want) {
            snprintf(t->error, sizeof t->error, "line %ld: expected %s", ln,
                     packing ? "id,lower,upper,size" : "start end size");
            ok = 0;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            l = (gmt_life*)realloc(l, cap * sizeof *l);
            if (!l) return 0;
        }
        l[n].lo = packing ? v[1] : v[0];
        l[n].hi = packing ? v[2] : v[1];
        l[n].size = (packing ? v[3] : v[2]) * scale;
        if (l[n].hi <= l[n].lo && !(l[n].hi == l[n].lo && !packing)) {
            snprintf(t->error, sizeof t->error, "line %ld: the lifetime ends before it starts", ln);
            ok = 0;
            break;
        }
        if (!packing) l[n].hi++; /* lifetimes: live through step `end` */
        n++;
    }
    if (!ok) {
        free(l);
        return 0;
    }
    p = (gmt_point*)malloc((2 * n + 1) * sizeof *p);
    if (!p) {
        free(l);
        return 0;
    }
    for (i = 0; i < n; i++) {
        p[2 * i].time = l[i].lo;
        p[2 * i].id = (uint32_t)i;
        p[2 * i].is_free = 0;
        p[2 * i + 1].time = l[i].hi;
        p[2 * i + 1].id = (uint32_t)i;
        p[2 * i + 1].is_free = 1;
    }
    qsort(p, 2 * n, sizeof *p, gmt_point_cmp);
    /* ids are dense in allocation order, as for rmm */
    {
        uint32_t* remap = (uint32_t*)malloc((n + 1) * sizeof *remap);
        uint32_t next = 0;
        if (!remap) ok = 0;
        for (i = 0; ok && i < 2 * n; i++) {
            uint32_t id;
            if (!p[i].is_free) remap[p[i].id] = next++;
            id = remap[p[i].id];
            if (!gmt_push(t, id, (int)p[i].is_free, l[p[i].id].size, 0, (double)p[i].time)) ok = 0;
        }
        t->nids = next;
        free(remap);
    }
    free(p);
    free(l);
    return ok;
}

/* format: NULL or "" to guess from the file; scale multiplies sizes of the
   lifetime and packing formats (0 = 1). Returns 1, or 0 with t->error. */
static inline int gmt_load(const char* path, const char* format, uint64_t scale, gmt_trace* t) {
    FILE* f;
    char first[512] = "";
    int ok;
    memset(t, 0, sizeof *t);
    f = fopen(path, "r");
    if (!f) {
        snprintf(t->error, sizeof t->error, "cannot open %s", path);
        return 0;
    }
    if (!fgets(first, sizeof first, f)) first[0] = 0;
    rewind(f);
    if (!format || !*format) {
        if (strncmp(first, "Thread", 6) == 0 || strstr(first, "allocate") || strstr(first, ",free,")) format = "rmm";
        else if (strncmp(first, "id,", 3) == 0) format = "packing";
        else format = "lifetimes";
    }
    snprintf(t->format, sizeof t->format, "%s", format);
    if (!scale) scale = 1;
    if (strcmp(format, "rmm") == 0) ok = gmt_read_rmm(f, t);
    else if (strcmp(format, "packing") == 0) ok = gmt_read_lives(f, t, 1, scale);
    else if (strcmp(format, "lifetimes") == 0) ok = gmt_read_lives(f, t, 0, scale);
    else {
        snprintf(t->error, sizeof t->error, "unknown format '%s' (rmm, lifetimes, packing)", format);
        ok = 0;
    }
    fclose(f);
    if (ok) gmt_finish(t);
    return ok;
}
#endif
