#!/bin/sh
# make figures: runs every benchmark and every example that measures
# something, and writes docs/measured.md from what they write (their CSV,
# or for the examples that print a table, that table). Each section names
# the command that produced it and the backend it ran on; the page's head
# gives the date, the commit and the machine (cores, CPU, memory, GPU).
# Every measured number on the page comes from the run; the prose around
# the tables describes each benchmark. A section whose command fails says
# so, under its heading.
#
#   sh tools/figures.sh            (make figures; the binaries must be built)
#
# Settings from the environment: B (build directory, default build), OUT
# (default docs/measured.md), TRACES (default ../shared/traces), SPILL_DIR
# (default /var/tmp), RUNS (the demo's runs, median taken; default 3),
# TIER_MAX (the most tensors bench-tier-scale goes to; default 1000000),
# REUSE=1 (write the page from the outputs of the last run, running
# nothing: for changes to this script).
set -u
B=${B:-build}
OUT=${OUT:-docs/measured.md}
TRACES=${TRACES:-../shared/traces}
SPILL_DIR=${SPILL_DIR:-/var/tmp}
RUNS=${RUNS:-3}
TIER_MAX=${TIER_MAX:-1000000}
D=$B/figures
mkdir -p "$D" "$(dirname "$OUT")"
PAGE=$D/measured.md.new
: > "$PAGE"

# CSV fields (a field in double quotes may hold commas) into f[1..n]
AWKCSV='
function split_csv(line, f,    n, c, q, i, ch) {
    n = 1; c = ""; q = 0
    for (i = 1; i <= length(line); i++) {
        ch = substr(line, i, 1)
        if (ch == "\"") q = !q
        else if (ch == "," && !q) { f[n++] = c; c = "" }
        else c = c ch
    }
    f[n] = c
    return n
}
function trace_name(s) { sub(/\.rmm\.csv$/, "", s); sub(/\.csv$/, "", s); sub(/\.log$/, "", s); return s }
function pct(x) { return x < 0 ? "-" : sprintf("%.2f%%", 100 * x) }
function num(x, fmt) { return (x == "" || x + 0 < 0) ? "-" : sprintf(fmt, x) }
'

p() { printf '%s\n' "$@" >> "$PAGE"; }

# run NAME CMD...: runs CMD, its output in $D/NAME.out; the status is the
# command's. Prints a line per command so that a long run shows progress.
run() {
    name=$1; shift
    if [ "${REUSE:-0}" = 1 ]; then [ -f "$D/$name.out" ]; return; fi
    printf 'figures: %s\n' "$*"
    start=$(date +%s)
    "$@" > "$D/$name.out" 2>&1
    rc=$?
    printf 'figures: %s: exit %d, %d s\n' "$name" "$rc" "$(($(date +%s) - start))"
    return $rc
}

# failed NAME: the section's place on the page when its command failed
failed() {
    p "The command failed (exit $1); its last lines:" "" '```'
    tail -n 8 "$D/$2.out" >> "$PAGE"
    p '```' ""
}

# verbatim NAME FROM TO [before]: the lines of NAME's output from the
# first line matching FROM up to the first line after it matching TO (with
# "before", up to the line before it), as a code block
verbatim() {
    p '```'
    awk -v a="$2" -v b="$3" -v x="${4:-}" 'on == 0 && $0 ~ a { on = 1; print; next }
        on && $0 ~ b { if (x == "") print; exit } on { print }' "$D/$1.out" >> "$PAGE"
    p '```' ""
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
mem=$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
gpu=none
if command -v nvidia-smi > /dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1)
    [ -n "$gpu" ] || gpu=none
fi
commit=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2> /dev/null)" ] || commit="$commit (with uncommitted changes)"

p "# Measured figures" ""
p "Written by \`make figures\` on $(date -u +%Y-%m-%d), commit $commit, on a machine"
p "with $(nproc) cores ($cpu), $mem of memory, GPU: $gpu. Every gpumem figure"
p "below is on the backend each section names (sim: the simulated device, whose"
p "copies and kernels are modelled times; see [backends](backends.md))."
p "Each section gives the command that produced it; run \`make figures\` to"
p "regenerate the whole page, or the command to check one table. Timings on a"
p "small shared machine move by tens of percent from run to run: compare"
p "figures within one table (one run), and read ratios rather than times."
p ""

