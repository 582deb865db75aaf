#!/bin/bash
# The lab itself is what the other scenarios assume: three powered LE
# controllers with known addresses on org.bluez; avahi publishing, browsing
# and resolving on dummy0; BlueZ's own example advertiser + GATT server on
# one controller seen by bluetoothctl on another and connected to (services
# resolved) from a third.  Uses no PeerLink binary.
# timeout: 120
. "$LAB_DIR/lib.sh"

HCI0=00:AA:01:00:00:00
HCI1=00:AA:01:01:00:01
HCI2=00:AA:01:02:00:02

note "controllers: bluetoothctl and busctl"
list=$(bluetoothctl list 2>&1) || fail "bluetoothctl list: $list"
printf '%s\n' "$list"
assert_eq "$(grep -c '^Controller ' <<<"$list")" 3 "number of controllers in bluetoothctl list"
n=0
for addr in $HCI0 $HCI1 $HCI2; do
    assert_contains "$list" "Controller $addr " "bluetoothctl list"
    assert_eq "$(adapter_addr hci$n)" "$addr" "busctl: hci$n Address"
    assert_eq "$(adapter_powered hci$n)" true "busctl: hci$n Powered"
    n=$((n + 1))
done
tree=$(busctl tree --list org.bluez) || fail "busctl tree org.bluez"
assert_eq "$(grep -c '^/org/bluez/hci[0-9]*$' <<<"$tree")" 3 "adapter objects on org.bluez"

note "avahi: publish, browse, resolve on dummy0"
svc="lab-sanity-$$"
spawn publish avahi-publish -s "$svc" _peerlink-lab._tcp 4242 "k=v"
wait_log 10 publish "Established under name '$svc'" || fail "avahi-publish: $(cat "$(log_of publish)")"
all=$(timeout 15 avahi-browse -a -t -p 2>&1) || fail "avahi-browse -a -t: $all"
printf '%s\n' "$all"
assert_contains "$all" "+;dummy0;IPv4;$svc;_peerlink-lab._tcp;local" "avahi-browse -a -t"
res=$(timeout 15 avahi-browse -r -t -p _peerlink-lab._tcp 2>&1) || fail "avahi-browse -r: $res"
printf '%s\n' "$res"
# The lab's avahi publishes both of dummy0's addresses (the IPv6 link-local one over IPv4
# too, see avahi_conf); a resolve answers with whichever record came first.
line=$(grep "^=;dummy0;IPv4;$svc;" <<<"$res") || fail "no resolved line for $svc"
addr=$(cut -d';' -f8 <<<"$line")
case " $(ip -o addr show dev dummy0 | awk '{ sub(/\/.*/, "", $4); print $4 }' | tr '\n' ' ') " in
*" $addr "*) ;;
*) fail "resolved address '$addr' is not one of dummy0's: $line" ;;
esac
assert_eq "${line/;$addr;/;ADDR;}" "=;dummy0;IPv4;$svc;_peerlink-lab._tcp;local;$LAB_AVAHI_HOST.local;ADDR;4242;\"k=v\"" "resolved service"
assert_not_contains "$res" "IPv6" "lab avahi is IPv4-only"

for ex in example-advertisement example-gatt-server; do
    [ -f "$BLUEZ_EXAMPLES/$ex" ] || fail "$BLUEZ_EXAMPLES/$ex missing (bluez-test-scripts; see scripts/install-deps.sh)"
done

note "two centrals scanning before anything advertises"
# Scanners first, then the advertiser: btvirt sends a report to every
# controller already scanning when advertising is enabled (reliable); a scan
# started after the advertiser relies on the one report sent at scan enable,
# which is sometimes missed (see README, pitfalls).
discovering() { [ "$(adapter_prop "$1" Discovering)" = true ]; }

# 1. Debian's bluetoothctl on hci2: `select`, an LE filter, `scan on`, from a pipe.
stop="$LAB_OUT/bluetoothctl.stop"
btctl_script() {
    echo "select $HCI2"; sleep 0.5
    echo "menu scan"; echo "transport le"; echo "duplicate-data on"; echo "back"
    echo "scan on"
    for _ in $(seq 600); do [ -e "$stop" ] && break; sleep 0.1; done
    echo "devices"; sleep 0.3; echo "scan off"; sleep 0.3; echo "quit"
}
btctl_pipe() { btctl_script | bluetoothctl; }
spawn bluetoothctl btctl_pipe
btctl_pid=$SPAWN_PID
wait_for 15 discovering hci2 || fail "hci2 not discovering after bluetoothctl 'select $HCI2' + 'scan on': $(cat "$(log_of bluetoothctl)")"

# 2. A python3-dbus central on hci1 (bluez-find.py): find by service UUID,
#    connect, resolve services.  No discovery restarts (--restart 60).
spawn central bluez_find --adapter hci1 --address "$HCI0" --uuid 180d --timeout 45 --restart 60 --connect
central_pid=$SPAWN_PID
wait_for 15 discovering hci1 || fail "hci1 not discovering: $(cat "$(log_of central)")"

note "BlueZ's example advertiser + GATT server on hci0"
spawn gatt bluez_example example-gatt-server hci0
wait_log 30 gatt "GATT application registered" || fail "example-gatt-server: $(cat "$(log_of gatt)")"
spawn adv bluez_example example-advertisement hci0
wait_log 30 adv "Advertisement registered" || fail "example-advertisement: $(cat "$(log_of adv)")"
assert_eq "$(bluez_prop /org/bluez/hci0 org.bluez.LEAdvertisingManager1 ActiveInstances)" 1 "hci0 active advertising instances"

note "bluetoothctl on hci2 sees hci0"
wait_log 15 bluetoothctl "Device $HCI0" || fail "bluetoothctl on hci2 did not see $HCI0"
touch "$stop"
wait_for 10 sh -c "! kill -0 $btctl_pid" || fail "bluetoothctl did not quit"
sed 's/\x1b\[[0-9;]*[mK]//g; s/\r//g' "$(log_of bluetoothctl)" | grep -E "Device|Discover" | tail -n 5
busctl introspect org.bluez "/org/bluez/hci2/dev_${HCI0//:/_}" org.bluez.Device1 >/dev/null 2>&1 \
    || fail "no device object for $HCI0 under /org/bluez/hci2 (did bluetoothctl scan elsewhere?)"

note "the central on hci1 found, connected to and resolved hci0's services"
wait_for 40 sh -c "! kill -0 $central_pid" || fail "central on hci1 still running: $(cat "$(log_of central)")"
wait "$central_pid"; rc=$?
out=$(cat "$(log_of central)")
printf '%s\n' "$out"
assert_eq "$rc" 0 "central on hci1 exit status"
assert_contains "$out" "FOUND $HCI0" "discovery from hci1"
assert_contains "$out" "0000180d-0000-1000-8000-00805f9b34fb" "heart rate service"
assert_contains "$out" "0000180f-0000-1000-8000-00805f9b34fb" "battery service"
assert_contains "$out" "12345678-1234-5678-1234-56789abcdef0" "example-gatt-server's test service"
note "lab sane"
