#!/bin/bash
# Resources between hosts on a switch (namespaces plpeer1..3, 10.77.0.1..3): p2 sends files
# with `peerlink peer send-file` / `send-image` to p1 and p3 (accept_resources = all). Each
# received file is checked with sha256sum against the sent one: empty, 1 byte, a chunk
# (65,536) and a chunk and a byte, to one peer and to two at once, and 100 MiB to both. Names
# from the sender (`../../etc/passwd`, `/etc/passwd`, `a/b`, `..`, `.`, a newline, 300 bytes of
# UTF-8, a name already taken) land inside the inbox, one level deep, and nothing is written
# elsewhere. Bytes passed as a descriptor (standard input, Python's socket.send_fds, a file
# in a mount the daemon cannot see) are copied into the sender's outbox, arrive whole, and the
# copies are gone once sent; the daemon's own key is never sent by path. Then p3 is replaced by p4 (accept_resources = ask, max_resource_bytes = 30M,
# its inbox on a 40 MiB tmpfs): a client declines, the receiver cancels, the sender cancels,
# an offer over the quota and one that cannot fit are refused up front, and of two that each
# fit but not together one is refused before any byte of it is written (no-space: the other's
# bytes are promised), the other arrives whole; one whose disk another
# writer fills meanwhile fails cleanly (no-space, its part removed). Nothing partial appears
# under a final name. Every end is reported on both sides with its reason.
# timeout: 600
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

F=/run/lab/files
rm -rf "$F" /run/lab/inbox-p1 /run/lab/inbox-p3; mkdir -p "$F"
note "three namespaces on a bridge"
peer_net_bridge 3
peer_define p1 hci0 plpeer1 peer.name=host-1 peer.port=7001 peer.accept=all peer.accept_resources=all \
    peer.inbox_dir=/run/lab/inbox-p1 peer.max_resource_bytes=200M
peer_define p2 hci1 plpeer2 peer.name=host-2 peer.port=7002 peer.accept=all
peer_define p3 hci2 plpeer3 peer.name=host-3 peer.port=7003 peer.accept=all peer.accept_resources=all \
    peer.inbox_dir=/run/lab/inbox-p3 peer.max_resource_bytes=200M
peer_up p1 p2 p3
ID1=${PEER_ID[p1]} ID2=${PEER_ID[p2]} ID3=${PEER_ID[p3]}
for n in 1 3; do
    peer_connect p2 "$(peer_addr $n):700$n"
    [ "$RUN_RC" = 0 ] || fail "p2 could not connect to p$n: $RUN_OUT"
done

# received NAME TEXT: the path of NAME's latest peer.resource-received event containing TEXT.
received() { jfield path "$(event_lines "$1" peer.resource-received "$2" | tail -n 1)"; }
# same_hash SENT GOT WHAT: sha256sum of both files is the same.
same_hash() {
    [ -f "$2" ] || fail "$3: no received file ($2)"
    assert_eq "$(sha256sum <"$2" | cut -d' ' -f1)" "$(sha256sum <"$1" | cut -d' ' -f1)" "$3: sha256sum of the received file"
}
# send FROM ARGS...: `peer send-file` on FROM (waits until every peer has it), output in RUN_OUT.
send() { local from=$1; shift; run pl "$from" --json peer send-file "$@"; }

note "1. sizes to one peer, and to two at once (sha256sum)"
for size in 0 1 65536 65537; do
    head -c "$size" /dev/urandom >"$F/size-$size.bin"
    send p2 "$F/size-$size.bin" --to "$ID1"
    [ "$RUN_RC" = 0 ] || fail "send-file of $size bytes to p1 failed: $RUN_OUT"
    assert_contains "$RUN_OUT" '"topic":"peer.resource-sent"' "the sender reports $size bytes sent"
    need_event 30 p1 peer.resource-received "\"name\":\"size-$size.bin\""
    same_hash "$F/size-$size.bin" "$(received p1 "\"name\":\"size-$size.bin\"")" "$size bytes to p1"
    cp "$F/size-$size.bin" "$F/both-$size.bin"
    send p2 "$F/both-$size.bin"
    [ "$RUN_RC" = 0 ] || fail "send-file of $size bytes to both failed: $RUN_OUT"
    for n in 1 3; do
        need_event 30 p$n peer.resource-received "\"name\":\"both-$size.bin\""
        same_hash "$F/both-$size.bin" "$(received p$n "\"name\":\"both-$size.bin\"")" "$size bytes to p$n of two"
    done
