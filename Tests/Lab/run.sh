#!/bin/bash
# Run the virtual Bluetooth/DNS-SD lab: boot one QEMU guest (virtme-ng) on the
# host's kernel and read-only root, run Tests/Lab/guest.sh in it, and report.
#
#   Tests/Lab/run.sh [--demo] [SCENARIO...]
#
# SCENARIO: a file in Tests/Lab/scenarios, by name (10-adapters), file name
# (10-adapters.sh) or path, or the path of a script elsewhere (Tests/Lab/bench/30-notify.sh);
# default: all of Tests/Lab/scenarios, in sorted order.  A scenario whose first lines say
# `# boot: systemd` runs in a second boot of the guest with systemd as PID 1
# (Tests/Lab/systemd-boot.sh); the others in the ordinary boot, virtme-ng's init.
# --demo: run Tests/Lab/demo.sh instead, output shown live.
#
# Environment:
#   PEERLINK_BIN   dir with peerlinkd and peerlink (default: `swift build
#                  --show-bin-path`, else <repo>/.build/debug)
#   PEERLINK_DEB   the package 80-package installs (default: the newest
#                  <repo>/.build/package/peerlink_*.deb, made by `make deb`)
#   PEERLINK_STATIC_BIN  dir with the static peerlinkd bench/80-cli measures
#                  (make bench: scripts/make-deb.sh --build-only)
#   LAB_KERNEL     kernel image (default: newest /boot/vmlinuz-*)
#   LAB_RESULTS_DIR where results go (default: <repo>/.build/lab/<time>)
#   LAB_TIMEOUT    the ordinary boot, seconds (default 3300: a guard against a hung
#                  guest, not a target; its 32 scenarios took 35 to 37 min on a
#                  2-core machine without KVM on 2026-12-07, and the emulator's
#                  speed moves by a fifth between runs; with the systemd boot's
#                  guard and the builds, make check still ends within 90 min)
#   LAB_SYSTEMD_TIMEOUT the systemd boot, seconds (default 1200; it takes about 9 min)
#   LAB_SCENARIO_TIMEOUT per scenario, seconds (default 120; a scenario can
#                  say `# timeout: N`)
#   LAB_CPUS, LAB_MEMORY  guest size (default 2, 2G)
#   LAB_VERBOSE=1  print every scenario's whole output
#   LAB_BTMON=1    record all HCI traffic: results/btmon.snoop (btmon -r to read)
#
# The last line printed is always `N passed, N failed`; the exit status is 0
# only if the guest finished, nothing failed and something passed.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
LAB_DIR="$REPO/Tests/Lab"
LAB_TIMEOUT=${LAB_TIMEOUT:-3300}
LAB_SYSTEMD_TIMEOUT=${LAB_SYSTEMD_TIMEOUT:-1200}

# verdict PASSED FAILED: the last line, and the exit status.
verdict() {
    echo "$1 passed, $2 failed"
    [ "$2" = 0 ] && [ "$1" -gt 0 ] && exit 0
    exit 1
}
# cannot_run MSG...: the lab cannot run: that is a failure, never a pass.
cannot_run() {
    printf 'lab: cannot run: %s\n' "$@" >&2
    verdict 0 1
}

mode=scenarios
names=()
while [ $# -gt 0 ]; do
    case $1 in
        --demo) mode=demo ;;
        -h|--help) sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) echo "lab: unknown option $1" >&2; cannot_run "usage: run.sh [--demo] [SCENARIO...]" ;;
        *) names+=("$1") ;;
    esac
    shift
done

# ---- what the lab needs on the host --------------------------------------------
if [ "$(id -u)" = 0 ]; then deps="$REPO/scripts/install-deps.sh --install --lab"
else deps="sudo $REPO/scripts/install-deps.sh --install --lab"; fi
missing=()
command -v vng >/dev/null 2>&1 || missing+=("vng (PyPI virtme-ng)")
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=("qemu-system-x86_64 (qemu-system-x86)")
command -v busybox >/dev/null 2>&1 || [ -x /bin/busybox ] || missing+=("busybox (busybox-static)")
if [ -n "${LAB_KERNEL:-}" ]; then
    kernel=$LAB_KERNEL
else
    kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$kernel" ]; then
    missing+=("a kernel image /boot/vmlinuz-* (linux-image-amd64)")
elif [ ! -r "$kernel" ]; then
    missing+=("read access to $kernel")
elif [ ! -d "/lib/modules/${kernel##*/vmlinuz-}" ]; then
    missing+=("/lib/modules/${kernel##*/vmlinuz-} (modules for $kernel)")
