#!/usr/bin/env python3
"""Writes examples/images/peerlink.png: the small picture `make demo` sends between peers
(the reference flow ends with each side sending an image). Standard library only; run it
again to remake the same bytes: python3 scripts/make-demo-image.py examples/images/peerlink.png
"""
import struct
import sys
import zlib

W, H = 96, 64


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def pixel(x, y):
    # Two rings, one a peer each, on a gradient: the daemon's two sides of a session.
    r, g, b = 40 + x * 2, 60 + y * 2, 160
    for cx in (30, 66):
        d = ((x - cx) ** 2 + (y - 32) ** 2) ** 0.5
        if 14 <= d <= 20:
            r, g, b = 250, 250, 250
    return bytes((min(r, 255), min(g, 255), b))


rows = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(W)) for y in range(H))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
with open(sys.argv[1] if len(sys.argv) > 1 else "examples/images/peerlink.png", "wb") as f:
    f.write(png)
