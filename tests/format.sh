#!/usr/bin/env bash
# The C, C++ and CUDA sources (*.c *.h *.cc *.cu under client daemon gpu proto bench tests) are
# formatted as the root .clang-format says, by Debian's clang-format (another version may format
# differently). Lists the files that are not, with the command that formats them. Build folders,
# node_modules, hidden folders and generated protobuf-c code are not ours to format; no vendored
# C is kept in the tree (a third_party or vendor folder would be skipped).
# usage: format.sh [SOURCE_ROOT]   (default: the tree this script is in)
# Exit: 0 formatted, 1 not (or .clang-format missing or rejected), 77 no clang-format (a skip).
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$root"

if ! command -v clang-format >/dev/null; then
  echo "SKIP: clang-format not found (Debian: apt-get install clang-format)"
  exit 77
fi
version=$(clang-format --version)
if [ ! -f .clang-format ]; then
  echo "no .clang-format at $root"
  exit 1
fi
# An unknown key fails every file alike: say so once instead of listing the whole tree.
if ! err=$(clang-format --style=file --assume-filename="$root/x.c" --dump-config 2>&1 >/dev/null); then
  printf '%s rejects .clang-format:\n%s\n' "$version" "$err"
  exit 1
fi

mapfile -t files < <(find client daemon gpu proto bench tests \
  -type d \( -name node_modules -o -name 'build*' -o -name '.?*' -o -name third_party -o -name vendor \) \
  -prune -o -type f \( -name '*.[ch]' -o -name '*.cc' -o -name '*.cu' \) ! -name '*.pb-c.[ch]' -print |
  LC_ALL=C sort)
differ=()
for f in "${files[@]}"; do
  clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || differ+=("$f")
done
if [ ${#differ[@]} -eq 0 ]; then
  echo "${#files[@]} files formatted as .clang-format says ($version)"
  exit 0
fi
echo "${#differ[@]} of ${#files[@]} files differ from .clang-format ($version):"
printf '  %s\n' "${differ[@]}"
echo "to format them (from $root):"
echo "  clang-format -i ${differ[*]}"
exit 1
