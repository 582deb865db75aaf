# shellcheck shell=bash
# Helpers for the DNS-SD scenarios (50-5x) and benchmark; sourced after lib.sh.

# avahi_browse_json TYPE [SECONDS]: what `avahi-browse -r -p -t TYPE` (an independent
# client of the same avahi-daemon) sees, as a JSON list (see avahi-browse-json.py).
avahi_browse_json() {
    # A browse that fails (avahi-daemon down, a timeout) prints nothing and returns 1: an
    # empty list would read as "the service is not there".
    local out rc
    out=$(timeout --foreground "${2:-20}" avahi-browse -k -r -p -t "$1" 2>/dev/null)
    rc=$?
    [ "$rc" = 0 ] || { echo "avahi-browse $1 exited $rc" >&2; return 1; }
    printf '%s\n' "$out" | "$PY3" "$LAB_DIR/avahi-browse-json.py"
}

# avahi_has NAME TYPE: avahi-browse resolves a service called NAME of TYPE (exit 0).
avahi_has() {
    avahi_browse_json "$2" | "$PY3" -c 'import json,sys; sys.exit(0 if any(i["event"]=="=" and i["name"]==sys.argv[1] for i in json.load(sys.stdin)) else 1)' "$1"
}

# json_get FILE EXPR: evaluates the Python expression EXPR with d = the JSON in FILE.
json_get() { "$PY3" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# now_ms: milliseconds since the epoch.
now_ms() { date +%s%3N; }

# avahi_running: avahi-daemon is on the bus and its server state is RUNNING.
avahi_running() { [ "$(busctl call org.freedesktop.Avahi / org.freedesktop.Avahi.Server GetState 2>/dev/null)" = "i 2" ]; }

# dummy0_addrs: the lab interface's addresses, space-separated (IPv4 and link-local IPv6).
dummy0_addrs() { ip -o addr show dev dummy0 | awk '{ sub(/\/.*/, "", $4); print $4 }' | tr '\n' ' '; }

# start_peerlinkd_keep NAME ADAPTER STATE_DIR: like start_peerlinkd, but with a state dir
# that is kept (not wiped), so a restarted daemon finds what it saved.
start_peerlinkd_keep() {
    local name=$1 adapter=$2 state=$3 sock log pid
    require_peerlink
    sock=$(pl_socket "$name"); log="$LAB_OUT/peerlinkd-$name.log"
    rm -rf "${sock%/*}"; mkdir -p "${sock%/*}" "$state"
    "$PEERLINK_BIN/peerlinkd" --socket "$sock" --adapter "$adapter" --state-dir "$state" --config /dev/null \
        </dev/null >>"$log" 2>&1 &
    pid=$!
    PEERLINKD_PID[$name]=$pid
    _LIB_PIDS+=("$pid")
    note "started peerlinkd $name on $adapter with state dir $state (pid $pid)"
    wait_for 15 sh -c "timeout 5 '$PEERLINK_BIN/peerlink' --socket '$sock' status >/dev/null 2>&1; [ \$? -le 2 ]" \
        || fail "peerlinkd $name: no answer on $sock within 15 s: $(tail -n 5 "$log")"
}
