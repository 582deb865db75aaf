#!/bin/bash
# boot: systemd
# timeout: 900
# The service as a board runs it: systemd is PID 1 (Tests/Lab/systemd-boot.sh), bluetoothd,
# avahi-daemon and D-Bus are Debian's own units, the package (`make deb`) is installed with
# apt-get and `systemctl enable --now peerlinkd` starts it.  Then, with systemd's own tools
# (systemctl, journalctl, systemd-analyze) and the independent central (central.py):
#   1. Type=notify: `systemctl start` returns once the daemon said READY=1, and the control
#      socket answers at that moment; the daemon runs as user peerlink;
#   2. a central reads and gets notifications from the service-run daemon (bluetoothd calls
#      back into its GATT application through Debian's D-Bus policy for group bluetooth);
#      2b. an independent central pairs with it: bluetoothd asks the daemon's pairing agent
#      (agent.authorize names the central), the bond shows on the daemon's adapter (busctl);
#   3. `systemctl reload` re-reads the configuration and the journal says what changed;
#   4. `kill -9` mid-operation → Restart=on-failure starts it again; identity and trust
#      kept; a watching client told (exit 3); bluetoothd has let go of the killed daemon's
#      advertisement; the client registers again and an independent central reads;
#   5. a hung daemon (SIGSTOP) → the watchdog (WatchdogSec=) kills and restarts it: the
#      daemon's last ping came at most WatchdogSec/2 before the stop, systemd's timeout within
#      WatchdogSec after it (systemd's and journald's monotonic times);
#   6. a configuration error → exit 2, not restarted in a loop, `systemctl status` shows the
#      file, line and key, and `journalctl -p err` has the error but not the notices (the
#      <N> priority prefixes reach journald);
#   7. hotplug: with the unit enabled but stopped, controllers appearing (btvirt started anew)
#      start it (WantedBy=bluetooth.target, which systemd starts when a controller appears);
#      disabled, they do not; 7b. a controller removed
#      and re-added under another hciN is followed by its address: adapter.added says which
#      name it had, its GATT application and advertisement come back on it (the events, and
#      busctl for the advertisement), none lands on the controller that took its name;
#   8. `systemd-analyze security peerlinkd`: in the OK band or better;
#   8b. `peer send-file` of a file in /root (hidden by ProtectHome=yes) and one in /tmp
#      (PrivateTmp=yes) to a second daemon: the service copies the descriptor the CLI passes,
#      each arrives whole (sha256sum), the outbox (peerlink, 0700) is empty after;
#   8c. LimitNICE lets libdispatch set its threads' nice values: no complaint in the journal;
#   9. `systemctl disable --now` (`apt-get purge` is proved by 80-package).
. "$LAB_DIR/lib.sh"
[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm), not systemd: this scenario needs the lab's systemd boot ('# boot: systemd', Tests/Lab/systemd-boot.sh)"
DEB=${PEERLINK_DEB:-}
[ -n "$DEB" ] || DEB=$(ls -1t "$LAB_REPO"/.build/package/peerlink_*.deb 2>/dev/null | head -n 1)
[ -n "$DEB" ] && [ -f "$DEB" ] || fail "no package to install (PEERLINK_DEB=${PEERLINK_DEB:-<unset>}, none in $LAB_REPO/.build/package): run 'make deb' on the host"
dpkg -s peerlink >/dev/null 2>&1 && fail "peerlink is installed before the test: the guest is not clean"
CONF=/etc/peerlink/peerlink.conf
UNIT=peerlinkd.service

prop() { systemctl show -p "$1" --value "$UNIT"; }
main_pid() { prop MainPID; }
# journal_since STAMP [journalctl args...]: the unit's journal since STAMP, messages only.
journal_since() { local s=$1; shift; journalctl -u "$UNIT" --since "$s" --no-pager -o cat "$@"; }
stamp() { date '+%Y-%m-%d %H:%M:%S'; }
# restarted_from PID: the unit is active again under another main pid.
restarted_from() { local p; p=$(main_pid); [ "$p" != 0 ] && [ "$p" != "$1" ] && [ "$(systemctl is-active "$UNIT")" = active ]; }
answers() { timeout 5 peerlink status >/dev/null 2>&1; [ $? -le 2 ]; }

