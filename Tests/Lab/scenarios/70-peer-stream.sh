#!/bin/bash
# Byte streams (MultipeerConnectivity's startStream) between two hosts (namespaces plpeer1,
# plpeer2 on a veth pair): p2 writes with `peerlink peer open-stream`, p1 reads with
# `peerlink peer accept-stream` (the oldest stream not yet taken, or the next one opened). 20 MiB from a file and 3 MiB
# through a pipe arrive whole (sha256sum of what went in and what came out) and both
# commands exit 0 only then; a client declines (the writer exits 1 with `declined`); the
# reader leaves half way (the writer hears `cancelled`); the writing command is killed with
# SIGKILL half way (the reader hears `cancelled` and keeps no file); p1's daemon is killed mid-stream
# (the writer exits 1 with the daemon's reason for the stream's end, the reader's file is not left under its
# final name). `peer streams` lists a stream while it runs.
# timeout: 480
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink
PL_TIMEOUT=300  # the 20 MiB stream runs under the emulator

F=/run/lab/stream
rm -rf "$F"; mkdir -p "$F"
note "two namespaces joined by a veth pair"
peer_net_pair
peer_define p1 hci0 plpeer1 peer.name=reader peer.port=7001 peer.accept=all
peer_define p2 hci1 plpeer2 peer.name=writer peer.port=7002 peer.accept=all
peer_up p1 p2
ID1=${PEER_ID[p1]} ID2=${PEER_ID[p2]}
peer_connect p2 "$(peer_addr 1):7001"
[ "$RUN_RC" = 0 ] || fail "p2 could not connect to p1: $RUN_OUT"
# same_hash A B WHAT: sha256sum of both files is the same.
same_hash() {
    [ -f "$2" ] || fail "$3: no file $2"
    assert_eq "$(sha256sum <"$2" | cut -d' ' -f1)" "$(sha256sum <"$1" | cut -d' ' -f1)" "$3: sha256sum"
}

note "1. 20 MiB from a file, read into a file"
head -c $((20 * 1024 * 1024)) /dev/urandom >"$F/big.bin"
spawn reader-1 pl p1 peer accept-stream --wait 120 --peer "$ID2" --to "$F/big.out"
R=$SPAWN_PID
T0=$(date +%s%3N)
run pl p2 peer open-stream "$ID1" big --from "$F/big.bin"
T1=$(date +%s%3N)
[ "$RUN_RC" = 0 ] || fail "open-stream of 20 MiB exited $RUN_RC: $RUN_OUT"
assert_contains "$RUN_OUT" "wrote 20971520 bytes; the peer's reader has them all" "the writer's summary"
wait "$R"; RC=$?
[ "$RC" = 0 ] || fail "accept-stream exited $RC: $(cat "$(log_of reader-1)")"
assert_contains "$(cat "$(log_of reader-1)")" "read 20971520 bytes; complete" "the reader's summary"
same_hash "$F/big.bin" "$F/big.out" "20 MiB through a stream"
[ ! -e "$F/big.out.part" ] || fail "the reader left its part behind"
note "20 MiB in $(( T1 - T0 )) ms (TLS, under the emulator)"

note "2. 3 MiB through pipes on both ends; peer streams lists it while it runs"
head -c $((3 * 1024 * 1024)) /dev/urandom >"$F/pipe.bin"
spawn reader-2 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket p1)' peer accept-stream --wait 120 | sha256sum >'$F/pipe.sum'"
R=$SPAWN_PID
# The writer's pipe gives its first 1000 bytes, then the rest only once the stream was seen
# listed, so it is listed while it runs whatever the timing.
spawn writer-2 sh -c "{ head -c 1000 '$F/pipe.bin'; while [ ! -e '$F/listed' ]; do sleep 0.1; done; tail -c +1001 '$F/pipe.bin'; } \
    | '$PEERLINK_BIN/peerlink' --socket '$(pl_socket p2)' peer open-stream '$ID1' pipe"
W=$SPAWN_PID
wait_for 60 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket p1)' peer streams | grep -q 'from .* pipe reading'" \
    || fail "peer streams did not list the running stream: $(pl p1 peer streams 2>&1)"
touch "$F/listed"
wait "$W"; RC=$?
[ "$RC" = 0 ] || fail "open-stream from a pipe exited $RC: $(cat "$(log_of writer-2)")"
wait "$R"; RC=$?
[ "$RC" = 0 ] || fail "accept-stream into a pipe exited $RC: $(cat "$(log_of reader-2)")"
assert_eq "$(cut -d' ' -f1 <"$F/pipe.sum")" "$(sha256sum <"$F/pipe.bin" | cut -d' ' -f1)" "3 MiB through pipes: sha256sum"