# ---------------------------------------------------------------- replay
p "## Fragmentation on real traces" ""
if run replay "$B/bench-replay" "$TRACES" "$D/replay.csv"; then
    p "\`$B/bench-replay $TRACES $D/replay.csv\`, sim: each trace replayed from an"
    p "empty context with classic and with expandable segments; fragmentation is"
    p "1 − peak live / peak reserved. PyTorch's column is the trace's own figure"
    p "(its meta file: PyTorch's reserved memory at the dump)." ""
    p "| trace | operations | peak live | PyTorch | gpumem classic | gpumem expandable |"
    p "|---|---|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); if (f[7] + 0 >= 0) next
        printf "| %s | %d | %.2f GB | %s | %s | %s |\n", trace_name(f[1]), f[2], f[3] / 1e9, pct(f[4]), pct(f[5]), pct(f[6]) }' \
        "$D/replay.csv" >> "$PAGE"
    p "" "On the packing problems (sizes ×512; the known optimum packs each into"
    p "512 MiB), peak reserved over the optimum. Expandable segments count mapped"
    p "pages, which need not be contiguous, so they may dip below the optimum of a"
    p "contiguous packing." ""
    p "| problem | operations | classic / optimum | expandable / optimum |" "|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); if (f[7] + 0 < 0) next
        printf "| %s | %d | %.2f× | %.2f× |\n", trace_name(f[1]), f[2], f[7], f[8] }' "$D/replay.csv" >> "$PAGE"
    p ""
    p "## Trace replay cost" ""
    p "The same run: nanoseconds per operation, the median of nine replays of"
    p "each trace, each from an empty context (classic segments and expandable"
    p "segments, both with the thread caches), and the same request stream"
    p "through glibc and jemalloc (\`-\` where jemalloc is not installed: Debian"
    p "\`libjemalloc2\`). *Again*: the trace replayed a second time on the same"
    p "context, as the second step of a training loop, with its segments or"
    p "pages in place. *Calls*: the backend calls per operation with expandable"
    p "segments (maps and unmaps of page runs, each a few driver calls on CUDA),"
    p "from empty and again; classic segments make no backend call again." ""
    p "| trace | classic | expandable | glibc | jemalloc | classic / jemalloc | classic again | expandable again | calls | calls again |"
    p "|---|---|---|---|---|---|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); if (f[7] + 0 >= 0) next
        r = f[14] + 0 > 0 ? sprintf("%.2f×", f[11] / f[14]) : "-"
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", trace_name(f[1]), num(f[11], "%.0f"),
            num(f[12], "%.0f"), num(f[13], "%.0f"), num(f[14], "%.0f"), r, num(f[15], "%.0f"), num(f[16], "%.0f"),
            num(f[18], "%.3f"), num(f[20], "%.3f") }' "$D/replay.csv" >> "$PAGE"
    p ""
else
    failed $? replay
    p "## Trace replay cost" "" "See above: the same command." ""
fi

