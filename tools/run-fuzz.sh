#!/bin/sh
# Runs each libFuzzer target for a time: run-fuzz.sh DIR SECONDS TARGET...
# The corpus grows in DIR/corpus/TARGET from tests/fuzz/seed and
# tests/fuzz/regress; a crash leaves DIR/crash-TARGET-* and fails the run.
# Closes with one line per target: the inputs it executed.
dir=$1 secs=$2
shift 2
fail=0 summary=""
for t in "$@"; do
    mkdir -p "$dir/corpus/$t" tests/fuzz/seed/$t tests/fuzz/regress/$t
    log="$dir/fuzz_$t.log"
    "$dir/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$dir/crash-$t-" "$dir/corpus/$t" tests/fuzz/seed/$t tests/fuzz/regress/$t >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    if [ $rc -ne 0 ]; then
        fail=1
        tail -n 40 "$log"
        summary="$summary
fuzz_$t: FAILED after ${runs:-?} inputs (see $log and $dir/crash-$t-*)"
    else
        summary="$summary
fuzz_$t: ${runs:-?} inputs in $secs s, $cov, no crash"
    fi
done
printf '%s\n' "$summary" | sed '/^$/d'
exit $fail
