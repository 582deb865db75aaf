#!/bin/bash
# make fuzz: builds the libFuzzer binary and runs each fuzz target for FUZZ_SECONDS seconds.
#
#   FUZZ_SECONDS=N     seconds per target (default 120)
#   FUZZ_TARGETS="a b" targets to run (default: all; PEERLINK_FUZZ_TARGET=list names them)
#
# Inputs: Tests/Fuzz/corpus/<target>/ and Tests/Fuzz/regressions/<target>/ (read only).
# New inputs the fuzzer finds go to .build/fuzz/corpus/<target>/ (kept between runs, so
# later runs start from what earlier ones reached; never the repository). A crash or a
# violated property leaves its input in .build/fuzz/crashes/<target>/ and makes the run
# exit 1, naming it. Per target the summary prints executions, exec/s, libFuzzer's final
# coverage (cov: edges, ft: features) and crashes, and the executions of every run so far on
# this machine (the ledger .build/fuzz/executions.tsv: one line per target and run, with the
# date, seconds, executions, crashes and commit; the goal is 10 million per target over
# time). See docs/fuzzing.md.
set -uo pipefail
cd "$(dirname "$0")/.."

# The toolchain lives in /opt/swift on these machines (as in the Makefile).
export PATH=$PATH:/opt/swift/usr/bin
SWIFT=${SWIFT:-swift}
SECONDS_EACH=${FUZZ_SECONDS:-120}
BUILD=.build/fuzz
BIN=$BUILD/release/peerlink-fuzz

# libFuzzer ships with the swift.org toolchain (compiler-rt), not with every Swift install.
toolchain=$(dirname "$(command -v "$SWIFT")")/..
if ! ls "$toolchain"/lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-*.a >/dev/null 2>&1 \
   && ! ls "$toolchain"/lib/swift/clang/lib/linux/libclang_rt.fuzzer_no_main-*.a >/dev/null 2>&1; then
    echo "fuzz: no libFuzzer (libclang_rt.fuzzer*) in $toolchain; install a swift.org toolchain (it includes compiler-rt's libFuzzer)" >&2
    exit 2
fi

# One build for every target, in its own build path so it never disturbs the debug build.
# -DFUZZING removes the binary's Swift main (libFuzzer brings its own; see FuzzEntry.swift);
# -sanitize=fuzzer instruments every module for coverage and links libFuzzer,
# -sanitize=address adds AddressSanitizer.
echo "== building the fuzzers (release, -sanitize=fuzzer,address) in $BUILD"
if ! "$SWIFT" build -c release --build-path "$BUILD" -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING \
        --product peerlink-fuzz 2>&1 | grep -v "prohibited flag(s): -D_REENTRANT"; then
    echo "fuzz: the build failed" >&2
    exit 2
fi

all=$(PEERLINK_FUZZ_TARGET=list "$BIN") || { echo "fuzz: $BIN cannot list its targets" >&2; exit 2; }
targets=${FUZZ_TARGETS:-$all}
for t in $targets; do
    grep -qx "$t" <<<"$all" || { echo "fuzz: no target '$t'; targets: $(echo $all)" >&2; exit 2; }
done

# Leaks are reported (LeakSanitizer runs with AddressSanitizer): a decoder that leaks per
# input would grow the daemon without bound. Timeouts: one input taking over 10 s is a hang.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:symbolize=1}
# Swift's own crash backtracer would catch the signal first and dump memory, which ASan
# reports as a crash of its own; libFuzzer's and ASan's reports are the ones wanted here.
export SWIFT_BACKTRACE=enable=no
failed=()
rows=()
LEDGER=$BUILD/executions.tsv
[ -s "$LEDGER" ] || printf 'date\ttarget\tseconds\texecutions\tcrashes\tcommit\n' >"$LEDGER"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# total TARGET: the executions of TARGET over every run in the ledger.
total() { awk -F'\t' -v t="$1" 'NR > 1 && $2 == t { n += $4 } END { printf "%d", n }' "$LEDGER"; }
for t in $targets; do
    corpus=$BUILD/corpus/$t
    crashes=$BUILD/crashes/$t
    log=$BUILD/logs/$t.log
    mkdir -p "$corpus" "$crashes" "$BUILD/logs" "Tests/Fuzz/regressions/$t"
    echo "== $t: ${SECONDS_EACH}s (log: $log)"
    started=$SECONDS
    PEERLINK_FUZZ_TARGET=$t "$BIN" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
        "$corpus" "Tests/Fuzz/corpus/$t" "Tests/Fuzz/regressions/$t" >"$log" 2>&1
    rc=$?
    # The seconds it ran (a run stopped from outside ran fewer than asked).
    ran=$(( SECONDS - started ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    # A crashed run prints no final stats: its last status line ("#N ...") has the count.
    [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    artifacts=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log")
    ncrash=$(grep -c . <<<"$artifacts")
    if [ "$rc" -ne 0 ] && [ -z "$artifacts" ] && grep -q 'libFuzzer: run interrupted' "$log"; then
        # Stopped from outside (SIGINT/SIGTERM): its executions count, it found nothing.
        echo "   $t: interrupted after ${execs:-?} executions (not a crash)"
    elif [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "   CRASH in $t (exit $rc):"
        grep -m3 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|property violated|Fatal error|deadly signal' "$log" | sed 's/^/     /'
        for a in $artifacts; do echo "     input: $a"; done
        [ -n "$artifacts" ] || { echo "     (no input written; see $log)"; ncrash=1; }
    fi
    [[ ${execs:-} =~ ^[0-9]+$ ]] && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -Is)" "$t" "$ran" "$execs" "$ncrash" "$commit" >>"$LEDGER"
    rows+=("$(printf '%-20s %12s %9s %7s %7s %8s %14s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$ncrash" "$(total "$t")")")
done

echo
printf '%-20s %12s %9s %7s %7s %8s %14s\n' target executions exec/s cov ft crashes "all runs"
for r in "${rows[@]}"; do echo "$r"; done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]} (inputs in $BUILD/crashes/<target>/; replay one with: swift build --product peerlink-fuzz && .build/debug/peerlink-fuzz TARGET FILE)" >&2
    exit 1
fi
echo "fuzz: no crashes"
