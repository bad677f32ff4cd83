/* gm-viz: a picture of a trace or a snapshot, as one self-contained HTML
   page (inline SVG, no scripts, no network).

   usage: gm-viz [--conf key:value,...] [--format F] [--scale N] TRACE -o OUT.html
          gm-viz --snapshot SNAPSHOT.json -o OUT.html

   For a trace it replays the trace through gpumem on the sim backend and
   draws (1) live and reserved memory over the events, and (2) the segment
   map at the moment reserved memory peaked: every segment, its blocks
   allocated or free, laid out in address order. For a snapshot (the JSON of
   gm_snapshot) it draws the segment map alone. */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "gm_trace.h"
#include "gm_replay.h"
#include "gm_snapshot.h"

#define W 1000 /* drawing width in pixels */

typedef struct series {
    double* live;
    double* reserved;
    size_t n;
} series;

static void record(size_t i, uint64_t live, int64_t reserved, void* user) {
    series* s = (series*)user;
    s->live[i] = (double)live;
    s->reserved[i] = (double)reserved;
    s->n = i + 1;
}

static const char* human(char* buf, size_t cap, double v) {
    static const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, u[i]);
    return buf;
}

/* Memory over events: the maximum of each pixel column, so peaks show. */
static void chart(FILE* f, const series* s, double peak_live) {
    const int H = 300, L = 80, R = 20, T = 20, B = 40;
    int plot_w = W - L - R, x, k;
    double ymax = 0;
    size_t i;
    char buf[32];
    for (i = 0; i < s->n; i++)
        if (s->reserved[i] > ymax) ymax = s->reserved[i];
    if (ymax <= 0) ymax = 1;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' font-size='12'>\n",
            W, H + T + B);
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='#fafafa' stroke='#ccc'/>\n", L, T, plot_w, H);
    for (k = 0; k <= 4; k++) {
        double v = ymax * k / 4;
        int y = T + H - (int)(H * k / 4);
        fprintf(f, "<line x1='%d' x2='%d' y1='%d' y2='%d' stroke='#e5e5e5'/>\n", L, L + plot_w, y, y);
        fprintf(f, "<text x='%d' y='%d' text-anchor='end'>%s</text>\n", L - 6, y + 4, human(buf, sizeof buf, v));
    }
    for (k = 0; k < 2; k++) {
        const double* v = k ? s->live : s->reserved;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", k ? "#1f77b4" : "#d62728");
        for (x = 0; x < plot_w; x++) {
            size_t a = s->n * (size_t)x / (size_t)plot_w, b = s->n * (size_t)(x + 1) / (size_t)plot_w;
            double m = 0;
            if (b <= a) b = a + 1;
            for (i = a; i < b && i < s->n; i++)
                if (v[i] > m) m = v[i];
            fprintf(f, "%d,%.1f ", L + x, T + H - H * m / ymax);
        }
        fprintf(f, "'/>\n");
    }
    fprintf(f, "<line x1='%d' x2='%d' y1='%.1f' y2='%.1f' stroke='#1f77b4' stroke-dasharray='4 3'/>\n", L, L + plot_w,
            T + H - H * peak_live / ymax, T + H - H * peak_live / ymax);
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>events (%zu)</text>\n", L + plot_w / 2, T + H + 28, s->n);
    fprintf(f, "<rect x='%d' y='%d' width='12' height='3' fill='#d62728'/><text x='%d' y='%d'>reserved</text>\n",
            L + 10, T + 10, L + 26, T + 14);
    fprintf(f, "<rect x='%d' y='%d' width='12' height='3' fill='#1f77b4'/><text x='%d' y='%d'>live (requested)</text>\n",
            L + 100, T + 10, L + 116, T + 14);
    fprintf(f, "</svg>\n");
}

/* Text into HTML, escaped: names and options come from the command line. */
static void html(FILE* f, const char* s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '\'') fputs("&#39;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static void page_head(FILE* f, const char* title) {
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>");
    html(f, title);
    fprintf(f, "</title>\n"
               "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1040px}"
               "h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse}"
               "td{padding:2px 12px 2px 0}.legend span{display:inline-block;width:12px;height:10px;"
               "margin:0 4px 0 12px;vertical-align:middle}</style></head><body>\n<h1>");
    html(f, title);
    fprintf(f, "</h1>\n");
}

