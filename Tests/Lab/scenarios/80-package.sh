#!/bin/bash
# timeout: 420
# The Debian package (`make deb`, docs/packaging.md), installed as a user would: `apt-get
# install ./peerlink_*.deb` in the guest (its /etc, /usr and /var are overlays on tmpfs: the
# host is untouched). Checked with independent tools: dpkg (files, the conffile, the
# maintainer scripts), getent and id (the system user `peerlink`, in group `bluetooth`),
# readelf (no Swift library needed at run time), ps (the daemon runs as `peerlink`, not
# root), and the independent central (Tests/Lab/central.py): the installed daemon, run
# unprivileged, registers a GATT service and advertises through Debian's own D-Bus policy
# for group `bluetooth`, and bluetoothd calls back into it when the central reads. Then
# `apt-get purge` and the file system is compared with before: nothing of the package
# remains. (The unit itself, under systemd as PID 1, is not run here: this lab's init is
# virtme-ng's; see Tests/Lab/README.md.)
. "$LAB_DIR/lib.sh"
DEB=${PEERLINK_DEB:-}
if [ -z "$DEB" ]; then
    DEB=$(ls -1t "$LAB_REPO"/.build/package/peerlink_*.deb 2>/dev/null | head -n 1)
fi
[ -n "$DEB" ] && [ -f "$DEB" ] || fail "no package to install (PEERLINK_DEB=${PEERLINK_DEB:-<unset>}, none in $LAB_REPO/.build/package): run 'make deb' on the host"
note "package: $DEB"
dpkg -s peerlink >/dev/null 2>&1 && fail "peerlink is installed before the test: the guest is not clean"
getent passwd peerlink >/dev/null && fail "user peerlink exists before the test"

# snapshot FILE: what has been written to /etc, /usr and /var since the guest booted. Each
# is an overlay on tmpfs: every file created, changed or deleted (a whiteout) is in its upper
# directory, so two listings of those show exactly what the package left (the whole tree
# through 9p takes minutes). Left out: apt's, dpkg's and PackageKit's own logs, caches and
# databases (dpkg is asked instead), and bluetoothd's pairing records of the central's
# connection (/var/lib/bluetooth); the user database is compared by content.
UPPERS=()
for d in /etc /usr /var; do
    u=$(findmnt -n -o FSTYPE,OPTIONS --target "$d" | awk '$1 == "overlay" {print $2}' | tr , '\n' | sed -n 's/^upperdir=//p')
    [ -n "$u" ] && [ -d "$u" ] || fail "$d is not an overlay with an upper directory in this guest: $(findmnt -n --target "$d")"
    UPPERS+=("$d=$u")
