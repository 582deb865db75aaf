#!/usr/bin/python3
"""A socat receiver's rate from its own log (socat -d -d -lu: microsecond timestamps).

    socat_log_rate.py LOG BYTES SIZE

Prints "WRITES_PER_S BYTES_PER_S" for BYTES moved in writes of SIZE, timed from the log's
"starting data transfer loop" (after any TLS handshake) to "is at EOF". Used by the peer
benches in the lab guest (Tests/Lab/bench/60-peer-throughput.sh) and on the host
(scripts/peer-bench-host.sh).
"""
import datetime
import sys

log, nbytes, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def at(marker):
    for line in open(log):
        if marker in line:
            return datetime.datetime.strptime(" ".join(line.split()[:2]), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    raise SystemExit(f"no '{marker}' in socat's log")


dt = at("is at EOF") - at("starting data transfer loop")
print(f"{nbytes / size / dt:.1f} {nbytes / dt:.0f}")