# ----------------------------------------------------------------- alloc
p "## Allocation cost" ""
if run alloc "$B/bench-alloc-cuda" "$D/alloc.csv"; then
    be=$(awk -F, 'NR == 2 { print $1 }' "$D/alloc.csv")
    p "\`$B/bench-alloc-cuda $D/alloc.csv\`, backend $be: the median ns of an"
    p "allocation + free pair (cached: the same size again), on one thread and on"
    p "the slower of two threads sharing a context (one of their own, whose thread caches widen to large blocks"
    p "when the threads contend for them: the default); a miss that creates a segment;"
    p "the backend's own allocation; glibc's and jemalloc's malloc + free of the"
    p "same size (\`-\` where jemalloc is not installed); on a GPU, CUDA's"
    p "\`cudaMallocAsync\` + \`cudaFreeAsync\` from a pool that keeps its memory;"
    p "and gpumem again with \`thread_cache_max:64M\` (large blocks in the thread"
    p "caches too), on one thread and on the slower of two. 2 threads / alone is each"
    p "thread's pair with both running over its own pair alone (batches alternate),"
    p "the larger of the two. gpumem / jemalloc is"
    p "gpumem's pair timed in batches alternating with jemalloc's, in jemalloc's"
    p "process (\"beside\"), over jemalloc's: columns timed apart drift with the machine." ""
    p "| size | gpumem, 1 thread | gpumem, 2 threads | 2 threads / alone | gpumem / jemalloc | miss | backend | glibc | jemalloc | cudaMallocAsync | tc 64M, 1 thread | tc 64M, 2 threads |"
    p "|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); s = f[2] + 0
        sz = s >= 1048576 ? sprintf("%d MiB", s / 1048576) : s >= 1024 ? sprintf("%d KiB", s / 1024) : sprintf("%d B", s)
        r = f[8] + 0 > 0 && f[12] + 0 > 0 ? sprintf("%.2f× (%.1f beside)", f[12] / f[8], f[12]) : "-"
        printf "| %s | %.1f | %.1f | %s | %s | %.0f | %.0f | %.1f | %s | %s | %s | %s |\n", sz, f[3], f[4], num(f[13], "%.2f×"), r, f[5], f[6], f[7],
            num(f[8], "%.1f"), num(f[9], "%.1f"), num(f[10], "%.1f"), num(f[11], "%.1f") }' \
        "$D/alloc.csv" >> "$PAGE"
    p ""
    rel=$(sed -n 's/^gm_empty_cache, us per cached 2 MiB segment given back: //p' "$D/alloc.out")
    [ -n "$rel" ] && p "\`gm_empty_cache\` giving back cached 2 MiB segments, µs per segment (segments in" \
        "parentheses): $rel." ""
    wide=$(sed -n 's/^expandable segments (sim), ns per gm_alloc or gm_free, //p' "$D/alloc.out")
    [ -n "$wide" ] && p "Expandable segments (sim), ns per \`gm_alloc\` or \`gm_free\` of blocks spanning" \
        "a few pages and up to 2,560 (eight live at a time): $wide." ""
    crossed=$(sed -n '/^blocks freed on other threads (sim): /,/ a block$/p' "$D/alloc.out" | tr '\n' ' ' |
        sed 's/^blocks freed on other threads (sim): //; s/ *$//')
    [ -n "$crossed" ] && p "Blocks freed on other threads than the allocating one (sim): $crossed." ""
else failed $? alloc; fi

