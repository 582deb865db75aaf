# shellcheck shell=bash
# Lab services inside the guest: system D-Bus, bluetoothd, btvirt (virtual LE
# controllers) and avahi-daemon on dummy0.  Sourced by guest.sh (to bring the
# lab up) and by lib.sh (so scenarios can stop/start/restart daemons).
#
# Under the systemd boot (LAB_BOOT=systemd, Tests/Lab/systemd-boot.sh) D-Bus, bluetoothd and
# avahi-daemon are Debian's own units, started and stopped with systemctl; btvirt is still
# the lab's.
#
# Every service is started with `setsid` and its pid kept under $LAB_RUN, so
# a daemon (re)started by a scenario outlives that scenario's process group,
# which guest.sh kills when the scenario ends.  Logs go to
# $LAB_RESULTS/daemons/<name>.log (appended across restarts).

: "${LAB_RESULTS:?LAB_RESULTS must be set (results dir)}"
LAB_RUN=${LAB_RUN:-/run/lab}                    # pid files, generated configs
LAB_CONTROLLERS=${LAB_CONTROLLERS:-3}           # btvirt -l<N>: hci0..hci<N-1>
LAB_BLUETOOTHD=${LAB_BLUETOOTHD:-/usr/libexec/bluetooth/bluetoothd}
LAB_DUMMY_ADDR=${LAB_DUMMY_ADDR:-169.254.10.1}
LAB_AVAHI_HOST=${LAB_AVAHI_HOST:-peerlink-lab}

# _lab_log MSG: harness messages, prefixed so they stand out in scenario logs.
_lab_log() { printf '[lab %s] %s\n' "$(date +%T.%1N)" "$*" >&2; }

# _lab_spawn NAME CMD...: start CMD detached (own session), log to
# daemons/NAME.log, pid in $LAB_RUN/NAME.pid (written by the process itself,
# which then execs CMD, so the pid is CMD's).
_lab_spawn() {
    local name=$1; shift
    mkdir -p "$LAB_RUN" "$LAB_RESULTS/daemons"
    rm -f "$LAB_RUN/$name.pid"
    printf '\n==== %s start %s: %s\n' "$name" "$(date +%T.%3N)" "$*" >>"$LAB_RESULTS/daemons/$name.log"
    setsid -f sh -c 'echo $$ >"$0"; exec "$@"' "$LAB_RUN/$name.pid" "$@" \
        </dev/null >>"$LAB_RESULTS/daemons/$name.log" 2>&1
    local i
    for i in $(seq 50); do [ -s "$LAB_RUN/$name.pid" ] && return 0; sleep 0.02; done
    _lab_log "$name: no pid file after start"; return 1
}

