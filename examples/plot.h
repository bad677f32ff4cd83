/* plot.h -- just enough SVG for the examples and benchmarks to draw their
   figures: panels with nice axis ticks, lines, stacked areas, markers and a
   legend. One header, no dependencies; everything is static.

       FILE* f = plot_open("build/x.svg", 800, 400);
       plot p = plot_panel(f, 60, 30, 700, 320, 0, 10, 0, 1, "title", "x", "y");
       plot_line(&p, xs, ys, n, "#1f77b4", 0);
       plot_legend(&p, names, colors, 2);
       plot_close(f);

   Coordinates passed to the drawing calls are data coordinates; values
   outside the panel's range are clamped to its frame. */
#ifndef GM_PLOT_H
#define GM_PLOT_H
#include <math.h>
#include <stdio.h>

typedef struct plot {
    FILE* f;
    double x, y, w, h;     /* the frame, in SVG pixels */
    double x0, x1, y0, y1; /* the data range */
} plot;

static const char* const plot_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};

static inline FILE* plot_open(const char* path, int width, int height) {
    FILE* f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height, width, height);
    return f;
}

static inline int plot_close(FILE* f) {
    if (!f) return -1;
    fputs("</svg>\n", f);
    return fclose(f);
}

static inline double plot_px(const plot* p, double x) {
    double t = p->x1 > p->x0 ? (x - p->x0) / (p->x1 - p->x0) : 0;
    return p->x + p->w * (t < 0 ? 0 : t > 1 ? 1 : t);
}
static inline double plot_py(const plot* p, double y) {
    double t = p->y1 > p->y0 ? (y - p->y0) / (p->y1 - p->y0) : 0;
    return p->y + p->h * (1 - (t < 0 ? 0 : t > 1 ? 1 : t));
}

/* A tick step of 1, 2 or 5 times a power of ten giving about n ticks. */
static inline double plot_step(double span, int n) {
    double raw = span / (n > 0 ? n : 1), mag, m;
    if (!(raw > 0)) return 1;
    mag = pow(10, floor(log10(raw)));
    m = raw / mag;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * mag;
}

/* Frame, grid, ticks, title and axis labels of one panel. */
static inline plot plot_panel(FILE* f, double x, double y, double w, double h, double x0, double x1, double y0, double y1,
                       const char* title, const char* xlabel, const char* ylabel) {
    plot p;
    double s, v;
    p.f = f;
    p.x = x, p.y = y, p.w = w, p.h = h;
    p.x0 = x0, p.x1 = x1 > x0 ? x1 : x0 + 1, p.y0 = y0, p.y1 = y1 > y0 ? y1 : y0 + 1;
    if (!f) return p;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", x, y, w, h);
    s = plot_step(p.x1 - p.x0, (int)(w / 80));
    for (v = ceil(p.x0 / s) * s; v <= p.x1 + s * 1e-9; v += s)
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                plot_px(&p, v), y, plot_px(&p, v), y + h, plot_px(&p, v), y + h + 13, fabs(v) < s * 1e-9 ? 0 : v);
    s = plot_step(p.y1 - p.y0, (int)(h / 40));
    for (v = ceil(p.y0 / s) * s; v <= p.y1 + s * 1e-9; v += s)
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                x, plot_py(&p, v), x + w, plot_py(&p, v), x - 4, plot_py(&p, v) + 4, fabs(v) < s * 1e-9 ? 0 : v);
    if (title) fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n", x, y - 6, title);
    if (xlabel) fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x + w / 2, y + h + 27, xlabel);
    if (ylabel)
        fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", x - 38,
                y + h / 2, ylabel);
    return p;
}

/* A polyline through n points; dashed non-zero draws it dashed. Points
   whose y is NaN break the line. */
static inline void plot_line(const plot* p, const double* xs, const double* ys, int n, const char* color, int dashed) {
    int i, open = 0;
    if (!p->f) return;
    for (i = 0; i <= n; i++) {
        int ok = i < n && !isnan(ys[i]);
        if (ok && !open) {
            fprintf(p->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"", color,
                    dashed ? " stroke-dasharray=\"5,4\"" : "");
            open = 1;
        }
        if (ok) fprintf(p->f, "%.1f,%.1f ", plot_px(p, xs[i]), plot_py(p, ys[i]));
        if (!ok && open) {
            fputs("\"/>\n", p->f);
            open = 0;
        }
    }
}

/* The band between lo and hi over n points, filled (a layer of a stacked
   area chart: lo is the sum of the layers below). */
static inline void plot_band(const plot* p, const double* xs, const double* lo, const double* hi, int n, const char* color) {
    int i;
    if (!p->f || n < 1) return;
    fprintf(p->f, "<polygon fill=\"%s\" fill-opacity=\"0.75\" stroke=\"none\" points=\"", color);
    for (i = 0; i < n; i++) fprintf(p->f, "%.1f,%.1f ", plot_px(p, xs[i]), plot_py(p, hi[i]));
    for (i = n - 1; i >= 0; i--) fprintf(p->f, "%.1f,%.1f ", plot_px(p, xs[i]), plot_py(p, lo[i]));
    fputs("\"/>\n", p->f);
}

/* A horizontal reference line across the panel, labelled above its right
   end (a failure's cross and its label sit to the left, where runs stop). */
static inline void plot_hline(const plot* p, double y, const char* color, const char* label) {
    if (!p->f) return;
    fprintf(p->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6,3\"/>\n", p->x,
            plot_py(p, y), p->x + p->w, plot_py(p, y), color);
    if (label)
        fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" text-anchor=\"end\">%s</text>\n", p->x + p->w - 4,
                plot_py(p, y) - 3, color, label);
}

/* A cross at (x, y) with a label beside it: where a run failed. */
static inline void plot_cross(const plot* p, double x, double y, const char* color, const char* label) {
    double px = plot_px(p, x), py = plot_py(p, y);
    if (!p->f) return;
    fprintf(p->f,
            "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            px - 5, py - 5, px + 5, py + 5, px - 5, py + 5, px + 5, py - 5, color);
    if (label) /* beside the cross, on the side with room, below it unless it is low in the panel */
        fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\"%s>%s</text>\n", px > p->x + p->w / 2 ? px - 8 : px + 8,
                py < p->y + 0.6 * p->h ? py + 18 : py - 6, color, px > p->x + p->w / 2 ? " text-anchor=\"end\"" : "", label);
}

/* A dot at (x, y). */
static inline void plot_dot(const plot* p, double x, double y, const char* color) {
    if (p->f) fprintf(p->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", plot_px(p, x), plot_py(p, y), color);
}

/* Free text at a data position. */
static inline void plot_text(const plot* p, double x, double y, const char* text) {
    if (p->f) fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", plot_px(p, x), plot_py(p, y), text);
}

/* A legend in the panel's top right corner. */
static inline void plot_legend(const plot* p, const char* const* names, const char* const* colors, int n) {
    int i;
    double lx = p->x + p->w - 150, ly = p->y + 8;
    if (!p->f) return;
    fprintf(p->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"144\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" "
                  "stroke=\"#bbb\"/>\n", lx - 4, ly - 2, 16 * n + 4);
    for (i = 0; i < n; i++)
        fprintf(p->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                lx, ly + 16 * i + 2, colors[i], lx + 17, ly + 16 * i + 11, names[i]);
}
#endif
