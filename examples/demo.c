/* demo.c -- spill versus out-of-memory. `make demo` builds and runs it.

   A training-shaped workload (spill_workload.h: weights, Adam state,
   activations saved for the backward pass, gradients) whose peak is about
   twice the device budget, run five ways: with room for it
   all (the reference), raw device allocation, the caching allocator, gpumem
   tensors spilling to pinned host memory and a spill file, and gpumem
   tensors with the unified-memory fallback. Each way runs the same steps
   on the same modelled device (spill_workload.h: kernels take a modelled
   compute time, copies a modelled link time); the first step warms up,
   and the table compares the median of the steps after it, so every way
   has faulted its memory in before it is timed. The timed steps check a
   word in every page of every tensor at every use, and a last, untimed
   step checks every word. Prints a table and writes an SVG of memory by
   tier over time.

   usage: demo [SPILL_DIR [SVG [CSV]]]   (default /var/tmp, build/demo.svg, no CSV) */
#define GPUMEM_IMPLEMENTATION
#include "spill_workload.h"
#include "plot.h"
#include "pick_backend.h"

static const char* const tier_names[] = {"device", "host (pinned)", "disk (spill file)", "unified memory"};
static const char* const tier_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"};

/* Memory by tier over time: one panel per way, stacked. */
static void draw(const char* path, const wl_params* p, wl_result* res) {
    FILE* f = plot_open(path, 820, 70 + WAYS * 150);
    double tmax = 0, ymax = (double)p->budget;
    int w, i, k;
    if (!f) {
        printf("could not write %s\n", path);
        return;
    }
    for (w = 0; w < WAYS; w++)
        for (i = 0; i < res[w].ntl; i++) {
            wl_sample* s = &res[w].tl[i];
            double tot = s->device + s->host + s->disk + s->managed;
            if (s->ms > tmax) tmax = s->ms;
            if (tot > ymax) ymax = tot;
        }
    fprintf(f, "<text x=\"70\" y=\"22\" font-size=\"14\" font-weight=\"bold\">gpumem demo: memory by tier over time, "
               "device budget %zu MiB, peak live %zu MiB</text>\n",
            p->budget / WL_MIB, wl_peak_live(p) / WL_MIB);
    for (w = 0; w < WAYS; w++) {
        wl_result* r = &res[w];
        char title[256];
        double *x = (double*)malloc((size_t)(r->ntl + 1) * sizeof(double)), *lo, *hi;
        plot pl;
        lo = (double*)calloc((size_t)(r->ntl + 1), sizeof(double));
        hi = (double*)calloc((size_t)(r->ntl + 1), sizeof(double));
        if (r->ok) snprintf(title, sizeof title, "%s: completes, %.0f ms a step", wl_way_names[w], r->step_ms);
        else snprintf(title, sizeof title, "%s: fails", wl_way_names[w]);
        pl = plot_panel(f, 70, 60 + w * 150, 720, 105, 0, tmax / 1e3, 0, ymax / (double)WL_MIB, title,
                        w == WAYS - 1 ? "seconds" : NULL, "MiB");
        for (k = 0; k < 4 && x && lo && hi; k++) {
            for (i = 0; i < r->ntl; i++) {
                wl_sample* s = &r->tl[i];
                double v[4];
                v[0] = s->device, v[1] = s->host, v[2] = s->disk, v[3] = s->managed;
                x[i] = s->ms / 1e3;
                lo[i] = hi[i];
                hi[i] += v[k] / (double)WL_MIB;
            }
            plot_band(&pl, x, lo, hi, r->ntl, tier_colors[k]);
        }
        if (w != WAY_MEMORY) plot_hline(&pl, (double)p->budget / (double)WL_MIB, "#d62728", "device budget");
        if (!r->ok && r->ntl)
            plot_cross(&pl, r->fail_ms / 1e3, hi[r->ntl - 1], "#d62728", "out of memory");
        if (w == 0) plot_legend(&pl, tier_names, tier_colors, 4);
        free(x), free(lo), free(hi);
    }
    plot_close(f);
    printf("wrote %s (memory by tier over time, one panel per way)\n", path);
}