fi
if [ ${#missing[@]} -gt 0 ]; then
    printf 'lab: missing: %s\n' "${missing[@]}" >&2
    printf 'lab: install with: %s\n' "$deps" >&2
    cannot_run "lab dependencies missing"
fi

# ---- scenarios -------------------------------------------------------------------
scenarios=()
if [ "$mode" = scenarios ]; then
    if [ ${#names[@]} -eq 0 ]; then
        for f in "$LAB_DIR"/scenarios/*.sh; do [ -e "$f" ] && scenarios+=("$(basename "$f" .sh)"); done
        [ ${#scenarios[@]} -gt 0 ] || cannot_run "no scenarios in $LAB_DIR/scenarios"
    else
        for n in "${names[@]}"; do
            b=$(basename "$n" .sh)
            if [ -f "$LAB_DIR/scenarios/$b.sh" ]; then scenarios+=("$b"); continue; fi
            # A path to a script elsewhere (Tests/Lab/bench/*.sh): passed on as an absolute path.
            case $n in */*) [ -f "$n" ] && { scenarios+=("$(cd "$(dirname "$n")" && pwd -P)/${n##*/}"); continue; } ;; esac
            m=$(cd "$LAB_DIR/scenarios" && ls -1 -- [0-9]*-"$b".sh 2>/dev/null)
            [ "$(printf '%s\n' "$m" | grep -c .)" = 1 ] || cannot_run "no single scenario matches '$n' in $LAB_DIR/scenarios"
            scenarios+=("${m%.sh}")
        done
    fi
elif [ ${#names[@]} -gt 0 ]; then
    cannot_run "--demo takes no scenario names"
fi

# ---- the binaries under test --------------------------------------------------------
if [ -z "${PEERLINK_BIN:-}" ]; then
    swift=$(command -v swift || { [ -x /opt/swift/usr/bin/swift ] && echo /opt/swift/usr/bin/swift; })
    if [ -n "$swift" ]; then
        PEERLINK_BIN=$(cd "$REPO" && timeout 120 "$swift" build --show-bin-path 2>/dev/null | tail -n 1)
    fi
    [ -n "${PEERLINK_BIN:-}" ] || PEERLINK_BIN="$REPO/.build/debug"
fi
PEERLINK_BIN=$(cd "$PEERLINK_BIN" 2>/dev/null && pwd -P || echo "$PEERLINK_BIN")
for b in peerlinkd peerlink; do
    [ -x "$PEERLINK_BIN/$b" ] || echo "lab: warning: $PEERLINK_BIN/$b not found: scenarios that need it will FAIL (build with 'swift build' or set PEERLINK_BIN)" >&2
done

# ---- which boot each scenario needs ----------------------------------------------------
# scenario_file NAME: the script of a scenario (a name in scenarios/, or an absolute path).
scenario_file() { case $1 in /*) echo "$1" ;; *) echo "$LAB_DIR/scenarios/$1.sh" ;; esac; }
plain=() systemd=()
for s in "${scenarios[@]}"; do
    if head -n 20 "$(scenario_file "$s")" | grep -q '^# boot: *systemd'; then systemd+=("$s"); else plain+=("$s"); fi
done
if [ ${#systemd[@]} -gt 0 ]; then
    command -v unshare >/dev/null 2>&1 || cannot_run "unshare (util-linux) is needed for the systemd boot"
    [ -x /lib/systemd/systemd ] || cannot_run "systemd is not installed on the host (the systemd boot runs the host's): $deps"
fi

# ---- results dir ------------------------------------------------------------------
stamp=$(date +%Y%m%d-%H%M%S)
results=${LAB_RESULTS_DIR:-$REPO/.build/lab/$stamp-$$}
if ! mkdir -p "$results" 2>/dev/null; then
    results=$(mktemp -d "${TMPDIR:-/tmp}/peerlink-lab.XXXXXX") || cannot_run "no writable results dir"
fi
results=$(cd "$results" && pwd -P)
case $results in "$REPO/.build/lab/"*) ln -sfn "${results##*/}" "$REPO/.build/lab/latest" ;; esac
: >"$results/results.txt"

# write_env FILE BOOT SCENARIO...: what guest.sh reads.
write_env() {
    local file=$1 boot=$2; shift 2
    {
        printf 'LAB_REPO=%q\n' "$REPO"
        printf 'LAB_RESULTS=%q\n' "$results"
        printf 'PEERLINK_BIN=%q\n' "$PEERLINK_BIN"
        printf 'LAB_MODE=%q\n' "$mode"
        printf 'LAB_BOOT=%q\n' "$boot"
        printf 'LAB_SCENARIOS=%q\n' "$*"
        # Exported: the scenarios (children of guest.sh) read them.
        for v in PEERLINK_DEB PEERLINK_STATIC_BIN BENCH_CLI_N BENCH_IDLE_SECONDS LAB_SCENARIO_TIMEOUT LAB_DEMO_TIMEOUT LAB_VERBOSE LAB_CONTROLLERS LAB_BTMON BENCH_COUNT BENCH_BATCH BENCH_PERF BENCH_RUNS BENCH_REPEAT BENCH_TRANSFER_BYTES SOAK_MINUTES SOAK_RESTART_SECONDS SOAK_SAMPLE_SECONDS; do
            [ -n "${!v:-}" ] && printf 'export %s=%q\n' "$v" "${!v}"
        done
    } >"$file"
}

# ---- boot ---------------------------------------------------------------------------
echo "lab: kernel $kernel; PEERLINK_BIN=$PEERLINK_BIN; results in $results"
[ "$mode" = demo ] && echo "lab: demo" || echo "lab: scenarios: ${scenarios[*]}"
cd "$REPO" || cannot_run "cd $REPO"
start=$(date +%s)
declare -A boot_rc=()
if [ "$mode" = demo ] || [ ${#plain[@]} -gt 0 ]; then
    write_env "$results/lab.env" virtme "${plain[@]}"
    # --disable-kvm: KVM aborts or hangs here; TCG works.  --force-9p: no virtiofsd.
    timeout -k 30 "$LAB_TIMEOUT" vng --run "$kernel" --disable-kvm --force-9p \
        --cpus "${LAB_CPUS:-2}" --memory "${LAB_MEMORY:-2G}" --user root \
        --rwdir "$results" \
        --exec "bash $(printf %q "$LAB_DIR/guest.sh") $(printf %q "$results/lab.env")" \
        </dev/null 2>&1 | tee "$results/console.log"
    boot_rc[virtme]=${PIPESTATUS[0]}
fi
if [ ${#systemd[@]} -gt 0 ]; then
    echo "lab: systemd boot: ${systemd[*]}"
    write_env "$results/lab-systemd.env" systemd "${systemd[@]}"
    timeout -k 30 "$LAB_SYSTEMD_TIMEOUT" unshare -m --propagation private \
        bash "$LAB_DIR/systemd-boot.sh" "$kernel" "$results/lab-systemd.env" "$results" "$results/console-systemd.log"
    boot_rc[systemd]=$?
fi
elapsed=$(( $(date +%s) - start ))

# ---- summary --------------------------------------------------------------------------
passed=0; failed=0
echo
echo "==== lab summary (${elapsed}s, results in $results)"
declare -A seen=()
if [ -f "$results/results.txt" ]; then
    while IFS=$'\t' read -r verdict_ name dur detail; do
        [ -n "$name" ] || continue
        seen[$name]=1
        if [ "$verdict_" = PASS ]; then
            passed=$((passed + 1)); echo "PASS $name (${dur}s)"
        else
            failed=$((failed + 1))
            echo "FAIL $name (${dur}s): ${detail:-failed}; output: $results/scenarios/$name/output.log"
        fi
    done <"$results/results.txt"
fi
expected=("${scenarios[@]}")
[ "$mode" = demo ] && expected=(demo)
for s in "${expected[@]}"; do
    s=$(basename "$s" .sh)
    [ -n "${seen[$s]:-}" ] && continue
    setup=lab-setup; [[ " ${systemd[*]} " == *" $s "* ]] && setup=lab-setup-systemd
    [ -n "${seen[$setup]:-}" ] && { failed=$((failed + 1)); echo "FAIL $s: not run (the lab did not come up)"; continue; }
    failed=$((failed + 1)); echo "FAIL $s: no result (guest crashed or timed out before it finished)"
done
for boot in "${!boot_rc[@]}"; do
    done_file=$results/guest-done console=$results/console.log
    [ "$boot" = virtme ] || { done_file=$results/guest-done-$boot; console=$results/console-$boot.log; }
    [ -f "$done_file" ] && continue
    failed=$((failed + 1))
    rc=${boot_rc[$boot]}
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        tmo=$LAB_TIMEOUT; [ "$boot" = virtme ] || tmo=$LAB_SYSTEMD_TIMEOUT
        echo "FAIL lab ($boot boot): the guest was killed after the timeout of ${tmo}s"
    else
        echo "FAIL lab ($boot boot): the guest did not finish (exit $rc; see $console)"
    fi
done
verdict "$passed" "$failed"
