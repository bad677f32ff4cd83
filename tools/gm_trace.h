/* gm_trace.h -- reading allocation traces into one event stream, for the
   replay tool, the visualiser and the benchmarks. Not part of gpumem.h.

   Formats (chosen by content, or forced):
     rmm        RMM's logging_resource_adaptor CSV:
                Thread,Time,Action,Pointer,Size,Stream (gpumem's own trace
                capture writes this too). Action is allocate, or free (or
                deallocate, as newer RMM writes it); Time a number or
                HH:MM:SS:us; Pointer hex; Stream decimal or 0x-hex. A free
                names a live pointer with its size. A null pointer of size
                0 (a zero-byte request) is skipped.
     lifetimes  "start end size" per line: live from step start through
                step end (end >= start).
     packing    minimalloc's "id,lower,upper,size": live in [lower, upper).
   Lifetimes and packing become a stream: at each time, frees first, then
   allocations. Sizes may be scaled (packing problems x512 look like GPU
   tensors).

   Input is untrusted: a malformed line (a missing or extra field, a
   number that is not one or does not fit in 64 bits, a size that
   overflows when scaled, a line past GMT_LINE_MAX bytes or with a NUL in
   it), a free of a pointer that is not live, a free whose size differs
   from its allocation, or an allocation of a pointer already live is an
   error naming the line and the field; nothing crashes, and every valid
   trace is read. */
#ifndef GM_TRACE_H
#define GM_TRACE_H
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GMT_LINE_MAX 65536

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
    uint64_t peak_live;   /* largest sum of live requested sizes (saturates at 2^64 - 1) */
    uint64_t total_bytes; /* sum of all allocation sizes (saturates) */
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

static inline uint64_t gmt_sat_add(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

/* Peak live and the live count at the end, from the event stream (a free
   always follows its allocation, with its size). */
static inline void gmt_finish(gmt_trace* t) {
    uint64_t live = 0;
    size_t i, nlive = 0, over = 0; /* over: live has passed 2^64 - 1 by this many frees' worth */
    t->peak_live = 0;
    t->total_bytes = 0;
    for (i = 0; i < t->n; i++) {
        gmt_event* e = &t->ev[i];
        if (!e->is_free) {
            t->total_bytes = gmt_sat_add(t->total_bytes, e->size);
            if (e->size > UINT64_MAX - live) over++, live = UINT64_MAX;
            else live += e->size;
            nlive++;
            if (live > t->peak_live) t->peak_live = live;
        } else {
            if (!over) live -= e->size;
            nlive--;
        }
    }
    t->live_at_end = nlive;
}

/* Splits a line into at most `max` fields on commas or white space;
   returns the count, or max + 1 when there are more. */
static inline int gmt_fields(char* line, char** f, int max) {
    int n = 0;
    char* p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (!*p || *p == '\n' || *p == '\r') break;
        if (n == max) return max + 1;
        f[n++] = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
        if (*p) *p++ = 0;
    }
    return n;
}

/* An unsigned 64-bit integer, all of s: no sign, no blank, no overflow. */
static inline int gmt_u64(const char* s, int base, uint64_t* out) {
    char* end;
    unsigned long long v;
    if (!*s || !isxdigit((unsigned char)*s)) return 0;
    errno = 0;
    v = strtoull(s, &end, base);
    if (*end || errno == ERANGE) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* RMM's time: a finite number >= 0 (seconds or microseconds, as written),
   or HH:MM:SS:micro / HH:MM:SS.fraction (microseconds since midnight). */
static inline int gmt_time(const char* s, double* us) {
    char* end;
    double v;
    if (!*s || !(isdigit((unsigned char)*s) || *s == '.')) return 0;
    errno = 0;
    v = strtod(s, &end);
    if (!*end) {
        if (errno == ERANGE || !isfinite(v) || v < 0) return 0;
        *us = v;
        return 1;
    }
    {
        unsigned h, m, sec;
        char sep;
        int at = 0;
        if (sscanf(s, "%2u:%2u:%2u%c%n", &h, &m, &sec, &sep, &at) != 4 || (sep != ':' && sep != '.') || h > 99 ||
            m > 59 || sec > 60)
            return 0;
        s += at;
        if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9) return 0;
        v = strtod(s, NULL);
        if (sep == '.') v = v / pow(10.0, (double)strlen(s)) * 1e6; /* a fraction of a second */
        *us = ((double)h * 3600 + (double)m * 60 + (double)sec) * 1e6 + v;
        return 1;
    }
}

/* One line of the input (without its end), or NULL at the end; an error
   (too long, a NUL byte, out of memory) sets t->error. */