/* The table as CSV, for the page of measured figures. */
static void write_csv(const char* path, const wl_result* res, double mem_ms) {
    FILE* f = fopen(path, "w");
    int w;
    if (!f) {
        printf("cannot write %s\n", path);
        return;
    }
    fprintf(f, "way,completed,step_ms,over_in_memory,run_s,link_mib,disk_mib,peak_device_mib,peak_host_mib,"
               "peak_disk_mib,peak_unified_mib,why\n");
    for (w = 0; w < WAYS; w++) {
        const wl_result* r = &res[w];
        fprintf(f, "%s,%d,%.1f,%.3f,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,\"%s\"\n", wl_way_names[w], r->ok,
                r->ok ? r->step_ms : 0.0, r->ok && mem_ms > 0 ? r->step_ms / mem_ms : 0.0, r->seconds,
                r->moved / (double)WL_MIB, r->disk_moved / (double)WL_MIB, r->peak_device / (double)WL_MIB,
                r->peak_host / (double)WL_MIB, r->peak_disk / (double)WL_MIB, r->peak_managed / (double)WL_MIB,
                r->ok ? "" : r->why);
    }
    fclose(f);
    printf("wrote %s\n", path);
}

int main(int argc, char** argv) {
    wl_params p;
    wl_result res[WAYS];
    int w, all_ok = 1;
    double mem_ms;
    p = wl_defaults();
    p.steps = 4;
    p.budget = 448 * WL_MIB;
    if (argc > 1) p.disk_dir = argv[1];
    p.backend = pick_backend();
    p.timeline = 1;

    printf("gpumem demo: spill versus out-of-memory\n\n");
    if (p.backend == GM_BACKEND_SIM)
        printf("backend: sim, a simulated device in host memory: host<->device copies are timed as a %.0f GB/s link,\n"
               "  and each kernel as a device processing %.0f GB/s of what it reads and writes\n",
               p.link / 1e9, p.compute / 1e9);
    else
        printf("backend: cuda (the budget below stands in for a smaller GPU)\n");
    printf("workload: %d layers of weights (%zu MiB), Adam state (%zu MiB), activations (%zu MiB) and gradients\n"
           "  (%zu MiB); %d training steps (the first warms up) and one that checks every word of every tensor;\n"
           "  peak live %zu MiB against a device budget of %zu MiB (%.1fx over).\n",
           p.layers, p.weight / WL_MIB, p.state / WL_MIB, p.act / WL_MIB, p.weight / WL_MIB, p.steps,
           wl_peak_live(&p) / WL_MIB, p.budget / WL_MIB, (double)wl_peak_live(&p) / (double)p.budget);
    printf("spill: a pinned host tier of %zu MiB, and below it a spill file in %s\n\n", p.host_budget / WL_MIB,
           p.disk_dir);

    for (w = 0; w < WAYS; w++) {
        printf("running %-10s ...", wl_way_names[w]);
        fflush(stdout);
        res[w] = wl_run_way(&p, (wl_way)w);
        printf(" %s\n", res[w].ok ? "completes" : res[w].why);
    }
    mem_ms = res[WAY_MEMORY].ok ? res[WAY_MEMORY].step_ms : 0;

    printf("\n%-10s %-10s %8s %9s %7s %11s %10s %12s %11s %11s %12s\n", "way", "result", "step ms", "x memory",
           "run s", "link MiB", "disk MiB", "peak device", "peak host", "peak disk", "peak unified");
    for (w = 0; w < WAYS; w++) {
        wl_result* r = &res[w];
        char ratio[16] = "-", step[16] = "-";
        if (r->ok) snprintf(step, sizeof step, "%.0f", r->step_ms);
        if (r->ok && mem_ms > 0) snprintf(ratio, sizeof ratio, "%.2f", r->step_ms / mem_ms);
        printf("%-10s %-10s %8s %9s %7.2f %11.0f %10.0f %12.0f %11.0f %11.0f %12.0f\n", wl_way_names[w],
               r->ok ? "completes" : "OOM", step, ratio, r->seconds, r->moved / (double)WL_MIB,
               r->disk_moved / (double)WL_MIB, r->peak_device / (double)WL_MIB, r->peak_host / (double)WL_MIB,
               r->peak_disk / (double)WL_MIB, r->peak_managed / (double)WL_MIB);
    }
    printf("(step: the median of the steps after the first; x memory: against the in-memory way's step; run:\n"
           " the whole run, setup and the checking step included; link: bytes copied between host and device;\n"
           " peaks in MiB, sampled after every operation)\n");
    if (p.backend == GM_BACKEND_SIM && res[WAY_SPILL].link_rate > 0)
        printf("(the link moved %.1f GB/s while busy in the spill way, against the %.0f GB/s modelled)\n",
               res[WAY_SPILL].link_rate / 1e9, p.link / 1e9);
    printf("\n");

    printf("What it shows:\n");
    printf("- raw: %s.\n", res[WAY_RAW].ok ? "completes (the budget is large enough)" : res[WAY_RAW].why);
    if (res[WAY_CACHING].ok) {
        printf("- caching: completes.\n");
    } else {
        wl_result *c = &res[WAY_CACHING], *raw = &res[WAY_RAW];
        printf("- caching: %s.\n  A cache makes allocation fast; it cannot make memory", c->why);
        if (!raw->ok && c->fail_op != raw->fail_op)
            printf(": it fails %d operations %s than raw,\n  with %.0f MiB of its %.0f MiB reserved holding tensors",
                   abs(c->fail_op - raw->fail_op), c->fail_op < raw->fail_op ? "earlier" : "later",
                   c->fail_live / (double)WL_MIB, c->peak_device / (double)WL_MIB);
        printf(".\n");
    }
    if (res[WAY_SPILL].ok)
        printf("- spill: completes, a step %.2fx the in-memory step: the same compute, and the transfers to and from\n"
               "  the host tier and the spill file that do not hide behind it (%.0f MiB through the link and %.0f MiB\n"
               "  through the spill file in the whole run); %.0f MiB of tensor data checked, every word as written.\n",
               mem_ms > 0 ? res[WAY_SPILL].step_ms / mem_ms : 0, res[WAY_SPILL].moved / (double)WL_MIB,
               res[WAY_SPILL].disk_moved / (double)WL_MIB, (double)res[WAY_SPILL].checked_bytes / (double)WL_MIB);
    else
        printf("- spill: FAILED: %s\n", res[WAY_SPILL].why);
    if (res[WAY_UNIFIED].ok) {
        printf("- unified: completes, a step %.2fx the in-memory step: what does not fit lives in unified memory and\n"
               "  is migrated to the device at each use.\n",
               mem_ms > 0 ? res[WAY_UNIFIED].step_ms / mem_ms : 0);
        if (p.backend == GM_BACKEND_SIM)
            printf("  On sim the migrations follow the UVM driver: 2 MiB chunks, the least recently migrated copied\n"
                   "  out first when the device is full, before the copy in (not beside it). Unified memory gets the\n"
                   "  room the device allocations leave; a tensor larger than that room is evicted by its own\n"
                   "  prefetch and faults back in, chunk by chunk, at its use, each fault paying the driver's\n"
                   "  handling on top of its bytes: %.0f MiB crossed the link (the spill way: %.0f MiB).\n",
                   res[WAY_UNIFIED].moved / (double)WL_MIB, res[WAY_SPILL].moved / (double)WL_MIB);
    } else
        printf("- unified: FAILED: %s\n", res[WAY_UNIFIED].why);
    for (w = 0; w < WAYS; w++)
        if (res[w].bad_words) {
            printf("- %s: %llu words read back differ from what was written\n", wl_way_names[w],
                   (unsigned long long)res[w].bad_words);
            all_ok = 0;
        }
    printf("\n");
    draw(argc > 2 && argv[2][0] ? argv[2] : "build/demo.svg", &p, res);
    if (argc > 3) write_csv(argv[3], res, mem_ms);
    for (w = 0; w < WAYS; w++) free(res[w].tl);
    /* the demo fails if a way that must complete did not, or a byte was lost */
    return all_ok && res[WAY_MEMORY].ok && res[WAY_SPILL].ok && res[WAY_UNIFIED].ok ? 0 : 1;
}
