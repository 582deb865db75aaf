#!/bin/bash
# A name collision over the network (Avahi's entry-group COLLISION path, not the
# local AVAHI_ERR_COLLISION of 51): two hosts, each its own network namespace
# (plns1, plns2) joined by a veth pair (169.254.20.1/16 and .2), each with its
# own system bus (a second and third dbus-daemon, on sockets under /run/lab) and
# its own avahi-daemon (host names pl-net1 and pl-net2; /run/avahi-daemon is a
# private tmpfs in the namespace, so the pid files do not meet). One peerlinkd
# per host, pointed at that host's bus with DBUS_SYSTEM_BUS_ADDRESS (their
# BlueZ bus stays the lab's). n1 publishes "Net Twin"; n2 then publishes the
# same name: its avahi-daemon's probe is answered by n1's over the veth link,
# so n2 is renamed "Net Twin #2" and says so (publish result, dnssd.renamed
# event). Checked independently with avahi-browse on each host: both services,
# each from its own host name and address, and n1's keeps its name.
# timeout: 180
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

NET=/run/lab/dnssd-net
TYPE=_pl-net._tcp

net_cleanup() {
    ip netns del plns1 2>/dev/null
    ip netns del plns2 2>/dev/null
    ip link del plveth1 2>/dev/null
    return 0
}
net_cleanup
rm -rf "$NET"

# bus_of N: the address of host N's system bus.
bus_of() { echo "unix:path=$NET/ns$1/system_bus_socket"; }
# on_host N CMD...: CMD as a D-Bus client of host N (its avahi-daemon).
on_host() { local n=$1; shift; DBUS_SYSTEM_BUS_ADDRESS=$(bus_of "$n") "$@"; }
avahi_state() { on_host "$1" busctl --address="$(bus_of "$1")" call org.freedesktop.Avahi / org.freedesktop.Avahi.Server GetState 2>/dev/null; }

note "two network namespaces joined by a veth pair"
ip netns add plns1 && ip netns add plns2 || fail "ip netns add failed"
ip link add plveth1 type veth peer name plveth2 || fail "cannot create a veth pair"
ip link set plveth1 netns plns1 && ip link set plveth2 netns plns2 || fail "cannot move the veth ends"
for n in 1 2; do
    ip netns exec plns$n ip link set lo up
    ip netns exec plns$n ip link set plveth$n multicast on up || fail "plveth$n up"
    ip netns exec plns$n ip addr add 169.254.20.$n/16 dev plveth$n || fail "plveth$n address"
done
ip netns exec plns1 ip -o addr show dev plveth1
ip netns exec plns2 ip -o addr show dev plveth2

for n in 1 2; do
    mkdir -p "$NET/ns$n"
    note "host $n: its own system bus"
    spawn bus-$n dbus-daemon --system --nofork --nopidfile --address="$(bus_of "$n")"
    wait_for 30 busctl --address="$(bus_of "$n")" status >/dev/null 2>&1 || fail "bus $n did not start: $(cat "$(log_of bus-$n)")"
    avahi_conf "$NET/ns$n/avahi-daemon.conf" pl-net$n plveth$n
    note "host $n: avahi-daemon in plns$n"
    # ip netns exec gives the command its own mount namespace: a tmpfs on
    # /run/avahi-daemon there hides the lab's avahi-daemon pid file and socket.
    spawn avahi-$n env DBUS_SYSTEM_BUS_ADDRESS="$(bus_of "$n")" ip netns exec plns$n sh -c \
        'mount -t tmpfs tmpfs /run/avahi-daemon && exec avahi-daemon --no-drop-root --no-chroot --no-rlimits -f "$1"' \
        sh "$NET/ns$n/avahi-daemon.conf"
done
for n in 1 2; do
    wait_for 30 sh -c "[ \"\$(DBUS_SYSTEM_BUS_ADDRESS='$(bus_of "$n")' busctl --address='$(bus_of "$n")' call org.freedesktop.Avahi / org.freedesktop.Avahi.Server GetState 2>/dev/null)\" = 'i 2' ]" \
        || fail "avahi-daemon $n not RUNNING: $(tail -n 20 "$(log_of avahi-$n)")"
    note "avahi-daemon $n running: $(avahi_state "$n")"
done

# The lab's own avahi-daemon (dummy0, root namespace) must not be what the hosts talk to.
assert_contains "$(on_host 1 timeout --foreground 20 avahi-resolve -4 -n pl-net2.local 2>&1)" "169.254.20.2" "host 1 resolves host 2's name over the link"

