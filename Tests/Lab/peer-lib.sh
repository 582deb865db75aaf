# shellcheck shell=bash
# Helpers for the peer-session scenarios (6x-peer-*) and benchmark; sourced after lib.sh.
# The independent side of every check is peer-tool.py (Python standard library only, written
# from docs/peer-protocol.md), openssl and socat.

PEER_TOOL="$LAB_DIR/peer-tool.py"
# peer_tool ARGS...: Debian's python3 running peer-tool.py (see its docstring).
peer_tool() { "$PY3" -u "$PEER_TOOL" "$@"; }

declare -A PEER_ID=() PEER_PORT=() PEER_NS=() PEER_ADAPTER=()
# Set before peer_up: PEER_ENV[NAME]="VAR=VALUE ..." (the daemon's environment, e.g. the bus of
# its namespace's avahi-daemon), PEER_ARGS[NAME]="--bus ..." (more peerlinkd arguments).
declare -A PEER_ENV=() PEER_ARGS=()

# peer_define NAME ADAPTER NETNS|- [KEY=VALUE...]: a daemon to start with peer_up: its
# configuration file made of the KEY=VALUE settings (peer.port=7001 ...), run in network
# namespace NETNS ("-": the lab's own).
peer_define() {
    local name=$1 kv cfg=/run/lab/peer-$1.conf
    PEER_ADAPTER[$name]=$2
    PEER_NS[$name]=$3
    [ "$3" != - ] || PEER_NS[$name]=
    shift 3
    mkdir -p /run/lab
    : >"$cfg"
    for kv in "$@"; do printf '%s = %s\n' "${kv%%=*}" "${kv#*=}" >>"$cfg"; done
}

# peer_up NAME...: starts the defined daemons at once (start_peerlinkd: fresh dirs, log
# peerlinkd-NAME.log, stopped at exit) and one event recorder for all of them (peer-tool.py
# events, spawned as rec-<first NAME>), which waits until each daemon answers, subscribes to
# its peer events (written to $(log_of ev-NAME)) and reads its identity: PEER_ID[NAME] (64 hex
# digits) and PEER_PORT[NAME]. Fails naming the daemon that did not come up within 40 s.
# (Under the emulator a daemon takes 3 to 15 s to start and Python seconds to import: one
# recorder for all and parallel starts keep the scenarios short.)
peer_up() {
    local name specs=() rec="rec-$1" line
    for name in "$@"; do
        PEERLINKD_NOWAIT=1 PL_CONFIG=/run/lab/peer-$name.conf PEERLINKD_NETNS=${PEER_NS[$name]} PEERLINKD_ENV=${PEER_ENV[$name]:-} \
            start_peerlinkd "$name" "${PEER_ADAPTER[$name]}" ${PEER_ARGS[$name]:-}
        specs+=("$name=$(pl_socket "$name")")
    done
    spawn "$rec" "$PY3" -u "$PEER_TOOL" events --out-dir "$LAB_OUT" --wait 40 "${specs[@]}"
    for name in "$@"; do
        wait_for 45 grep -q "^READY $name \|^NOT-READY $name" "$(log_of "$rec")"
        line=$(grep "^READY $name " "$(log_of "$rec")") \
            || fail "peerlinkd $name did not come up: $(grep "$name" "$(log_of "$rec")"); $(tail -n 5 "$LAB_OUT/peerlinkd-$name.log")"
        PEER_ID[$name]=$(cut -d' ' -f3 <<<"$line")
        PEER_PORT[$name]=$(cut -d' ' -f4 <<<"$line")
        note "$name: peer ${PEER_ID[$name]:0:16}… port ${PEER_PORT[$name]}${PEER_NS[$name]:+ in netns ${PEER_NS[$name]}}"
    done
}

# peer_kill9 NAME: SIGKILL the daemon (no clean-up of any kind) and forget it.
peer_kill9() {
    local pid=${PEERLINKD_PID[$1]:-}
    [ -n "$pid" ] || fail "peer_kill9: no daemon '$1'"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    unset "PEERLINKD_PID[$1]"
}
# peer_restart NAME: peer_up NAME again with its state directory kept (identity, trust, inbox
# parts, outgoing transfers): what a restart of the service does. Its events are appended to
# the same ev-NAME log.
peer_restart() { PEERLINKD_KEEP=1 peer_up "$1"; }

# peer_start NAME ADAPTER NETNS|- [KEY=VALUE...]: peer_define and peer_up of one daemon.
peer_start() {
    peer_define "$@"
    peer_up "$1"
}

