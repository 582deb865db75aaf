#!/bin/bash
# The demo story, run by `Tests/Lab/run.sh --demo` with its output shown live.
# Two PeerLink daemons on two virtual controllers; later issues extend it.
. "$LAB_DIR/lib.sh"

heading() { printf '\n======== %s ========\n' "$*"; }
show() { printf '$ peerlink %s\n' "$*"; }

require_peerlink
heading "Two PeerLink daemons: 'a' on hci0, 'b' on hci1"
# Peer-session names of the reference flow (MultipeerConnectivity's tutorial).
printf 'peer.name = KenshinCui_Advertiser\npeer.accept = ask\npeer.accept_resources = all\n' >"$LAB_OUT/demo-a.conf"
printf 'peer.name = KenshinCui\npeer.accept = ask\npeer.accept_resources = all\n' >"$LAB_OUT/demo-b.conf"
PL_CONFIG=$LAB_OUT/demo-a.conf start_peerlinkd a hci0
PL_CONFIG=$LAB_OUT/demo-b.conf start_peerlinkd b hci1

for name in a b; do
    heading "daemon $name: status"
    show status
    pl "$name" status || fail "peerlink status ($name) exited $?"
    heading "daemon $name: adapter list"
    show adapter list
    pl "$name" adapter list || fail "peerlink adapter list ($name) exited $?"
done
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
heading "daemon a: the reference peripheral (CBPeripheralManager's tutorial) on hci0"
show gatt register examples/seed-peripheral.json
pl a gatt register "$LAB_REPO/examples/seed-peripheral.json" || fail "gatt register failed"
show advertise start --name "$NAME" --service $SVC
pl a advertise start --name "$NAME" --service $SVC || fail "advertise start failed"
show gatt list
pl a gatt list

heading "an independent central (python3-dbus, not PeerLink) on hci2: find, connect, read"
"$PY3" -u "$LAB_DIR/central.py" --adapter hci2 --service $SVC --char $CHR --read --timeout 60 || fail "central read failed"

# central_subscribes: the independent central subscribes for three values in the background
# (central_pid); returns once it is subscribed.
central_subscribes() {
    rm -f /tmp/demo-ready
    "$PY3" -u "$LAB_DIR/central.py" --adapter hci2 --service $SVC --char $CHR --subscribe 3 --ready-file /tmp/demo-ready --timeout 90 &
    central_pid=$!
    wait_for 60 test -e /tmp/demo-ready || fail "the central did not subscribe"
    sleep 1
}

heading "the central subscribes; daemon a notifies \"<name> --<date>\" three times"
central_subscribes
for i in 1 2 3; do
    value="$NAME --$(date '+%Y-%m-%d %H:%M:%S')"
    show gatt notify $CHR "\"$value\""
    pl a gatt notify $CHR "$value" || fail "notify failed"
    sleep 1
done
wait "$central_pid" || fail "the central did not receive the notifications"

heading "a data stream: daemon a notifies each line of a file (peerlink gatt stream), one packet each"
central_subscribes
for i in 1 2 3; do echo "$NAME --$(date '+%Y-%m-%d %H:%M:%S') stream.$i"; done >/tmp/demo-stream.txt
show gatt stream $CHR --from /tmp/demo-stream.txt
pl a gatt stream $CHR --from /tmp/demo-stream.txt || fail "gatt stream failed"
wait "$central_pid" || fail "the central did not receive the streamed notifications"

heading "daemon b on hci1: the reference central (CBCentralManager's tutorial) against daemon a"
# The emulator reports an advertiser reliably only to a scanner that was already scanning
# (Tests/Lab/README.md): b scans first, then a advertises again.
pl a advertise stop >/dev/null
show scan --service $SVC --count 1
pl_watch b --json scan --service $SVC --count 1 --timeout 90 >"$(log_of demo-scan)" &
scan_pid=$!
sleep 3
advertise_until_seen a demo-scan '"address"' --name "$NAME" --service $SVC || fail "daemon b did not find the peripheral"
wait "$scan_pid" || fail "daemon b's scan failed: $(cat "$(log_of demo-scan)")"
ADDR=$("$PY3" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["address"])' "$(log_of demo-scan)")
# In words, as 'peerlink scan' prints a device (the --json line above is for the script).
"$PY3" -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print("found", d["address"], "%s dBm" % d.get("rssi", "-"), d.get("name", "-"), ",".join(d.get("uuids", [])) or "-")' "$(log_of demo-scan)"
show connect "$ADDR"
pl b connect "$ADDR" || fail "connect failed"
show services "$ADDR"
pl b services "$ADDR" || fail "services failed"
show read "$ADDR" $CHR
pl b read "$ADDR" $CHR || fail "read failed"
heading "daemon b subscribes (AcquireNotify); daemon a notifies; b prints each value, then disconnects"
show subscribe "$ADDR" $CHR --count 3 --disconnect
pl_watch b subscribe "$ADDR" $CHR --count 3 --timeout 90 --disconnect &
sub_pid=$!
sleep 3
for i in 1 2 3; do
    value="$NAME --$(date '+%Y-%m-%d %H:%M:%S')"
    pl a gatt notify $CHR "$value" >/dev/null || fail "notify failed"
    sleep 1