# ------------------------------------------------------------ tier scale
p "## Tiered manager at scale" ""
if run tier_scale "$B/bench-tier-scale" "$D/tier-scale.csv" "$D/tier-scale.svg" "$TIER_MAX" "$SPILL_DIR"; then
    p "\`$B/bench-tier-scale $D/tier-scale.csv $D/tier-scale.svg $TIER_MAX $SPILL_DIR\`, sim: 4 KiB"
    p "tensors, half of them fitting on the device, acquired and released in a"
    p "cycle so that every acquire evicts one tensor and brings one in; ns per"
    p "acquire + release (best of three passes, each ending when its copies"
    p "have), LRU and learned order, one thread, and each of two threads on"
    p "disjoint halves (the device then holds half of one thread's tensors);"
    p "then everything fitting (hits only); host bytes per tensor, all of"
    p "them (with the allocator's record of the tensor's device block) and the"
    p "manager's own (less what as many plain 4 KiB \`gm_alloc\` cost); then LRU"
    p "and learned order with a disk tier beside and a host tier that holds"
    p "every tensor (nothing is written: what the disk tier's bookkeeping"
    p "costs). Up to $TIER_MAX tensors (\`TIER_MAX\`). The sim runs each 4 KiB"
    p "copy in the calling thread when its stream is idle (\`sim.run_inline\`),"
    p "and moves no bytes (\`sim.move_bytes\` off; a device's copy engine"
    p "moves them without the host): on its stream threads, every copy and"
    p "wait is a hand-off between threads, and with the bytes moved by the CPU"
    p "a miss at 10⁶ tensors is half a copy from memory out of the CPU's"
    p "caches; the figures would be the simulator's (the lines under the"
    p "table give both)." ""
    p "| tensors | LRU | LRU, 2 threads | learned | learned, 2 threads | hits only | host bytes / tensor | the manager's | LRU, disk tier | learned, disk tier | note |"
    p "|---|---|---|---|---|---|---|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f)
        printf "| %d | %s | %s | %s | %s | %.0f | %d | %s | %s | %s |%s\n", f[1], num(f[2], "%.0f"), num(f[3], "%.0f"),
            num(f[4], "%.0f"), num(f[5], "%.0f"), f[6], f[7], num(f[13], "%.0f"), num(f[14], "%.0f"), num(f[15], "%.0f"),
            f[8] + 0 ? " a pass stopped at the time limit |" : " |" }' \
        "$D/tier-scale.csv" >> "$PAGE"
    p "" "$(awk "$AWKCSV"'NR == 2 { split_csv($0, f); printf "One 4 KiB copy and its wait on a sim stream thread cost %.1f µs beyond the modelled link time (median of five medians of 201); with every copy on the stream threads, LRU at %d tensors costs %.0f ns per pair.", f[9] / 1000, f[1], f[10] }' "$D/tier-scale.csv")"
    p "$(awk "$AWKCSV"'NR > 1 { split_csv($0, f); n = f[1]; a = f[11]; b = f[12] } END { if (a > 0 && b > 0) printf "With the copies'"'"' bytes moved by the CPU, LRU costs %.0f ns per pair at 1000 tensors and %.0f at %d (%.2f×).", a, b, n, b / a }' "$D/tier-scale.csv")" ""
    p "The host tier full (same run): the device holds a tenth of the tensors,"
    p "the host tier a quarter and the disk the rest, so that every eviction"
    p "gives up a host copy (most of them written to disk first) and every miss"
    p "reads its tensor from disk; ns per acquire + release, best of three"
    p "passes of 10,000 pairs. The figure is the disk's; what grows with the"
    p "tensors is the choice of the host copy to give up." ""
    p "| tensors | LRU | learned | note |" "|---|---|---|---|"
    awk '/^host tier full/ { on = 1; next } on && $1 ~ /^[0-9]+$/ {
        printf "| %s | %s | %s |%s\n", $1, $2, $3, (NF > 3 ? " a pass stopped at the time limit |" : " |") }' \
        "$D/tier_scale.out" >> "$PAGE"
    p ""
else failed $? tier_scale; fi

# ----------------------------------------------------------------- spill
p "## Spill step" ""
if run spill "$B/bench-spill" "$D/spill.csv" "$SPILL_DIR"; then
    p "\`$B/bench-spill $D/spill.csv $SPILL_DIR\`, sim: a training-like step"
    p "(\`layers\`: 16 layer tensors of 32 MiB; \`transformer\`: weights,"
    p "activations kept for the backward pass, gradients and optimizer moments)"
    p "under budgets of 1/ratio of its working set, seven ways; each cell is the"
    p "step time over the row's lower bound: the largest of the compute, the"
    p "link traffic Belady's order needs over the link's rate, and for the disk"
    p "ways Belady's disk traffic over the fastest disk the run measured (at its"
    p "start and just before and after each disk row: this disk drifts by 2x and"
    p "more within minutes; where the bound is the compute, this is also the step over the"
    p "in-memory step). \`lru+disk\` and \`learned+disk\` have a host tier of a"
    p "quarter of the working set and the spill file below it." ""
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); key = f[1] SUBSEP f[2] SUBSEP f[4]; m = f[3]
            if (!(key in sk)) { sk[key] = 1; keys[++nk] = key } if (!(m in sm)) { sm[m] = 1; modes[++nm] = m }
            cell[key, m] = f[5] + 0 ? num(f[9], "%.2f") : "OOM" }
        END { printf "| workload | link GB/s | ratio |"; for (i = 1; i <= nm; i++) printf " %s |", modes[i]
            printf "\n|---|---|---|"; for (i = 1; i <= nm; i++) printf "---|"; printf "\n"
            for (j = 1; j <= nk; j++) { split(keys[j], k, SUBSEP); printf "| %s | %.1f | %.1f |", k[1], k[2], k[3]
                for (i = 1; i <= nm; i++) printf " %s |", ((keys[j], modes[i]) in cell) ? cell[keys[j], modes[i]] : ""
                printf "\n" } }' "$D/spill.csv" >> "$PAGE"
    p "" "The rows with the disk tier (host tier a quarter of the working set):"
    p "bytes per step through the link and the disk, and the mean I/O queue"
    p "depth (of 32) while the disk is busy, and while it is the bottleneck;"
    p "for learned order, the MiB of the device and host tiers its plan counts"
    p "on once its room is tuned (of the two budgets); the disk's read rate"
    p "measured beside the row (the faster of the passes just before and just after it)."
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); if (f[3] ~ /disk/ && f[19] + 0 > 0) {
        printf "The bounds use the run'"'"'s fastest disk: write %s, read %s, both at once %s MB/s.\n", f[18], f[19], f[20]; exit } }' \
        "$D/spill.csv" >> "$PAGE"
    p ""
    p "| workload | link GB/s | ratio | way | × bound | link MiB / step | disk MiB / step | queue depth | while disk-bound | plan MiB | read beside, MB/s |"
    p "|---|---|---|---|---|---|---|---|---|---|---|"
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); if (f[3] !~ /disk/ || !(f[5] + 0) || f[12] + 0 == 0) next
        printf "| %s | %.1f | %.1f | %s | %s | %.0f | %.0f | %s | %s | %s | %s |\n", f[1], f[2], f[4], f[3], num(f[9], "%.2f"), f[10], f[12],
            num(f[13], "%.1f"), num(f[14], "%.1f"), num(f[17], "%.0f"), num(f[22], "%.0f") }' "$D/spill.csv" >> "$PAGE"
    p ""
