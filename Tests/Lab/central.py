#!/usr/bin/python3 -u
"""An independent BLE central for lab tests (python3-dbus + GLib, talks only to bluetoothd).

    central.py --adapter hciN (--address AA:.. | --service UUID | --name NAME)
               [--char UUID] [--read] [--write TEXT] [--write-command TEXT]
               [--subscribe N] [--ready-file F] [--restart S] [--hold] [--pair] [--timeout S]

Finds the peripheral (LE discovery with a filter, restarted every --restart seconds,
default 2; SCANNING is printed each time the adapter reports Discovering), connects, waits
for ServicesResolved, then on characteristic --char: reads (READ <hex> <text>), writes
with response (WROTE request) and without (WROTE command), subscribes with StartNotify
and prints every value change (NOTIFY <i> <hex> <text>) until N arrived. Prints
FOUND <address> <name> first and MTU <n> when known. With --pair it pairs once connected
(Device1.Pair, its own NoInputNoOutput agent, so the peripheral's side is answered by
bluetoothd's default agent: the peripheral's) and prints PAIRED. Exit 0 when everything asked for
happened, 1 otherwise (reason on stderr). With --hold (and no --char) it stays connected
(HOLDING) until the timeout or a signal ends it.
"""
import argparse
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

BLUEZ = "org.bluez"
OM = "org.freedesktop.DBus.ObjectManager"
PROPS = "org.freedesktop.DBus.Properties"


def full(u):
    u = u.lower()
    return f"0000{u}-0000-1000-8000-00805f9b34fb" if len(u) == 4 else u


def text(b):
    try:
        return bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return ""


class Agent(dbus.service.Object):
    """This central's own agent: just-works on its side, so that what the peripheral's side
    is asked goes to the peripheral's agent (bluetoothd's default one)."""

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Release(self):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="")
    def RequestAuthorization(self, device):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="ou", out_signature="")
    def RequestConfirmation(self, device, passkey):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="os", out_signature="")
    def AuthorizeService(self, device, uuid):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Cancel(self):
        pass


