#!/usr/bin/env bash
# The unit tests (`swift test --skip-build`), with a watchdog, for make check and make unit.
#
# The tests normally take about a minute on a two-core machine. A run still going after
# UNIT_TIMEOUT seconds (default 900) is a hang, and a hang is a bug: instead of waiting for
# CI's own limit, this prints the tests that started and never ended, writes every thread's
# stack (gdb, when installed) to .build/unit-tests-stacks.txt and prints where the test
# threads wait, stops the run and fails.
#
# The output is line-buffered (stdbuf), so what is printed is what has happened even when
# stdout is a pipe; a copy goes to .build/unit-tests.log.
# Usage: scripts/unit-tests.sh [swift test options...]   (SWIFT=swift, UNIT_TIMEOUT=900, UNIT_WIDTH=12)
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
LIMIT=${UNIT_TIMEOUT:-900}
LOG=.build/unit-tests.log
STACKS=.build/unit-tests-stacks.txt
mkdir -p .build
rm -f "$STACKS"

# The processes of session $1, from /proc (procps may not be installed).
in_session() {
    python3 - "$1" <<'EOF'
import os, sys
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            stat = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, so split after ')'.
        if stat[stat.rindex(")") + 2:].split()[3] == sys.argv[1]:
            print(p)
EOF
}

# At most UNIT_WIDTH tests run at once (Swift Testing starts every test at once otherwise).
# The product's own tasks in the test process (an in-process control server's handlers, a
# peer node's continuations) share Swift's cooperative pool, two threads here, with the test
# bodies: with all 800 queued at the start, such a task waited behind them for 14 s, and a
# control server did not answer its test within 10 s, a peer's handshake ran out of time.
# Tests that block their thread run on threads of their own (`.ownThreads`, TestSupport).
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${UNIT_WIDTH:-12}

# setsid: the run is a session of its own, stopped as one.
setsid stdbuf -oL -eL "$SWIFT" test --skip-build "$@" > >(stdbuf -oL tee "$LOG") 2>&1 &
run=$!
started=$SECONDS
while kill -0 "$run" 2>/dev/null && (( SECONDS - started < LIMIT )); do sleep 1; done

if kill -0 "$run" 2>/dev/null; then
    sleep 2  # let tee print what it has
    echo "unit-tests: FAIL: still running after $LIMIT s (UNIT_TIMEOUT); a test hangs."
    echo "unit-tests: started and not ended:"
    # "◇ Test name() started." against "✔/✘ Test name() passed/failed …"; a name can belong
    # to several suites, so the count of starts and ends is compared.
    python3 - "$LOG" <<'EOF'
import re, sys, collections
count = collections.Counter()
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    # A test case's start has no end line of its own: the test's end stands for its cases.
    m = re.match(r"^\S+ (Test|Suite) (?!case |run )(.+?) started\.$", line.rstrip("\n"))
    if m:
        count[(m[1], m[2])] += 1
        continue
    m = re.match(r"^\S+ (Test|Suite) (.+?) (?:with \d+ test cases? )?(?:passed|failed|skipped)", line)
    if m:
        count[(m[1], m[2])] -= 1
for (kind, name), n in sorted(count.items()):
    if n > 0:
        print(f"  {kind} {name}" + (f" (x{n})" if n > 1 else ""))
EOF
    tests=$(in_session "$run" | while read -r p; do
        grep -qa 'PeerLinkPackageTests.xctest' "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done | head -1)
    if [[ -n $tests ]] && command -v gdb >/dev/null; then
        gdb -batch -ex 'thread apply all bt' -p "$tests" > "$STACKS" 2>&1
        echo "unit-tests: every thread's stack is in $STACKS; the frames of this project's code in each:"
        # The innermost frame of ours (a test or the product) in each thread's stack, as file:line.
        awk '/^Thread /{ if (t != "" && f != "") print "  thread " t ": " f; t = $2; f = "" }
             f == "" && / at \/.*\/(Tests|Sources)\// { f = $NF }
             END { if (t != "" && f != "") print "  thread " t ": " f }' "$STACKS"
    else
        echo "unit-tests: no stacks (gdb is not installed: apt-get install gdb)"
    fi
    # By session: swift test puts the test process in a group of its own, and the programs
    # the tests started (dbus-daemon, peerlinkd) are in that group.
    in_session "$run" | xargs -r kill -TERM 2>/dev/null
    sleep 2
    in_session "$run" | xargs -r kill -KILL 2>/dev/null
    wait "$run" 2>/dev/null
    exit 1
fi
wait "$run"