else failed $? spill; fi

# ------------------------------------------------------------------ nvme
p "## Disk tier against fio" ""
if run nvme "$B/bench-nvme" "$SPILL_DIR" 1024 "$D/nvme.csv"; then
    p "\`$B/bench-nvme $SPILL_DIR 1024 $D/nvme.csv\`: 1 GiB of 64 MiB tensors through"
    p "the disk tier (device → staging → file and back, \`O_DIRECT\`, 1 MiB"
    p "chunks, depth 32) against fio with the io_uring engine on the same file"
    p "system in the same run (its rows are missing where fio is not installed);"
    p "MB/s, median of five, and in parentheses the ratio to fio's better setup."
    p "Depth: fio's is the queue depth it was given; gpumem's the mean depth at"
    p "submission over its last repetition." ""
    p "| way | write, new file | write, steady | read | mean depth |" "|---|---|---|---|---|"
    awk "$AWKCSV"'function c(b, r) { return sprintf("%.0f%s", b / 1e6, r == "" ? "" : sprintf(" (%.2f)", r)) }
        NR > 1 { split_csv($0, f)
        printf "| %s | %s | %s | %s | %s |\n", f[1], c(f[2], f[5]), c(f[3], f[6]), c(f[4], f[7]), num(f[8], "%.0f") }' \
        "$D/nvme.csv" >> "$PAGE"
    p ""
else failed $? nvme; fi

# ------------------------------------------------------------------ demo
p "## The demo" ""
demo=$B/demo
[ -x "$B/demo-cuda" ] && demo=$B/demo-cuda
ok=0
i=1
while [ "$i" -le "$RUNS" ]; do
    run "demo$i" "$demo" "$SPILL_DIR" "$D/demo.svg" "$D/demo$i.csv" && ok=$((ok + 1))
    i=$((i + 1))
