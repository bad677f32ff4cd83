#!/bin/sh
# make install into a temporary prefix, build examples/basic.c against the
# installed copy with pkg-config's flags alone, run it, make uninstall.
# Prints "N passed, N failed" last, like every test program.
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "note: no pkg-config (Debian: apt-get install pkg-config): the install was not checked"
    echo "0 passed, 0 failed"
    exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s --no-print-directory "$@"; }
if mk install PREFIX="$tmp/prefix" >"$tmp/log" 2>&1; then ok; else bad "make install"; cat "$tmp/log"; fi
for f in include/gpumem.h bin/gm-replay bin/gm-viz lib/pkgconfig/gpumem.pc; do
    if [ -f "$tmp/prefix/$f" ]; then ok; else bad "$f not installed"; fi
done
cp examples/basic.c "$tmp/basic.c" # away from the source tree: only the installed header can be found
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
if cflags=$(pkg-config --cflags gpumem) && libs=$(pkg-config --libs gpumem); then ok; else bad "pkg-config gpumem"; fi
case "$cflags" in *"$tmp/prefix/include"*) ok ;; *) bad "pkg-config --cflags gives $cflags" ;; esac
case "$libs" in *-pthread*) ok ;; *) bad "pkg-config --libs gives $libs" ;; esac
# shellcheck disable=SC2086
if ${CC:-cc} $cflags "$tmp/basic.c" -o "$tmp/basic" $libs >"$tmp/log" 2>&1; then ok; else bad "building basic.c"; cat "$tmp/log"; fi
if [ -x "$tmp/basic" ] && "$tmp/basic" >"$tmp/log" 2>&1; then ok; else bad "running basic"; cat "$tmp/log"; fi
if "$tmp/prefix/bin/gm-replay" --help >/dev/null 2>&1 || [ -x "$tmp/prefix/bin/gm-replay" ]; then ok; else bad "gm-replay"; fi
if mk uninstall PREFIX="$tmp/prefix" >"$tmp/log" 2>&1; then ok; else bad "make uninstall"; cat "$tmp/log"; fi
left=$(find "$tmp/prefix" -type f | wc -l)
if [ "$left" -eq 0 ]; then ok; else bad "$left files left after uninstall"; fi
echo "install into a temporary prefix, basic.c built with pkg-config $cflags $libs"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
