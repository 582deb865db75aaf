#!/bin/bash
# Bad input on the peer port (daemon a on loopback), sent by peer-tool.py: random bytes and a
# header announcing an oversized frame (each answered with HELLO, then CLOSE protocol-error);
# a client sending a valid HELLO one byte a second (closed by the 10 s handshake timeout with
# CLOSE timeout), a real session from b coming up meanwhile; 1,000 connections that send
# nothing opened at once (all fit a's accept queue, the kernel drops none; all closed by the
# daemon after the handshake timeout), then a's
# descriptors return to what they were and the session still carries a message. Daemon e, limited to 128
# descriptors, gets 100 connections at once: it takes them up to its ceiling and refuses the
# rest (never running out: libdispatch stops a process that does), does not spin, ends every
# one, its descriptors return and a session works. Last, b stops reading
# (SIGSTOP) while a client keeps sending a 64 KiB messages to it through a: a's RSS, sampled
# from /proc, stays under 64 MB; b, continued, gets the messages and the session still works.
# timeout: 240
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

A=127.0.0.1:7301
note "nofile limit here: $(ulimit -Sn) soft, $(ulimit -Hn) hard"
# a's own pings are slow so that a stopped b is not declared lost during the last step.
peer_define a hci0 - peer.name=lab-a peer.listen=loopback peer.port=7301 peer.accept=all peer.ping_interval=30
# b's too: stopped (SIGSTOP) in the last step, it must not find a lost when it continues.
peer_define b hci1 - peer.name=lab-b peer.listen=loopback peer.port=7302 peer.ping_interval=30
peer_define e hci2 - peer.name=lab-e peer.listen=loopback peer.port=7303 peer.accept=all
peer_up a b e
APID=${PEERLINKD_PID[a]}
FD0=$(fd_count "$APID")
note "a: $FD0 descriptors, RSS $(rss_kb "$APID") kB"

note "random bytes"
run peer_tool probe --to "$A" --random 4096 --seed 7
[ "$RUN_RC" = 0 ] || fail "probe failed"
assert_contains "$RUN_OUT" "FRAME HELLO" "a still sends its HELLO"
assert_contains "$RUN_OUT" "FRAME CLOSE reason=protocol-error" "random bytes: CLOSE protocol-error"
need_event 15 a peer.disconnected '"reason":"protocol-error"'

note "a header announcing a 1 MiB frame"
run peer_tool probe --to "$A" --hex 010100000000000000100000
[ "$RUN_RC" = 0 ] || fail "probe failed"
assert_contains "$RUN_OUT" "FRAME CLOSE reason=protocol-error" "oversized length: CLOSE protocol-error"
assert_contains "$RUN_OUT" "1048576" "the CLOSE names the length"
kill -0 "$APID" || fail "a died"

note "a slow client; a real session meanwhile"
spawn slow peer_tool slow --to "$A" --interval 1 --timeout 40
wait_log 15 slow CONNECTED || fail "the slow client did not connect: $(cat "$(log_of slow)")"
peer_connect b "$A" --context "during the slow client"
[ "$RUN_RC" = 0 ] || fail "no session while the slow client was pending: $RUN_OUT"
need_event 15 a peer.connected "\"peer\":\"${PEER_ID[b]}\""
# When a says the session came up (its event's own time), against when it closed the slow one.
SESSION_AT=$(date -d "$(event_lines a peer.connected "\"peer\":\"${PEER_ID[b]}\"" | head -n 1 | grep -o '"time":"[^"]*"' | cut -d'"' -f4)" +%s%3N)
wait_log 30 slow CLOSED-AFTER || fail "the slow client was not closed: $(cat "$(log_of slow)")"
cat "$(log_of slow)"
assert_contains "$(cat "$(log_of slow)")" "FRAME CLOSE reason=timeout" "the slow client: CLOSE timeout"
SLOW_S=$(grep -o 'CLOSED-AFTER [0-9]*' "$(log_of slow)" | cut -d' ' -f2)
[ "$SLOW_S" -ge 9 ] && [ "$SLOW_S" -le 14 ] || fail "the slow client was closed after $SLOW_S s, not at the 10 s handshake timeout"
SLOW_AT=$(grep -o 'at-ms=[0-9]*' "$(log_of slow)" | cut -d= -f2)
[ "$SESSION_AT" -lt "$SLOW_AT" ] || fail "the session came up only after the slow client was closed"
note "the session was up $(( SLOW_AT - SESSION_AT )) ms before a closed the slow client"