done
if [ "$ok" -eq "$RUNS" ]; then
    be=$(sed -n 's/^backend: \([a-z]*\).*/\1/p' "$D/demo1.out")
    p "\`$demo $SPILL_DIR $D/demo.svg $D/demoN.csv\` ($RUNS runs; \`make demo\`), backend $be:"
    p "a training-shaped workload with a peak of 872 MiB against a 448 MiB"
    p "budget. Step: the median of the steps after the first; × in memory: the"
    p "median over the runs, with the range; bytes (for the whole run) and peaks"
    p "(MiB) from the first run." ""
    p "| way | result | step ms | × in memory | range | link MiB, run | disk MiB, run | peak device | peak host | peak disk | peak unified |"
    p "|---|---|---|---|---|---|---|---|---|---|---|"
    # every run's rows, way by way: median and range of the ratio
    for c in $(seq 1 "$RUNS"); do cat "$D/demo$c.csv" | tail -n +2 | sed "s/^/$c,/"; done |
        awk "$AWKCSV"'{ n = split_csv($0, f); w = f[2]; if (!(w in seen)) { seen[w] = 1; order[++nw] = w }
            k = ++cnt[w]; ratio[w, k] = f[5]; step[w, k] = f[4]
            if (f[1] == 1) { ok[w] = f[3] + 0; why[w] = f[13]; row[w] = sprintf("%.0f | %.0f | %.0f | %.0f | %.0f | %.0f", f[7], f[8], f[9], f[10], f[11], f[12]) } }
        function med(a, w, m,    i, j, t, v) { for (i = 1; i <= m; i++) v[i] = a[w, i] + 0
            for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            lo = v[1]; hi = v[m]; return v[int((m + 1) / 2)] }
        END { for (i = 1; i <= nw; i++) { w = order[i]
            if (!ok[w]) { printf "| %s | OOM: %s | | | | | | | | | |\n", w, why[w]; continue }
            s = med(step, w, cnt[w]); r = med(ratio, w, cnt[w])
            printf "| %s | completes | %.0f | %.2f | %.2f–%.2f | %s |\n", w, s, r, lo, hi, row[w] } }' >> "$PAGE"
    p ""
    p "The first run's account of itself:" ""
    verbatim demo1 '^What it shows' '^$'
else
    failed 1 demo1
fi

# ----------------------------------------------------- spill versus OOM
p "## Spill versus OOM over budgets" ""
if run spill_vs_oom "$B/bench-spill-vs-oom" "$D/spill-vs-oom.csv" "$D/spill-vs-oom.svg" "$SPILL_DIR"; then
    p "\`$B/bench-spill-vs-oom $D/spill-vs-oom.csv $D/spill-vs-oom.svg $SPILL_DIR\`"
    p "(\`make bench-spill-vs-oom\`): the demo's workload under budgets of peak"
    p "live / ratio, the median step after the first over the in-memory step."
    p "Spill: a 256 MiB pinned host tier and the spill file below it." ""
    awk "$AWKCSV"'NR > 1 { split_csv($0, f); w = f[1]; r = f[2]
            if (!(w in sw)) { sw[w] = 1; ways[++nw] = w } if (!(r in sr)) { sr[r] = 1; rs[++nr] = r }
            cell[w, r] = f[4] + 0 ? sprintf("%.2f", 1 / f[6]) : "OOM" }
        END { printf "| peak / budget |"; for (i = 1; i <= nw; i++) printf " %s |", ways[i]; printf "\n|---|"
            for (i = 1; i <= nw; i++) printf "---|"; printf "\n"
            for (j = 1; j <= nr; j++) { printf "| %.1f |", rs[j]; for (i = 1; i <= nw; i++) printf " %s |", cell[ways[i], rs[j]]; printf "\n" } }' \
        "$D/spill-vs-oom.csv" >> "$PAGE"
    p ""
else failed $? spill_vs_oom; fi

