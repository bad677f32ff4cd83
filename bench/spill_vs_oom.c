/* bench/spill_vs_oom: the demo's workload (examples/spill_workload.h) over
   oversubscription ratios from 0.5 to 4 (peak live memory / device
   budget), four ways: raw device allocation, the caching allocator, gpumem
   spilling to host and disk, gpumem with the unified-memory fallback. For
   each: completes or out of memory (and where), median step time and
   throughput against the in-memory run, bytes over the link and through the
   spill file per step, peak memory by tier, and words read back wrong.
   Writes CSV and an SVG of throughput against ratio with each way's OOM
   point marked.

   On CUDA (built with GPUMEM_CUDA, a device present) it runs there, else on
   the sim backend with the demo's link and compute models.

   usage: spill_vs_oom [CSV [SVG [SPILL_DIR]]]
          (default build/bench-spill-vs-oom.csv, .svg, /var/tmp) */
#define GPUMEM_IMPLEMENTATION
#include "../examples/spill_workload.h"
#include "../examples/plot.h"
#include "../examples/pick_backend.h"
#include "bench.h"
#include <math.h>

static const double ratios[] = {0.5, 1.0, 1.5, 2.0, 3.0, 4.0};
enum { NR = sizeof ratios / sizeof ratios[0] };
static const wl_way ways[] = {WAY_RAW, WAY_CACHING, WAY_SPILL, WAY_UNIFIED};
enum { NW = sizeof ways / sizeof ways[0] };

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-spill-vs-oom [CSV [SVG [SPILL_DIR]]]", NULL);
    if (args_rc >= 0) return args_rc;
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-spill-vs-oom.csv";
    const char* svg_path = argc > 2 ? argv[2] : "build/bench-spill-vs-oom.svg";
    wl_params p;
    wl_result mem, res[NW][NR];
    double xs[NR], ys[NW][NR], ymax = 1.1;
    FILE *csv = fopen(csv_path, "w"), *svg;
    int w, i;
    p = wl_defaults();
    p.steps = 5;
    if (argc > 3) p.disk_dir = argv[3];
    p.backend = pick_backend();

    p.budget = 4 * wl_peak_live(&p);
    mem = wl_run_way(&p, WAY_MEMORY);
    if (!mem.ok) {
        printf("the in-memory run failed: %s\n", mem.why);
        return 1;
    }
    printf("%s backend; peak live %zu MiB; host tier %zu MiB, spill file in %s; %d steps, median step\n",
           p.backend == GM_BACKEND_SIM ? "sim" : "cuda", wl_peak_live(&p) / WL_MIB, p.host_budget / WL_MIB,
           p.disk_dir, p.steps);
    printf("in memory: %.1f ms per step (%.2f steps/s)\n\n", mem.step_ms, 1e3 / mem.step_ms);
    printf("%-8s %5s %7s | %-9s %8s %7s %9s %9s %8s %8s %8s %8s\n", "way", "ratio", "budget", "result", "step ms",
           "x mem", "link/step", "disk/step", "peak dev", "host", "disk", "unified");
    if (csv)
        fprintf(csv, "way,ratio,budget_mib,completed,step_ms,throughput_vs_memory,link_mib_per_step,"
                     "disk_mib_per_step,peak_device_mib,peak_host_mib,peak_disk_mib,peak_unified_mib,bad_words,failure\n");
    for (w = 0; w < NW; w++) {
        for (i = 0; i < NR; i++) {
            wl_result* r = &res[w][i];
            double per = 1.0 / (p.steps + 0.0);
            p.budget = (size_t)((double)wl_peak_live(&p) / ratios[i]) / WL_MIB * WL_MIB;
            *r = wl_run_way(&p, ways[w]);
            xs[i] = ratios[i];
            ys[w][i] = r->ok ? mem.step_ms / r->step_ms : NAN;
            if (r->ok && ys[w][i] > ymax) ymax = ys[w][i];
            if (r->ok)
                printf("%-8s %5.1f %7zu | %-9s %8.1f %7.2f %9.0f %9.0f %8.0f %8.0f %8.0f %8.0f\n", wl_way_names[ways[w]],
                       ratios[i], p.budget / WL_MIB, "completes", r->step_ms, r->step_ms / mem.step_ms,
                       r->moved * per / (double)WL_MIB, r->disk_moved * per / (double)WL_MIB,
                       r->peak_device / (double)WL_MIB, r->peak_host / (double)WL_MIB, r->peak_disk / (double)WL_MIB,
                       r->peak_managed / (double)WL_MIB);
            else
                printf("%-8s %5.1f %7zu | %s\n", wl_way_names[ways[w]], ratios[i], p.budget / WL_MIB, r->why);
            if (csv)
                fprintf(csv, "%s,%.2f,%zu,%d,%.2f,%.4f,%.1f,%.1f,%.0f,%.0f,%.0f,%.0f,%llu,\"%s\"\n", wl_way_names[ways[w]],
                        ratios[i], p.budget / WL_MIB, r->ok, r->step_ms, r->ok ? mem.step_ms / r->step_ms : 0,
                        r->moved * per / (double)WL_MIB, r->disk_moved * per / (double)WL_MIB,
                        r->peak_device / (double)WL_MIB, r->peak_host / (double)WL_MIB, r->peak_disk / (double)WL_MIB,
                        r->peak_managed / (double)WL_MIB, (unsigned long long)r->bad_words, r->why);
            free(r->tl);
        }
    }
    if (csv) {
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    svg = plot_open(svg_path, 760, 420);
    if (svg) {
        const char* names[NW];
        const char* colors[NW];
        plot pl = plot_panel(svg, 70, 40, 640, 320, 0, 4.2, 0, ymax, "Throughput against oversubscription",
                             "oversubscription: peak live memory / device budget", "throughput / in-memory");
        plot_hline(&pl, 1.0, "#555", "in memory");
        for (w = 0; w < NW; w++) {
            names[w] = wl_way_names[ways[w]];
            colors[w] = plot_colors[w];
            plot_line(&pl, xs, ys[w], NR, colors[w], 0);
            for (i = 0; i < NR; i++) {
                if (res[w][i].ok) {
                    plot_dot(&pl, xs[i], ys[w][i], colors[w]);
                } else { /* the first ratio at which this way runs out */
                    char label[64];
                    snprintf(label, sizeof label, "%s: OOM from %.1f", names[w], xs[i]);
                    plot_cross(&pl, xs[i], 0.04 * ymax * (w + 1), colors[w], label);
                    break;
                }
            }
        }
        plot_legend(&pl, names, colors, NW);
        plot_close(svg);
        printf("wrote %s\n", svg_path);
    }
    return 0;
}
