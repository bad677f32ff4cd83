#!/bin/sh
# Runs test programs, shows their output, and closes with one line summing
# their "N passed, N failed" lines. A program that exits 77 is a skip, said
# once per reason; any other non-zero exit counts as a failure. Each
# program's line gives its wall time.
pass=0 fail=0 skip=0 skipped_names=""
for t in "$@"; do
    t0=$(date +%s)
    out=$("$t" 2>&1)
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    if [ $rc -eq 77 ]; then
        skip=$((skip + 1)); skipped_names="$skipped_names $(basename "$t")"
        reason=$(printf '%s\n' "$out" | tail -n 1)
        continue
    fi
    printf '%s\n' "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
    line=$(printf '%s\n' "$out" | tail -n 1)
    p=$(printf '%s' "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(printf '%s' "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    if [ -z "$p" ]; then p=0; f=1; fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    printf '%-28s %6d passed, %d failed%s (%d s)\n' "$(basename "$t")" "$p" "$f" "$([ $rc -ne 0 ] && echo " (exit $rc)")" "$secs"
    pass=$((pass + p)); fail=$((fail + f))
done
if [ $skip -gt 0 ]; then
    echo "$skip test programs skipped ($reason):$skipped_names"
    echo "$pass passed, $fail failed, $skip skipped"
else
    echo "$pass passed, $fail failed"
fi
[ $fail -eq 0 ]