# event_lines NAME TOPIC [TEXT...]: NAME's recorded events of TOPIC containing every TEXT
# (events are compact JSON with sorted keys: "reason":"timeout", "peer":"<hex>").
event_lines() {
    local name=$1 topic=$2 t; shift 2
    local cmd="grep -F '\"topic\":\"$topic\"' '$(log_of "ev-$name")'"
    for t in "$@"; do cmd+=" | grep -F -- $(printf '%q' "$t")"; done
    eval "$cmd"
}
# event_count NAME TOPIC [TEXT...]: how many.
event_count() { event_lines "$@" | wc -l; }
# wait_event SECONDS NAME TOPIC [TEXT...]: wait until NAME has recorded such an event.
wait_event() {
    local t=$1; shift
    wait_for "$t" event_lines "$@"
}
# need_event SECONDS NAME TOPIC [TEXT...]: wait_event or fail naming what was recorded.
need_event() {
    wait_event "$@" || fail "$2: no $3 event with [${*:4}] within $1 s; recorded: $(tail -n 8 "$(log_of "ev-$2")")"
}

# jfield KEY TEXT: the first value of "KEY" in the JSON TEXT, a string unquoted, or a number,
# true, false or null as written (flat values only; Python starts too slowly under the
# emulator to parse each reply with it).
jfield() {
    grep -o "\"$1\":\(\"[^\"]*\"\|[^,}]*\)" <<<"$2" | head -n 1 | sed 's/^"[^"]*"://; s/^"//; s/"$//'
}

# peer_connect FROM ADDRESS [peer.connect CLI options]: `peer connect` on FROM, output in RUN_OUT.
peer_connect() { local from=$1; shift; run pl "$from" --json peer connect "$@"; }

# peer_sessions NAME: the peer IDs (hex) of NAME's sessions, sorted, one a line.
peer_sessions() {
    local out
    out=$(pl "$1" --json peer sessions) || { echo "ERROR: $out"; return 1; }
    grep -o '"peer":"[0-9a-f]\{64\}"' <<<"$out" | cut -d'"' -f4 | sort
}

# parts_left INBOX: the names in INBOX/.part, one a line, but for the records of files saved
# (`*.saved`: kept so that the same resource offered again, its confirmation lost, is not
# received twice).
parts_left() { ls -A "$1/.part" | grep -v '\.saved$' || true; }

# rss_kb PID / fd_count PID: VmRSS (kB) and open descriptors of a process, from /proc.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
fd_count() { ls "/proc/$1/fd" | wc -l; }
# tcp_listen_drops: the kernel's count (this network namespace, since boot) of handshakes it
# completed but dropped because a listener's accept queue was full. A client whose final ACK
# is dropped that way after a SYN cookie believes it is connected while no listener ever sees
# the connection, so a burst must fit the queue.
tcp_listen_drops() {
    awk '/^TcpExt:/ { if (!h) { split($0, k); h = 1 } else { split($0, v); for (i in k) if (k[i] == "ListenDrops") print v[i] } }' /proc/net/netstat
}

