/* gm_snapshot.h -- reading a gm_snapshot() document back, for gm-viz. Not
   part of gpumem.h.

   The document: {"segments":[{"size":N,"mapped":N,"expandable":B,
   "pages":[[offset,length],...],"blocks":[{"offset":N,"size":N,
   "requested":N,"state":"free|allocated|pending"},...]},...],...}. Other
   keys (address, pool, stream, budget, ...) are read past.

   Input is untrusted: anything that is not that document (not JSON, a
   missing or repeated field, a number that is not an unsigned 64-bit
   integer, a block or page outside its segment, a request larger than its
   block, segments whose sizes sum past 2^64, nesting deeper than 64) is
   refused with the line, the segment, the block and the field; nothing is
   read past the end of the text. gms_draw draws the segment map. */
#ifndef GM_SNAPSHOT_H
#define GM_SNAPSHOT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gms_block {
    uint64_t offset, size, requested;
    char state; /* 'f'ree, 'a'llocated, 'p'ending */
} gms_block;

typedef struct gms_seg {
    uint64_t size, mapped;
    int expandable;
    uint64_t* pages; /* pairs: offset, length */
    size_t npages;
    gms_block* blocks;
    size_t nblocks;
} gms_seg;

typedef struct gms_snapshot {
    gms_seg* segs;
    size_t nsegs;
    uint64_t total; /* the segments' sizes */
    char error[256];
} gms_snapshot;

typedef struct gms__p {
    const char *s, *end;
    long line;
    long seg, blk; /* where we are, -1: outside */
    gms_snapshot* out;
} gms__p;

static inline void gms_free(gms_snapshot* d) {
    size_t i;
    for (i = 0; i < d->nsegs; i++) free(d->segs[i].pages), free(d->segs[i].blocks);
    free(d->segs);
    d->segs = NULL;
    d->nsegs = 0;
}

static inline int gms__fail(gms__p* p, const char* field, const char* what) {
    char where[96] = "";
    if (p->out->error[0]) return 0; /* the first error stands */
    if (p->seg >= 0 && p->blk >= 0) snprintf(where, sizeof where, ", segment %ld, block %ld", p->seg, p->blk);
    else if (p->seg >= 0) snprintf(where, sizeof where, ", segment %ld", p->seg);
    snprintf(p->out->error, sizeof p->out->error, "line %ld%s%s%s%s: %s", p->line, where, field ? ", field \"" : "",
             field ? field : "", field ? "\"" : "", what);
    return 0;
}

static inline void gms__ws(gms__p* p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) {
        if (*p->s == '\n') p->line++;
        p->s++;
    }
}

static inline int gms__eat(gms__p* p, char c) {
    gms__ws(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return 1;
    }
    return 0;
}

/* A string into buf (cap > 0; longer ones are cut, but read whole). */
static inline int gms__string(gms__p* p, char* buf, size_t cap, const char* field) {
    size_t n = 0;
    if (!gms__eat(p, '"')) return gms__fail(p, field, "expected a string");
    while (p->s < p->end && *p->s != '"') {
        char c = *p->s++;
        if ((unsigned char)c < 0x20) return gms__fail(p, field, "a control character in a string");
        if (c == '\\') {
            int k;
            if (p->s >= p->end) break;
            c = *p->s++;
            if (c == 'u') {
                for (k = 0; k < 4; k++, p->s++)
                    if (p->s >= p->end || !strchr("0123456789abcdefABCDEF", *p->s) || !*p->s)
                        return gms__fail(p, field, "a bad \\u escape");
                c = '?';
            } else if (!strchr("\"\\/bfnrt", c) || !c) {
                return gms__fail(p, field, "a bad escape");
            }
        }
        if (n + 1 < cap) buf[n++] = c;
    }
    if (p->s >= p->end) return gms__fail(p, field, "a string runs past the end");
    p->s++;
    buf[n] = 0;
    return 1;
}

