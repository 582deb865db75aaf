#!/usr/bin/python3 -u
"""Independent BLE central for the lab (python3-dbus, talks to bluetoothd).

    bluez-find.py --adapter hciN [--address AA:..] [--uuid UUID] [--name NAME]
                  [--timeout S] [--restart S] [--connect]

Starts LE discovery on the named adapter and polls bluetoothd's objects until
a device matching every given filter, seen during this discovery (it has an
RSSI), shows up under that adapter; discovery is restarted every --restart
seconds (default 2) until then (see the btvirt pitfall in README.md).  Prints
    FOUND <address> name=<Name> uuids=<u1,u2,...>
With --connect: stops discovery, Connect()s, waits for ServicesResolved and
prints
    SERVICES <uuid> <uuid> ...
then Disconnect()s.  Exit 0 on success, 1 on timeout/error (reason on stderr).
"""
import argparse
import sys
import time

import dbus

BLUEZ = "org.bluez"
OM = "org.freedesktop.DBus.ObjectManager"
PROPS = "org.freedesktop.DBus.Properties"


def full_uuid(u: str) -> str:
    u = u.lower()
    if len(u) == 4:
        return f"0000{u}-0000-1000-8000-00805f9b34fb"
    if len(u) == 8:
        return f"{u}-0000-1000-8000-00805f9b34fb"
    return u


def match(om, apath, a):
    """(path, props, uuids) of a device under apath matching every filter and
    seen in this discovery (BlueZ drops RSSI when discovery stops), or None."""
    for path, ifaces in om.GetManagedObjects().items():
        d = ifaces.get("org.bluez.Device1")
        if d is None or not path.startswith(apath + "/") or "RSSI" not in d:
            continue
        uuids = [str(u).lower() for u in d.get("UUIDs", [])]
        if a.address and str(d.get("Address", "")).upper() != a.address.upper():
            continue
        if a.uuid and full_uuid(a.uuid) not in uuids:
            continue
        if a.name and str(d.get("Name", d.get("Alias", ""))) != a.name:
            continue
        return path, d, uuids
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--address")
    ap.add_argument("--uuid")
    ap.add_argument("--name")
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--connect", action="store_true")
    ap.add_argument("--restart", type=float, default=2.0, help="restart discovery every S seconds")
    a = ap.parse_args()

    bus = dbus.SystemBus()
    om = dbus.Interface(bus.get_object(BLUEZ, "/"), OM)
    apath = a.adapter if a.adapter.startswith("/") else "/org/bluez/" + a.adapter
    adapter = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.Adapter1")
    flt = {"Transport": dbus.String("le"), "DuplicateData": dbus.Boolean(True)}
    if a.uuid:
        flt["UUIDs"] = dbus.Array([full_uuid(a.uuid)], signature="s")
    adapter.SetDiscoveryFilter(flt)
    deadline = time.monotonic() + a.timeout
    found = None
    attempt = 0
    while found is None:
        # btvirt delivers an advertiser's report once, when a scan (or the
        # advertising) is enabled, and the kernel can drop that one report
        # while discovery is still starting: restart discovery until seen.
        attempt += 1
        adapter.StartDiscovery()
        restart_at = time.monotonic() + a.restart
        try:
            while found is None and time.monotonic() < min(restart_at, deadline):
                found = match(om, apath, a)
                if found is None:
                    time.sleep(0.1)
        finally:
            try:
                adapter.StopDiscovery()
            except dbus.DBusException:
                pass
        if found is None and time.monotonic() >= deadline:
            print(f"bluez-find: nothing matching on {apath} within {a.timeout} s ({attempt} discovery runs)",
                  file=sys.stderr)
            return 1
    path, d, uuids = found
    print(f"FOUND {d['Address']} name={d.get('Name', '')} uuids={','.join(uuids)}")
    if not a.connect:
        return 0
    dev = dbus.Interface(bus.get_object(BLUEZ, path), "org.bluez.Device1")
    props = dbus.Interface(bus.get_object(BLUEZ, path), PROPS)
    dev.Connect(timeout=a.timeout)
    try:
        deadline = time.monotonic() + a.timeout
        while not props.Get("org.bluez.Device1", "ServicesResolved"):
            if time.monotonic() > deadline:
                print("bluez-find: connected but ServicesResolved never true", file=sys.stderr)
                return 1
            time.sleep(0.1)
        services = sorted(
            str(ifs["org.bluez.GattService1"]["UUID"])
            for p, ifs in om.GetManagedObjects().items()
            if p.startswith(path + "/") and "org.bluez.GattService1" in ifs
        )
        print("SERVICES " + " ".join(services))
    finally:
        dev.Disconnect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