note "one peerlinkd per host"
DBUS_SYSTEM_BUS_ADDRESS=$(bus_of 1) start_peerlinkd n1 hci0 --bus unix:path=/run/dbus/system_bus_socket
DBUS_SYSTEM_BUS_ADDRESS=$(bus_of 2) start_peerlinkd n2 hci1 --bus unix:path=/run/dbus/system_bus_socket
wait_for 15 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket n1)' --json dnssd list | grep -q '\"available\":true'" || fail "n1 does not reach its avahi-daemon"
wait_for 15 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket n2)' --json dnssd list | grep -q '\"available\":true'" || fail "n2 does not reach its avahi-daemon"

note "n1 publishes \"Net Twin\"; host 2 sees it over the network"
pl n1 --json dnssd publish "Net Twin" $TYPE 5001 who=n1 >"$LAB_OUT/n1.json" || fail "publish on n1 exited $?: $(cat "$LAB_OUT/n1.json")"
cat "$LAB_OUT/n1.json"
assert_eq "$(json_get "$LAB_OUT/n1.json" 'd["name"]')" "Net Twin" "n1's name"
assert_eq "$(json_get "$LAB_OUT/n1.json" 'd["state"]')" "established" "n1's state"
# (avahi-browse runs in the root namespace: the interface shows as "(null)" there.)
host2_sees_n1() {
    on_host 2 avahi-browse -k -r -p -t $TYPE 2>/dev/null \
        | grep -qF 'IPv4;Net\032Twin;_pl-net._tcp;local;pl-net1.local;169.254.20.1;5001;"who=n1"'
}
wait_for 20 host2_sees_n1 || fail "host 2's avahi-browse does not resolve n1's service: $(on_host 2 avahi-browse -k -r -p -t $TYPE 2>&1)"

spawn_watch watch-n2 pl_watch n2 --json watch --topic dnssd.renamed --count 1 --timeout 60

note "n2 publishes the same name: its probe meets n1's record on the network"
expect_rc 0 pl n2 --json dnssd publish "Net Twin" $TYPE 5002 who=n2
printf '%s\n' "$RUN_OUT" >"$LAB_OUT/n2.json"
py_check "n2 is renamed by a network collision" "$LAB_OUT/n2.json" <<'PY'
import json, sys
out = open(sys.argv[1]).read()
d = json.loads(out[out.index("{"):])
assert d["requested_name"] == "Net Twin", d
assert d["name"] == "Net Twin #2", d
assert d["renames"] == 1, d
PY
wait_for 20 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket n2)' --json dnssd list | grep -q '\"state\":\"established\"'" \
    || fail "n2's renamed publication not established: $(pl n2 --json dnssd list)"
wait_log 10 watch-n2 '"dnssd.renamed"' || fail "no dnssd.renamed event on n2: $(cat "$(log_of watch-n2)")"
cat "$(log_of watch-n2)"
assert_contains "$(cat "$(log_of watch-n2)")" '"from":"Net Twin"' "renamed event: from"
assert_contains "$(cat "$(log_of watch-n2)")" '"to":"Net Twin #2"' "renamed event: to"
assert_contains "$(cat "$LAB_OUT/peerlinkd-n2.log")" "dnssd.collision=network" "n2's log: a network collision (entry group COLLISION)"

note "n1 kept its name"
expect_rc 0 pl n1 --json dnssd list
py_check "n1 not renamed" "$RUN_OUT" <<'PY'
import json, sys
out = sys.argv[1]
p = json.loads(out[out.index("{"):])["publications"][0]
assert p["name"] == "Net Twin" and p["renames"] == 0 and p["state"] == "established", p
PY

note "both hosts' avahi-browse see both services, each from its own host"
for n in 1 2; do
    on_host $n avahi_browse_json $TYPE >"$LAB_OUT/browse-$n.json"
    cat "$LAB_OUT/browse-$n.json"
    py_check "host $n sees both" "$LAB_OUT/browse-$n.json" <<'PY'
import json, sys
got = {i["name"]: i for i in json.load(open(sys.argv[1])) if i["event"] == "="}
a, b = got.get("Net Twin", {}), got.get("Net Twin #2", {})
assert a.get("host") == "pl-net1.local" and a.get("address") == "169.254.20.1" and a.get("txt") == ["who=n1"], got
assert b.get("host") == "pl-net2.local" and b.get("address") == "169.254.20.2" and b.get("txt") == ["who=n2"], got
PY
done

stop_peerlinkd n1; stop_peerlinkd n2
net_cleanup
note "ok"