note "0. the boot: $(systemctl is-system-running) ($(systemd-detect-virt)); bluetooth $(systemctl is-active bluetooth), avahi-daemon $(systemctl is-active avahi-daemon), dbus $(systemctl is-active dbus)"
# man-db's trigger would rebuild the whole manual index through 9p (minutes in the emulator).
rm -f /var/lib/man-db/auto-update

note "1. apt-get install ./$(basename "$DEB"); systemctl enable --now peerlinkd"
apt_offline
run timeout 300 apt-get "${APT_OFFLINE[@]}" install -y --no-install-recommends "$DEB"
assert_eq "$RUN_RC" 0 "apt-get install"
assert_eq "$(systemctl is-enabled "$UNIT" 2>&1)" disabled "the package leaves the unit disabled"
run timeout 120 systemctl enable --now "$UNIT"
assert_eq "$RUN_RC" 0 "systemctl enable --now"
# Type=notify: systemctl returned when the daemon sent READY=1; asked at once, without a
# wait, the socket answers (READY=1 comes after the socket listens).
run timeout 5 peerlink --json status
[ "$RUN_RC" -le 2 ] || fail "the control socket did not answer right after 'systemctl start' returned (exit $RUN_RC)"
assert_eq "$(systemctl is-active "$UNIT")" active "the unit's state"
assert_eq "$(prop Type)" notify "the unit's type"
assert_eq "$(systemctl is-enabled "$UNIT")" enabled "enabled"
PID=$(main_pid)
assert_eq "$(ps -o user= -p "$PID" | tr -d ' ')" peerlink "the daemon's user"
assert_contains " $(ps -o supgrp= -p "$PID") " "bluetooth" "the daemon's supplementary groups"

note "2. a central reads and gets notifications from the service-run daemon"
SVC=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D21
CHR=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D22
NAME="unit-run-$$"
cat >"$LAB_OUT/app.json" <<JSON
{"name": "unit", "services": [{"uuid": "$SVC", "characteristics": [
  {"uuid": "$CHR", "flags": ["read", "notify"], "value": "$NAME"}]}]}
JSON
run timeout 30 peerlink gatt register "$LAB_OUT/app.json"
assert_eq "$RUN_RC" 0 "gatt register"
central_scanning c --adapter hci1 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready" --restart 10 --timeout 90
run timeout 30 peerlink advertise start --name unit --service $SVC
assert_eq "$RUN_RC" 0 "advertise start"
wait_for 60 test -e "$LAB_OUT/ready" || fail "the central did not subscribe: $(cat "$(log_of c)")"
for i in 1 2 3 4 5; do
    run timeout 30 peerlink gatt notify $CHR "$NAME --$(date +%Y-%m-%dT%H:%M:%S).$i"
    assert_eq "$RUN_RC" 0 "gatt notify $i"
done
central_result c
assert_eq "$RUN_RC" 0 "the central's exit status"
check_notified "$(log_of c)" "$NAME"