done
wait "$sub_pid" || fail "daemon b did not receive the notifications"
show devices
pl b devices

heading "peer sessions (MultipeerConnectivity's reference flow): a advertises cmj-stream"
pl_watch a peer watch >"$(log_of demo-a-peer)" 2>&1 &
pl_watch b peer watch >"$(log_of demo-b-peer)" 2>&1 &
show peer identity
pl a peer identity || fail "peer identity failed"
show peer advertise cmj-stream --info room=lab
pl a peer advertise cmj-stream --info room=lab || fail "peer advertise failed"
heading "daemon b (KenshinCui) browses for cmj-stream"
show peer browse cmj-stream --timeout 3
pl b peer browse cmj-stream --timeout 3 || fail "peer browse failed"
heading "b invites KenshinCui_Advertiser with a context; a's client answers"
show peer invite KenshinCui_Advertiser --type cmj-stream --context "Let's stream"
pl b peer invite KenshinCui_Advertiser --type cmj-stream --context "Let's stream" >"$(log_of demo-invite)" 2>&1 &
invite_pid=$!
wait_for 30 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket a)' peer invitations | grep -q ' from '" \
    || fail "daemon a got no invitation: $(cat "$(log_of demo-invite)")"
echo "(on a)"; show peer invitations
pl a peer invitations
INV=$(pl a peer invitations | awk '/ from /{ print $1; exit }')
show peer accept "$INV"
pl a peer accept "$INV" || fail "peer accept failed"
wait "$invite_pid" || fail "the invitation failed: $(cat "$(log_of demo-invite)")"
echo "(on b)"; cat "$(log_of demo-invite)"
echo "(both ends show the same pairing code)"
show peer sessions
pl a peer sessions
heading "a message each way"
show peer send "Hello from KenshinCui"
pl b peer send "Hello from KenshinCui" || fail "peer send (b) failed"
show peer send "Hello from KenshinCui_Advertiser"
pl a peer send "Hello from KenshinCui_Advertiser" || fail "peer send (a) failed"
wait_for 10 grep -q "message from" "$(log_of demo-a-peer)" || fail "a never got b's message"
wait_for 10 grep -q "message from" "$(log_of demo-b-peer)" || fail "b never got a's message"
echo "(what a's 'peer watch' printed)"; cat "$(log_of demo-a-peer)"
echo "(what b's 'peer watch' printed)"; cat "$(log_of demo-b-peer)"

heading "the reference flow's picture: each side sends an image to every connected peer"
IMG=$LAB_REPO/examples/images/peerlink.png
for side in a b; do
    show peer send-image examples/images/peerlink.png
    pl "$side" peer send-image "$IMG" || fail "peer send-image ($side) failed"
done
wait_for 20 sh -c "grep -c '^received' '$(log_of demo-a-peer)' '$(log_of demo-b-peer)' | grep -vq ':0'" \
    || fail "the images did not arrive on both sides"
for side in a b; do
    echo "(on $side)"; show peer inbox
    pl "$side" peer inbox
    got=$(grep '^received' "$(log_of "demo-$side-peer")" | tail -n 1 | sed 's/.* saved as //; s/ sha256 .*//')
    printf 'sent     sha256 %s  %s\n' "$(sha256sum <"$IMG" | cut -d' ' -f1)" "examples/images/peerlink.png"
    printf 'received sha256 %s  %s (sha256sum)\n' "$(sha256sum <"$got" | cut -d' ' -f1)" "$got"
    [ "$(sha256sum <"$got")" = "$(sha256sum <"$IMG")" ] || fail "the image $side received differs from the one sent"
done
heading "end of demo"
