# shellcheck shell=bash
# Helpers for lab scenarios.  A scenario starts with
#     . "$LAB_DIR/lib.sh"
# and runs as root inside the guest, in its own process group, under a
# timeout (default 120 s, or a `# timeout: N` line in its first 20 lines).
# It passes iff it exits 0.  `set -u -o pipefail` is on; `set -e` is not:
# check what matters with the assert_* helpers or `|| fail "..."`.
#
# Environment (set by guest.sh):
#   LAB_DIR      this directory (read-only inside the guest)
#   LAB_REPO     the repository root (read-only)
#   LAB_RESULTS  the run's results dir (shared with the host)
#   LAB_OUT      this scenario's own output dir ($LAB_RESULTS/scenarios/NAME)
#   LAB_SCENARIO this scenario's name
#   PEERLINK_BIN where peerlinkd and peerlink are
# Lab services (stop/start/restart bluetoothd, btvirt, avahi) come from
# services.sh, sourced below: see README.md.

set -u -o pipefail
: "${LAB_DIR:?run scenarios through Tests/Lab/run.sh}"
: "${LAB_OUT:?run scenarios through Tests/Lab/run.sh}"
. "$LAB_DIR/services.sh"

# Debian's python with python3-dbus/python3-gi (not whatever `python3` is on PATH).
PY3=/usr/bin/python3
# Where Debian's bluez-test-scripts puts BlueZ's examples (plain files, not gzipped).
BLUEZ_EXAMPLES=/usr/share/doc/bluez-test-scripts/examples
PL_TIMEOUT=${PL_TIMEOUT:-60}     # bound on any single `pl` call

_LIB_PIDS=()        # background processes to end when the scenario exits
_LIB_FAILED=""      # the message given to fail, repeated last at exit

# ---- failing and asserting ------------------------------------------------------
# fail MSG...: the scenario fails: print MSG and exit 1.  Inside $( ) it only
# leaves the command substitution: call it at the top level.
fail() {
    _LIB_FAILED="$*"    # printed by the exit trap, after any daemon log tails
    exit 1
}

# note MSG...: a progress line in the scenario's log.
note() { printf '== %s %s\n' "$(date +%T.%1N)" "$*"; }

# assert_eq ACTUAL EXPECTED MSG
assert_eq() {
    [ "$1" = "$2" ] || fail "$3: expected [$2], got [$1]"
}

# assert_contains HAYSTACK NEEDLE MSG
assert_contains() {
    case "$1" in
        *"$2"*) ;;
        *) fail "$3: [$2] not found in: $1" ;;
    esac
}

# assert_not_contains HAYSTACK NEEDLE MSG
assert_not_contains() {
    case "$1" in
        *"$2"*) fail "$3: [$2] unexpectedly found in: $1" ;;
    esac
}

# run CMD...: run CMD (with stdin from /dev/null), keep its exit status in
# RUN_RC and its stdout+stderr in RUN_OUT; also echo both to the log.
# Never fails by itself.
run() {
    RUN_OUT=$("$@" </dev/null 2>&1)
    RUN_RC=$?
    printf '$ %s\n%s\n[rc=%s]\n' "$*" "$RUN_OUT" "$RUN_RC"
}