note "2b. bluetoothd calls back into the service-run daemon's pairing agent: an independent central pairs"
# The central pairs with an agent of its own (central.py --pair); the peripheral's side of
# the just-works pairing is asked of bluetoothd's default agent: the daemon's, under the
# unit's user, reached through Debian's D-Bus policy for the bluetooth group.
# The emulator shows an advertiser to a scanner when one of them is (re)enabled: step 2's
# advertisement stops, the central scans, then the advertisement starts again.
CENTRAL_ADDR=$(adapter_addr hci1)
spawn_watch agentev timeout 150 peerlink --json watch --topic agent --count 1 --timeout 140
AGENTEV=$SPAWN_PID
run timeout 30 peerlink advertise stop
assert_eq "$RUN_RC" 0 "advertise stop"
central_scanning pairing --adapter hci1 --service $SVC --pair --restart 10 --timeout 100
advertise_until_seen - pairing FOUND --name unit --service $SVC || fail "the central did not find the service-run daemon: $(cat "$(log_of pairing)")"
central_result pairing
assert_eq "$RUN_RC" 0 "an independent central pairs with the service-run daemon"
assert_contains "$RUN_OUT" PAIRED "central.py's pairing"
wait "$AGENTEV"
assert_eq "$?" 0 "the daemon's agent event (peerlink watch --topic agent --count 1)"
py_check "the daemon's agent was asked about the central" "$(log_of agentev)" "$CENTRAL_ADDR" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(ev) == 1 and ev[0]["topic"] == "agent.authorize" and ev[0]["data"]["device"] == sys.argv[2], ev
PY
PEER_DEV=/org/bluez/hci0/dev_${CENTRAL_ADDR//:/_}
assert_eq "$(bluez_prop "$PEER_DEV" org.bluez.Device1 Paired)" true "Paired on the daemon's adapter (busctl)"
# Forgotten on both sides: the later steps connect without a bond, as before.
run busctl call org.bluez /org/bluez/hci0 org.bluez.Adapter1 RemoveDevice o "$PEER_DEV"
assert_eq "$RUN_RC" 0 "RemoveDevice on hci0 (busctl)"
DAEMON_ADDR=$(adapter_addr hci0)
run busctl call org.bluez /org/bluez/hci1 org.bluez.Adapter1 RemoveDevice o "/org/bluez/hci1/dev_${DAEMON_ADDR//:/_}"
assert_eq "$RUN_RC" 0 "RemoveDevice on hci1 (busctl)"

note "3. systemctl reload: the configuration is re-read; the journal says what changed"
grep -q '^log_level = info$' "$CONF" || fail "no 'log_level = info' line in $CONF: $(cat "$CONF")"
sed -i 's/^log_level = info$/log_level = debug/' "$CONF"
t=$(stamp)
run timeout 30 systemctl reload "$UNIT"
assert_eq "$RUN_RC" 0 "systemctl reload"
wait_for 15 sh -c "journalctl -u $UNIT --since '$t' -o cat | grep -q 'configuration reloaded.*log_level'" \
    || fail "no 'configuration reloaded ... log_level' in the journal: $(journal_since "$t")"
assert_eq "$(main_pid)" "$PID" "the main pid after a reload"
sed -i 's/^log_level = debug$/log_level = info/' "$CONF"
run timeout 30 systemctl reload "$UNIT"

note "4. kill -9: Restart=on-failure starts it again"
# Mid-operation: a client watching, the GATT application and advertisement of step 2
# registered, a trusted peer. After the restart the identity and the trust are still there
# (state files); bluetoothd has let go of the killed daemon's registrations, which are the
# clients' to make again: the watching client is told (exit 3), and once re-registered an
# independent central reads again.
ADV_INSTANCES() { bluez_prop /org/bluez/hci0 org.bluez.LEAdvertisingManager1 ActiveInstances; }
assert_eq "$(ADV_INSTANCES)" 1 "advertisements on hci0 before kill -9 (busctl)"
ID0=$(peerlink --json peer identity | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["peer"])')
TRUSTED=$(printf 'cd%.0s' $(seq 32))
run timeout 30 peerlink peer trust "$TRUSTED"
assert_eq "$RUN_RC" 0 "peer trust"
spawn_watch watch4 timeout 120 peerlink --json watch --topic adapter --topic gatt
WATCH4=$SPAWN_PID
N0=$(prop NRestarts)
kill -9 "$PID"
wait_for 60 restarted_from "$PID" || fail "not restarted after kill -9: $(systemctl status "$UNIT" --no-pager 2>&1 | head -n 15)"
assert_eq "$(prop NRestarts)" $((N0 + 1)) "NRestarts after kill -9"
wait_for 15 answers || fail "the restarted daemon does not answer"
PID=$(main_pid)
wait_for 10 sh -c "! kill -0 $WATCH4 2>/dev/null" || fail "the watching client did not notice the daemon's end"
wait "$WATCH4"; rc=$?
assert_eq "$rc" 3 "the watching client's exit status (3: the daemon closed the connection)"
assert_contains "$(cat "$(log_of watch4)")" "closed the connection" "what the watching client says"
assert_eq "$(peerlink --json peer identity | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["peer"])')" "$ID0" "the identity after kill -9"
run timeout 30 peerlink --json peer trusted
assert_contains "$RUN_OUT" "$TRUSTED" "the trusted peer after kill -9"
wait_for 10 sh -c "[ \"\$(busctl get-property org.bluez /org/bluez/hci0 org.bluez.LEAdvertisingManager1 ActiveInstances)\" = 'y 0' ]" \
    || fail "bluetoothd still has the killed daemon's advertisement: ActiveInstances $(ADV_INSTANCES)"
run timeout 30 peerlink --json gatt list
assert_not_contains "$RUN_OUT" "$SVC" "the restarted daemon's applications (the clients' to register again)"
note "the client registers again"
run timeout 30 peerlink gatt register "$LAB_OUT/app.json"
assert_eq "$RUN_RC" 0 "gatt register after the restart"
run timeout 30 peerlink advertise start --name unit --service $SVC
assert_eq "$RUN_RC" 0 "advertise start after the restart"
assert_eq "$(ADV_INSTANCES)" 1 "advertisements on hci0 after registering again (busctl)"
run timeout 90 "$PY3" -u "$LAB_DIR/central.py" --adapter hci1 --service $SVC --char $CHR --read --timeout 60
assert_eq "$RUN_RC" 0 "an independent central after the restart"
assert_contains "$RUN_OUT" "READ " "it reads the application registered again"

note "5. a hung daemon (SIGSTOP): the watchdog kills and restarts it (WatchdogSec=$(prop WatchdogUSec))"
WATCHDOG_USEC=$(busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1/unit/peerlinkd_2eservice \
                org.freedesktop.systemd1.Service WatchdogUSec | awk '{print $2}')
[ "${WATCHDOG_USEC:-0}" -gt 0 ] || fail "the unit has no WatchdogSec (busctl: '${WATCHDOG_USEC:-}')"
# Times on CLOCK_MONOTONIC in µs, as systemd and journald keep them: the stop, the daemon's
# last ping before it (read while it is stopped), systemd's timeout (its journal entry).
t=$(stamp)
# The stop lies between these two readings (a ping may come between the first and the kill:
# one did, 58 ms after it, and a check against that reading alone failed).
STOP_BEFORE=$(py3 -c 'import time; print(time.monotonic_ns() // 1000)')
kill -STOP "$PID"
STOP_AFTER=$(py3 -c 'import time; print(time.monotonic_ns() // 1000)')
LAST_PING=$(prop WatchdogTimestampMonotonic)
wait_for 120 restarted_from "$PID" || fail "a stopped daemon was not restarted: $(systemctl status "$UNIT" --no-pager 2>&1 | head -n 15)"
run journalctl --since "$t" --no-pager -o cat -u "$UNIT"
assert_contains "$RUN_OUT" "Watchdog timeout" "systemd's reason for the restart"
FIRED_AT=$(journalctl --since "$t" --no-pager -o json -u "$UNIT" --grep "Watchdog timeout" \
           | py3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["__MONOTONIC_TIMESTAMP"])')
# The daemon pings at half of WatchdogSec, so its last ping came at most that long before the
# stop; systemd's timeout is due WatchdogSec after that ping, so within WatchdogSec of the
# stop. 1 s more for each: systemd's timer slack and journald's receive time.
py_check "the daemon's pings and systemd's watchdog timeout" "$STOP_BEFORE" "$STOP_AFTER" "${LAST_PING:-0}" "${FIRED_AT:-0}" "$WATCHDOG_USEC" <<'PY'
import sys
before, after, ping, fired, limit = (int(a) / 1e6 for a in sys.argv[1:6])
# (1 s more for each: systemd's receive time of a ping, its timer slack, journald's receive time.)
assert 0 < ping <= after + 1, f"no ping before the stop (last ping {ping:.3f}, stop between {before:.3f} and {after:.3f})"
assert before - ping <= limit / 2 + 1, f"the last ping came {before - ping:.1f} s before the stop (pings are due every {limit / 2:g} s)"
assert fired > after, f"no timeout after the stop (journal {fired:.3f}, stop by {after:.3f})"
assert fired - after <= limit + 1, f"the timeout came {fired - after:.1f} s after SIGSTOP (WatchdogSec={limit:g})"
print(f"last ping {before - ping:.1f} s before SIGSTOP; timeout {fired - after:.1f} s after it (WatchdogSec={limit:g})")
PY
wait_for 15 answers || fail "the daemon restarted by the watchdog does not answer"

note "6. a configuration error: exit 2, no restart loop; status and the journal name file, line and key"
cp "$CONF" "$LAB_OUT/peerlink.conf.good"
# On the first line: a key in the file's global section (the file ends inside [peer]).
sed -i '1i no_such_key = 1' "$CONF"
LINE=1
t=$(stamp)
run timeout 60 systemctl restart "$UNIT"
[ "$RUN_RC" != 0 ] || fail "systemctl restart succeeded with a bad configuration"
wait_for 15 sh -c "[ \"\$(systemctl is-active $UNIT)\" = failed ]" || fail "the unit is $(systemctl is-active "$UNIT"), not failed"
assert_eq "$(prop ExecMainStatus)" 2 "the exit status of a configuration error"
N0=$(prop NRestarts)
# RestartPreventExitStatus=2: three RestartSec= periods later it is still failed, not restarted.
sleep 6
assert_eq "$(systemctl is-active "$UNIT")" failed "the state 6 s after the configuration error"
assert_eq "$(prop NRestarts)" "$N0" "NRestarts after the configuration error"
run systemctl status "$UNIT" --no-pager -l
assert_contains "$RUN_OUT" "$CONF:$LINE: no_such_key" "systemctl status shows the file, line and key"
ERR=$(journal_since "$t" -p err)
assert_contains "$ERR" "configuration error: $CONF:$LINE: no_such_key" "the error at priority err"
NOTICE=$(journalctl -u "$UNIT" -b --no-pager -o cat -p notice)
assert_contains "$NOTICE" "configuration reloaded" "the reload's notice at priority notice"
assert_not_contains "$(journalctl -u "$UNIT" -b --no-pager -o cat -p err)" "configuration reloaded" "a notice logged as an error"
assert_not_contains "$NOTICE" "<3>" "a raw priority prefix in the journal"
cp "$LAB_OUT/peerlink.conf.good" "$CONF"
run systemctl reset-failed "$UNIT"
run timeout 120 systemctl start "$UNIT"
assert_eq "$RUN_RC" 0 "start with the configuration repaired"

note "7. hotplug: disabled, controllers appearing do not start it; enabled but stopped, they do"
run timeout 60 systemctl disable --now "$UNIT"
assert_eq "$RUN_RC" 0 "systemctl disable --now"
lab_stop_btvirt || fail "btvirt's controllers did not go away"
lab_start_btvirt || fail "btvirt did not come back"
# (bluetooth.target is started as the controllers appear: then, and a moment after, the
# disabled unit must still be stopped.)
wait_for 30 sh -c '[ "$(systemctl is-active bluetooth.target)" = active ]' || fail "bluetooth.target did not start with the controllers"
sleep 5
assert_eq "$(systemctl is-active "$UNIT")" inactive "the disabled unit, controllers having appeared"
run timeout 60 systemctl enable "$UNIT"
assert_eq "$RUN_RC" 0 "systemctl enable"
lab_stop_btvirt || fail "btvirt's controllers did not go away"
assert_eq "$(systemctl is-active "$UNIT")" inactive "the unit with no controller"
lab_start_btvirt || fail "btvirt did not come back"
wait_for 60 sh -c "[ \"\$(systemctl is-active $UNIT)\" = active ]" || fail "controllers appearing did not start the unit: $(systemctl status "$UNIT" --no-pager 2>&1 | head -n 15)"
wait_for 15 answers || fail "the daemon started by a controller's appearance does not answer"

note "7b. a controller removed and re-added under another hciN is followed by address"
# btvirt's -l controllers take their address from their index (00:AA:01:0N:00:0N), so none
# can come back under another hciN with the same address.  A controller on a pseudo terminal
# (btvirt -S, attached through the kernel's hci_uart with btattach) has a fixed one (btvirt's
# id 0x42): it is detached, a third btvirt's controller takes its index meanwhile, and it is
# attached again under the next one.  (No central reads through it: the emulator's serial
# controller is dual-mode, and a central on another controller of the same btvirt connects
# to it but discovers no GATT service at all, ours or bluetoothd's own; Tests/Lab/README.md.)
hcis() { ls /sys/class/bluetooth | grep -E '^hci[0-9]+$' | sort -V; }
# new_hci BEFORE: the controller in /sys/class/bluetooth that BEFORE (a list) does not have;
# fails when there is none.
new_hci() { comm -13 <(printf '%s\n' $1 | sort) <(hcis | sort) | head -n 1 | grep .; }
# last_pts: the pseudo terminal btvirt -S opened last (it opens a new one when the old hangs
# up, often under the same number); pts_opened: how many it opened so far.
last_pts() { sed -n 's/^Pseudo terminal at //p' "$(log_of btvirt-serial)" | tail -n 1; }
pts_opened() { grep -c '^Pseudo terminal at ' "$(log_of btvirt-serial)"; }
pts_more_than() { [ "$(pts_opened)" -gt "$1" ]; }
# power_on hciN: bluetoothd lists it and it is powered (AutoEnable usually did it already).
is_powered() { [ "$(adapter_powered "$1")" = true ]; }
power_on() {
    wait_for 20 adapter_addr "$1" || fail "bluetoothd does not list $1"
    is_powered "$1" || busctl set-property org.bluez "/org/bluez/$1" org.bluez.Adapter1 Powered b true
    wait_for 10 is_powered "$1" || fail "$1 is not powered"
}
# attach NAME PTS: btattach on PTS (spawned as NAME); ATTACHED = the controller it added, powered.
attach() {
    local before; before=$(hcis)
    spawn "$1" btattach -B "$2" -P h4
    wait_for 20 new_hci "$before" || fail "btattach $2 added no controller: $(cat "$(log_of "$1")")"
    ATTACHED=$(new_hci "$before")
    power_on "$ATTACHED"
}
modprobe hci_uart || fail "modprobe hci_uart: the kernel's serial HCI driver is needed to move a controller"
# stdbuf: btvirt prints the pseudo terminal with printf, block-buffered into a file.
spawn btvirt-serial stdbuf -oL btvirt -S
wait_log 20 btvirt-serial "Pseudo terminal at" || fail "btvirt -S made no pseudo terminal: $(cat "$(log_of btvirt-serial)")"
PTS=$(last_pts)
attach attach1 "$PTS"; OLD=$ATTACHED
ADDR=$(adapter_addr "$OLD")
note "the moving controller: $OLD ($ADDR)"
spawn_watch events7 peerlink --json watch --topic adapter --topic gatt --topic advertise
SVC2=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D31
CHR2=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D32
cat >"$LAB_OUT/app2.json" <<JSON
{"name": "moved", "services": [{"uuid": "$SVC2", "characteristics": [
  {"uuid": "$CHR2", "flags": ["read"], "value": "moved"}]}]}
JSON
wait_for 20 sh -c "peerlink --json adapter list | grep -q '$ADDR'" || fail "the daemon does not list $ADDR: $(peerlink adapter list 2>&1)"
run timeout 30 peerlink gatt register "$LAB_OUT/app2.json" --adapter "$OLD"
assert_eq "$RUN_RC" 0 "gatt register --adapter $OLD"
run timeout 30 peerlink advertise start --name moved --service $SVC2 --adapter "$OLD"
assert_eq "$RUN_RC" 0 "advertise start --adapter $OLD"
assert_eq "$(bluez_prop "/org/bluez/$OLD" org.bluez.LEAdvertisingManager1 ActiveInstances)" 1 "advertisements on $OLD (busctl)"

# Detached: the controller is gone; a third btvirt's controller takes its index.
NPTS=$(pts_opened)
pkill -f "btattach -B $PTS" || fail "no btattach to stop"
wait_for 20 sh -c "[ ! -e /sys/class/bluetooth/$OLD ]" || fail "$OLD did not go away when btattach stopped"
spawn placeholder btvirt -l1 -L
wait_for 20 sh -c "[ -e /sys/class/bluetooth/$OLD ]" || fail "the placeholder controller did not take $OLD's index (now: $(hcis))"
power_on "$OLD"
[ "$(adapter_addr "$OLD")" != "$ADDR" ] || fail "the placeholder under $OLD has the moving controller's address"
wait_for 20 pts_more_than "$NPTS" || fail "btvirt -S opened no new pseudo terminal after the detach: $(cat "$(log_of btvirt-serial)")"
PTS2=$(last_pts)
attach attach2 "$PTS2"; NEW=$ATTACHED
assert_eq "$(adapter_addr "$NEW")" "$ADDR" "the address of the controller back as $NEW"
[ "$NEW" != "$OLD" ] || fail "the controller came back under the same name $OLD"
note "$ADDR: $OLD -> $NEW"

# The daemon's events: the controller back under its new name, with its old one; its GATT
# application and advertisement registered again there, not on the placeholder.
wait_for 30 grep -q "\"previous_name\":\"$OLD\"" "$(log_of events7)" || fail "no adapter.added with previous_name $OLD: $(cat "$(log_of events7)")"
ADDED=$(grep "\"previous_name\":\"$OLD\"" "$(log_of events7)")
assert_contains "$ADDED" '"topic":"adapter.added"' "the event"
assert_contains "$ADDED" "\"name\":\"$NEW\"" "the event's adapter"
assert_contains "$ADDED" "\"address\":\"$ADDR\"" "the event's address"
wait_for 30 sh -c "grep '\"topic\":\"gatt.reregistered\"' '$(log_of events7)' | grep -q '\"adapter\":\"$NEW\"'" \
    || fail "no gatt.reregistered on $NEW: $(cat "$(log_of events7)")"
wait_for 30 sh -c "grep '\"topic\":\"advertise.restarted\"' '$(log_of events7)' | grep -q '\"adapter\":\"$NEW\"'" \
    || fail "no advertise.restarted on $NEW: $(cat "$(log_of events7)")"
assert_not_contains "$(grep -E 'gatt.reregistered|advertise.restarted' "$(log_of events7)")" "\"adapter\":\"$OLD\"" "a registration on the placeholder"
assert_eq "$(bluez_prop "/org/bluez/$NEW" org.bluez.LEAdvertisingManager1 ActiveInstances)" 1 "advertisements on $NEW (busctl)"
assert_eq "$(bluez_prop "/org/bluez/$OLD" org.bluez.LEAdvertisingManager1 ActiveInstances)" 0 "advertisements on the placeholder $OLD (busctl)"
pkill -f "btattach -B $PTS2"

note "8. systemd-analyze security"
run systemd-analyze security "$UNIT" --no-pager
LEVEL=$(printf '%s\n' "$RUN_OUT" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p')
note "exposure: ${LEVEL:-?}"
case ${LEVEL#* } in
    OK|SAFE|PERFECT) ;;
    *) fail "systemd-analyze security: '${LEVEL:-no level}', not OK or better: $(printf '%s\n' "$RUN_OUT" | grep '✗')" ;;
esac

note "8b. peer send-file of files the service cannot see by name (/root: ProtectHome=yes, /tmp: PrivateTmp=yes)"
# The receiving peer: a second daemon on loopback, started by hand as root (the packaged binary).
RCV=/run/lab/receiver
rm -rf "$RCV"; mkdir -p "$RCV"
printf 'peer.name = receiver\npeer.port = 7079\npeer.accept = all\npeer.accept_resources = all\npeer.inbox_dir = %s/inbox\n' "$RCV" >"$RCV/peerlink.conf"
spawn receiver /usr/bin/peerlinkd --socket "$RCV/control.sock" --state-dir "$RCV/state" --config "$RCV/peerlink.conf"
RECEIVER=$SPAWN_PID
wait_for 20 sh -c "timeout 5 peerlink --socket '$RCV/control.sock' status >/dev/null 2>&1; [ \$? -le 2 ]" \
    || fail "the receiving daemon does not answer: $(tail -n 5 "$(log_of receiver)")"
run timeout 30 peerlink peer connect 127.0.0.1:7079
assert_eq "$RUN_RC" 0 "the service connects to the receiving peer"
head -c 150000 /dev/urandom >/root/in-home.bin
head -c 120000 /dev/urandom >/tmp/in-tmp.bin
for f in /root/in-home.bin /tmp/in-tmp.bin; do
    run timeout 60 peerlink --json peer send-file "$f"
    assert_eq "$RUN_RC" 0 "peer send-file $f to the service"
    assert_contains "$RUN_OUT" '"copied":true' "the service cannot open $f by name: it copied the passed descriptor"
    got=$RCV/inbox/$(basename "$f")
    wait_for 15 test -f "$got" || fail "$f did not arrive: $(ls -A "$RCV/inbox" 2>&1)"
    assert_eq "$(sha256sum <"$got" | cut -d' ' -f1)" "$(sha256sum <"$f" | cut -d' ' -f1)" "sha256sum of $f as received"
done
wait_for 15 sh -c "[ -z \"\$(ls -A /var/lib/peerlink/peer/outbox)\" ]" \
    || fail "copies left in the service's outbox: $(ls -A /var/lib/peerlink/peer/outbox)"
assert_eq "$(stat -c '%U %a' /var/lib/peerlink/peer/outbox)" "peerlink 700" "the outbox's owner and mode"
kill "$RECEIVER"; wait "$RECEIVER" 2>/dev/null
rm -f /root/in-home.bin /tmp/in-tmp.bin

note "8c. libdispatch may give its threads the nice values it wants (LimitNICE), and says nothing"
# libdispatch writes to stderr, which the journal has (the daemon's own lines go the same way),
# when it may not raise a worker thread's priority (nice -2 and -4 for its higher QoS classes).
assert_eq "$(prop LimitNICE)" 24 "RLIMIT_NICE of the unit (20 - (-4): nice down to -4)"
assert_eq "$(journalctl -b --no-pager -o cat -u "$UNIT" | grep -c 'Failed to set thread priority')" 0 \
    "libdispatch's complaints about thread priority in the unit's journal since boot"

note "9. systemctl disable --now"
run timeout 60 systemctl disable --now "$UNIT"
assert_eq "$RUN_RC" 0 "systemctl disable --now"
assert_eq "$(systemctl is-enabled "$UNIT")" disabled "disabled"
assert_eq "$(systemctl is-active "$UNIT")" inactive "stopped"
# (apt-get purge, and what it leaves, is 80-package's: two more minutes of dpkg through 9p here.)
note "ok"
