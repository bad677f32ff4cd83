#!/bin/sh
# gpu-figures: what needs a real GPU, once, on a machine with one (make
# gpu-figures). Each step has its own time limit and log under $B/gpu;
# a step that fails or runs out of time is reported and the next one runs.
#   info      the device, driver and toolkit
#   tests     every test's CUDA build on the real runtime (CUDART=real)
#   vmm       bench/vmm: the driver's cost of the calls under expandable
#             segments, beside cudaMalloc and cudaFree
#   replay    bench/cuda_replay: the PyTorch traces through gpumem on the
#             device, then bench/torch_replay: the same requests through
#             PyTorch's CUDA caching allocator, with its classic and its
#             expandable segments (when torch is installed)
#   demo      the spill-versus-OOM demo on the device
#   alloc     bench/alloc on the device (cudaMalloc beside gpumem)
#   torch     examples/torch_allocator/train.py --compare (when torch is)
#   spill     bench/spill_vs_oom on the device
#   mlp       examples/train_mlp on the device (cuBLAS)
# STEPS="tests replay" runs a subset; TRACES is the traces' directory;
# TEST_TIMEOUT each test's limit in seconds (default 120); TEST_JOBS how
# many tests run at once (default 1).
B=${B:-build}
TRACES=${TRACES:-../shared/traces}
STEPS=${STEPS:-info tests vmm replay demo alloc torch spill mlp}
MAKE=${MAKE:-make}
LOG=$B/gpu
mkdir -p "$LOG"
J=$(nproc 2>/dev/null || echo 2)
summary=$LOG/summary.txt
: > "$summary"

step() { # name seconds command...
    name=$1 secs=$2
    shift 2
    t0=$(date +%s)
    timeout "$secs" "$@" > "$LOG/$name.log" 2>&1
    rc=$?
    t1=$(date +%s)
    line="$name: exit $rc in $((t1 - t0)) s$([ $rc -eq 124 ] && echo " (ran out of its $secs s)")"
    echo "$line" | tee -a "$summary"
    return $rc
}

has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if has info; then
    step info 30 sh -c 'nvidia-smi; nvcc --version; uname -r; nproc; free -g; df -h . /tmp'
fi

if has tests; then
    step build-tests 600 sh -c "$MAKE -j$J --no-print-directory CUDART=real B=$B \$(ls tests/test_*.c | sed 's|tests/\(.*\)\.c|$B/cuda/\1|')"
    # one test ($1; limit $2 s; logs under $3): its log, then a line
    # "name: exit rc in s: last line"; TEST_JOBS of them at once (default
    # 1: timing checks see a quiet device)
    one='n=$(basename "$1"); s0=$(date +%s); timeout "$2" stdbuf -oL "$1" > "$3/t_$n.log" 2>&1; rc=$?
        echo "$n: exit $rc in $(($(date +%s) - s0)) s: $(tail -n 1 "$3/t_$n.log")"'
    for t in "$B"/cuda/test_*; do [ -x "$t" ] && echo "$t"; done |
        xargs -P "${TEST_JOBS:-1}" -I{} sh -c "$one" _ {} "${TEST_TIMEOUT:-120}" "$LOG" > "$LOG/tests.log" 2>&1
    cat "$LOG/tests.log" >> "$summary"
fi

if has vmm; then
    $MAKE -s --no-print-directory B=$B "$B/bench-vmm" > "$LOG/build-vmm.log" 2>&1
    step vmm 120 "$B/bench-vmm" "$LOG/vmm.csv"
fi

if has replay; then
    $MAKE -s --no-print-directory B=$B "$B/bench-cuda-replay" > "$LOG/build-replay.log" 2>&1
    mkdir -p "$LOG/events"
    step replay 400 "$B/bench-cuda-replay" "$TRACES" "$LOG/cuda-replay.csv" "$LOG/events"
    T=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
    if [ -n "$T" ]; then
        ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
        step build-torch-replay 300 g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$ABI" bench/torch_replay.cc -o "$B/torch-replay" \
            -I"$T/include" -I"$(dirname "$(command -v nvcc)")/../include" -L"$T/lib" -Wl,-rpath,"$T/lib" -lc10_cuda -lc10 &&
            step torch-replay 400 "$B/torch-replay" "$LOG"/events/*.ev &&
            PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True step torch-replay-expandable 400 "$B/torch-replay" "$LOG"/events/*.ev
    else
        echo "torch-replay: no torch beside python3: skipped" | tee -a "$summary"
    fi
fi

if has demo; then
    $MAKE -s --no-print-directory B=$B "$B/demo-cuda" > "$LOG/build-demo.log" 2>&1
    step demo 300 "$B/demo-cuda"
fi

if has alloc; then
    $MAKE -s --no-print-directory B=$B "$B/bench-alloc-cuda" > "$LOG/build-alloc.log" 2>&1
    step alloc 200 "$B/bench-alloc-cuda" "$LOG/bench-alloc.csv"
fi

if has torch; then
    if python3 -c 'import torch' 2>/dev/null; then
        $MAKE -s --no-print-directory B=$B "$B/libgm_torch.so" > "$LOG/build-torch.log" 2>&1
        step torch 400 python3 examples/torch_allocator/train.py --compare --lib "$B/libgm_torch.so"
    else
        echo "torch: no torch beside python3: skipped" | tee -a "$summary"
    fi
fi

if has spill; then
    $MAKE -s --no-print-directory B=$B "$B/bench-spill-vs-oom" > "$LOG/build-spill.log" 2>&1
    step spill 400 "$B/bench-spill-vs-oom" "$LOG/spill-vs-oom.csv" "$LOG/spill-vs-oom.svg" "${SPILL_DIR:-/var/tmp}"
fi

if has mlp; then
    $MAKE -s --no-print-directory B=$B "$B/train_mlp-cuda" > "$LOG/build-mlp.log" 2>&1
    step mlp 300 "$B/train_mlp-cuda"
fi
cat "$summary"