# apt_offline: sets APT_OFFLINE, options that make apt-get read no package lists, only the
# .deb it is given and what is installed: `run timeout 300 apt-get "${APT_OFFLINE[@]}" install
# -y ./x.deb`. The guest has no network, so the lists could only name packages it cannot
# fetch; a package's dependencies are installed or it fails either way. In the systemd boot,
# which sees the host's lists (19 MB, no binary cache kept), parsing them took apt 27 s a
# call under the emulator before it did anything (2 s natively).
apt_offline() {
    local d=/tmp/lab-apt-offline
    mkdir -p "$d/lists/partial" "$d/sources.list.d" && : >"$d/sources.list" || fail "cannot make $d"
    APT_OFFLINE=(-o "Dir::Etc::SourceList=$d/sources.list" -o "Dir::Etc::SourceParts=$d/sources.list.d"
                 -o "Dir::State::Lists=$d/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
}

# expect_rc RC CMD...: run CMD and fail unless it exits RC.  RUN_OUT/RUN_RC set.
expect_rc() {
    local want=$1; shift
    run "$@"
    [ "$RUN_RC" = "$want" ] || fail "'$*' exited $RUN_RC, expected $want; output: $RUN_OUT"
}

# wait_for TIMEOUT_S CMD...: retry CMD (output discarded) every 0.1 s until it
# succeeds (return 0) or TIMEOUT_S seconds (may be fractional) pass (return 1).
wait_for() { _lab_until "$@"; }

# py_check MSG [ARGS...] <<'PY' ... PY: run the Python on stdin with Debian's
# python3 (sys.argv[1:] = ARGS); fail with MSG and its output unless it exits 0.
# Use it to check JSON: `py_check "adapter list" "$f" <<'PY'` ... `json.load(open(sys.argv[1]))`.
py_check() {
    local msg=$1; shift
    local out
    out=$("$PY3" - "$@" 2>&1) || fail "$msg: $out"
    [ -z "$out" ] || printf '%s\n' "$out"
}

# py3 ARGS...: Debian's python3, unbuffered.
py3() { "$PY3" -u "$@"; }

# check_notified LOG NAME: central.py's LOG has exactly five values "NAME --<date>.1" to
# ".5", in order, each longer than 20 bytes (so the ATT MTU was raised above 23).
check_notified() {
    py_check "notifications in $1" "$1" "$2" <<'PY'
import sys
name = sys.argv[2]
n = [l.split(" ", 3) for l in open(sys.argv[1]) if l.startswith("NOTIFY ")]
texts = [x[3].strip() for x in n]
assert len(texts) == 5, texts
for i, t in enumerate(texts, 1):
    assert t.startswith(name + " --") and t.endswith(f".{i}"), (i, t)
    assert len(t.encode()) > 20, "the value must be longer than 20 bytes (MTU > 23)"
PY
}

# ---- background processes --------------------------------------------------------
# spawn NAME CMD...: run CMD in the background, output to $LAB_OUT/NAME.log,
# ended (SIGTERM, then SIGKILL) when the scenario exits.  Sets SPAWN_PID.
spawn() {
    local name=$1; shift
    "$@" </dev/null >"$LAB_OUT/$name.log" 2>&1 &
    SPAWN_PID=$!
    _LIB_PIDS+=("$SPAWN_PID")
    note "spawned $name (pid $SPAWN_PID): $*"
}

# spawn_watch NAME COMMAND...: spawn a `peerlink watch` or `peerlink peer watch` COMMAND as
# NAME with `--ready-file` appended, and return once it has subscribed (the file exists), so
# it sees the events of whatever the scenario does next. A fixed sleep here was a race under
# the emulator, where starting the CLI can take longer than any guess. Fails when the watch
# exits first or has not subscribed within 60 s.
spawn_watch() {
    local name=$1; shift
    local ready="$LAB_OUT/$name.ready"
    rm -f "$ready"
    spawn "$name" "$@" --ready-file "$ready"
    local pid=$SPAWN_PID
    _subscribed_or_gone() { [ -e "$ready" ] || ! kill -0 "$pid" 2>/dev/null; }
    wait_for 60 _subscribed_or_gone
    [ -e "$ready" ] || fail "$name did not subscribe within 60 s or exited: $(cat "$(log_of "$name")")"
}

# log_of NAME: path of a spawned process's (or daemon's) log.
log_of() { echo "$LAB_OUT/$1.log"; }

# wait_log TIMEOUT_S NAME TEXT: wait until spawned NAME's log contains TEXT.
wait_log() {
    wait_for "$1" grep -qF -- "$3" "$(log_of "$2")"
}

# bluez_example SCRIPT ADAPTER [ARGS...]: run one of BlueZ's example scripts
# (example-advertisement, example-gatt-server, ...) on the named adapter, in
# the foreground; use with spawn.  See bluez-example.py.
bluez_example() { "$PY3" -u "$LAB_DIR/bluez-example.py" "$@"; }

# bluez_find ARGS...: the lab's independent central (see bluez-find.py):
# --adapter hciN [--address A] [--uuid U] [--name N] [--timeout S] [--connect]
bluez_find() { "$PY3" -u "$LAB_DIR/bluez-find.py" "$@"; }

# central_scanning NAME ARGS...: spawn the independent central (central.py ARGS) as NAME and
# wait (30 s) until its discovery is on (it prints SCANNING).  Scanner first: the caller then
# (re)starts the advertisement, so btvirt reports it to a controller already scanning (a scan
# started after the advertisement can miss it: README.md, "Pitfalls met").
# central_result NAME: wait for that central to end; RUN_RC = its exit status, RUN_OUT = its
# output (as `run` sets them).
declare -A CENTRAL_PID=()
central_scanning() {
    local name=$1; shift
    spawn "$name" "$PY3" -u "$LAB_DIR/central.py" "$@"
    CENTRAL_PID[$name]=$SPAWN_PID
    wait_log 30 "$name" SCANNING || fail "central $name: discovery not on within 30 s: $(cat "$(log_of "$name")")"
}
central_result() {
    wait "${CENTRAL_PID[$1]}"
    RUN_RC=$?
    RUN_OUT=$(cat "$(log_of "$1")")
    printf '$ central %s\n%s\n[rc=%s]\n' "$1" "$RUN_OUT" "$RUN_RC"
}

_lib_cleanup() {
    local rc=$? pid f
    trap - EXIT
    for pid in "${_LIB_PIDS[@]}"; do _lab_stop_pid "$pid"; done
    wait 2>/dev/null
    if [ "$rc" != 0 ]; then
        for f in "$LAB_OUT"/peerlinkd-*.log; do
            [ -s "$f" ] || continue
            printf -- '---- last lines of %s\n' "${f#"$LAB_RESULTS"/}"
            tail -n 15 "$f"
        done
        # the reason goes last: the harness shows the last lines on FAIL
    fi
    # The systemd boot: the guest's journal is kept with the scenario (it dies with the guest).
    if [ "${LAB_BOOT:-virtme}" = systemd ]; then
        journalctl -b --no-pager >"$LAB_OUT/journal.log" 2>&1
        if [ "$rc" != 0 ]; then
            echo "---- last lines of the journal of peerlinkd.service"
            journalctl -u peerlinkd.service -b --no-pager -n 15 2>&1
        fi
    fi
    [ -n "$_LIB_FAILED" ] && printf 'FAIL: %s\n' "$_LIB_FAILED" >&2
    exit "$rc"
}
trap _lib_cleanup EXIT
trap 'fail "interrupted (scenario timeout?)"' TERM INT

# ---- peerlink --------------------------------------------------------------------
# require_peerlink: fail (never skip) unless both binaries are in $PEERLINK_BIN.
require_peerlink() {
    local b
    for b in peerlinkd peerlink; do
        [ -x "${PEERLINK_BIN:-}/$b" ] || fail "$b not found in PEERLINK_BIN=${PEERLINK_BIN:-<unset>} (build with 'swift build' on the host, or set PEERLINK_BIN)"
    done
}

pl_socket() { echo "/run/peerlink-$1/control.sock"; }
pl_state_dir() { echo "/var/lib/peerlink-$1"; }

# pl NAME ARGS...: the CLI against daemon NAME's socket (bounded by PL_TIMEOUT, 60 s: a
# `watch` meant to run through the scenario must use pl_watch).  Says so on stderr when it
# had to stop the CLI (exit 124).
pl() {
    local name=$1; shift
    timeout --foreground -k 5 "$PL_TIMEOUT" "$PEERLINK_BIN/peerlink" --socket "$(pl_socket "$name")" "$@"
    local rc=$?
    [ "$rc" != 124 ] || echo "pl: 'peerlink $*' stopped after PL_TIMEOUT=${PL_TIMEOUT} s" >&2
    return "$rc"
}

# pl_watch NAME ARGS...: like pl, for a CLI that runs as long as the scenario (a spawned
# `watch` recording events): bounded by PL_WATCH_TIMEOUT (900 s) instead of PL_TIMEOUT; a
# `--timeout` given to watch still applies.  Under `pl`, a recorder started early was
# killed after 60 s without a word, which looked like events no longer reaching it.
pl_watch() {
    local name=$1; shift
    timeout --foreground -k 5 "${PL_WATCH_TIMEOUT:-900}" "$PEERLINK_BIN/peerlink" --socket "$(pl_socket "$name")" "$@"
    local rc=$?
    [ "$rc" != 124 ] || echo "pl_watch: 'peerlink $*' stopped after PL_WATCH_TIMEOUT=${PL_WATCH_TIMEOUT:-900} s" >&2
    return "$rc"
}

declare -A PEERLINKD_PID=()

# start_peerlinkd NAME ADAPTER [EXTRA ARGS...]: start a daemon with a fresh
# socket dir (/run/peerlink-NAME) and state dir (/var/lib/peerlink-NAME),
# logging to $LAB_OUT/peerlinkd-NAME.log; wait (15 s) until `peerlink status`
# gets an answer (exit 0, 1 or 2; 3 means it could not reach the daemon).
# The daemon is stopped when the scenario exits.  Sets PEERLINKD_PID[NAME].
# PL_CONFIG=FILE: the configuration file (default none: /dev/null).  PEERLINKD_NETNS=NS: run
# it in that network namespace; PEERLINKD_ENV="VAR=VALUE ...": with those in its environment;
# PEERLINKD_NOWAIT=1: no waiting (peer-lib.sh's peer_up starts several at once).
start_peerlinkd() {
    local name=$1 adapter=$2; shift 2
    require_peerlink
    [ -z "${PEERLINKD_PID[$name]:-}" ] || fail "start_peerlinkd: daemon '$name' already started"
    local sock state log
    sock=$(pl_socket "$name"); state=$(pl_state_dir "$name"); log="$LAB_OUT/peerlinkd-$name.log"
    # PEERLINKD_KEEP=1: a restart: the state directory (identity, trust, parts) stays.
    rm -rf "${sock%/*}"
    [ -n "${PEERLINKD_KEEP:-}" ] || rm -rf "$state"
    mkdir -p "${sock%/*}" "$state"
    # `ip netns exec` and `env` exec the daemon: the pid is the daemon's.
    local wrap=()
    # shellcheck disable=SC2206
    [ -z "${PEERLINKD_ENV:-}" ] || wrap=(env ${PEERLINKD_ENV})
    [ -z "${PEERLINKD_NETNS:-}" ] || wrap+=(ip netns exec "$PEERLINKD_NETNS")
    "${wrap[@]}" "$PEERLINK_BIN/peerlinkd" --socket "$sock" --adapter "$adapter" --state-dir "$state" \
        --config "${PL_CONFIG:-/dev/null}" "$@" </dev/null >>"$log" 2>&1 &
    local pid=$!
    PEERLINKD_PID[$name]=$pid
    _LIB_PIDS+=("$pid")
    note "started peerlinkd $name on $adapter (pid $pid)"
    # PEERLINKD_NOWAIT=1: return at once (the caller waits for the daemon its own way).
    [ -z "${PEERLINKD_NOWAIT:-}" ] || return 0
    local deadline=$(( $(date +%s) + 15 )) rc
    while :; do
        kill -0 "$pid" 2>/dev/null || fail "peerlinkd $name exited during start-up: $(tail -n 5 "$log")"
        timeout --foreground 5 "$PEERLINK_BIN/peerlink" --socket "$sock" status >/dev/null 2>&1
        rc=$?
        [ "$rc" -le 2 ] && return 0
        [ "$(date +%s)" -lt "$deadline" ] || fail "peerlinkd $name: no answer on $sock within 15 s (last status exit $rc)"
        sleep 0.1
    done
}

# stop_peerlinkd NAME: SIGTERM the daemon and wait for it (5 s, then SIGKILL);
# returns the daemon's exit status.
stop_peerlinkd() {
    local pid=${PEERLINKD_PID[$1]:-}
    [ -n "$pid" ] || fail "stop_peerlinkd: no daemon '$1'"
    _lab_stop_pid "$pid"
    wait "$pid" 2>/dev/null
    local rc=$?
    unset "PEERLINKD_PID[$1]"
    return "$rc"
}

# ---- BlueZ, read independently of peerlink ------------------------------------------
# bluez_prop PATH INTERFACE PROP: a property of a BlueZ object, busctl's value
# without its type (strings unquoted):
#   bluez_prop /org/bluez/hci0 org.bluez.LEAdvertisingManager1 ActiveInstances -> 1
bluez_prop() {
    local v
    v=$(busctl get-property org.bluez "$1" "$2" "$3") || return 1
    v=${v#* }; v=${v#\"}; v=${v%\"}
    printf '%s\n' "$v"
}
# adapter_prop hciN PROP: a property of org.bluez.Adapter1 (adapter_prop hci0 Powered -> true)
adapter_prop() { bluez_prop "/org/bluez/$1" org.bluez.Adapter1 "$2"; }
# adapter_addr hciN: the controller's address, e.g. 00:AA:01:00:00:00.
adapter_addr() { adapter_prop "$1" Address; }
# adapter_powered hciN: true|false
adapter_powered() { adapter_prop "$1" Powered; }

# advertise_until_seen DAEMON LOG TEXT ARGS...: `peerlink advertise start ARGS` on DAEMON, then
# wait until the spawned LOG contains TEXT; if it does not within 15 s, stop and start the
# advertisement again (up to 4 times). The emulator reports an advertiser to a scanner only
# when one of them is (re)enabled and in about one run in five misses even that (README).
# DAEMON "-" is the installed service (the CLI's default socket), as 90-systemd-unit runs it.
advertise_until_seen() {
    local daemon=$1 log=$2 text=$3 try; shift 3
    local cli=(pl "$daemon")
    [ "$daemon" != - ] || cli=(timeout 30 peerlink)
    for try in 1 2 3 4; do
        [ "$try" = 1 ] || { note "not seen yet: advertising again (try $try)"; "${cli[@]}" advertise stop >/dev/null; }
        "${cli[@]}" advertise start "$@" >/dev/null || return 1
        wait_log 15 "$log" "$text" && return 0
    done
    return 1
}
