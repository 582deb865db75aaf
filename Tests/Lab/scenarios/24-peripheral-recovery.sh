#!/bin/bash
# timeout: 240
# bluetoothd killed and restarted: peerlinkd registers its GATT application and its
# advertisement again by itself (no restart of peerlinkd), says so in events, within 2 s of
# bluetoothd being back (the moment org.bluez has an owner again, as the bus says it:
# dbus-monitor's NameOwnerChanged, not the daemon's own bluez.available); an independent
# central then finds, connects and reads again.
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
central() { "$PY3" -u "$LAB_DIR/central.py" "$@"; }

start_peerlinkd p hci0
pid_before=$(pl p --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
expect_rc 0 pl p gatt register "$LAB_REPO/examples/seed-peripheral.json"
expect_rc 0 pl p advertise start --name "$NAME" --service $SVC
expect_rc 0 central --adapter hci1 --service $SVC --char $CHR --read --timeout 60
assert_contains "$RUN_OUT" "READ " "read before the restart"

spawn_watch events pl_watch p --json watch --topic gatt.reregistered --topic advertise.restarted --topic bluez --count 4 --timeout 90
# The bus's own word on when org.bluez has an owner again.
spawn owners dbus-monitor --system "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.bluez'"
# (It prints the loss of its own name once it has become a monitor: from then on it sees all.)
wait_log 10 owners "member=NameLost" || fail "dbus-monitor did not start: $(cat "$(log_of owners)")"
note "kill bluetoothd"
lab_stop_bluetoothd || fail "bluetoothd did not stop"
wait_log 10 events bluez.unavailable || fail "no bluez.unavailable event: $(cat "$(log_of events)")"
note "start bluetoothd again"
lab_start_bluetoothd || fail "bluetoothd did not come back"
wait_log 20 events gatt.reregistered || fail "the application was not registered again: $(cat "$(log_of events)")"
wait_log 20 events advertise.restarted || fail "the advertisement was not registered again: $(cat "$(log_of events)")"
py_check "re-registered within 2 s of bluetoothd being back" "$(log_of events)" "$(log_of owners)" <<'PY'
import json, re, sys, datetime
times = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        t = datetime.datetime.strptime(e["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        times.setdefault(e["topic"], t)
# dbus-monitor: "signal time=<epoch> ... member=NameOwnerChanged" then the name, the old
# owner and the new one as string lines; bluetoothd is back at the change to a new owner.
back, block = None, None
for line in open(sys.argv[2]):
    m = re.match(r"signal time=([0-9.]+) .*member=NameOwnerChanged", line)
    if m:
        block = [float(m.group(1))]
    elif block is not None and line.strip().startswith("string "):
        block.append(line.strip()[len("string "):].strip('"'))
        if len(block) == 4:
            if block[1] == "org.bluez" and block[3] and back is None and block[2] == "":
                back = block[0]
            block = None
assert back is not None, "dbus-monitor saw no new owner of org.bluez: " + open(sys.argv[2]).read()[-2000:]
print(f"bluez.available {times['bluez.available'] - back:.2f} s after the bus's NameOwnerChanged")
for topic in ("gatt.reregistered", "advertise.restarted"):
    delay = times[topic] - back
    print(f"{topic}: {delay:.2f} s after bluetoothd was back")
    assert delay <= 2.0, f"{topic} {delay:.2f} s after bluetoothd was back (limit 2 s)"
PY
assert_eq "$(pl p --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["pid"])')" "$pid_before" "same peerlinkd process"
note "the central connects and reads again"
expect_rc 0 central --adapter hci1 --service $SVC --char $CHR --read --timeout 60
assert_contains "$RUN_OUT" "READ $(printf '%s' "$NAME" | od -An -v -tx1 | tr -d ' \n') $NAME" "read after the restart"
note "recovery ok"