done

note "2. 100 MiB to both peers at once"
head -c $((100 * 1024 * 1024)) /dev/urandom >"$F/big.bin"
T0=$(date +%s%3N)
PL_TIMEOUT=400 send p2 "$F/big.bin"
T1=$(date +%s%3N)
[ "$RUN_RC" = 0 ] || fail "send-file of 100 MiB failed: $(tail -c 2000 <<<"$RUN_OUT")"
note "100 MiB to two peers in $(( T1 - T0 )) ms (TLS, under the emulator)"
assert_contains "$RUN_OUT" '"topic":"peer.resource-progress"' "progress events while it runs"
for n in 1 3; do
    need_event 30 p$n peer.resource-received '"name":"big.bin"'
    same_hash "$F/big.bin" "$(received p$n '"name":"big.bin"')" "100 MiB to p$n"
done

note "3. names from the sender stay in the inbox"
PASSWD=$(sha256sum </etc/passwd)
printf xy >"$F/one"  # two bytes: never the content of size-1.bin, sent under that name below
LONG=$(printf 'é%.0s' $(seq 150))
NAMES=("../../etc/passwd" "/etc/passwd" "a/b" ".." "." $'new\nline' "$LONG" "size-1.bin")
BEFORE=$(ls -A /run/lab/inbox-p1 | wc -l)
for name in "${NAMES[@]}"; do
    send p2 "$F/one" --to "$ID1" --name "$name"
    [ "$RUN_RC" = 0 ] || fail "sending as $(printf %q "$name") failed: $RUN_OUT"
done
wait_for 30 sh -c "[ \$(ls -A /run/lab/inbox-p1 | wc -l) -ge $(( BEFORE + ${#NAMES[@]} )) ]" \
    || fail "not every named file arrived: $(ls -A /run/lab/inbox-p1)"
assert_eq "$(ls -A /run/lab/inbox-p1 | wc -l)" "$(( BEFORE + ${#NAMES[@]} ))" "one new file in the inbox per name"
assert_eq "$(find /run/lab/inbox-p1 -mindepth 1 ! -path '/run/lab/inbox-p1/.part' ! -path '/run/lab/inbox-p1/.part/*' ! -type f | wc -l)" 0 \
    "only files in the inbox (no directories made from a name)"
assert_eq "$(find /run/lab/inbox-p1 -mindepth 2 ! -path '/run/lab/inbox-p1/.part/*' | wc -l)" 0 "nothing below the inbox's top level"
assert_eq "$(sha256sum </etc/passwd)" "$PASSWD" "/etc/passwd is unchanged"
for stray in /run/lab/b /run/lab/a /run/lab/passwd /run/passwd /passwd /run/lab/files/passwd; do
    [ ! -e "$stray" ] || fail "a file was written outside the inbox: $stray"
