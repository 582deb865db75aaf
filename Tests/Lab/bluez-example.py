#!/usr/bin/python3 -u
"""Run one of BlueZ's example scripts on a NAMED adapter.

    bluez-example.py SCRIPT ADAPTER [script args...]

SCRIPT is a path (or a name under bluez-test-scripts' examples dir, e.g.
`example-gatt-server`); ADAPTER is `hciN` or an object path.  The examples
register on "the first adapter" GetManagedObjects returns, which in the lab
is any of hci0..hci2; this wrapper replaces their `find_adapter(bus)` with
one returning the named adapter, then runs the script as `__main__`.
Must run under Debian's /usr/bin/python3 (python3-dbus, python3-gi).
"""
import gzip
import os
import sys

EXAMPLES = "/usr/share/doc/bluez-test-scripts/examples"


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    script, adapter = sys.argv[1], sys.argv[2]
    if "/" not in script:
        script = os.path.join(EXAMPLES, script)
    if not os.path.exists(script) and os.path.exists(script + ".gz"):
        script += ".gz"
    opener = gzip.open if script.endswith(".gz") else open
    with opener(script, "rt") as f:
        src = f.read()
    path = adapter if adapter.startswith("/") else "/org/bluez/" + adapter
    marker = "def find_adapter(bus):"
    if src.count(marker) != 1:
        sys.exit(f"bluez-example: {script} has no single '{marker}' to replace")
    src = src.replace(marker, f"def find_adapter(bus):\n    return {path!r}\n\n\ndef _example_find_adapter(bus):")
    sys.argv = [script] + sys.argv[3:]
    print(f"bluez-example: {os.path.basename(script)} on {path}", flush=True)
    exec(compile(src, script, "exec"), {"__name__": "__main__", "__file__": script})


main()
