#!/usr/bin/env bash
# libringd as a program outside this tree gets it: `meson install` into a temporary DESTDIR, then a
# small C program compiled and linked with `pkg-config --cflags --libs libringd` against the
# installed header and library, and run (it needs no daemon). The temporary directory goes, pass
# or fail.
# usage: pkgconfig.sh BUILD_DIR MESON VERSION [CFLAG...]   (CC: the compiler command, default cc)
set -euo pipefail
build=$1 meson=$2 version=$3
shift 3
read -ra cc <<<"${CC:-cc}"
command -v pkg-config >/dev/null || {
  echo "pkg-config not found: install it (Debian: apt-get install pkg-config; scripts/deps.sh does)" >&2
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringd-pkgconfig.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest

# --no-rebuild: meson test has built everything, and a second ninja in the build directory while
# other tests run could race with it.
if ! "$meson" install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  echo "meson install --destdir $dest failed" >&2
  exit 1
fi
pc=$(find "$dest" -path '*/pkgconfig/libringd.pc')
[ -n "$pc" ] || { echo "meson install put no pkgconfig/libringd.pc under $dest" >&2; exit 1; }

# The .pc file names the real prefix; the sysroot puts its -I and -L under the DESTDIR. Nothing
# counts as a system directory, so that no flag is dropped before the sysroot is added.
export PKG_CONFIG_PATH=${pc%/*} PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
cflags=$(pkg-config --cflags libringd)
libs=$(pkg-config --libs libringd)
libdirs=$(pkg-config --libs-only-L libringd)
for f in "$cflags" "$libdirs"; do
  [[ $f == *"$dest"* ]] || { echo "pkg-config gives '$f', not a directory under $dest" >&2; exit 1; }
done
[ "$(pkg-config --modversion libringd)" = "$version" ] || {
  echo "libringd.pc says version $(pkg-config --modversion libringd), want $version" >&2
  exit 1
}

cat >"$tmp/prog.c" <<'C'
/* A libringd user outside the tree: the installed header alone, the installed library. */
#include <ringd.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    ringd_options_t o;
    const char *v = ringd_version();
    (void)argc;
    if (strcmp(v, argv[1]) != 0) {
        fprintf(stderr, "ringd_version() is %s, want %s\n", v, argv[1]);
        return 1;
    }
    ringd_options_init(&o, sizeof(o));
    if (o.struct_size != sizeof(o) || strstr(ringd_strerror(RINGD_E_CONNECT), "ringd") == NULL) {
        fprintf(stderr, "ringd_options_init or ringd_strerror give nonsense\n");
        return 1;
    }
    printf("libringd %s: %s\n", v, ringd_strerror(RINGD_E_CONNECT));
    return 0;
}
C
# shellcheck disable=SC2086 # pkg-config's output is meant to be split
"${cc[@]}" -std=c99 -Wall -Wextra -Wpedantic -Werror "$@" -o "$tmp/prog" "$tmp/prog.c" \
  $cflags $libs
ld_path=${LD_LIBRARY_PATH:-}
for f in $libdirs; do
  ld_path=${f#-L}${ld_path:+:$ld_path}
done
LD_LIBRARY_PATH=$ld_path "$tmp/prog" "$version"
echo "built and ran a program against libringd $version installed under a DESTDIR, with pkg-config"
