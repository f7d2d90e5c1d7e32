#!/usr/bin/env bash
# test-time.sh (make test-time): what make test costs, in CPU seconds, which
# a shared or loaded machine does not distort the way it does wall time. It
# runs make test from an empty Go build cache, as CI does (TEST_TIME_WARM=1
# keeps the cache), records each test binary's CPU, its API servers' and
# other children's included, and prints the packages dearest first, the
# compiling (compile, link, vet: the rest of the total) and the total. On
# CORES cores make test takes at least total/CORES of wall time: the script
# fails if that is over BUDGET seconds (default 2 cores, 20 minutes).
# Arguments are more go test flags, e.g. -v for each test's wall time.
set -euo pipefail

# As go test's -exec program: run the test binary, then append its CPU
# and wall seconds, with the package directory, to the records.
if [[ -n "${TEST_TIME_RECORDS:-}" ]]; then
	start=$(date +%s.%N)
	code=0
	"$@" || code=$?
	end=$(date +%s.%N)
	times >"$TEST_TIME_RECORDS.$$" # not in a subshell: it has no children
	echo "$PWD $(tail -n 1 "$TEST_TIME_RECORDS.$$") $start $end" >>"$TEST_TIME_RECORDS"
	rm -f "$TEST_TIME_RECORDS.$$"
	exit "$code"
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cores=${CORES:-2}
budget=${BUDGET:-1200}
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
if [[ -z "${TEST_TIME_WARM:-}" ]]; then
	export GOCACHE=$work/gocache
fi

# seconds converts times's 1m2.345s to 62.345.
seconds() { awk -v t="$1" 'BEGIN { split(t, a, "m"); sub("s", "", a[2]); printf "%.3f", a[1] * 60 + a[2] }'; }

cd "$root"
times >"$work/before" # not in a subshell: it has no children
code=0
TEST_TIME_RECORDS=$work/records make test GO_TEST_FLAGS="-race -timeout 15m -count=1 -exec $root/hack/test-time.sh $*" || code=$?
times >"$work/after"
read -r bu bs < <(tail -n 1 "$work/before")
read -r au as < <(tail -n 1 "$work/after")
total=$(awk -v a="$(seconds "$au")" -v b="$(seconds "$as")" -v c="$(seconds "$bu")" -v d="$(seconds "$bs")" 'BEGIN { printf "%.0f", a + b - c - d }')

# cpu reads the records: the package, its CPU and wall seconds.
cpu() {
	awk -v root="$root/" '
		function seconds(t, a) { split(t, a, "m"); sub("s", "", a[2]); return a[1] * 60 + a[2] }
		{ dir = $1; sub(root, "", dir); printf "%s %.0f %.0f\n", dir, seconds($2) + seconds($3), $5 - $4 }
	' "$work/records"
}
tests=$(cpu | awk '{ sum += $2 } END { printf "%.0f", sum }')
printf '%-40s %8s %8s\n' "package (test binary and its children)" "CPU s" "wall s"
cpu | sort -k2,2nr | awk '{ printf "%-40s %8d %8d\n", $1, $2, $3 }'
printf '%-40s %8d\n' "compiling (compile, link, vet)" $((total - tests))
printf '%-40s %8d\n' "total" "$total"
floor=$((total / cores))
printf 'on %d cores make test takes at least %dm%02ds of wall time; the budget is %dm%02ds\n' \
	"$cores" $((floor / 60)) $((floor % 60)) $((budget / 60)) $((budget % 60))
if ((code != 0)); then
	echo "make test failed" >&2
	exit "$code"
fi
if ((floor > budget)); then
	echo "over budget: cut the dearest packages above (see docs/install.md, Developing)" >&2
	exit 1
fi
