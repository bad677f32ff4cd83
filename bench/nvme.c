/* bench/nvme: the disk tier's write and read throughput against fio on the
   same file system, in the same run.

   gpumem: tensors of 64 MiB on the device (sim backend, no link limit) are
   written to the spill file with gm_tensor_evict_to(GM_TIER_DISK) (device
   -> staging -> file), read back with gm_tensor_acquire (file -> staging
   -> device), and written again over the same extents; each pass timed
   over the whole set, with CRC32C on (the default) and off, and through
   pread/pwrite for comparison. The first write lands on a new file, whose
   fallocated extents the file system converts as they are written; the
   second is the steady state of training, where each step's spill reuses
   the last step's extents. fio is measured the same two ways: a new file,
   then the same file again.
   fio: the io_uring engine, --direct=1, the same block size (the disk
   tier's chunk) and queue depth, one job, a file of the same size in the
   same directory, sequential write then read; plain, and with registered
   buffers and file as the disk tier uses them. The ratios are against the
   better of the two each way.

   Each measurement is repeated and the median kept, alternating gpumem and
   fio so that drift of the disk hits both. Prints a table, writes CSV.

   usage: nvme [DIR] [MiB] [CSV]  (default /var/tmp, 1024, build/bench-nvme.csv) */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
enum { REPS = 5, DEPTH = 32 };
static const size_t T = 64 * MiB; /* one tensor */
static const size_t CHUNK = MiB;

static void fill(void* arg) {
    memset(arg, 0x5a, T);
}

typedef struct way {
    const char* name;
    gm_disk_io io;
    gm_toggle crc;
    double fresh[REPS], w[REPS], r[REPS], depth;
} way;

/* One write and one read of `total` bytes through the disk tier; bytes/s. */
static int run_gpumem(const char* dir, size_t total, way* wy, int rep) {
    gm_context* ctx = NULL;
    gm_desc d;
    size_t n = total / T, i;
    gm_tensor* t = (gm_tensor*)calloc(n, sizeof *t);
    gm_tier_stats ts;
    double t0;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.log_fn = gm_log_stderr;
    d.device_budget = total + 256 * MiB;
    d.sim.capacity = total + 512 * MiB;
    d.host_budget = 64 * MiB;
    d.disk_dir = dir;
    d.disk_io = wy->io;
    d.disk_checksum = wy->crc;
    d.disk_depth = DEPTH;
    d.disk_chunk = CHUNK;
    if (!t || gm_setup(&ctx, &d) != GM_OK) {
        free(t);
        return 0;
    }
    for (i = 0; i < n; i++) {
        void* p;
        if (gm_tensor_create(ctx, &t[i], T) != GM_OK || gm_tensor_acquire(ctx, t[i], NULL, &p) != GM_OK) goto fail;
        gm_launch_host(ctx, NULL, fill, p);
        gm_tensor_release(ctx, t[i], NULL, 1);
    }
    gm_device_synchronize(ctx);
    /* a fresh file: its extents are unwritten, so the file system converts
       them as the writes complete */
    t0 = bench_now_ns();
    for (i = 0; i < n; i++)
        if (gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK) != GM_OK) goto fail;
    wy->fresh[rep] = (double)(n * T) / ((bench_now_ns() - t0) / 1e9);
    t0 = bench_now_ns();
    for (i = 0; i < n; i++) {
        void* p;
        if (gm_tensor_acquire(ctx, t[i], NULL, &p) != GM_OK) goto fail;
        gm_tensor_release(ctx, t[i], NULL, 1); /* written: the disk copy goes */
    }
    gm_device_synchronize(ctx);
    wy->r[rep] = (double)(n * T) / ((bench_now_ns() - t0) / 1e9);
    /* steady state: the same extents again, as every step of training */
    t0 = bench_now_ns();
    for (i = 0; i < n; i++)
        if (gm_tensor_evict_to(ctx, t[i], GM_TIER_DISK) != GM_OK) goto fail;
    wy->w[rep] = (double)(n * T) / ((bench_now_ns() - t0) / 1e9);
    gm_tier_get_stats(ctx, &ts);
    wy->depth = ts.disk_ios ? (double)ts.disk_depth_sum / (double)ts.disk_ios : 0;
    for (i = 0; i < n; i++) gm_tensor_destroy(ctx, t[i]);
    gm_shutdown(ctx);
    free(t);
    return 1;
fail:
    gm_shutdown(ctx);
    free(t);
    return 0;
}

