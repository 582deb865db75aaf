#!/usr/bin/env python3
"""An independent client for peer.send-resource with a descriptor: Python's socket.send_fds
passes a pipe's read end with the request line (SCM_RIGHTS), then writes FILE into the pipe.
With SIZE, the request announces that many bytes (the daemon checks what the pipe gives).
Prints the daemon's reply; exits 1 when it is an error.

usage: send-fd.py SOCKET NAME FILE [SIZE]
"""
import json
import os
import socket
import sys

sock_path, name, source = sys.argv[1:4]
size = int(sys.argv[4]) if len(sys.argv) > 4 else None
r, w = os.pipe()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_path)
request = {"jsonrpc": "2.0", "id": 1, "method": "peer.send-resource",
           "params": {"descriptor": True, "name": name, "to": "all"}}
if size is not None:
    request["params"]["size"] = size
socket.send_fds(s, [(json.dumps(request) + "\n").encode()], [r])
os.close(r)
with open(source, "rb") as f:
    data = f.read()
view = memoryview(data)
while view:
    view = view[os.write(w, view):]
os.close(w)
reply = b""
while not reply.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    reply += chunk
answer = json.loads(reply)
print(json.dumps(answer))
sys.exit(1 if "error" in answer else 0)