# _lab_pid NAME: print the pid of a running lab service, or fail.
_lab_pid() {
    local pid
    pid=$(cat "$LAB_RUN/$1.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# _lab_stop_pid PID: SIGTERM, wait up to 5 s, then SIGKILL.
_lab_stop_pid() {
    local pid=$1 i
    # Its children first: spawn runs a shell function (py3 ...) in a subshell whose child is
    # the real program, which SIGTERM to the subshell alone leaves running (a Python
    # peripheral would keep its application and advertisement registered).
    pkill -TERM -P "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    _lab_log "pid $pid ignored SIGTERM for 5 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null; sleep 0.1
}

# _lab_kill NAME: stop a lab service (see _lab_stop_pid).
_lab_kill() {
    local name=$1 pid
    if pid=$(_lab_pid "$name"); then
        _lab_stop_pid "$pid"
        printf '==== %s stopped %s\n' "$name" "$(date +%T.%3N)" >>"$LAB_RESULTS/daemons/$name.log"
    fi
    rm -f "$LAB_RUN/$name.pid"
}

# _lab_until TIMEOUT_S CMD...: retry CMD (output discarded) every 0.1 s until
# it succeeds (0) or TIMEOUT_S seconds, possibly fractional, pass (1).
_lab_until() {
    local ms deadline
    # milliseconds in awk (fractions), the sum in bash: mawk's printf %d
    # cannot hold a nanosecond clock
    ms=$(awk -v t="$1" 'BEGIN { printf "%d", t * 1000 }'); shift
    deadline=$(( $(date +%s%3N) + ms ))
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        [ "$(date +%s%3N)" -ge "$deadline" ] && return 1
        sleep 0.1
    done
}

# ---- system bus ------------------------------------------------------------
lab_start_dbus() {
    busctl status org.freedesktop.DBus >/dev/null 2>&1 && return 0
    mkdir -p /run/dbus
    _lab_spawn dbus dbus-daemon --system --nofork --nopidfile || return 1
    # can take several seconds under TCG
    _lab_until 20 busctl status org.freedesktop.DBus || { _lab_log "system dbus did not come up"; return 1; }
}

# ---- controllers (btvirt) ----------------------------------------------------
# lab_controller_addr N: the address btvirt gives controller N (hciN).
lab_controller_addr() { printf '00:AA:01:%02X:00:%02X\n' "$1" "$1"; }

# _lab_mgmt_count: how many controllers mgmt lists.  btmgmt prints nothing when its stdin
# cannot be polled (/dev/null, a scenario's stdin: bt_shell then has no input and drops its
# output), so it gets a pipe.
_lab_mgmt_count() { true | btmgmt info 2>/dev/null | grep -c '^hci[0-9]*:'; }

# _lab_controllers_up: the kernel finished setting up every controller (mgmt
# lists only those; a controller whose init timed out is never listed).
_lab_controllers_up() {
    [ "$(_lab_mgmt_count)" -ge "$LAB_CONTROLLERS" ]
}

lab_start_btvirt() {
    _lab_pid btvirt >/dev/null && return 0
    lsmod | grep -q '^hci_vhci' || modprobe hci_vhci || { _lab_log "modprobe hci_vhci failed"; return 1; }
    local attempt
    for attempt in 1 2 3; do
        _lab_spawn btvirt btvirt -L -l"$LAB_CONTROLLERS" || return 1
        _lab_until 20 _lab_controllers_up && return 0
        # Seen under load (TCG on a busy host): "hci0: Opcode 0x0c03 failed:
        # -110", the kernel's HCI Reset to btvirt timed out and that
        # controller is dead for good.  A new btvirt gives new controllers.
        _lab_log "btvirt attempt $attempt: not every controller finished setup: $(dmesg | grep -i 'hci[0-9]*:.*fail' | tail -n 3 | tr '\n' ' ')"
        _lab_kill btvirt
        _lab_until 10 sh -c '! ls /sys/class/bluetooth/hci* >/dev/null 2>&1'
    done
    return 1
}
# lab_stop_btvirt: stop it and wait (10 s) until its controllers are gone (a new btvirt
# started before that would get other hciN names).
lab_stop_btvirt() {
    _lab_kill btvirt
    _lab_until 10 sh -c '! ls /sys/class/bluetooth/hci* >/dev/null 2>&1'
}
lab_restart_btvirt() { lab_stop_btvirt && lab_start_btvirt && lab_wait_adapters; }

# ---- bluetoothd --------------------------------------------------------------
# _lab_adapters_ready: every controller is on org.bluez with its address.
_lab_adapters_ready() {
    local n addr
    for n in $(seq 0 $((LAB_CONTROLLERS - 1))); do
        addr=$(busctl get-property org.bluez "/org/bluez/hci$n" org.bluez.Adapter1 Address 2>/dev/null) || return 1
        [ "$addr" = "s \"$(lab_controller_addr "$n")\"" ] || return 1
    done
}

# lab_wait_adapters [TIMEOUT_S]: wait (bounded) until all controllers are on
# org.bluez with their addresses.
lab_wait_adapters() {
    _lab_until "${1:-15}" _lab_adapters_ready && return 0
    _lab_log "controllers not all on org.bluez after ${1:-15} s:"
    busctl tree org.bluez >&2 2>&1 || true
    return 1
}

# lab_power_all_on: set Powered=true on every controller (reset between tests).
lab_power_all_on() {
    local n
    for n in $(seq 0 $((LAB_CONTROLLERS - 1))); do
        [ "$(busctl get-property org.bluez "/org/bluez/hci$n" org.bluez.Adapter1 Powered 2>/dev/null)" = "b true" ] && continue
        busctl set-property org.bluez "/org/bluez/hci$n" org.bluez.Adapter1 Powered b true || return 1
    done
}

lab_start_bluetoothd() {
    if [ "${LAB_BOOT:-virtme}" = systemd ]; then
        systemctl start bluetooth.service || return 1
        lab_wait_adapters 15
        return
    fi
    _lab_pid bluetoothd >/dev/null && return 0
    _lab_spawn bluetoothd "$LAB_BLUETOOTHD" -n -E || return 1
    lab_wait_adapters 15 && return 0
    _lab_log "bluetoothd: not every controller appeared; restarting it once"
    _lab_kill bluetoothd
    _lab_spawn bluetoothd "$LAB_BLUETOOTHD" -n -E || return 1
    lab_wait_adapters 15
}
lab_stop_bluetoothd() {
    if [ "${LAB_BOOT:-virtme}" = systemd ]; then systemctl stop bluetooth.service || return 1
    else _lab_kill bluetoothd; fi
    _lab_until 5 sh -c '! busctl status org.bluez' || { _lab_log "org.bluez still on the bus"; return 1; }
}
lab_restart_bluetoothd() { lab_stop_bluetoothd && lab_start_bluetoothd; }

# ---- avahi on dummy0 -----------------------------------------------------------
lab_setup_dummy0() {
    ip link show dummy0 >/dev/null 2>&1 && return 0
    ip link add dummy0 type dummy &&
        ip link set dummy0 multicast on up &&
        ip addr add "$LAB_DUMMY_ADDR/16" dev dummy0
}

# avahi_conf FILE HOST INTERFACE [AAAA]: an avahi-daemon config on one interface, IPv4 only,
# with a fixed host name, so a published service is seen exactly once (one interface, one
# protocol); the lab's own daemon and each network-namespace host of a scenario use it.
# AAAA (yes|no, default no) is publish-aaaa-on-ipv4: with use-ipv6=no avahi still publishes
# the interface's IPv6 link-local address over IPv4 unless told not to, and a resolve then
# answers with whichever record came first. The namespace hosts turn it off (their scenarios
# compare one address); the lab's own daemon keeps it, so 50-dnssd-interop can check that
# `dnssd resolve --all-addresses` gathers both of dummy0's addresses.
avahi_conf() {
    cat >"$1" <<CONF
[server]
host-name=$2
use-ipv4=yes
use-ipv6=no
allow-interfaces=$3
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-aaaa-on-ipv4=${4:-no}
publish-hinfo=no
publish-workstation=no
[reflector]
[rlimits]
CONF
}

# The lab's avahi config: dummy0 only, its IPv6 link-local address published over IPv4 too.
_lab_avahi_conf() {
    mkdir -p "$LAB_RUN"
    avahi_conf "$LAB_RUN/avahi-daemon.conf" "$LAB_AVAHI_HOST" dummy0 yes
}

lab_start_avahi() {
    _lab_pid avahi >/dev/null && return 0
    lab_setup_dummy0 || { _lab_log "dummy0 setup failed"; return 1; }
    if [ "${LAB_BOOT:-virtme}" = systemd ]; then
        systemctl start avahi-daemon.service || return 1
        [ -n "${LAB_NOWAIT:-}" ] || lab_wait_avahi
        return
    fi
    _lab_avahi_conf
    mkdir -p /run/avahi-daemon
    rm -f /run/avahi-daemon/pid
    _lab_spawn avahi avahi-daemon --no-drop-root --no-chroot --no-rlimits -f "$LAB_RUN/avahi-daemon.conf" || return 1
    [ -n "${LAB_NOWAIT:-}" ] || lab_wait_avahi
}

# lab_wait_avahi: wait (bounded) until avahi-daemon is on the bus and RUNNING.
lab_wait_avahi() {
    _lab_until 10 busctl status org.freedesktop.Avahi || { _lab_log "avahi-daemon not on the bus"; return 1; }
    # "running" = the server state is RUNNING (2): host name established.
    _lab_until 10 sh -c '[ "$(busctl call org.freedesktop.Avahi / org.freedesktop.Avahi.Server GetState)" = "i 2" ]' \
        || { _lab_log "avahi-daemon did not reach RUNNING"; return 1; }
}
lab_stop_avahi() {
    if [ "${LAB_BOOT:-virtme}" = systemd ]; then systemctl stop avahi-daemon.socket avahi-daemon.service || return 1
    else _lab_kill avahi; fi
    _lab_until 5 sh -c '! busctl status org.freedesktop.Avahi' || { _lab_log "org.freedesktop.Avahi still on the bus"; return 1; }
}
lab_restart_avahi() { lab_stop_avahi && lab_start_avahi; }

# ---- whole lab ------------------------------------------------------------------
# lab_up: bring up (or repair) everything; idempotent.  btvirt first and
# alone (the kernel times out on a controller that answers too slowly while
# everything else starts), then the bus, then bluetoothd and avahi together.
lab_up() {
    if [ "${LAB_BTMON:-0}" = 1 ] && ! _lab_pid btmon >/dev/null; then
        _lab_spawn btmon btmon -T -w "$LAB_RESULTS/btmon.snoop" || return 1
    fi
    lab_start_btvirt && lab_start_dbus && lab_setup_dummy0 || return 1
    LAB_NOWAIT=1 lab_start_avahi && lab_start_bluetoothd && lab_wait_avahi
}

# lab_forget_devices: remove every remote device object from every adapter (RemoveDevice also
# ends its link), so no connection, bond or cached GATT tree leaks into the next scenario.
lab_forget_devices() {
    local p
    for p in $(busctl --list tree org.bluez 2>/dev/null | grep -E '^/org/bluez/hci[0-9]+/dev_[0-9A-F_]+$'); do
        busctl call org.bluez "${p%/*}" org.bluez.Adapter1 RemoveDevice o "$p" >/dev/null 2>&1 \
            || _lab_log "lab_forget_devices: RemoveDevice $p failed"
    done
}

# lab_reset: between scenarios: services running, controllers present and on, no remote
# devices left.  A scenario may have restarted btvirt with more controllers
# (LAB_CONTROLLERS=4 lab_restart_btvirt): unless mgmt lists exactly $LAB_CONTROLLERS, btvirt
# starts afresh.
lab_reset() {
    if _lab_pid btvirt >/dev/null && [ "$(_lab_mgmt_count)" != "$LAB_CONTROLLERS" ]; then
        _lab_log "btvirt: not $LAB_CONTROLLERS controllers: restarting it"
        lab_stop_btvirt
    fi
    lab_up && lab_wait_adapters 15 && lab_power_all_on && lab_forget_devices
}