static inline char* gmt_line(FILE* f, char** buf, size_t* cap, long ln, gmt_trace* t) {
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char* b;
            if (nc > GMT_LINE_MAX + 2) nc = GMT_LINE_MAX + 2;
            if (n + 2 > nc) {
                snprintf(t->error, sizeof t->error, "line %ld: longer than %d bytes", ln, GMT_LINE_MAX);
                return NULL;
            }
            b = (char*)realloc(*buf, nc);
            if (!b) {
                snprintf(t->error, sizeof t->error, "out of host memory");
                return NULL;
            }
            *buf = b, *cap = nc;
        }
        if (c == '\n') break;
        if (c == 0) {
            snprintf(t->error, sizeof t->error, "line %ld: a NUL byte", ln);
            return NULL;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && n == 0) return NULL;
    (*buf)[n] = 0;
    return *buf;
}

/* Open-addressing map from the trace's pointer (any 64-bit value) to the
   live id; `used` marks the occupied slots, deletion shifts back. */
typedef struct gmt_pmap {
    uint64_t* key;
    uint32_t* val;
    unsigned char* used;
    size_t cap, n;
} gmt_pmap;

static inline size_t gmt_home(const gmt_pmap* m, uint64_t k) {
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (m->cap - 1);
}

/* The slot of k, or the empty slot where it would go. */
static inline size_t gmt_slot(const gmt_pmap* m, uint64_t k) {
    size_t i = gmt_home(m, k);
    while (m->used[i] && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    return i;
}

static inline int gmt_pmap_has(const gmt_pmap* m, uint64_t k, uint32_t* v) {
    size_t i;
    if (!m->cap) return 0;
    i = gmt_slot(m, k);
    if (m->used[i] && v) *v = m->val[i];
    return m->used[i];
}

static inline int gmt_pmap_put(gmt_pmap* m, uint64_t k, uint32_t v) {
    size_t i;
    if ((m->n + 1) * 2 > m->cap) {
        gmt_pmap o = *m;
        size_t j;
        m->cap = o.cap ? o.cap * 2 : 1024;
        m->key = (uint64_t*)calloc(m->cap, sizeof *m->key);
        m->val = (uint32_t*)calloc(m->cap, sizeof *m->val);
        m->used = (unsigned char*)calloc(m->cap, 1);
        m->n = 0;
        if (!m->key || !m->val || !m->used) {
            free(m->key), free(m->val), free(m->used);
            *m = o;
            return 0;
        }
        for (j = 0; j < o.cap; j++)
            if (o.used[j]) {
                i = gmt_slot(m, o.key[j]);
                m->key[i] = o.key[j], m->val[i] = o.val[j], m->used[i] = 1;
                m->n++;
            }
        free(o.key), free(o.val), free(o.used);
    }
    i = gmt_slot(m, k);
    m->key[i] = k, m->val[i] = v, m->used[i] = 1;
    m->n++;
    return 1;
}

static inline void gmt_pmap_del(gmt_pmap* m, uint64_t k) {
    size_t i, j, mask;
    if (!m->cap) return;
    i = gmt_slot(m, k), mask = m->cap - 1;
    if (!m->used[i]) return;
    for (j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
        size_t h = gmt_home(m, m->key[j]);
        if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue; /* stays: its home is in (i, j] */
        m->key[i] = m->key[j], m->val[i] = m->val[j];
        i = j;
    }
    m->used[i] = 0;
    m->n--;
}

static inline void gmt_pmap_free(gmt_pmap* m) {
    free(m->key), free(m->val), free(m->used);
    memset(m, 0, sizeof *m);
}

#define GMT_FAIL(...)                                        \
    do {                                                     \
        snprintf(t->error, sizeof t->error, __VA_ARGS__);    \
        goto fail;                                           \
    } while (0)

static inline int gmt_read_rmm(FILE* f, gmt_trace* t) {
    static const char* want = "expected Thread,Time,Action,Pointer,Size,Stream";
    char *line, *buf = NULL, *fl[8];
    size_t cap = 0;
    long ln = 0;
    gmt_pmap m;
    uint64_t* sizes = NULL;
    size_t cap_sizes = 0;
    memset(&m, 0, sizeof m);
    while (++ln, (line = gmt_line(f, &buf, &cap, ln, t)) != NULL) {
        uint64_t ptr, size, stream = 0, th;
        uint32_t id;
        double tus;
        int nf, is_free;
        const char* ps;
        if (ln == 1 && strncmp(line, "Thread", 6) == 0) continue;
        nf = gmt_fields(line, fl, 6);
        if (nf == 0) continue;
        if (nf < 5) GMT_FAIL("line %ld: %s (%d fields)", ln, want, nf);
        if (nf > 6) GMT_FAIL("line %ld: %s (more than 6 fields)", ln, want);
        if (!gmt_u64(fl[0], 0, &th)) GMT_FAIL("line %ld: %s (field Thread: '%.32s' is not an integer)", ln, want, fl[0]);
        if (!gmt_time(fl[1], &tus)) GMT_FAIL("line %ld: %s (field Time: '%.32s' is not a time)", ln, want, fl[1]);
        if (!gmt_u64(fl[4], 10, &size))
            GMT_FAIL("line %ld: %s (field Size: '%.32s' is not an unsigned 64-bit integer)", ln, want, fl[4]);
        if (nf == 6 && !gmt_u64(fl[5], 0, &stream))
            GMT_FAIL("line %ld: %s (field Stream: '%.32s' is not an unsigned 64-bit integer)", ln, want, fl[5]);
        if (strcmp(fl[2], "allocate") == 0) is_free = 0;
        else if (strcmp(fl[2], "free") == 0 || strcmp(fl[2], "deallocate") == 0) is_free = 1;
        else GMT_FAIL("line %ld: action '%.32s' is neither allocate nor free (field Action)", ln, fl[2]);
        ps = fl[3][0] == '0' && (fl[3][1] == 'x' || fl[3][1] == 'X') ? fl[3] + 2 : fl[3];
        if (!gmt_u64(ps, 16, &ptr)) GMT_FAIL("line %ld: bad pointer '%.32s' (field Pointer)", ln, fl[3]);
        if (!ptr) {
            if (size) GMT_FAIL("line %ld: a null pointer with %llu bytes (field Pointer)", ln, (unsigned long long)size);
            continue; /* a zero-byte request: nothing to replay */
        }
        if (!is_free) {
            if (gmt_pmap_has(&m, ptr, NULL))
                GMT_FAIL("line %ld: pointer %.32s allocated again while live (field Pointer)", ln, fl[3]);
            if (t->nids == UINT32_MAX) GMT_FAIL("line %ld: more than 2^32 - 1 allocations", ln);
            if (t->nids == cap_sizes) {
                size_t nc = cap_sizes ? cap_sizes * 2 : 4096;
                uint64_t* s2 = (uint64_t*)realloc(sizes, nc * sizeof *s2);
                if (!s2) GMT_FAIL("out of host memory");
                sizes = s2, cap_sizes = nc;
            }
            sizes[t->nids] = size;
            if (!gmt_pmap_put(&m, ptr, t->nids)) GMT_FAIL("out of host memory");
            if (!gmt_push(t, t->nids, 0, size, stream, tus)) goto fail;
            t->nids++;
        } else {
            if (!gmt_pmap_has(&m, ptr, &id)) GMT_FAIL("line %ld: free of %.32s, which is not live (field Pointer)", ln, fl[3]);
            if (sizes[id] != size)
                GMT_FAIL("line %ld: free of %.32s with size %llu, allocated with %llu (field Size)", ln, fl[3],
                         (unsigned long long)size, (unsigned long long)sizes[id]);
            gmt_pmap_del(&m, ptr);
            if (!gmt_push(t, id, 1, size, stream, tus)) goto fail;
        }
    }
    if (t->error[0]) goto fail;
    gmt_pmap_free(&m);
    free(sizes);
    free(buf);
    return 1;
fail:
    gmt_pmap_free(&m);
    free(sizes);
    free(buf);
    return 0;
}

/* Lifetimes and packing problems: buffers live from lo, freed at hi (the
   event's time; lifetimes free after the allocations of hi, packing
   before them). */
typedef struct gmt_life {
    uint64_t lo, hi, size;
} gmt_life;
typedef struct gmt_point {
    uint64_t time;
    uint32_t id;
    uint32_t phase; /* at one time: packing frees (0), allocations (1), lifetimes' frees (2) */
} gmt_point;

static inline int gmt_point_cmp(const void* a, const void* b) {
    const gmt_point *x = (const gmt_point*)a, *y = (const gmt_point*)b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static inline int gmt_read_lives(FILE* f, gmt_trace* t, int packing, uint64_t scale) {
    static const char* names[2][4] = {{"start", "end", "size", ""}, {"id", "lower", "upper", "size"}};
    char *line, *buf = NULL, *fl[8];
    size_t cap = 0, n = 0, lcap = 0, i;
    long ln = 0;
    gmt_life* l = NULL;
    gmt_point* p = NULL;
    uint32_t* remap = NULL;
    const char* want = packing ? "expected id,lower,upper,size" : "expected start end size";
    while (++ln, (line = gmt_line(f, &buf, &cap, ln, t)) != NULL) {
        uint64_t v[4];
        int nf, nwant = packing ? 4 : 3, k;
        if (ln == 1 && isalpha((unsigned char)line[0])) continue; /* header */
        nf = gmt_fields(line, fl, 4);
        if (nf == 0) continue;
        if (nf != nwant) GMT_FAIL("line %ld: %s (%s fields)", ln, want, nf > nwant ? "too many" : "too few");
        for (k = 0; k < nwant; k++)
            if (!gmt_u64(fl[k], 10, &v[k]))
                GMT_FAIL("line %ld: %s (field %s: '%.32s' is not an unsigned 64-bit integer)", ln, want,
                         names[packing][k], fl[k]);
        if (n == UINT32_MAX) GMT_FAIL("line %ld: more than 2^32 - 1 buffers", ln);
        if (n == lcap) {
            size_t nc = lcap ? lcap * 2 : 1024;
            gmt_life* l2 = (gmt_life*)realloc(l, nc * sizeof *l2);
            if (!l2) GMT_FAIL("out of host memory");
            l = l2, lcap = nc;
        }
        l[n].lo = packing ? v[1] : v[0];
        l[n].hi = packing ? v[2] : v[1];
        l[n].size = packing ? v[3] : v[2];
        if (scale > 1 && l[n].size > UINT64_MAX / scale)
            GMT_FAIL("line %ld: %llu times the scale %llu passes 2^64 (field size)", ln, (unsigned long long)l[n].size,
                     (unsigned long long)scale);
        l[n].size *= scale;
        if (packing ? l[n].hi <= l[n].lo : l[n].hi < l[n].lo)
            GMT_FAIL("line %ld: the lifetime ends before it starts (field %s)", ln, names[packing][packing ? 2 : 1]);
        n++;
    }
    if (t->error[0]) goto fail;
    p = (gmt_point*)malloc((2 * n + 1) * sizeof *p);
    remap = (uint32_t*)malloc((n + 1) * sizeof *remap);
    if (!p || !remap) GMT_FAIL("out of host memory");
    for (i = 0; i < n; i++) {
        p[2 * i].time = l[i].lo, p[2 * i].id = (uint32_t)i, p[2 * i].phase = 1;
        p[2 * i + 1].time = l[i].hi, p[2 * i + 1].id = (uint32_t)i, p[2 * i + 1].phase = packing ? 0 : 2;
    }
    qsort(p, 2 * n, sizeof *p, gmt_point_cmp);
    { /* ids are dense in allocation order, as for rmm; a lifetime's free is at end + 1 in time */
        uint32_t next = 0;
        for (i = 0; i < 2 * n; i++) {
            int is_free = p[i].phase != 1;
            double tm = (double)p[i].time + (p[i].phase == 2 ? 1.0 : 0.0);
            if (!is_free) remap[p[i].id] = next++;
            if (!gmt_push(t, remap[p[i].id], is_free, l[p[i].id].size, 0, tm)) goto fail;
        }
        t->nids = next;
    }
    free(p), free(remap), free(l), free(buf);
    return 1;
fail:
    free(p), free(remap), free(l), free(buf);
    return 0;
}
#undef GMT_FAIL

/* Reads an open stream; format and scale as gmt_load. */
static inline int gmt_load_file(FILE* f, const char* format, uint64_t scale, gmt_trace* t) {
    char first[512] = "";
    int ok;
    memset(t, 0, sizeof *t);
    if (!format || !*format) {
        long at = ftell(f);
        if (!fgets(first, sizeof first, f)) first[0] = 0;
        if (at < 0 || fseek(f, at, SEEK_SET) != 0) {
            snprintf(t->error, sizeof t->error, "cannot read the input twice to guess its format (name it)");
            return 0;
        }
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
        snprintf(t->error, sizeof t->error, "unknown format '%.32s' (rmm, lifetimes, packing)", format);
        ok = 0;
    }
    if (ok) gmt_finish(t);
    return ok;
}

/* format: NULL or "" to guess from the file; scale multiplies sizes of the
   lifetime and packing formats (0 = 1). Returns 1, or 0 with t->error. */
static inline int gmt_load(const char* path, const char* format, uint64_t scale, gmt_trace* t) {
    FILE* f;
    int ok;
    memset(t, 0, sizeof *t);
    f = fopen(path, "r");
    if (!f) {
        snprintf(t->error, sizeof t->error, "cannot open %s: %s", path, strerror(errno));
        return 0;
    }
    ok = gmt_load_file(f, format, scale, t);
    fclose(f);
    return ok;
}
#endif
