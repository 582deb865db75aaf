#!/usr/bin/python3
"""Reads `avahi-browse -p` (parsable) output on stdin and prints one JSON list:
[{"event": "+"|"-"|"=", "interface", "protocol", "name", "type", "domain",
  "host", "address", "port", "txt": [...]}], names unescaped (avahi writes
a space as \\032 and a dot as \\.)."""
import json, re, sys

def unescape(s):
    out, i = bytearray(), 0
    b = s.encode()
    while i < len(b):
        if b[i] == 0x5C and i + 3 < len(b) + 0 and b[i+1:i+4].isdigit():
            out.append(int(b[i+1:i+4])); i += 4
        elif b[i] == 0x5C and i + 1 < len(b):
            out.append(b[i+1]); i += 2
        else:
            out.append(b[i]); i += 1
    return out.decode("utf-8", "replace")

def split(line):
    # Fields are ';'-separated; a ';' inside a name is escaped as \059.
    return line.rstrip("\n").split(";")

items = []
for line in sys.stdin:
    f = split(line)
    if not f or f[0] not in "+-=" or len(f) < 6:
        continue
    d = {"event": f[0], "interface": f[1], "protocol": f[2], "name": unescape(f[3]), "type": f[4], "domain": f[5]}
    if f[0] == "=" and len(f) >= 10:
        d.update(host=f[6], address=f[7], port=int(f[8]),
                 txt=[t.replace('\\"', '"') for t in re.findall(r'"((?:[^"\\]|\\.)*)"', ";".join(f[9:]))])
    items.append(d)
print(json.dumps(items))