done
# The root without the overlays (a bind mount does not carry the mounts below it): a
# directory in an upper that is also there is one the overlay copied up to hold a change
# made inside it, not something new.
LOWER=/run/lab-lower-root
mkdir -p "$LOWER"
mountpoint -q "$LOWER" || mount --bind / "$LOWER" || fail "cannot bind-mount the guest's root"
snapshot() {
    local pair d u
    for pair in "${UPPERS[@]}"; do
        d=${pair%%=*}; u=${pair#*=}
        (cd "$u" && find . -printf "$d/%P %y\n") | sed 's|/ | |' \
            | while read -r path type; do
                [ "$type" = d ] && [ -d "$LOWER$path" ] && continue
                echo "$path $type"
            done
    done | grep -vE '^/var/(log|cache|lib/apt|lib/dpkg|lib/PackageKit|lib/bluetooth|backups|tmp)(/| )|^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-? |^/etc/\.pwd\.lock ' \
        | LC_ALL=C sort >"$1"
    local f
    for f in /etc/passwd /etc/group /etc/shadow /etc/gshadow; do
        [ -f "$f" ] && { echo "== $f"; cat "$f"; } 
    done >"$1.users"
}
# Two things of the guest's own set-up, undone before the snapshot: virtme-ng bind-mounts
# a copy over /etc/shadow (useradd's rename onto a mount point fails with EBUSY), and
# man-db's trigger would rebuild the whole manual index through 9p (minutes in the
# emulator); a board has neither problem.
if mountpoint -q /etc/shadow; then umount /etc/shadow || fail "cannot unmount the guest's /etc/shadow copy"; fi
rm -f /var/lib/man-db/auto-update
snapshot "$LAB_OUT/before.txt"

note "1. apt-get install ./$(basename "$DEB")"
run timeout 300 apt-get install -y --no-install-recommends "$DEB"
assert_eq "$RUN_RC" 0 "apt-get install"
assert_eq "$(dpkg-query -W -f='${db:Status-Status}' peerlink)" installed "dpkg's status"
# The package's own list, read once: `dpkg -S FILE` reads every package's list (121,000
# files here, through 9p: about 8 s a call in the emulator, 90 s for these eleven).
OWNED=$(dpkg -L peerlink) || fail "dpkg -L peerlink failed"
for f in /usr/bin/peerlinkd /usr/bin/peerlink /lib/systemd/system/peerlinkd.service /usr/share/lintian/overrides/peerlink \
         /etc/peerlink/peerlink.conf /usr/share/man/man8/peerlinkd.8.gz /usr/share/man/man1/peerlink.1.gz \
         /usr/share/man/man5/peerlink.conf.5.gz /usr/share/bash-completion/completions/peerlink \
         /usr/share/zsh/vendor-completions/_peerlink /usr/share/doc/peerlink/copyright; do
    [ -e "$f" ] || fail "the package did not install $f"
    grep -qxF "$f" <<<"$OWNED" || fail "$f is not among the package's files (dpkg -L peerlink)"
done
assert_contains "$(dpkg-query -W -f='${Conffiles}' peerlink)" /etc/peerlink/peerlink.conf "the configuration is a conffile"
assert_contains "$(grep ExecStart= /lib/systemd/system/peerlinkd.service)" "ExecStart=/usr/bin/peerlinkd" "the unit runs the installed binary"
# The package installs the unit but does not enable it: the owner does (`systemctl enable --now`).
WANTS=$(ls /etc/systemd/system/*.wants/peerlinkd.service 2>/dev/null)
[ -z "$WANTS" ] || fail "the package enabled the unit: $WANTS"
# The Swift runtime is inside the binaries: what they need at run time is Debian's.
NEEDED=$(readelf -d /usr/bin/peerlinkd /usr/bin/peerlink | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u | tr '\n' ' ')
note "needed libraries: $NEEDED"
assert_not_contains "$NEEDED" swift "a Swift library needed at run time"
assert_not_contains "$NEEDED" Foundation "Foundation needed at run time"
assert_not_contains "$NEEDED" dispatch "libdispatch needed at run time"
# The daemon's C libraries are loaded with dlopen when first used, so the CLI never loads them.
for lib in libssl libcrypto libdbus libavahi libstdc++; do
    assert_not_contains "$NEEDED" "$lib" "$lib needed at start (it is loaded with dlopen, or linked statically)"
done
assert_eq "$(/usr/bin/peerlinkd --version | cut -d' ' -f1)" peerlinkd "the installed daemon runs"
# One binary for both programs: peerlink is a link to peerlinkd and is the CLI by that name.
assert_eq "$(readlink /usr/bin/peerlink)" peerlinkd "/usr/bin/peerlink links to peerlinkd"
assert_eq "$(/usr/bin/peerlink --version | cut -d' ' -f1)" peerlink "the installed CLI runs"
note "installed size: $(dpkg-query -W -f='${Installed-Size}' peerlink) KiB; peerlinkd $(stat -c %s /usr/bin/peerlinkd) bytes"

note "2. the system user and group"
getent passwd peerlink >/dev/null || fail "no user peerlink"
getent group peerlink >/dev/null || fail "no group peerlink"
assert_contains " $(id -nG peerlink) " " bluetooth " "peerlink is in group bluetooth"
assert_eq "$(getent passwd peerlink | cut -d: -f7)" /usr/sbin/nologin "peerlink's shell"
[ "$(id -u peerlink)" -lt 1000 ] || fail "peerlink is not a system user (uid $(id -u peerlink))"

note "3. the installed daemon, unprivileged, serves a central through BlueZ's D-Bus policy"
# What the unit's RuntimeDirectory= and StateDirectory= make.
install -d -o peerlink -g peerlink -m 0755 /run/peerlink
install -d -o peerlink -g peerlink -m 0750 /var/lib/peerlink
setpriv --reuid=peerlink --regid=peerlink --init-groups /usr/bin/peerlinkd --adapter hci0 \
    </dev/null >>"$LAB_OUT/peerlinkd-installed.log" 2>&1 &
D=$!
_LIB_PIDS+=("$D")
up() { timeout 5 /usr/bin/peerlink status >/dev/null 2>&1; [ $? -le 2 ]; }
wait_for 20 up || fail "the installed daemon did not answer on /run/peerlink/control.sock: $(tail -n 5 "$LAB_OUT/peerlinkd-installed.log")"
assert_eq "$(ps -o user= -p "$D" | tr -d ' ')" peerlink "the daemon's user"
# The daemon made its identity in its state directory, its own and private (the directory
# above was made by this scenario, as systemd would: it proves nothing).
wait_for 10 test -e /var/lib/peerlink/peer/identity.key || fail "no identity in /var/lib/peerlink/peer: $(ls -laR /var/lib/peerlink)"
assert_eq "$(stat -c '%U %a' /var/lib/peerlink/peer/identity.key)" "peerlink 600" "the identity key's owner and mode"
assert_eq "$(stat -c '%U' /var/lib/peerlink/peer)" peerlink "the owner of the daemon's state"
SVC=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D11
CHR=5A1D0F4E-2B7C-4E1A-9C33-6E0B8F2A7D12
cat >"$LAB_OUT/app.json" <<JSON
{"name": "packaged", "services": [{"uuid": "$SVC", "characteristics": [
  {"uuid": "$CHR", "flags": ["read"], "value": "from the package"}]}]}
JSON
run timeout 30 /usr/bin/peerlink gatt register "$LAB_OUT/app.json"
assert_eq "$RUN_RC" 0 "gatt register as user peerlink"
central_scanning c --adapter hci1 --service $SVC --char $CHR --read --restart 10 --timeout 60
run timeout 30 /usr/bin/peerlink advertise start --name packaged --service $SVC
assert_eq "$RUN_RC" 0 "advertise start as user peerlink"
central_result c
assert_eq "$RUN_RC" 0 "the central's read"
assert_contains "$RUN_OUT" "from the package" "the value the central read"
_lab_stop_pid "$D"; wait "$D" 2>/dev/null

note "4. apt-get purge: nothing of the package remains"
run timeout 120 apt-get purge -y peerlink
assert_eq "$RUN_RC" 0 "apt-get purge"
[ -z "$(dpkg-query -W -f='${db:Status-Status}' peerlink 2>/dev/null | grep -v not-installed)" ] || fail "dpkg still knows peerlink: $(dpkg -s peerlink 2>&1 | head -n 3)"
getent passwd peerlink >/dev/null && fail "user peerlink left after purge"
getent group peerlink >/dev/null && fail "group peerlink left after purge"
[ ! -e /run/peerlink ] || fail "/run/peerlink left after purge"
snapshot "$LAB_OUT/after.txt"
if ! diff -u "$LAB_OUT/before.txt" "$LAB_OUT/after.txt" >"$LAB_OUT/files.diff"; then
    fail "the file system differs after purge: $(head -n 30 "$LAB_OUT/files.diff")"
fi
if ! diff -u "$LAB_OUT/before.txt.users" "$LAB_OUT/after.txt.users" >"$LAB_OUT/users.diff"; then
    fail "the user database differs after purge: $(head -n 30 "$LAB_OUT/users.diff")"
fi
note "what was written to /etc, /usr and /var: the same before the install and after the purge ($(wc -l <"$LAB_OUT/before.txt") paths)"
umount "$LOWER" 2>/dev/null
note "ok"