/* A JSON number that is an unsigned 64-bit integer. */
static inline int gms__u64(gms__p* p, uint64_t* v, const char* field) {
    uint64_t x = 0;
    const char* st;
    gms__ws(p);
    st = p->s;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        unsigned d = (unsigned)(*p->s - '0');
        if (x > (UINT64_MAX - d) / 10) return gms__fail(p, field, "a number too large for 64 bits");
        x = x * 10 + d;
        p->s++;
    }
    if (p->s == st) return gms__fail(p, field, "expected an unsigned integer");
    if (p->s - st > 1 && *st == '0') return gms__fail(p, field, "a number with a leading zero");
    if (p->s < p->end && (*p->s == '.' || *p->s == 'e' || *p->s == 'E'))
        return gms__fail(p, field, "expected an integer, not a fraction");
    *v = x;
    return 1;
}

static inline int gms__word(gms__p* p, const char* w) {
    size_t n = strlen(w);
    gms__ws(p);
    if ((size_t)(p->end - p->s) >= n && memcmp(p->s, w, n) == 0) {
        p->s += n;
        return 1;
    }
    return 0;
}

/* Any JSON value, read past. */
static inline int gms__skip(gms__p* p, int depth, const char* field) {
    char tmp[2];
    gms__ws(p);
    if (depth > 64) return gms__fail(p, field, "nested deeper than 64");
    if (p->s >= p->end) return gms__fail(p, field, "a value is missing at the end");
    if (*p->s == '"') return gms__string(p, tmp, sizeof tmp, field);
    if (*p->s == '{' || *p->s == '[') {
        char close = *p->s == '{' ? '}' : ']';
        int obj = *p->s == '{';
        p->s++;
        if (gms__eat(p, close)) return 1;
        do {
            if (obj && (!gms__string(p, tmp, sizeof tmp, field) || !gms__eat(p, ':')))
                return gms__fail(p, field, "expected \"key\": value");
            if (!gms__skip(p, depth + 1, field)) return 0;
        } while (gms__eat(p, ','));
        return gms__eat(p, close) ? 1 : gms__fail(p, field, "expected , or the end of a list");
    }
    if (gms__word(p, "true") || gms__word(p, "false") || gms__word(p, "null")) return 1;
    if (*p->s == '-' || (*p->s >= '0' && *p->s <= '9')) {
        if (*p->s == '-') p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return gms__fail(p, field, "a bad number");
        while (p->s < p->end && strchr("0123456789.eE+-", *p->s) && *p->s) p->s++;
        return 1;
    }
    return gms__fail(p, field, "not a JSON value");
}

/* Grows an array of n elements of sz bytes to room for n + 1. */
static inline int gms__grow(void** a, size_t n, size_t* cap, size_t sz) {
    if (n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void* b = realloc(*a, nc * sz);
        if (!b) return 0;
        *a = b, *cap = nc;
    }
    return 1;
}

/* Marks a key as seen; a second time is an error. */
static inline int gms__once(gms__p* p, unsigned* seen, unsigned bit, const char* field) {
    if (*seen & bit) return gms__fail(p, field, "given twice");
    *seen |= bit;
    return 1;
}