def pair(bus, dev, deadline, fail):
    """Device1.Pair with this central's agent registered (not as the default), the GLib loop
    running so the agent can answer while the call is under way."""
    path = "/lab/central/agent"
    Agent(bus, path)
    manager = dbus.Interface(bus.get_object(BLUEZ, "/org/bluez"), "org.bluez.AgentManager1")
    manager.RegisterAgent(path, "NoInputNoOutput")
    loop = GLib.MainLoop()
    result = []
    dev.Pair(reply_handler=lambda: (result.append(None), loop.quit()),
             error_handler=lambda e: (result.append(e), loop.quit()),
             timeout=max(10, deadline - time.time()))
    loop.run()
    manager.UnregisterAgent(path)
    if result[0] is not None:
        fail(f"pair failed: {result[0].get_dbus_name()}: {result[0]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--address")
    ap.add_argument("--service")
    ap.add_argument("--name")
    ap.add_argument("--char")
    ap.add_argument("--read", action="store_true")
    ap.add_argument("--write")
    ap.add_argument("--write-command")
    ap.add_argument("--subscribe", type=int, default=0)
    ap.add_argument("--ready-file")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--restart", type=float, default=2.0, help="restart discovery every S seconds")
    ap.add_argument("--hold", action="store_true", help="stay connected until the timeout")
    ap.add_argument("--pair", action="store_true", help="pair once connected")
    a = ap.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    om = dbus.Interface(bus.get_object(BLUEZ, "/"), OM)
    apath = f"/org/bluez/{a.adapter}"
    adapter = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.Adapter1")
    aprops = dbus.Interface(bus.get_object(BLUEZ, apath), PROPS)
    deadline = time.time() + a.timeout

    def fail(why):
        print(f"central: {why}", file=sys.stderr)
        sys.exit(1)

    def find():
        for path, ifaces in om.GetManagedObjects().items():
            d = ifaces.get("org.bluez.Device1")
            if not d or not path.startswith(apath + "/") or "RSSI" not in d and not d.get("Connected"):
                continue
            if a.address and str(d.get("Address", "")).upper() != a.address.upper():
                continue
            if a.service and full(a.service) not in [str(u).lower() for u in d.get("UUIDs", [])]:
                continue
            if a.name and str(d.get("Name", d.get("Alias", ""))) != a.name:
                continue
            return path, d
        return None

    filt = {"Transport": "le", "DuplicateData": True}
    if a.service:
        filt["UUIDs"] = [full(a.service)]
    adapter.SetDiscoveryFilter(filt)
    found = None
    while not found and time.time() < deadline:
        try:
            adapter.StartDiscovery()
        except dbus.exceptions.DBusException:
            pass
        # SCANNING: the kernel's discovery is on (Discovering follows mgmt's Discovering event,
        # sent once the scan is enabled and the kernel takes reports): an advertisement
        # started from now on reaches this central (btvirt, README.md "Pitfalls met").
        scanning = False
        until = time.time() + a.restart
        while time.time() < until and not found:
            if not scanning and aprops.Get("org.bluez.Adapter1", "Discovering"):
                scanning = True
                print("SCANNING")
            found = find()
            time.sleep(0.1)
        try:
            adapter.StopDiscovery()
        except dbus.exceptions.DBusException:
            pass
    if not found:
        fail("peripheral not found")
    dpath, d = found
    print(f"FOUND {d.get('Address')} {d.get('Name', d.get('Alias', ''))}")
    dev = dbus.Interface(bus.get_object(BLUEZ, dpath), "org.bluez.Device1")
    dprops = dbus.Interface(bus.get_object(BLUEZ, dpath), PROPS)
    def device_prop(name):
        # A loaded lab can keep bluetoothd from answering for the whole D-Bus timeout: that is
        # not an answer, so the caller polls again until its own deadline.
        try:
            return dprops.Get("org.bluez.Device1", name)
        except dbus.exceptions.DBusException as e:
            if e.get_dbus_name() != "org.freedesktop.DBus.Error.NoReply":
                raise
            print(f"central: no answer to Get {name} (bluetoothd busy?)", file=sys.stderr)
            return None

    # Connect gets the time left, not a shorter D-Bus timeout: a retry while the first Connect
    # is still under way (a loaded lab) could start a second connection.
    for attempt in range(5):
        try:
            dev.Connect(timeout=max(20, deadline - time.time()))
            break
        except dbus.exceptions.DBusException as e:
            if attempt == 4 or time.time() > deadline:
                fail(f"connect failed: {e.get_dbus_name()}: {e}")
            time.sleep(1)
    while not device_prop("ServicesResolved"):
        if time.time() > deadline:
            fail("services not resolved")
        time.sleep(0.1)
    print("CONNECTED")
    if a.pair:
        pair(bus, dev, deadline, fail)
        print("PAIRED")
    if not a.char:
        if a.hold:
            print("HOLDING")
            while time.time() < deadline and device_prop("Connected") is not False:
                time.sleep(0.5)
        dev.Disconnect()
        return
    # The objects can appear a moment after ServicesResolved (bluez #191): wait for them.
    cpath = None
    while not cpath and time.time() < deadline:
        for path, ifaces in om.GetManagedObjects().items():
            c = ifaces.get("org.bluez.GattCharacteristic1")
            if c and path.startswith(dpath + "/") and str(c["UUID"]).lower() == full(a.char):
                cpath = path
        if not cpath:
            time.sleep(0.1)
    if not cpath:
        fail(f"characteristic {a.char} not found")
    chrc = dbus.Interface(bus.get_object(BLUEZ, cpath), "org.bluez.GattCharacteristic1")
    cprops = dbus.Interface(bus.get_object(BLUEZ, cpath), PROPS)
    try:
        print(f"MTU {int(cprops.Get('org.bluez.GattCharacteristic1', 'MTU'))}")
    except dbus.exceptions.DBusException:
        pass
    if a.read:
        v = chrc.ReadValue({})
        print(f"READ {bytes(v).hex()} {text(v)}")
    if a.write is not None:
        chrc.WriteValue(dbus.Array(a.write.encode(), signature="y"), {"type": "request"})
        print("WROTE request")
    if a.write_command is not None:
        chrc.WriteValue(dbus.Array(a.write_command.encode(), signature="y"), {"type": "command"})
        print("WROTE command")
    if a.subscribe:
        got = []
        loop = GLib.MainLoop()

        def changed(iface, changed, invalidated):
            if "Value" in changed:
                got.append(bytes(changed["Value"]))
                print(f"NOTIFY {len(got)} {got[-1].hex()} {text(got[-1])}")
                if len(got) >= a.subscribe:
                    loop.quit()

        bus.add_signal_receiver(changed, "PropertiesChanged", PROPS, BLUEZ, cpath)
        chrc.StartNotify()
        print("SUBSCRIBED")
        if a.ready_file:
            open(a.ready_file, "w").write("subscribed\n")
        GLib.timeout_add(int(max(1, deadline - time.time()) * 1000), loop.quit)
        loop.run()
        try:
            chrc.StopNotify()
        except dbus.exceptions.DBusException:
            pass
        if len(got) < a.subscribe:
            fail(f"got {len(got)} of {a.subscribe} notifications")
    dev.Disconnect()
    print("DONE")


main()
