#!/bin/sh
# test/fuzz.sh [FUZZTIME] runs every Go fuzz target (func FuzzX in a
# fuzz_test.go) for FUZZTIME each (default 5m; make fuzz-ci gives 3s).
# go test -fuzz takes one package and one target per run, so they run one
# after the other. A crasher is written to the package's
# testdata/fuzz/FuzzX/ (commit it with the fix: plain go test replays it);
# the script goes on with the other targets and fails at the end.
# FUZZ=Pattern runs only the targets whose name matches.
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
# Without cgo, as make build ships and make test tests: a cgo build's PID 1
# serves on the stack it was cloned on, and under the fuzzer's
# instrumentation its nosplit chain outgrows the linker's limit.
export CGO_ENABLED=${CGO_ENABLED:-0}
fuzztime=${1:-5m}
failed=""
start=$(date +%s)
for file in $(find . -name fuzz_test.go -not -path './.git/*' | sort); do
	pkg=./$(dirname "${file#./}")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' "$file"); do
		case "$target" in *${FUZZ:-}*) ;; *) continue ;; esac
		t0=$(date +%s)
		run() { $GO test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -fuzzminimizetime 10s "$pkg" 2>&1; }
		out=$(run); rc=$?
		# Go's fuzzing coordinator can give up on a busy worker at the end
		# of a short run ("context deadline exceeded", no input failed, no
		# crasher written): that is the harness, not the target; run again.
		if [ $rc -ne 0 ] && echo "$out" | grep -q 'context deadline exceeded' && ! echo "$out" | grep -q 'Failing input written'; then
			echo "retry $pkg $target (the fuzzing coordinator timed out)"
			out=$(run); rc=$?
		fi
		if [ $rc -eq 0 ]; then
			echo "ok   $pkg $target ($(($(date +%s) - t0))s)"
		else
			echo "FAIL $pkg $target ($(($(date +%s) - t0))s)"
			echo "$out" | grep -v '^fuzz: elapsed' | tail -n 20
			failed="$failed $pkg:$target"
		fi
	done
done
echo "fuzzing took $(($(date +%s) - start))s"
if [ -n "$failed" ]; then
	echo "fuzz targets failed:$failed (crashers are in each package's testdata/fuzz/)"
	exit 1
fi