static inline int gms__block(gms__p* p, gms_block* b) {
    char key[32], state[16];
    unsigned seen = 0;
    int empty;
    if (!gms__eat(p, '{')) return gms__fail(p, NULL, "expected a block object");
    if (!(empty = gms__eat(p, '}'))) do {
        if (!gms__string(p, key, sizeof key, NULL) || !gms__eat(p, ':')) return gms__fail(p, NULL, "expected \"key\": value");
        if (!strcmp(key, "offset")) {
            if (!gms__once(p, &seen, 1, key) || !gms__u64(p, &b->offset, key)) return 0;
        } else if (!strcmp(key, "size")) {
            if (!gms__once(p, &seen, 2, key) || !gms__u64(p, &b->size, key)) return 0;
        } else if (!strcmp(key, "requested")) {
            if (!gms__once(p, &seen, 4, key) || !gms__u64(p, &b->requested, key)) return 0;
        } else if (!strcmp(key, "state")) {
            if (!gms__once(p, &seen, 8, key) || !gms__string(p, state, sizeof state, key)) return 0;
            if (strcmp(state, "free") && strcmp(state, "allocated") && strcmp(state, "pending"))
                return gms__fail(p, key, "not free, allocated or pending");
            b->state = state[0];
        } else if (!gms__skip(p, 1, key)) {
            return 0;
        }
    } while (gms__eat(p, ','));
    if (!empty && !gms__eat(p, '}')) return gms__fail(p, NULL, "expected , or } in a block");
    if (!(seen & 1)) return gms__fail(p, "offset", "missing");
    if (!(seen & 2)) return gms__fail(p, "size", "missing");
    if (!(seen & 4)) return gms__fail(p, "requested", "missing");
    if (!(seen & 8)) return gms__fail(p, "state", "missing");
    if (b->requested > b->size) return gms__fail(p, "requested", "more than the block's size");
    return 1;
}

static inline int gms__segment(gms__p* p, gms_seg* g) {
    char key[32];
    unsigned seen = 0;
    size_t cap = 0, pcap = 0, i;
    int empty, inner;
    if (!gms__eat(p, '{')) return gms__fail(p, NULL, "expected a segment object");
    if (!(empty = gms__eat(p, '}'))) do {
        if (!gms__string(p, key, sizeof key, NULL) || !gms__eat(p, ':')) return gms__fail(p, NULL, "expected \"key\": value");
        if (!strcmp(key, "size")) {
            if (!gms__once(p, &seen, 1, key) || !gms__u64(p, &g->size, key)) return 0;
        } else if (!strcmp(key, "mapped")) {
            if (!gms__once(p, &seen, 2, key) || !gms__u64(p, &g->mapped, key)) return 0;
        } else if (!strcmp(key, "expandable")) {
            if (!gms__once(p, &seen, 4, key)) return 0;
            if (gms__word(p, "true")) g->expandable = 1;
            else if (!gms__word(p, "false")) return gms__fail(p, key, "expected true or false");
        } else if (!strcmp(key, "pages")) {
            if (!gms__once(p, &seen, 8, key)) return 0;
            if (!gms__eat(p, '[')) return gms__fail(p, key, "expected a list");
            if (!(inner = gms__eat(p, ']'))) do {
                if (!gms__grow((void**)&g->pages, 2 * g->npages, &pcap, sizeof(uint64_t)) ||
                    !gms__grow((void**)&g->pages, 2 * g->npages + 1, &pcap, sizeof(uint64_t)))
                    return gms__fail(p, key, "out of host memory");
                if (!gms__eat(p, '[') || !gms__u64(p, &g->pages[2 * g->npages], key) || !gms__eat(p, ',') ||
                    !gms__u64(p, &g->pages[2 * g->npages + 1], key) || !gms__eat(p, ']'))
                    return gms__fail(p, key, "expected [offset,length]");
                g->npages++;
            } while (gms__eat(p, ','));
            if (!inner && !gms__eat(p, ']')) return gms__fail(p, key, "expected , or ] in the pages");
        } else if (!strcmp(key, "blocks")) {
            if (!gms__once(p, &seen, 16, key)) return 0;
            if (!gms__eat(p, '[')) return gms__fail(p, key, "expected a list");
            if (!(inner = gms__eat(p, ']'))) do {
                if (!gms__grow((void**)&g->blocks, g->nblocks, &cap, sizeof(gms_block)))
                    return gms__fail(p, key, "out of host memory");
                memset(&g->blocks[g->nblocks], 0, sizeof(gms_block));
                p->blk = (long)g->nblocks;
                g->nblocks++;
                if (!gms__block(p, &g->blocks[g->nblocks - 1])) return 0;
            } while (gms__eat(p, ','));
            p->blk = -1;
            if (!inner && !gms__eat(p, ']')) return gms__fail(p, key, "expected , or ] in the blocks");
        } else if (!gms__skip(p, 1, key)) {
            return 0;
        }
    } while (gms__eat(p, ','));
    if (!empty && !gms__eat(p, '}')) return gms__fail(p, NULL, "expected , or } in a segment");
    if (!(seen & 1)) return gms__fail(p, "size", "missing");
    if (!(seen & 16)) return gms__fail(p, "blocks", "missing");
    for (i = 0; i < g->nblocks; i++) {
        const gms_block* b = &g->blocks[i];
        p->blk = (long)i;
        if (b->offset > g->size || b->size > g->size - b->offset) return gms__fail(p, "size", "past the segment's end");
    }
    p->blk = -1;
    for (i = 0; i < g->npages; i++)
        if (g->pages[2 * i] > g->size || g->pages[2 * i + 1] > g->size - g->pages[2 * i])
            return gms__fail(p, "pages", "a page run past the segment's end");
    return 1;
}