done
ls -A /run/lab/inbox-p1 | grep -q '^passwd$' || fail "'../../etc/passwd' did not land as 'passwd': $(ls -A /run/lab/inbox-p1)"
ls -A /run/lab/inbox-p1 | grep -q '^passwd (2)$' || fail "'/etc/passwd' was not numbered 'passwd (2)': $(ls -A /run/lab/inbox-p1)"
ls -A /run/lab/inbox-p1 | grep -q '^size-1 (2).bin$' || fail "a taken name was not numbered: $(ls -A /run/lab/inbox-p1)"
for f in /run/lab/inbox-p1/*; do
    [ "$(basename "$f" | wc -c)" -le 256 ] || fail "a name longer than 255 bytes: $(basename "$f" | wc -c)"
done

note "4. an image: send-image checks it, the receiver reports its pixel size (checked with file)"
cp "$LAB_DIR/../../examples/images/peerlink.png" "$F/peerlink.png" || fail "the project's demo image is missing"
run pl p2 --json peer send-image "$F/peerlink.png" --to "$ID1"
[ "$RUN_RC" = 0 ] || fail "send-image failed: $RUN_OUT"
need_event 30 p1 peer.resource-received '"name":"peerlink.png"' '"media_type":"image/png"'
GOT=$(received p1 '"name":"peerlink.png"')
same_hash "$F/peerlink.png" "$GOT" "the image"
SIZE=$(file -b "$GOT" | grep -o '[0-9]* x [0-9]*') || fail "file does not see a PNG: $(file -b "$GOT")"
LINE=$(event_lines p1 peer.resource-received '"name":"peerlink.png"' | tail -n 1)
assert_eq "$(jfield width "$LINE") x $(jfield height "$LINE")" "$SIZE" "the pixel size the daemon reports is the one file(1) reads"
run pl p2 peer send-image "$F/one" --to "$ID1"
[ "$RUN_RC" != 0 ] || fail "send-image of a file that is not an image succeeded"
assert_contains "$RUN_OUT" "not a PNG or JPEG" "send-image says why"
run pl p1 peer inbox
assert_contains "$RUN_OUT" "peerlink.png $(( $(stat -c %s "$F/peerlink.png") / 1024 ))." "peer inbox lists the image"
assert_contains "$RUN_OUT" "image/png ${SIZE// /}" "peer inbox gives its pixel size"

note "4b. bytes passed as a descriptor: standard input, an independent client, a file the daemon cannot see"
OUTBOX=$(pl_state_dir p2)/peer/outbox
head -c 300000 /dev/urandom >"$F/piped.bin"
OUT=$(cat "$F/piped.bin" | pl p2 --json peer send-file - --name piped.bin --to "$ID1" 2>&1); RC=$?
printf '$ cat piped.bin | peerlink peer send-file - --name piped.bin\n%s\n[rc=%s]\n' "$(tail -c 1500 <<<"$OUT")" "$RC"
[ "$RC" = 0 ] || fail "send-file - (a pipe) failed: $OUT"
assert_contains "$OUT" '"copied":true' "the daemon copied the piped bytes into its outbox"
need_event 30 p1 peer.resource-received '"name":"piped.bin"'
same_hash "$F/piped.bin" "$(received p1 '"name":"piped.bin"')" "the piped bytes"
# Python's socket.send_fds, not our code: a pipe passed with the request, written after it.
head -c 500000 /dev/urandom >"$F/py.bin"
run "$PY3" "$LAB_DIR/send-fd.py" "$(pl_socket p2)" py.bin "$F/py.bin"
[ "$RUN_RC" = 0 ] || fail "the python client's send-resource failed: $RUN_OUT"
assert_contains "$RUN_OUT" '"copied": true' "the python client's bytes were copied"
for n in 1 3; do
    need_event 30 p$n peer.resource-received '"name":"py.bin"'
    same_hash "$F/py.bin" "$(received p$n '"name":"py.bin"')" "the python client's bytes to p$n"
done
# A pipe that gives less than the client announced (a writer killed mid-way): an error, no transfer.
run "$PY3" "$LAB_DIR/send-fd.py" "$(pl_socket p2)" short.bin "$F/py.bin" 500001
[ "$RUN_RC" = 1 ] || fail "a pipe shorter than its announced size was taken: $RUN_OUT"
assert_contains "$RUN_OUT" "gave 500000 bytes, not the 500001 announced" "the daemon says the pipe ended short"
# A file in a mount only the CLI sees (as a service with ProtectHome= cannot see /home):
# the CLI opens it, the daemon cannot open it by name and copies what the descriptor gives.
mkdir -p /run/lab/hidden
OUT=$(unshare -m --propagation private sh -c '
    mount -t tmpfs tmpfs /run/lab/hidden || exit 9
    head -c 200000 /dev/urandom >/run/lab/hidden/unseen.bin
    sha256sum </run/lab/hidden/unseen.bin | cut -d" " -f1 >"$1"
    exec "$2" --socket "$3" --json peer send-file /run/lab/hidden/unseen.bin --to "$4"' \
    sh "$F/unseen.sha" "$PEERLINK_BIN/peerlink" "$(pl_socket p2)" "$ID1" 2>&1); RC=$?
printf '$ unshare -m ... peerlink peer send-file /run/lab/hidden/unseen.bin\n%s\n[rc=%s]\n' "$(tail -c 1500 <<<"$OUT")" "$RC"
[ "$RC" = 0 ] || fail "send-file of a file the daemon cannot see failed: $OUT"
[ ! -e /run/lab/hidden/unseen.bin ] || fail "the private mount is visible outside its namespace: the case tests nothing"
assert_contains "$OUT" '"copied":true' "a file the daemon cannot open by name is copied from the descriptor"
need_event 30 p1 peer.resource-received '"name":"unseen.bin"'
assert_eq "$(sha256sum <"$(received p1 '"name":"unseen.bin"')" | cut -d' ' -f1)" "$(cat "$F/unseen.sha")" "the unseen file's bytes"
# A file the daemon reads by name is not copied.
send p2 "$F/size-1.bin" --to "$ID1" --name by-path.bin
assert_contains "$RUN_OUT" '"copied":false' "a file the daemon can open is read in place"
wait_for 30 sh -c "[ -z \"\$(ls -A '$OUTBOX')\" ]" || fail "copies left in the outbox once every transfer ended: $(ls -A "$OUTBOX")"
# The daemon's own key is never sent by path, nor through a symbolic link to it (socat: a raw client).
KEY=$(pl_state_dir p2)/peer/identity.key
[ -f "$KEY" ] || fail "no identity key at $KEY"
ln -sf "$KEY" "$F/key-link"
for path in "$KEY" "$F/key-link"; do
    REPLY=$(printf '{"jsonrpc":"2.0","id":1,"method":"peer.send-resource","params":{"path":"%s","to":"all"}}\n' "$path" \
        | socat -t 10 - UNIX-CONNECT:"$(pl_socket p2)")
    printf '$ peer.send-resource path=%s\n%s\n' "$path" "$REPLY"
    assert_contains "$REPLY" "one of the daemon's own files" "sending $path by path is refused"
done

note "5. p3 is replaced by p4: accept_resources = ask, a 30 MiB quota, a 40 MiB tmpfs inbox"
stop_peerlinkd p3
mkdir -p /run/lab/small && mount -t tmpfs -o size=40m tmpfs /run/lab/small || fail "cannot mount a tmpfs"
peer_define p4 hci2 plpeer3 peer.name=host-4 peer.port=7004 peer.accept=all peer.accept_resources=ask \
    peer.inbox_dir=/run/lab/small/inbox peer.max_resource_bytes=30M
peer_up p4
ID4=${PEER_ID[p4]}
peer_connect p2 "$(peer_addr 3):7004"
[ "$RUN_RC" = 0 ] || fail "p2 could not connect to p4: $RUN_OUT"
# offered_number TEXT: the transfer number of p4's latest offer containing TEXT.
offered_number() { jfield transfer "$(event_lines p4 peer.resource-offered "$1" | tail -n 1)"; }

note "5a. a client declines"
cp "$F/one" "$F/decline.bin"
spawn send-decline pl p2 --json peer send-file "$F/decline.bin" --to "$ID4"
need_event 30 p4 peer.resource-offered '"name":"decline.bin"'
expect_rc 0 pl p4 peer decline-resource "$(offered_number '"name":"decline.bin"')"
wait "$SPAWN_PID"; RC=$?
[ "$RC" = 1 ] || fail "send-file of a declined file exited $RC: $(cat "$(log_of send-decline)")"
assert_contains "$(cat "$(log_of send-decline)")" '"reason":"declined"' "the sender hears declined"
need_event 15 p4 peer.resource-ended '"name":"decline.bin"' '"reason":"declined"' '"by_peer":false'

note "5b. the receiver cancels"
cp "$F/one" "$F/rcancel.bin"
spawn send-rcancel pl p2 --json peer send-file "$F/rcancel.bin" --to "$ID4"
need_event 30 p4 peer.resource-offered '"name":"rcancel.bin"'
expect_rc 0 pl p4 peer cancel "$(offered_number '"name":"rcancel.bin"')"
wait "$SPAWN_PID"; RC=$?
[ "$RC" = 1 ] || fail "send-file cancelled by the receiver exited $RC"
assert_contains "$(cat "$(log_of send-rcancel)")" '"reason":"cancelled"' "the sender hears cancelled"
assert_contains "$(cat "$(log_of send-rcancel)")" '"by_peer":true' "from the peer"
need_event 15 p4 peer.resource-ended '"name":"rcancel.bin"' '"reason":"cancelled"' '"by_peer":false'

note "5c. the sender cancels"
cp "$F/one" "$F/scancel.bin"
run pl p2 --json peer send-file "$F/scancel.bin" --to "$ID4" --detach
[ "$RUN_RC" = 0 ] || fail "send-file --detach failed: $RUN_OUT"
need_event 30 p4 peer.resource-offered '"name":"scancel.bin"'
expect_rc 0 pl p2 peer cancel "$(jfield transfer "$RUN_OUT")"
need_event 15 p4 peer.resource-ended '"name":"scancel.bin"' '"reason":"cancelled"' '"by_peer":true'
need_event 15 p2 peer.resource-ended '"name":"scancel.bin"' '"reason":"cancelled"' '"by_peer":false'

note "5d. over the quota, and more than the disk holds: refused before any byte, nobody asked"
head -c $((31 * 1024 * 1024)) /dev/zero >"$F/quota.bin"
send p2 "$F/quota.bin" --to "$ID4"
[ "$RUN_RC" = 1 ] || fail "send-file over the quota exited $RUN_RC: $RUN_OUT"
assert_contains "$RUN_OUT" '"reason":"too-large"' "the sender hears too-large"
need_event 15 p4 peer.resource-ended '"name":"quota.bin"' '"reason":"too-large"'
# 29 MiB is under the quota, but with the 16 MiB kept free it does not fit 40 MiB.
head -c $((29 * 1024 * 1024)) /dev/zero >"$F/nospace.bin"
send p2 "$F/nospace.bin" --to "$ID4"
[ "$RUN_RC" = 1 ] || fail "send-file of more than the disk holds exited $RUN_RC: $RUN_OUT"
assert_contains "$RUN_OUT" '"reason":"no-space"' "the sender hears no-space"
need_event 15 p4 peer.resource-ended '"name":"nospace.bin"' '"reason":"no-space"'
assert_eq "$(event_count p4 peer.resource-offered '"name":"quota.bin"')$(event_count p4 peer.resource-offered '"name":"nospace.bin"')" 00 \
    "no client was asked about either"

note "5e. two that each fit but not together: one is refused up front, the other arrives"
head -c $((22 * 1024 * 1024)) /dev/urandom >"$F/fill-1.bin"
head -c $((22 * 1024 * 1024)) /dev/urandom >"$F/fill-2.bin"
spawn fill-1 pl p2 --json peer send-file "$F/fill-1.bin" --to "$ID4"
P1=$SPAWN_PID
spawn fill-2 pl p2 --json peer send-file "$F/fill-2.bin" --to "$ID4"
P2=$SPAWN_PID
need_event 30 p4 peer.resource-offered '"name":"fill-1.bin"'
need_event 30 p4 peer.resource-offered '"name":"fill-2.bin"'
expect_rc 0 pl p4 peer accept-resource "$(offered_number '"name":"fill-1.bin"')"
expect_rc 0 pl p4 peer accept-resource "$(offered_number '"name":"fill-2.bin"')"
wait "$P1"; R1=$?
wait "$P2"; R2=$?
note "fill-1 exit $R1, fill-2 exit $R2; the tmpfs: $(df -k /run/lab/small | tail -n 1)"
# Which one is refused depends on which accept the daemon took first (each is opened off the
# session's queue); exactly one is, with the inbox's own refusal (not a write that failed).
[ $(( R1 + R2 )) = 1 ] || fail "exactly one of two 22 MiB files must be refused on a 40 MiB disk with 16 MiB kept (exits $R1, $R2)"
assert_contains "$(cat "$(log_of fill-1)" "$(log_of fill-2)")" '"reason":"no-space"' "a sender hears no-space"
need_event 15 p4 peer.resource-ended '"reason":"no-space"' '"detail":"the resource needs 23068672 bytes'
for n in 1 2; do
    f=/run/lab/small/inbox/fill-$n.bin
    rc=$R1; [ "$n" = 2 ] && rc=$R2
    if [ "$rc" = 0 ]; then
        same_hash "$F/fill-$n.bin" "$f" "fill-$n.bin, the one taken"
    else
        [ ! -e "$f" ] || fail "fill-$n.bin was refused, yet is in the inbox"
    fi
done
assert_eq "$(parts_left /run/lab/small/inbox | wc -l)" 0 "no part left of the failed transfer"

note "5f. another writer fills the disk while a transfer runs: it fails cleanly with no-space"
rm -f /run/lab/small/inbox/fill-*.bin
head -c $((20 * 1024 * 1024)) /dev/urandom >"$F/fill-3.bin"
spawn fill-3 pl p2 --json peer send-file "$F/fill-3.bin" --to "$ID4"
P3=$SPAWN_PID
need_event 30 p4 peer.resource-offered '"name":"fill-3.bin"'
expect_rc 0 pl p4 peer accept-resource "$(offered_number '"name":"fill-3.bin"')"
# Once its first MiB is on the disk (the whole 20 takes seconds in the emulator), the rest of
# the file system goes to a file of someone else's.
for _ in $(seq 300); do
    got=$(stat -c %s /run/lab/small/inbox/.part/*.data 2>/dev/null | head -n 1)
    [ "${got:-0}" -ge 1048576 ] && break
    sleep 0.1
done
[ "${got:-0}" -ge 1048576 ] || fail "fill-3.bin's part did not reach 1 MiB within 30 s"
dd if=/dev/zero of=/run/lab/small/filler bs=64k 2>/dev/null
note "filled at $got bytes of fill-3.bin: $(df -k /run/lab/small | tail -n 1)"
wait "$P3"; R3=$?
[ "$R3" = 1 ] || fail "send-file onto a disk that filled up exited $R3: $(cat "$(log_of fill-3)")"
assert_contains "$(cat "$(log_of fill-3)")" '"reason":"no-space"' "the sender hears no-space"
need_event 15 p4 peer.resource-ended '"name":"fill-3.bin"' '"reason":"no-space"'
[ ! -e /run/lab/small/inbox/fill-3.bin ] || fail "fill-3.bin is in the inbox"
assert_eq "$(parts_left /run/lab/small/inbox | wc -l)" 0 "no part left of the failed transfer"
rm -f /run/lab/small/filler

event_lines p2 peer.resource-ended | tail -n 4
stop_peerlinkd p1; stop_peerlinkd p2; stop_peerlinkd p4
umount /run/lab/small
peer_net_cleanup
note "ok"
