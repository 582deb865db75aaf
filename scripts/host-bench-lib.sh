# Shared by the host benchmarks that run daemons (scripts/transfer-bench-host.sh,
# scripts/peer-bench-host.sh; sourced, after `set -euo pipefail`): the work directory on
# tmpfs, a private D-Bus session bus, daemons on loopback, socat's certificates, and the
# repetitions' medians. The lab's own (Tests/Lab/lib.sh, peer-lib.sh, bench/benchlib.sh) need
# the guest; these need only the host.
#
#   host_bench_start NEED_SHM_BYTES TOOL...   checks the tools, makes $work on /dev/shm
#                                             (with NEED_SHM_BYTES free), starts the bus
#   daemon NAME PORT|off ENCRYPTION [CONFIG LINE]...   a daemon; its peer ID in ID[NAME]
#   pl NAME ARGS...                           the CLI against daemon NAME
#   record NAME KEY VALUE; m NAME KEY         one run's value; the median of the runs
#
# The caller sets BENCH (its name, for messages) and STATIC (the static binary's directory).
BENCH=${BENCH:?set BENCH before sourcing host-bench-lib.sh}
work= bus_pid= address= pids=()
declare -A PID ID RUNS

fail() { echo "$BENCH: $*" >&2; exit 1; }
note() { echo "== $*" >&2; }

cleanup() {
    local p
    # Every background job too (a socat receiver left listening after a failure, a sender).
    for p in "${pids[@]}" $(jobs -p); do kill "$p" 2>/dev/null || true; done
    [ -z "$bus_pid" ] || kill "$bus_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -z "$work" ] || rm -rf "$work"
}

host_bench_start() {
    local need=$1 tool shm_free who; shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || fail "$tool is missing: run scripts/install-deps.sh --lab (as root)"
    done
    shm_free=$(df --output=avail -B1 /dev/shm | tail -n 1)
    [ "$shm_free" -gt "$need" ] || fail "/dev/shm has $shm_free bytes free, needs $need"
    work=$(mktemp -d "/dev/shm/peerlink-$BENCH.XXXXXX")
    trap cleanup EXIT
    cp "$STATIC/peerlinkd" "$work/peerlinkd"
    ln -s peerlinkd "$work/peerlink"
    # A P-256 key and self-signed certificate each for a socat server and client: the TLS
    # baselines' identities ($work/srv.pem, cli.pem, cli.crt ...).
    for who in srv cli; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/$who.key" -out "$work/$who.crt" \
            -subj "/CN=$who" -days 2 >/dev/null 2>&1 || fail "openssl req failed"
        cat "$work/$who.key" "$work/$who.crt" >"$work/$who.pem"
    done
    read -r address bus_pid < <(dbus-daemon --session --fork --print-address=1 --print-pid=1 | paste -s -d ' ')
    [ -n "$bus_pid" ] || fail "dbus-daemon did not start"
}

# daemon NAME PORT|off ENCRYPTION [CONFIG LINE]...: a daemon on 127.0.0.1:PORT (off: it only
# dials), accepting every invitation, its inbox $work/in-NAME; waits until it answers.
daemon() {
    local n=$1 port=$2 enc=$3 i; shift 3
    mkdir -p "$work/in-$n"
    {
        printf '%s\n' "peer.name = bench-$n" "peer.encryption = $enc" "peer.accept = all" "peer.inbox_dir = $work/in-$n"
        if [ "$port" = off ]; then echo "peer.listen = off"; else printf '%s\n' "peer.listen = loopback" "peer.port = $port"; fi
        [ $# = 0 ] || printf '%s\n' "$@"
    } >"$work/$n.conf"
    "$work/peerlinkd" --bus "$address" --socket "$work/$n.sock" --state-dir "$work/state-$n" --config "$work/$n.conf" \
        </dev/null >"$work/$n.log" 2>&1 &
    PID[$n]=$!; pids+=($!)
    for i in $(seq 100); do
        [ -S "$work/$n.sock" ] && break
        kill -0 "${PID[$n]}" 2>/dev/null || fail "peerlinkd $n exited: $(tail -n 5 "$work/$n.log")"
        sleep 0.1
    done
    ID[$n]=$(pl "$n" --json peer identity | python3 -c 'import json, sys; print(json.load(sys.stdin)["peer"])') \
        || fail "no identity from daemon $n"
}
pl() { local n=$1; shift; "$work/peerlink" --socket "$work/$n.sock" "$@"; }
rss_mb() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# CPU ticks (utime + stime, 1/100 s) of process $1 so far; its minor page faults so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# cpu_per_gib FILE BYTES: bash `time`'s "USER SYSTEM" seconds in FILE (the last such line,
# under TIMEFORMAT='%3U %3S'), per GiB of BYTES.
cpu_per_gib() { awk -v b="$2" 'NF == 2 { t = $1 + $2 } END { printf "%.2f", t / (b / 1073741824) }' "$1"; }
faults() { awk '{ print $10 }' "/proc/$1/stat"; }
now() { date +%s%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# record NAME KEY VALUE: one run's value; m NAME KEY: the median of those recorded.
record() { RUNS[$1.$2]+="$3 "; }
m() { tr ' ' '\n' <<<"${RUNS[$1.$2]:-}" | grep . | median; }
each_run() { local v=${RUNS[$1.$2]:-}; tr -s ' ' ',' <<<"${v% }"; }