/* Parses len bytes of text. 1, or 0 with d->error (d holds nothing then). */
static inline int gms_parse(const char* text, size_t len, gms_snapshot* d) {
    gms__p p;
    char key[32];
    size_t cap = 0, i;
    int have_segs = 0, ok = 0, empty, inner;
    memset(d, 0, sizeof *d);
    p.s = text, p.end = text + len, p.line = 1, p.seg = p.blk = -1, p.out = d;
    if (!gms__eat(&p, '{')) {
        gms__fail(&p, NULL, "not a gm_snapshot document (expected {)");
        goto out;
    }
    if (!(empty = gms__eat(&p, '}'))) do {
        if (!gms__string(&p, key, sizeof key, NULL) || !gms__eat(&p, ':')) {
            gms__fail(&p, NULL, "expected \"key\": value");
            goto out;
        }
        if (!strcmp(key, "segments")) {
            if (have_segs) {
                gms__fail(&p, key, "given twice");
                goto out;
            }
            have_segs = 1;
            if (!gms__eat(&p, '[')) {
                gms__fail(&p, key, "expected a list");
                goto out;
            }
            if (!(inner = gms__eat(&p, ']'))) do {
                if (!gms__grow((void**)&d->segs, d->nsegs, &cap, sizeof(gms_seg))) {
                    gms__fail(&p, key, "out of host memory");
                    goto out;
                }
                memset(&d->segs[d->nsegs], 0, sizeof(gms_seg));
                p.seg = (long)d->nsegs;
                d->nsegs++;
                if (!gms__segment(&p, &d->segs[d->nsegs - 1])) goto out;
            } while (gms__eat(&p, ','));
            p.seg = -1;
            if (!inner && !gms__eat(&p, ']')) {
                gms__fail(&p, key, "expected , or ] in the segments");
                goto out;
            }
        } else if (!gms__skip(&p, 1, key)) {
            goto out;
        }
    } while (gms__eat(&p, ','));
    if (!empty && !gms__eat(&p, '}')) {
        gms__fail(&p, NULL, "expected , or } at the top level");
        goto out;
    }
    gms__ws(&p);
    if (p.s != p.end) {
        gms__fail(&p, NULL, "text after the document");
        goto out;
    }
    if (!have_segs) {
        gms__fail(&p, "segments", "missing");
        goto out;
    }
    for (i = 0; i < d->nsegs; i++) {
        if (d->segs[i].size > UINT64_MAX - d->total) {
            p.seg = (long)i;
            gms__fail(&p, "size", "the segments' sizes sum past 2^64");
            goto out;
        }
        d->total += d->segs[i].size;
    }
    ok = 1;
out:
    if (!ok) gms_free(d);
    return ok;
}
/* One run of bytes [at, at + len) of the laid-out map, split across rows.
   Integer bytes: every piece is at least one byte (in_row >= 1, and no
   product can wrap), so the loop ends. */