note "3. a client declines"
spawn writer-3 pl p2 peer open-stream "$ID1" unwanted --from "$F/pipe.bin"
W=$SPAWN_PID
need_event 30 p1 peer.stream-opened '"name":"unwanted"'
N=$(jfield stream "$(event_lines p1 peer.stream-opened '"name":"unwanted"' | tail -n 1)")
expect_rc 0 pl p1 peer decline-stream "$N"
wait "$W"; RC=$?
[ "$RC" = 1 ] || fail "open-stream of a declined stream exited $RC: $(cat "$(log_of writer-3)")"
assert_contains "$(cat "$(log_of writer-3)")" "ended: declined (by the peer)" "the writer hears declined"

note "4. the reader leaves half way"
spawn reader-4 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket p1)' peer accept-stream --wait 120 | head -c 100000 >/dev/null"
R=$SPAWN_PID
run pl p2 peer open-stream "$ID1" left --from "$F/big.bin"
[ "$RUN_RC" = 1 ] || fail "open-stream to a reader that left exited $RUN_RC: $RUN_OUT"
assert_contains "$RUN_OUT" "ended: cancelled (by the peer)" "the writer hears cancelled"
wait "$R"

note "5. the writing client is killed (kill -9) mid-stream: the reader never takes it for whole"
# Its input gives 1 MiB, then nothing until the end of the test: the command is mid-stream.
spawn reader-k pl p1 peer accept-stream --wait 120 --to "$F/killed.out"
R=$SPAWN_PID
spawn writer-k sh -c "{ head -c 1048576 '$F/big.bin'; sleep 600; } | exec '$PEERLINK_BIN/peerlink' --socket '$(pl_socket p2)' peer open-stream '$ID1' killed"
W=$SPAWN_PID
wait_for 60 sh -c "[ \$(stat -c %s '$F/killed.out.part' 2>/dev/null || echo 0) -ge 1048576 ]" || fail "the stream's first MiB did not arrive: $(cat "$(log_of reader-k)")"
CLI=$(pgrep -f "peer open-stream $ID1 killed" | head -n 1)
[ -n "$CLI" ] || fail "no open-stream process to kill"
kill -9 "$CLI"
wait "$R"; RC=$?
[ "$RC" = 1 ] || fail "accept-stream of a stream whose writer was killed exited $RC: $(cat "$(log_of reader-k)")"
assert_contains "$(cat "$(log_of reader-k)")" "cancelled" "the reader hears cancelled"
[ ! -e "$F/killed.out" ] || fail "a stream cut by a killed writer was saved under its final name"
[ ! -e "$F/killed.out.part" ] || fail "the reader left the part of a cut stream"
kill "$W" 2>/dev/null; pkill -f "sleep 600" 2>/dev/null

note "6. the reading daemon is killed mid-stream"
head -c $((100 * 1024 * 1024)) /dev/zero >"$F/long.bin"
spawn reader-5 pl p1 peer accept-stream --wait 120 --to "$F/long.out"
R=$SPAWN_PID
spawn writer-5 pl p2 peer open-stream "$ID1" long --from "$F/long.bin"
W=$SPAWN_PID
wait_for 60 sh -c "[ \$(stat -c %s '$F/long.out.part' 2>/dev/null || echo 0) -ge 1048576 ]" || fail "the long stream did not start"
peer_kill9 p1
wait "$W"; RC=$?
[ "$RC" = 1 ] || fail "open-stream whose reader's daemon died exited $RC: $(cat "$(log_of writer-5)")"
assert_contains "$(cat "$(log_of writer-5)")" "ended: " "the writer says how it ended"
# ... with the daemon's reason for the stream's end (its peer.stream-closed), not a guess.
assert_not_contains "$(cat "$(log_of writer-5)")" "ended: unknown" "the writer's reason is the daemon's"
wait "$R"; RC=$?
[ "$RC" = 1 ] || fail "accept-stream whose daemon died exited $RC: $(cat "$(log_of reader-5)")"
[ ! -e "$F/long.out" ] || fail "a cut stream was saved under its final name"
[ ! -e "$F/long.out.part" ] || fail "the reader left the part of a cut stream"

stop_peerlinkd p2
peer_net_cleanup
rm -rf "$F"
note "ok"