/* fio's bandwidth (bytes/s) of one sequential pass; -1 if fio failed. */
static double run_fio(const char* dir, size_t total, const char* rw, int fixed) {
    char cmd[1024], *buf, *at;
    size_t cap = 1 << 20, len = 0, k;
    double bw = -1;
    FILE* p;
    snprintf(cmd, sizeof cmd,
             "fio --name=gpumem-ref --filename=%s/gpumem-fio.tmp --size=%zuM --bs=%zuk --iodepth=%d "
             "--ioengine=io_uring --direct=1 --rw=%s --numjobs=1 %s --output-format=json 2>/dev/null",
             dir, total / MiB, CHUNK / 1024, DEPTH, rw, fixed ? "--fixedbufs --registerfiles" : "");
    p = popen(cmd, "r");
    buf = (char*)malloc(cap);
    if (!p || !buf) {
        if (p) pclose(p);
        free(buf);
        return -1;
    }
    while ((k = fread(buf + len, 1, cap - 1 - len, p)) > 0) len += k;
    buf[len] = 0;
    if (pclose(p) == 0) {
        char key[32];
        snprintf(key, sizeof key, "\"%s\" : {", strcmp(rw, "write") == 0 ? "write" : "read");
        at = strstr(buf, key);
        if (at && (at = strstr(at, "\"bw_bytes\" : ")) != NULL) bw = atof(at + 13);
    }
    free(buf);
    return bw;
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-nvme [DIR] [MiB] [CSV]", NULL);
    if (args_rc >= 0) return args_rc;
    const char* dir = argc > 1 ? argv[1] : "/var/tmp";
    size_t total = (argc > 2 ? (size_t)atol(argv[2]) : 1024) * MiB;
    const char* csv_path = argc > 3 ? argv[3] : "build/bench-nvme.csv";
    way ways[] = {{"gpumem io_uring", GM_DISK_IO_URING, GM_TOGGLE_ON, {0}, {0}, {0}, 0},
                  {"gpumem io_uring, no CRC", GM_DISK_IO_URING, GM_TOGGLE_OFF, {0}, {0}, {0}, 0},
                  {"gpumem pread/pwrite", GM_DISK_IO_PREAD, GM_TOGGLE_ON, {0}, {0}, {0}, 0}};
    static const char* fio_names[] = {"fio io_uring", "fio io_uring, registered"};
    double ff[2][REPS], fw[2][REPS], fr[2][REPS], fio_f[2], fio_w[2], fio_r[2], ref_f, ref_w, ref_r;
    char path[600];
    int rep, k, f, nways = (int)(sizeof ways / sizeof ways[0]);
    FILE* csv;
    total = total / T * T;
    if (total == 0) total = T;
    snprintf(path, sizeof path, "%s/gpumem-fio.tmp", dir);
    printf("disk tier vs fio in %s: %zu MiB each way, %zu KiB blocks, queue depth %d, O_DIRECT, median of %d\n", dir,
           total / MiB, CHUNK / 1024, DEPTH, REPS);
    for (rep = 0; rep < REPS; rep++) {
        for (f = 0; f < 2; f++) {
            remove(path);
            ff[f][rep] = run_fio(dir, total, "write", f); /* fresh file */
            fw[f][rep] = run_fio(dir, total, "write", f); /* over written blocks */
            fr[f][rep] = run_fio(dir, total, "read", f);
        }
        for (k = 0; k < nways; k++)
            if (!run_gpumem(dir, total, &ways[k], rep)) {
                printf("%s failed\n", ways[k].name);
                return 1;
            }
    }
    remove(path);
    for (f = 0; f < 2; f++) {
        fio_f[f] = bench_median(ff[f], REPS);
        fio_w[f] = bench_median(fw[f], REPS);
        fio_r[f] = bench_median(fr[f], REPS);
    }
    /* the reference each way: fio's better setup */
    ref_f = fio_f[0] > fio_f[1] ? fio_f[0] : fio_f[1];
    ref_w = fio_w[0] > fio_w[1] ? fio_w[0] : fio_w[1];
    ref_r = fio_r[0] > fio_r[1] ? fio_r[0] : fio_r[1];
    if (ref_w <= 0 || ref_r <= 0 || ref_f <= 0) {
        if (system("command -v fio >/dev/null 2>&1") != 0)
            printf("fio is not installed (Debian: apt-get install fio): the disk tier's rates are shown alone, without\n"
                   "the ratio to fio's on the same file system that this benchmark exists for\n");
        else
            printf("fio failed in %s (its io_uring engine and O_DIRECT must work there): the disk tier's rates are\n"
                   "shown alone, without the ratio to fio's\n", dir);
        ref_f = ref_w = ref_r = -1;
    }
    printf("\nMB/s, and the ratio to fio's better setup each way:\n");
    printf("%-26s %17s %17s %17s %6s\n", "way", "write, new file", "write, steady", "read", "depth");
    csv = fopen(csv_path, "w");
    if (csv)
        fprintf(csv, "way,write_new_file_bytes_per_s,write_steady_bytes_per_s,read_bytes_per_s,write_new_over_fio,"
                     "write_steady_over_fio,read_over_fio,mean_depth\n");
    for (k = ref_f > 0 ? -2 : 0; k < nways; k++) {
        const char* name = k < 0 ? fio_names[k + 2] : ways[k].name;
        double a = k < 0 ? fio_f[k + 2] : bench_median(ways[k].fresh, REPS);
        double w = k < 0 ? fio_w[k + 2] : bench_median(ways[k].w, REPS);
        double r = k < 0 ? fio_r[k + 2] : bench_median(ways[k].r, REPS);
        double depth = k < 0 ? DEPTH : ways[k].depth;
        double ra = ref_f > 0 ? a / ref_f : -1, rw = ref_w > 0 ? w / ref_w : -1, rr = ref_r > 0 ? r / ref_r : -1;
        char c1[16], c2[16], c3[16], f1[16], f2[16], f3[16];
        printf("%-26s %9.0f (%5s) %9.0f (%5s) %9.0f (%5s) %6.1f\n", name, a / 1e6, bench_cell(c1, sizeof c1, "%.2f", ra),
               w / 1e6, bench_cell(c2, sizeof c2, "%.2f", rw), r / 1e6, bench_cell(c3, sizeof c3, "%.2f", rr), depth);
        if (csv)
            fprintf(csv, "\"%s\",%.0f,%.0f,%.0f,%s,%s,%s,%.1f\n", name, a, w, r, bench_field(f1, sizeof f1, "%.3f", ra),
                    bench_field(f2, sizeof f2, "%.3f", rw), bench_field(f3, sizeof f3, "%.3f", rr), depth);
    }
    if (csv) {
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    return 0;
}