note "1,000 idle connections at once"
DROPS0=$(tcp_listen_drops)
spawn flood peer_tool flood --to "$A" --count 1000 --timeout 90
FLOOD_PID=$SPAWN_PID
wait_log 30 flood "OPEN " || fail "the flood did not open its connections: $(cat "$(log_of flood)")"
# (a takes them as they come and closes each 10 s later: how many it holds at once depends on
# the emulator's speed, so it is noted, not checked.)
note "a holds $(fd_count "$APID") descriptors, RSS $(rss_kb "$APID") kB"
wait "$FLOOD_PID"; RC=$?
cat "$(log_of flood)"
# The burst fits a's accept queue: a handshake dropped there leaves a client that believes
# it is connected and a daemon that never sees it (nothing to close).
DROPS=$(( $(tcp_listen_drops) - DROPS0 ))
note "handshakes the kernel dropped at a full accept queue: $DROPS"
[ "$DROPS" = 0 ] || fail "the kernel dropped $DROPS of the 1,000 handshakes at a's full accept queue (listen backlog too short)"
[ "$RC" = 0 ] || fail "the daemon did not close every idle connection: $(cat "$(log_of flood)")"
assert_contains "$(cat "$(log_of flood)")" "CLOSED-BY-DAEMON 1000/1000" "all 1,000 closed by a"
assert_contains "$(cat "$(log_of flood)")" "(refused 0)" "closed by a, none refused or reset"
# Each after the handshake's time (10 s from its accept, which cannot precede its connect):
# none closed at once.
first=$(sed -n 's/.*FIRST-CLOSE-AFTER \([0-9.]*\) s.*/\1/p' "$(log_of flood)")
[ -n "$first" ] && "$PY3" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 9.0 else 1)" "$first" \
    || fail "a closed an idle connection $first s after it opened (the handshake's time is 10 s)"
kill -0 "$APID" || fail "a died"
# Descriptors back: a's baseline plus its one session with b.
wait_for 20 sh -c "[ \$(ls /proc/$APID/fd | wc -l) -le $(( FD0 + 1 )) ]" \
    || fail "a's descriptors did not return: $(fd_count "$APID") (baseline $FD0 + 1 session)"
note "a: $(fd_count "$APID") descriptors (baseline $FD0 + 1 session), RSS $(rss_kb "$APID") kB"
expect_rc 0 pl b peer send "after the flood"
need_event 15 a peer.message "$(printf 'after the flood' | base64 -w0)"

note "near the descriptor limit: e limited to 128 (prlimit), 100 connections at once"
EPID=${PEERLINKD_PID[e]}
prlimit --pid "$EPID" --nofile=128:128 || fail "prlimit failed"
EFD0=$(fd_count "$EPID")
spawn flood-e peer_tool flood --to 127.0.0.1:7303 --count 100 --timeout 60
FLOOD_E=$SPAWN_PID
wait_log 30 flood-e "OPEN " || fail "the flood did not open its connections: $(cat "$(log_of flood-e)")"
# e takes connections up to its ceiling (128 less a reserve of 32) and refuses the rest at once.
wait_for 20 grep -q "refusing peer connections" "$LAB_OUT/peerlinkd-e.log" || fail "e refused nothing: $(fd_count "$EPID") descriptors"
T0=$(awk '{print $14 + $15}' "/proc/$EPID/stat")
sleep 2     # a measuring window: e holds what it took
T1=$(awk '{print $14 + $15}' "/proc/$EPID/stat")
note "e near its limit: $(fd_count "$EPID") descriptors, $(( (T1 - T0) * 10 )) ms of CPU in 2 s"
[ $(( T1 - T0 )) -lt 50 ] || fail "e spun near its descriptor limit: $(( (T1 - T0) * 10 )) ms of CPU in 2 s"
wait "$FLOOD_E"; RC=$?
cat "$(log_of flood-e)"
[ "$RC" = 0 ] || fail "e did not end every connection: $(cat "$(log_of flood-e)")"
kill -0 "$EPID" || fail "e died near its descriptor limit: $(tail -n 5 "$LAB_OUT/peerlinkd-e.log")"
assert_not_contains "$(cat "$LAB_OUT/peerlinkd-e.log")" "Too many open files" "e never ran out of descriptors"
wait_for 20 sh -c "[ \$(ls /proc/$EPID/fd | wc -l) -le $EFD0 ]" || fail "e's descriptors did not return: $(fd_count "$EPID") (baseline $EFD0)"
peer_connect b 127.0.0.1:7303 --context "after the limit"
[ "$RUN_RC" = 0 ] || fail "no session with e after its descriptor limit: $RUN_OUT"
note "e: all 100 ended, $(fd_count "$EPID") descriptors (baseline $EFD0), a session works"

note "b stops reading; a client keeps sending 64 KiB messages to b through a"
kill -STOP "${PEERLINKD_PID[b]}"
run peer_tool stuffed --socket "$(pl_socket a)" --to "${PEER_ID[b]}" --size 65536 --seconds 8 --pid "$APID" --window 16
kill -CONT "${PEERLINKD_PID[b]}"
[ "$RUN_RC" = 0 ] || fail "the sending client failed: $RUN_OUT"
RSS_MAX=$(grep -o 'max_kb=[0-9]*' <<<"$RUN_OUT" | cut -d= -f2)
ACCEPTED=$(grep -o 'replied=[0-9]*' <<<"$RUN_OUT" | cut -d= -f2)
note "a's RSS at most $(( RSS_MAX / 1024 )) MB while b did not read; a took $ACCEPTED messages of 64 KiB"
[ "$RSS_MAX" -gt 0 ] || fail "no RSS sample"
[ "$RSS_MAX" -lt $(( 64 * 1024 )) ] || fail "a's RSS reached $RSS_MAX kB (bound 64 MB)"
[ "$ACCEPTED" -ge 1 ] || fail "a took no message at all"
[ "$ACCEPTED" -lt 1000 ] || fail "a took $ACCEPTED messages of 64 KiB (more than it can hold): b was not stalled"

note "b continues: it receives them and the session still works"
expect_rc 0 pl a peer send "after the stall"
need_event 90 b peer.message "$(printf 'after the stall' | base64 -w0)"
note "b received $(event_count b peer.message) messages from a"
[ "$(event_count b peer.message)" -ge $(( ACCEPTED + 1 )) ] || fail "b received fewer messages than a took"
note "ok"
