#!/bin/bash
# Boot the lab guest with systemd as PID 1 and run Tests/Lab/guest.sh in it as a systemd
# unit (the scenarios marked `# boot: systemd`).  Called by run.sh inside a private mount
# namespace (`unshare -m --propagation private`), so every mount made here disappears with
# this script, whatever way it ends.
#
#   systemd-boot.sh KERNEL ENVFILE RESULTS_DIR LOG
#
# The guest's root is an overlay of the host's root with its upper directory on a tmpfs
# made here: the guest can write anywhere (install a package, enable a unit) and the host
# is untouched.  RESULTS_DIR is bind-mounted into it, so the guest's results land in the
# real directory.  What is prepared in the overlay before the boot:
#   - peerlink-lab.service, wanted by multi-user.target: runs guest.sh ENVFILE, its output
#     on the serial console (which is this script's output), then powers the guest off;
#   - units of the host that have nothing to do with the lab are masked (a database
#     server, apt's and man-db's timers: apt-daily would hold dpkg's lock while a scenario
#     installs the package);
#   - the host's container markers (/.dockerenv, /run/.containerenv) are hidden: finding
#     one, systemd believes it runs in a container, reads its kernel command line from its
#     own argv instead of /proc/cmdline and starts a container's console getty instead of
#     the serial one (this is why a plain `vng --systemd` of such a host ignores --exec,
#     systemd.run= and systemd.hostname=); so is a container's /usr/sbin/policy-rc.d, which
#     forbids maintainer scripts to start or stop services (a board has none);
#   - /var/lib gets an overlay with a tmpfs upper, early in the boot, and systemd-tmpfiles
#     is kept from emptying /tmp (below).
# vng's own getty drop-in, which would run virtme-ng-init on the serial console, is masked
# with serial-getty@ttyS0: the lab's unit owns the console.
set -u
[ $# -eq 4 ] || { echo "usage: systemd-boot.sh KERNEL ENVFILE RESULTS_DIR LOG" >&2; exit 2; }
kernel=$1 envfile=$2 results=$3 log=$4
LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
die() { echo "lab: systemd boot: $*" >&2; exit 3; }

# Mounts made here must not reach the host: refuse to run in the host's namespace.
[ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] \
    || die "run me inside a private mount namespace (run.sh does: unshare -m --propagation private)"
# The guest's /var/lib is an overlay (below): what the guest writes there stays in the guest.
for d in "$LAB_DIR" "$results"; do
    case $d/ in /var/lib/*) die "$d is under /var/lib, which the systemd boot's guest overlays: put the repository and the results elsewhere" ;; esac
done

# unit_word PATH: PATH as one word of a unit's ExecStart=: in double quotes, with "%" doubled
# (systemd reads %x as a specifier); a quote, backslash or line break is refused.
unit_word() {
    case $1 in *'"'*|*'\'*|*$'\n'*) die "a quote, backslash or line break in the path $1 cannot go into a unit file" ;; esac
    printf '"%s"' "${1//%/%%}"
}

top=$(mktemp -d "${TMPDIR:-/tmp}/peerlink-sdroot.XXXXXX") || die "mktemp failed"
trap 'umount -l "$top/root" 2>/dev/null; umount -l "$top" 2>/dev/null; rmdir "$top" 2>/dev/null' EXIT
mount -t tmpfs -o mode=0755 peerlink-sdroot "$top" || die "cannot mount a tmpfs on $top"
mkdir -p "$top/upper" "$top/work" "$top/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$top/upper,workdir=$top/work" "$top/root" \
    || die "cannot mount an overlay of / on $top/root (overlayfs missing?)"
R=$top/root
rm -f "$R/.dockerenv" "$R/run/.containerenv"
rm -f "$R/usr/sbin/policy-rc.d"
mkdir -p "$R$results" && mount --bind "$results" "$R$results" || die "cannot bind-mount $results into the guest's root"

units=$R/etc/systemd/system
guest_word=$(unit_word "$LAB_DIR/guest.sh") && env_word=$(unit_word "$envfile") || exit 3
mkdir -p "$units/multi-user.target.wants"
cat >"$units/peerlink-lab.service" <<UNIT
[Unit]
Description=PeerLink lab: the scenarios (Tests/Lab/guest.sh), then power off
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/bin/bash $guest_word $env_word
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
UNIT
ln -sf ../peerlink-lab.service "$units/multi-user.target.wants/peerlink-lab.service"
# vng mounts the root over 9p with access=any: whoever creates a file there, it is root's.
# A daemon running as its own user (peerlinkd as peerlink, in its StateDirectory) would find
# its own new files and directories root's and closed to it, so /var/lib gets an overlay
# with a tmpfs upper before anything uses it (virtme-ng's init does the same for /var in the
# ordinary boot). Only /var/lib: the repository and the results may be anywhere else (a
# clone under /tmp, say), and must stay the host's.
mkdir -p "$units/local-fs.target.wants"
cat >"$units/peerlink-lab-var.service" <<'UNIT'
[Unit]
Description=PeerLink lab: /var/lib on an overlay with a tmpfs upper (owners stick)
DefaultDependencies=no
After=systemd-remount-fs.service
Before=local-fs.target var-lib-machines.mount systemd-journal-flush.service systemd-tmpfiles-setup.service systemd-random-seed.service
ConditionPathIsMountPoint=!/var/lib

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/mkdir -p /run/lab-var-lib/upper /run/lab-var-lib/work
ExecStart=/bin/mount -t overlay lab-var-lib -o lowerdir=/var/lib,upperdir=/run/lab-var-lib/upper,workdir=/run/lab-var-lib/work /var/lib
UNIT
ln -sf ../peerlink-lab-var.service "$units/local-fs.target.wants/peerlink-lab-var.service"
# systemd-tmpfiles empties /tmp at boot (tmp.conf: "D /tmp"). Through the overlay that hides
# a repository cloned under /tmp (whiteouts) and, worse, empties the results directory bound
# into it for real: the guest must never clean the host's /tmp. An empty tmp.conf in /etc
# overrides Debian's; the daily clean-up timer is masked below.
mkdir -p "$R/etc/tmpfiles.d"
: >"$R/etc/tmpfiles.d/tmp.conf"
for u in systemd-tmpfiles-clean.timer postgresql.service postgresql@.service apt-daily.service apt-daily-upgrade.service \
         apt-daily.timer apt-daily-upgrade.timer man-db.timer man-db.service dpkg-db-backup.timer \
         e2scrub_all.timer e2scrub_reap.service fstrim.timer getty@tty1.service; do
    ln -sf /dev/null "$units/$u"
done

# --disable-kvm, --force-9p: as run.sh's ordinary boot.
vng --run "$kernel" --root "$R" --rw --systemd --disable-kvm --force-9p \
    --cpus "${LAB_CPUS:-2}" --memory "${LAB_MEMORY:-2G}" --user root \
    --append systemd.mask=serial-getty@ttyS0.service \
    </dev/null 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
