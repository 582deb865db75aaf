#!/usr/bin/python3
"""One line per event that matters to the lab, from a btmon capture (LAB_BTMON=1: btmon.snoop).

    snoop-summary.py FILE [--index N] [--from HH:MM:SS] [--to HH:MM:SS]

btmon 5.66 itself crashes (SIGSEGV) while decoding the ATT traffic of these captures, so this
reads the btsnoop monitor format directly and prints, with the time (UTC, as the guest logs),
the controller and the connection handle as the host saw them:
  - LE Connection Complete / Disconnection Complete (handle, role, peer), Disconnect commands;
  - every ATT PDU on the fixed ATT channel and on EATT (LE credit-based) channels;
  - LE Set Scan Enable, LE Advertising Reports, and mgmt's Start/Stop Discovery, Discovering
    and Device Found (what bluetoothd was told).
Runs on the host (no Bluetooth needed).
"""
import argparse
import datetime
import struct

EPOCH = 0x00DCDDB30F2F8000  # btsnoop time: microseconds since year 0
ATT = {0x01: "Error Response", 0x02: "Exchange MTU Request", 0x03: "Exchange MTU Response",
       0x04: "Find Information Request", 0x05: "Find Information Response",
       0x06: "Find By Type Value Request", 0x07: "Find By Type Value Response",
       0x08: "Read By Type Request", 0x09: "Read By Type Response", 0x0A: "Read Request",
       0x0B: "Read Response", 0x10: "Read By Group Type Request", 0x11: "Read By Group Type Response",
       0x12: "Write Request", 0x13: "Write Response", 0x1B: "Handle Value Notification",
       0x1D: "Handle Value Indication", 0x1E: "Handle Value Confirmation",
       0x20: "Read Multiple Variable Request", 0x21: "Read Multiple Variable Response",
       0x23: "Multiple Handle Value Notification", 0x52: "Write Command"}
ERRORS = {0x01: "Invalid Handle", 0x06: "Request Not Supported", 0x0A: "Attribute Not Found",
          0x0E: "Unlikely Error"}
TYPES = {0x2800: "Primary Service", 0x2801: "Secondary Service", 0x2802: "Include",
         0x2803: "Characteristic", 0x2B3A: "Server Supported Features"}
MGMT_CMDS = {0x0023: "Start Discovery", 0x0024: "Stop Discovery", 0x003A: "Start Service Discovery"}


def u16(b, i):
    return b[i] | b[i + 1] << 8


def att(p):
    op, a = p[0], p[1:]
    name = ATT.get(op, f"ATT opcode 0x{op:02x}")
    if op == 0x01 and len(a) >= 4:
        return f"{name} to {ATT.get(a[0], hex(a[0]))}, handle 0x{u16(a, 1):04x}: {ERRORS.get(a[3], '')} (0x{a[3]:02x})"
    if op in (0x02, 0x03) and len(a) >= 2:
        return f"{name} {u16(a, 0)}"
    if op in (0x04, 0x06, 0x08, 0x10) and len(a) >= 4:
        t = ""
        if len(a) == 6:
            t = " " + TYPES.get(u16(a, 4), f"0x{u16(a, 4):04x}")
        elif len(a) > 6:
            t = " (128-bit type)" if op != 0x06 else ""
        return f"{name} 0x{u16(a, 0):04x}-0x{u16(a, 2):04x}{t}"
    if op in (0x0A, 0x12, 0x52, 0x1B, 0x1D) and len(a) >= 2:
        return f"{name} handle 0x{u16(a, 0):04x}" + (f" value {bytes(a[2:34]).hex()}" if len(a) > 2 else "")
    return f"{name} ({len(a)} bytes) {bytes(a[:24]).hex()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--index", type=int)
    ap.add_argument("--from", dest="lo", default="00:00:00")
    ap.add_argument("--to", dest="hi", default="99:99:99")
    a = ap.parse_args()
    data = open(a.file, "rb").read()
    if data[:8] != b"btsnoop\0" or struct.unpack(">I", data[12:16])[0] != 2001:
        raise SystemExit(f"{a.file}: not a btmon (monitor format) capture")
    off = 16
    while off + 24 <= len(data):
        _, incl, flags, _, ts = struct.unpack(">IIIIq", data[off:off + 24])
        b = data[off + 24:off + 24 + incl]
        off += 24 + incl
        idx, opc = flags >> 16, flags & 0xFFFF
        t = datetime.datetime.fromtimestamp((ts - EPOCH) / 1e6, datetime.timezone.utc).strftime("%H:%M:%S.%f")
        if (a.index is not None and idx != a.index) or not a.lo <= t[:8] <= a.hi:
            continue
        line = None
        if opc == 2 and len(b) >= 3:                              # HCI command
            c = u16(b, 0)
            if c == 0x200C and len(b) >= 4:
                line = f"HCI LE Set Scan Enable {'on' if b[3] else 'off'}"
            elif c == 0x0406 and len(b) >= 6:
                line = f"HCI Disconnect handle {u16(b, 3)} reason 0x{b[5]:02x}"
        elif opc == 3 and len(b) >= 2:                            # HCI event
            ev, p = b[0], b[2:]
            if ev == 0x3E and len(p) >= 19 and p[0] == 0x01:
                peer = ":".join(f"{x:02X}" for x in reversed(p[6:12]))
                role = "central" if p[4] == 0 else "peripheral"
                line = f"HCI LE Connection Complete status {p[1]} handle {u16(p, 2)} role {role} peer {peer}"
            elif ev == 0x3E and p and p[0] == 0x02 and len(p) >= 10:
                peer = ":".join(f"{x:02X}" for x in reversed(p[4:10]))
                line = f"HCI LE Advertising Report type {p[2]} from {peer}"
            elif ev == 0x05 and len(p) >= 4:
                line = f"HCI Disconnection Complete status {p[0]} handle {u16(p, 1)} reason 0x{p[3]:02x}"
        elif opc in (4, 5) and len(b) >= 8:                       # ACL out (4) / in (5)
            handle, pb = u16(b, 0) & 0x0FFF, (u16(b, 0) >> 12) & 3
            cid, pay = u16(b, 6), b[8:]
            d = "out" if opc == 4 else "in "
            if pb != 1 and cid == 4 and pay:
                line = f"ACL {d} handle {handle} ATT: {att(pay)}"
            elif pb != 1 and cid >= 0x40 and len(pay) >= 3:       # K-frame: SDU length, then ATT
                line = f"ACL {d} handle {handle} EATT 0x{cid:04x}: {att(pay[2:])}"
        elif opc == 16 and len(b) >= 6 and u16(b, 4) in MGMT_CMDS:  # mgmt command (cookie, opcode)
            line = f"MGMT {MGMT_CMDS[u16(b, 4)]}"
        elif opc == 17 and len(b) >= 6:                           # mgmt event (cookie, opcode)
            ev = u16(b, 4)
            if ev == 0x0012:
                line = "MGMT Device Found"
            elif ev == 0x0013:
                line = f"MGMT Discovering {'on' if b[-1] else 'off'}"
        if line:
            print(f"{t} hci{idx} {line}", flush=False)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        pass