# ------------------------------------------------------------ planned
p "## Planned mode on real traces" ""
if run plan_traces "$B/gm-replay" --plan --csv "$D/plan-traces.csv" "$TRACES"/minimalloc/*.csv "$TRACES"/pytorch/*.csv; then
    p "\`$B/gm-replay --plan --csv $D/plan-traces.csv $TRACES/minimalloc/*.csv $TRACES/pytorch/*.csv\`,"
    p "sim: each trace is one step, recorded (marked with the trace's times where"
    p "it has any: tinyllama1b's are all zero, so it is recorded in event order;"
    p "\`gm_plan_mark\`) and then served from the plan; the plan's region and the"
    p "planned pass's peak reserved against peak live, the online allocator's"
    p "fragmentation (classic segments) on the same trace, the time to build the"
    p "plan, and the planned pass's ns per operation." ""
    p "| trace | requests | region / peak live | planned peak reserved / peak live | online classic fragmentation | build ms | planned ns/op | hits | departures |"
    p "|---|---|---|---|---|---|---|---|---|"
    awk "$AWKCSV"'{ split_csv($0, f) } f[2] == "rmm" { frag[f[1]] = f[6] }
        f[2] == "plan" && (f[1] in frag) { printf "| %s | %d | %.4f | %.4f | %s | %.0f | %.0f | %d | %d |\n", trace_name(f[1]), f[3], f[6],
            (f[4] + 0 > 0 ? f[10] / f[4] : 0), pct(frag[f[1]]), f[8], f[12], f[13], f[14] }' "$D/plan-traces.csv" >> "$PAGE"
    p ""
    p "## Packing problems" ""
    p "The same run, on the packing problems (×512): the plan's region over the"
    p "known optimum, recorded with the problems' own times (marked) and in"
    p "event order alone (unmarked), and the time to build each. Below 1: for"
    p "that problem the optimum is a packing known to exist, not a bound." ""
    p "| problem | marked / optimum | build ms | unmarked / optimum | build ms |" "|---|---|---|---|---|"
    awk "$AWKCSV"'{ split_csv($0, f) } f[2] == "plan" && f[7] + 0 > 0 {
        printf "| %s | %.4f | %.0f | %.4f | %.0f |\n", trace_name(f[1]), f[7], f[8], f[16], f[17] }' \
        "$D/plan-traces.csv" >> "$PAGE"
    p ""
else
    failed $? plan_traces
    p "## Packing problems" "" "See above: the same command." ""
fi

p "## Planned mode per-request cost" ""
if run plan "$B/bench-plan" "$D/plan.csv"; then
    p "\`$B/bench-plan $D/plan.csv\`, sim: a training-shaped step of 1,600"
    p "allocations and their frees (3,200 requests) served from a plan against"
    p "the caching allocator (median over 201 steps),"
    p "then the packer and \`gm_plan_end\` on 10,000-request steps:" ""
    p '```'
    cat "$D/plan.out" >> "$PAGE"
    p '```' ""
else failed $? plan; fi

# ------------------------------------------------------------ test_frag
p "## Tight budgets" ""
if run frag "$B/sim/test_frag" 6; then
    p "\`$B/sim/test_frag 6\`, sim: 48 tensors of random sizes from a few hundred"
    p "bytes to 14 MiB, 10 layers of 3 to 8 of them, each layer's working set"
    p "acquired whole (one tensor at a time, or as one batch), 3 passes, LRU"
    p "and learned order; layers refused room at each budget (× the largest"
    p "working set, + 2 MiB), out of 720 layer acquisitions per cell, half of"
    p "them batches. The test fails if a batch is refused anywhere." ""
    p '```'
    grep -v '^[0-9]* passed, [0-9]* failed$' "$D/frag.out" >> "$PAGE"
    p '```' ""
else failed $? frag; fi

# ------------------------------------------------------------- examples
p "## Examples" ""
p "Each example checks its own result; these are the tables they print."
p "All run on sim here." ""
# example NAME WHAT FROM TO [before]: runs build/NAME (make NAME, with
# dashes) and shows its table; 1 when it failed
example() {
    if run "$1" "$B/$1"; then
        p "**$1** (\`$B/$1\`; \`make $(printf %s "$1" | tr _ -)\`): $2" ""
        verbatim "$1" "$3" "$4" "${5:-}"
        return 0
    fi
    failed $? "$1"
    return 1
}
example train_mlp "an 8-layer MLP under budgets of 100%, 50% and 25% of its footprint." '^run +budget' '^\(footprint'
example train_gpt "a GPT-shaped transformer under budgets of 50% and 25% of its peak, with access modes and the old way." \
    '^run ' '^total'
example planned "planned mode against the caching allocator on a transformer-shaped step." '^peak reserved' '^planned'
if example caching "raw device allocation against the cache on a transformer's request stream (on sim a device allocation is an mmap)." \
    '^A\. raw' '^gm_summary' before; then
    p "and under a budget too small:" ""
    verbatim caching '^C\. ' '^  gm_check'
fi

mv "$PAGE" "$OUT"
echo "figures: wrote $OUT"
