#!/bin/sh
# make docs-check: keeps README.md and docs/ honest.
#  1. Every ```sh block of README.md is run as written, from the repository
#     root, each in its own shell with `set -e` and HOME set to a scratch
#     directory (so `make install PREFIX=$HOME/.local` installs nowhere
#     real). A command on the SLOW list below is not run (CI runs it as a
#     suite of its own), and says so.
#  2. Every gpumem name in backticks in README.md and docs/*.md
#     (gm_..., GM_..., GPUMEM_...) exists in gpumem.h, or, for the PyTorch
#     library's gm_torch_... and GM_TORCH_... names, in examples/torch_allocator/.
#  3. Every relative link in those pages names a file that exists, and a
#     link to a heading (page.md#anchor) names a heading of that page.
# Prints one line per failure and ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
SLOW='make test|make asan|make tsan|make fuzz|make bench|make figures|make demo|make examples'
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'docs-check: FAILED: %s\n' "$*"; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# 1. README.md's sh blocks, one shell per block; a slow command is
# replaced by a note. Blocks are numbered by their first line.
mkdir -p "$B"
awk -v dir="$scratch" -v slow="^($SLOW)( |$)" '
    /^```sh[[:space:]]*$/ { n++; f = sprintf("%s/block%02d.sh", dir, n); printf "set -e\n" > f; start[n] = NR; next }
    /^```/ && f != "" { close(f); printf "%d\n", start[n] > (dir "/lines"); f = ""; next }
    f != "" {
        cmd = $0; sub(/[[:space:]]+#.*$/, "", cmd)
        if (cmd ~ slow) { printf "echo \"(not run here: %s)\"\n", cmd > f; next }
        print > f
    }' README.md
i=0
for blk in "$scratch"/block*.sh; do
    [ -f "$blk" ] || continue
    i=$((i + 1))
    line=$(sed -n "${i}p" "$scratch/lines")
    printf 'docs-check: README.md:%s\n' "$line"
    sed -n 's/^echo "(not run here: \(.*\))"$/  not run here (a suite of its own in CI): \1/p' "$blk"
    if out=$(HOME="$scratch/home" sh "$blk" 2>&1); then
        ok
    else
        bad "README.md:$line: the sh block exits non-zero; its last lines:"
        printf '%s\n' "$out" | tail -n 15 | sed 's/^/    /'
    fi
done
[ "$i" -gt 0 ] || bad "README.md has no sh block"

# 2. names. A name in a file path (tests/gm_test.h) is not an API name.
pages="README.md docs/*.md"
names=$(cat $pages | grep -o '`[^`]*`' | sed 's/[A-Za-z0-9_./-]*\.[ch]\b//g' |
    grep -oE '\b(gm_[a-z0-9_]+|GM_[A-Z0-9_]+|GPUMEM_[A-Z0-9_]+)\b' | sort -u)
for n in $names; do
    if grep -q "\b$n\b" gpumem.h; then
        ok
    elif case $n in gm_torch_*|GM_TORCH_*) true ;; *) false ;; esac && grep -rqs "\b$n\b" examples/torch_allocator; then
        ok
    else
        bad "\`$n\` is named in the docs ($(grep -l "\b$n\b" $pages | tr '\n' ' ')) but is not in gpumem.h"
    fi
done

# 3. links: [text](target) with a relative target
slug() { # a heading's anchor, as forges write it
    printf '%s\n' "$1" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}
for page in $pages; do
    d=$(dirname "$page")
    grep -o '\]([^)]*)' "$page" | sed 's/^](//; s/)$//' | while read -r target; do
        case $target in http*|mailto:*) continue ;; esac
        file=${target%%#*}
        anchor=
        case $target in *'#'*) anchor=${target#*#} ;; esac
        if [ -z "$file" ]; then path=$page; else path=$d/$file; fi
        if [ ! -e "$path" ]; then
            echo "bad $page: link to $target: no such file"
            continue
        fi
        if [ -n "$anchor" ]; then
            found=0
            for h in $(sed -n 's/^#\{1,6\} \(.*\)$/\1/p' "$path" | while read -r t; do slug "$t"; done); do
                [ "$h" = "$anchor" ] && found=1
            done
            [ $found -eq 1 ] || { echo "bad $page: link to $target: no such heading"; continue; }
        fi
        echo ok
    done
done > "$scratch/links"
pass=$((pass + $(grep -c '^ok$' "$scratch/links")))
fail=$((fail + $(grep -c '^bad ' "$scratch/links")))
sed -n 's/^bad /docs-check: FAILED: /p' "$scratch/links"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
