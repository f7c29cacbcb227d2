# Shared by bench/peers.sh and bench/net-peers.sh (sourced): running one benchmark's table.

failed=()

# run_table NAME TITLE CMD...: print TITLE, run CMD with its table shown live and
# saved to $tmp/NAME.txt, and record NAME as failed on a bad exit status, an
# empty table or any row with #wrong > 0.
run_table() {
    local name=$1 title=$2
    shift 2
    local out="$tmp/$name.txt" rc=0
    echo
    echo "== $title =="
    "$@" | tee "$out" || rc=$?
    local verdict
    verdict=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { rows++; if ($8 + 0 > 0) bad++ }
                   END { if (!rows) print "no result rows"; else if (bad) print bad " row(s) with #wrong > 0" }' "$out")
    if ((rc != 0)); then
        verdict="exit status $rc${verdict:+; $verdict}"
    fi
    if [[ -n $verdict ]]; then
        echo "$(basename "$0"): $name FAILED: $verdict" >&2
        failed+=("$name")
    fi
}