# ---- network namespaces ---------------------------------------------------------------------
# plpeer1..N: one namespace per daemon, each with one interface pl0 (10.77.0.N/24) and lo.
# peer_net_pair: two namespaces, pl0 of each the two ends of one veth pair.
# peer_net_bridge N: N namespaces, each pl0 one end of a veth pair whose other end is a port of
# bridge plbr0 in namespace plpeer-sw (a switch; the lab's own namespace is not on the link).
# Discovery (an avahi-daemon per namespace, as 55-dnssd-net-collision runs them) goes on top
# of either: each namespace is a host with one interface, pl0.
PEER_NET_N=0
peer_net_cleanup() {
    local n
    for n in 1 2 3 4 5 6 7 8 9; do ip netns del "plpeer$n" 2>/dev/null; done
    ip netns del plpeer-sw 2>/dev/null
    return 0
}
_peer_ns_up() {
    local n=$1
    ip -n "plpeer$n" link set lo up || fail "plpeer$n: lo up"
    ip -n "plpeer$n" link set pl0 up || fail "plpeer$n: pl0 up"
    ip -n "plpeer$n" addr add "10.77.0.$n/24" dev pl0 || fail "plpeer$n: address"
}
# _peer_veth NS1 IF1 NS2 IF2 N: a veth pair made in the lab's namespace, each end moved and
# renamed. The addresses are set (02:77:00:00:N:01 and :02): in the guest the kernel gave
# several veths the same random address, and the bridge then lost host 3's ARP replies.
_peer_veth() {
    ip link add plvA address "02:77:00:00:0$5:01" type veth peer name plvB address "02:77:00:00:0$5:02" \
        || fail "cannot create a veth pair"
    ip link set plvA netns "$1" && ip link set plvB netns "$3" || fail "cannot move the veth ends to $1 and $3"
    ip -n "$1" link set plvA name "$2" && ip -n "$3" link set plvB name "$4" || fail "cannot rename the veth ends"
}
peer_net_pair() {
    peer_net_cleanup
    ip netns add plpeer1 && ip netns add plpeer2 || fail "ip netns add failed"
    _peer_veth plpeer1 pl0 plpeer2 pl0 1
    _peer_ns_up 1; _peer_ns_up 2
    PEER_NET_N=2
    peer_net_reachable
}
peer_net_bridge() {
    local n
    peer_net_cleanup
    ip netns add plpeer-sw || fail "ip netns add plpeer-sw"
    ip -n plpeer-sw link add plbr0 type bridge stp_state 0 forward_delay 0 || fail "cannot create a bridge (module bridge)"
    ip -n plpeer-sw link set plbr0 up
    for n in $(seq 1 "$1"); do
        ip netns add "plpeer$n" || fail "ip netns add plpeer$n"
        _peer_veth "plpeer$n" pl0 plpeer-sw "port$n" "$n"
        ip -n plpeer-sw link set "port$n" master plbr0 up || fail "port$n on the bridge"
        _peer_ns_up "$n"
    done
    PEER_NET_N=$1
    peer_net_reachable
}
# _refused N M: from namespace N, a TCP connection to host M's port 1 is refused (M answered:
# the link and ARP work) rather than unreachable.
_refused() {
    local out
    out=$(ip netns exec "plpeer$1" timeout 3 bash -c "exec 3<>/dev/tcp/10.77.0.$2/1" 2>&1)
    [[ $out == *refused* ]]
}
# peer_net_reachable: wait (15 s) until host 1 reaches every other host; fail with the links'
# state otherwise.
peer_net_reachable() {
    local n
    for n in $(seq 2 "$PEER_NET_N"); do
        wait_for 15 _refused 1 "$n" && continue
        ip -n plpeer1 -d link show pl0; ip -n plpeer1 neigh
        ip -n plpeer-sw -d link show 2>/dev/null
        fail "host 1 cannot reach host $n (10.77.0.$n) over the link"
    done
}
# peer_net_avahi N: host N gets its own system bus ($(peer_bus N)) and avahi-daemon (host
# name pl-peerN, interface pl0 only), as 55-dnssd-net-collision runs them: the daemon runs in
# the namespace with a private tmpfs on /run/avahi-daemon (ip netns exec gives it its own
# mount namespace). Waits (30 s) until it is RUNNING. A peerlinkd of host N reaches it with
# PEER_ENV[NAME]="DBUS_SYSTEM_BUS_ADDRESS=$(peer_bus N)" (and PEER_ARGS[NAME]="--bus
# unix:path=/run/dbus/system_bus_socket" to keep BlueZ on the lab's bus).
PEER_NET_DIR=/run/lab/peer-net
peer_bus() { echo "unix:path=$PEER_NET_DIR/ns$1/system_bus_socket"; }
# on_host N CMD...: CMD as a D-Bus client of host N's bus (avahi-browse there).
on_host() { local n=$1; shift; DBUS_SYSTEM_BUS_ADDRESS=$(peer_bus "$n") "$@"; }
_avahi_running() {
    [ "$(busctl --address="$(peer_bus "$1")" call org.freedesktop.Avahi / org.freedesktop.Avahi.Server GetState 2>/dev/null)" = "i 2" ]
}
peer_net_avahi() {
    local n=$1 dir=$PEER_NET_DIR/ns$1
    rm -rf "$dir"; mkdir -p "$dir"
    spawn "bus-$n" dbus-daemon --system --nofork --nopidfile --address="$(peer_bus "$n")"
    wait_for 30 busctl --address="$(peer_bus "$n")" status || fail "host $n's bus did not start: $(cat "$(log_of "bus-$n")")"
    avahi_conf "$dir/avahi-daemon.conf" pl-peer$n pl0
    peer_net_avahi_start "$n"
}
# peer_net_avahi_start N: (another) avahi-daemon for host N, on its bus (running already).
peer_net_avahi_start() {
    local n=$1 dir=$PEER_NET_DIR/ns$1
    spawn "avahi-$n" env DBUS_SYSTEM_BUS_ADDRESS="$(peer_bus "$n")" ip netns exec "plpeer$n" sh -c \
        'mount -t tmpfs tmpfs /run/avahi-daemon && exec avahi-daemon --no-drop-root --no-chroot --no-rlimits -f "$1"' \
        sh "$dir/avahi-daemon.conf"
    wait_for 30 _avahi_running "$n" || fail "host $n's avahi-daemon is not RUNNING: $(tail -n 20 "$(log_of "avahi-$n")")"
}
# peer_addr N: the address of namespace N's host; peer_ns N: its name.
peer_addr() { echo "10.77.0.$1"; }
peer_ns() { echo "plpeer$1"; }
# in_ns N CMD...: CMD in namespace N.
in_ns() { local n=$1; shift; ip netns exec "plpeer$n" "$@"; }
