#!/bin/bash
# The demo story, run by `Tests/Lab/run.sh --demo` with its output shown live.
# Two PeerLink daemons on two virtual controllers; later issues extend it.
. "$LAB_DIR/lib.sh"

heading() { printf '\n======== %s ========\n' "$*"; }
show() { printf '$ peerlink %s\n' "$*"; }

require_peerlink
heading "Two PeerLink daemons: 'a' on hci0, 'b' on hci1"
start_peerlinkd a hci0
start_peerlinkd b hci1

for name in a b; do
    heading "daemon $name: status"
    show status
    pl "$name" status || fail "peerlink status ($name) exited $?"
    heading "daemon $name: adapter list"
    show adapter list
    pl "$name" adapter list || fail "peerlink adapter list ($name) exited $?"
done
heading "end of demo"
