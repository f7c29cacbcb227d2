#!/usr/bin/env bash
# libringd.so exports the public API of ringd.h and nothing else: every defined dynamic symbol is
# a ringd_* function, every function ringd.h declares is exported, and every declaration carries
# RINGD_API (the library is built with hidden visibility, so one without it is not exported).
# usage: abi.sh LIBRINGD_SO RINGD_H
set -euo pipefail
so=$1 header=$2
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
declared=$(grep -oE '\bringd_[a-z_]+\(' "$header" | tr -d '(' | sort -u)
extra=$(grep -vE '^ringd_[a-z]' <<<"$exported" || true)
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
undeclared=$(comm -23 <(echo "$exported") <(echo "$declared"))
# Declarations start in column 0 with their return type (clang-format keeps them so); comments
# and macros that mention a function do not.
unmarked=$(grep -nE '^[A-Za-z_].*\bringd_[a-z_]+\(' "$header" | grep -vE '^[0-9]+:RINGD_API ' || true)
status=0
[ -z "$extra" ] || { echo "exported beyond ringd_*:" $extra; status=1; }
[ -z "$missing" ] || { echo "declared in ringd.h but not exported (RINGD_API missing?):" $missing; status=1; }
[ -z "$undeclared" ] || { echo "exported but not in ringd.h:" $undeclared; status=1; }
[ -z "$unmarked" ] || { printf 'declared in ringd.h without RINGD_API:\n%s\n' "$unmarked"; status=1; }
[ "$status" -ne 0 ] || echo "libringd.so exports the $(wc -l <<<"$exported") functions of ringd.h and nothing else"
exit "$status"