static inline void gms__run(FILE* f, int W, uint64_t at, uint64_t len, uint64_t per_row, int rows, int rh, const char* color) {
    const int L = 10, GAP = 2;
    while (len > 0) {
        uint64_t row = at / per_row, in_row = per_row - at % per_row, piece = len < in_row ? len : in_row;
        double x = L + (double)(at % per_row) / (double)per_row * (W - 2 * L);
        double w = (double)piece / (double)per_row * (W - 2 * L);
        if (row >= (uint64_t)rows) return;
        fprintf(f, "<rect x='%.2f' y='%d' width='%.2f' height='%d' fill='%s'/>\n", x, (int)row * (rh + GAP) + 2,
                w < 0.2 ? 0.2 : w, rh, color);
        at += piece;
        len -= piece;
    }
}

/* The segment map of a snapshot as inline SVG, W pixels wide. Segments
   are laid end to end in address order, wrapped into rows of equal bytes;
   blocks are coloured by state, with the part of an allocated block beyond
   its request shaded as rounding waste, and a dark tick where each segment
   ends. gms_parse checked the snapshot: every block and page lies in its
   segment, and the sizes sum below 2^64, so no position wraps. */
static inline void gms_draw(FILE* f, const gms_snapshot* d, int W) {
    const int ROWS = 60, RH = 9, GAP = 2, L = 10;
    uint64_t per_row, at = 0;
    size_t i, k;
    if (d->nsegs == 0 || d->total == 0) {
        fprintf(f, "<p>No segments.</p>\n");
        return;
    }
    per_row = d->total / (uint64_t)ROWS + (d->total % (uint64_t)ROWS != 0);
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d'>\n", W, ROWS * (RH + GAP) + 4);
    for (i = 0; i < d->nsegs; i++) {
        const gms_seg* g = &d->segs[i];
        if (!g->size) continue;
        if (g->expandable || g->npages) { /* the ground: mapped memory is free unless a block says otherwise */
            gms__run(f, W, at, g->size, per_row, ROWS, RH, "#fafafa");
            for (k = 0; k < g->npages; k++) gms__run(f, W, at + g->pages[2 * k], g->pages[2 * k + 1], per_row, ROWS, RH, "#e0e0e0");
        } else {
            gms__run(f, W, at, g->size, per_row, ROWS, RH, "#e0e0e0");
        }
        for (k = 0; k < g->nblocks; k++) {
            const gms_block* b = &g->blocks[k];
            if (b->state == 'a') {
                gms__run(f, W, at + b->offset, b->requested, per_row, ROWS, RH, "#1f77b4");
                gms__run(f, W, at + b->offset + b->requested, b->size - b->requested, per_row, ROWS, RH, "#9ecae1");
            } else if (b->state == 'p') {
                gms__run(f, W, at + b->offset, b->size, per_row, ROWS, RH, "#ff7f0e");
            }
        }
        at += g->size;
        {
            uint64_t row = (at - 1) / per_row;
            double x = L + (double)(at - per_row * row) / (double)per_row * (W - 2 * L);
            if (row < (uint64_t)ROWS)
                fprintf(f, "<rect x='%.2f' y='%d' width='1' height='%d' fill='#333'/>\n", x - 0.5,
                        (int)row * (RH + GAP) + 1, RH + 2);
        }
    }
    fprintf(f, "</svg>\n");
    fprintf(f, "<p class='legend'><span style='background:#1f77b4'></span>allocated (requested) "
               "<span style='background:#9ecae1'></span>allocated beyond the request (rounding) "
               "<span style='background:#e0e0e0'></span>free, mapped (cached) "
               "<span style='background:#fafafa;outline:1px solid #ccc'></span>free, unmapped (reserves nothing) "
               "<span style='background:#ff7f0e'></span>pending (other streams) "
               "<span style='background:#333;width:2px'></span>segment end. %zu segments, %llu bytes; "
               "each row is %llu bytes.</p>\n",
            d->nsegs, (unsigned long long)d->total, (unsigned long long)per_row);
}
#endif