/* The whole file (any kind: a pipe too); *n its length. NULL on failure. */
static char* read_all(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    char* s = NULL;
    size_t cap = 0, got;
    *n = 0;
    if (!f) return NULL;
    do {
        if (*n == cap) {
            char* t = (char*)realloc(s, cap = cap ? 2 * cap : 1 << 16);
            if (!t) {
                free(s);
                fclose(f);
                return NULL;
            }
            s = t;
        }
        got = fread(s + *n, 1, cap - *n, f);
        *n += got;
    } while (got > 0);
    if (ferror(f)) {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

int main(int argc, char** argv) {
    const char *conf = "", *format = NULL, *out = NULL, *snap = NULL, *in = NULL;
    uint64_t scale = 0;
    int i;
    FILE* f;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--conf") && i + 1 < argc) conf = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--snapshot") && i + 1 < argc) snap = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else {
            fprintf(stderr, "usage: gm-viz [--conf k:v,...] [--format F] [--scale N] TRACE -o OUT.html\n"
                            "       gm-viz --snapshot SNAPSHOT.json -o OUT.html\n");
            return 2;
        }
    }
    if (!out || (!snap && !in)) {
        fprintf(stderr, "gm-viz: need an input and -o OUT.html\n");
        return 2;
    }
    if (snap) {
        size_t n;
        char* json = read_all(snap, &n);
        gms_snapshot d;
        if (!json) {
            fprintf(stderr, "gm-viz: cannot read %s\n", snap);
            return 1;
        }
        if (!gms_parse(json, n, &d)) {
            fprintf(stderr, "gm-viz: %s: %s\n", snap, d.error);
            free(json);
            return 1;
        }
        free(json);
        f = fopen(out, "w");
        if (!f) {
            fprintf(stderr, "gm-viz: cannot write %s\n", out);
            gms_free(&d);
            return 1;
        }
        page_head(f, "gpumem snapshot");
        fprintf(f, "<h2>Segment map</h2>\n");
        gms_draw(f, &d, W);
        fprintf(f, "</body></html>\n");
        gms_free(&d);
        if (fclose(f) != 0) {
            fprintf(stderr, "gm-viz: cannot write %s\n", out);
            return 1;
        }
        return 0;
    } else {
        gmt_trace t;
        gm_desc d;
        gm_context* ctx;
        gmr_result r;
        series s;
        gmr_peak pk;
        char* json;
        gms_snapshot snapd;
        size_t n;
        char b1[32], b2[32];
        const char* name = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
        if (!scale && (!format || !strcmp(format, "packing"))) {
            FILE* g = fopen(in, "r");
            char line[16] = "";
            if (g) {
                if (!fgets(line, sizeof line, g)) line[0] = 0;
                fclose(g);
            }
            if (!strncmp(line, "id,", 3)) scale = 512;
        }
        if (!gmt_load(in, format, scale, &t)) {
            fprintf(stderr, "gm-viz: %s: %s\n", in, t.error);
            return 1;
        }
        memset(&d, 0, sizeof d);
        d.backend = GM_BACKEND_SIM;
        d.log_fn = gm_log_stderr;
        d.sim.capacity = (size_t)1 << 40;
        d.conf = conf;
        s.live = (double*)calloc(t.n + 1, sizeof(double));
        s.reserved = (double*)calloc(t.n + 1, sizeof(double));
        s.n = 0;
        if (gm_setup(&ctx, &d) != GM_OK || !s.live || !s.reserved) return 1;
        r = gmr_run(ctx, &t, 0, 0, 0, record, &s);
        gm_shutdown(ctx);
        /* again, up to the first event at the peak, for the map */
        pk.best = -1;
        pk.at = 0;
        for (n = 0; n < s.n; n++) gmr_peak_step(n, 0, (int64_t)s.reserved[n], &pk);
        d.log_fn = NULL; /* its shutdown releases the blocks live at the peak, on purpose */
        if (gm_setup(&ctx, &d) != GM_OK) return 1;
        gmr_run(ctx, &t, pk.at + 1, 0, GMR_KEEP_LIVE, NULL, NULL);
        n = gm_snapshot(ctx, NULL, 0);
        json = (char*)malloc(n + 1);
        if (!json) return 1;
        gm_snapshot(ctx, json, n + 1);
        gm_shutdown(ctx);
        if (!gms_parse(json, n, &snapd)) { /* its own snapshot: never, but say so */
            fprintf(stderr, "gm-viz: the snapshot of the replay does not read back: %s\n", snapd.error);
            return 1;
        }
        free(json);
        f = fopen(out, "w");
        if (!f) {
            fprintf(stderr, "gm-viz: cannot write %s\n", out);
            return 1;
        }
        page_head(f, name);
        fprintf(f, "<table><tr><td>options</td><td>");
        html(f, *conf ? conf : "defaults");
        fprintf(f, "</td></tr></table>\n");
        fprintf(f, "<table><tr><td>events</td><td>%zu</td></tr><tr><td>peak live</td><td>%s</td></tr>"
                   "<tr><td>peak reserved</td><td>%s</td></tr><tr><td>fragmentation</td><td>%.2f%% "
                   "(1 &minus; peak live / peak reserved)</td></tr><tr><td>segments created</td><td>%lld</td></tr>"
                   "</table>\n",
                r.ops, human(b1, sizeof b1, (double)r.peak_live), human(b2, sizeof b2, (double)r.peak_reserved),
                100 * r.frag, (long long)r.segments);
        fprintf(f, "<h2>Memory over the trace</h2>\n");
        chart(f, &s, (double)r.peak_live);
        fprintf(f, "<h2>Segment map at peak reserved (after event %zu)</h2>\n", pk.at);
        gms_draw(f, &snapd, W);
        fprintf(f, "</body></html>\n");
        gms_free(&snapd);
        if (fclose(f) != 0) {
            fprintf(stderr, "gm-viz: cannot write %s\n", out);
            return 1;
        }
        printf("gm-viz: wrote %s (%zu events, fragmentation %.2f%%)\n", out, r.ops, 100 * r.frag);
        free(s.live);
        free(s.reserved);
        gmt_free(&t);
    }
    return 0;
}
