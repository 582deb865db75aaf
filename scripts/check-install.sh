#!/usr/bin/env bash
# `make install` and `make uninstall` into a scratch DESTDIR, checked file by file (run by
# make check, after scripts/make-deb.sh has built the static binary, so the install's build
# is a no-op):
#   - every file lands under PREFIX or /etc with its mode; `peerlink` is a link to
#     `peerlinkd`, and both names run (`--version`, `--help`) from the installed tree;
#   - the unit's ExecStart names the installed binary, not the source tree's default;
#   - the man pages and completions are the repository's;
#   - a second install keeps an edited configuration (it is the owner's);
#   - uninstall removes everything it installed except /etc/peerlink/peerlink.conf, which it
#     says it leaves.
# Usage: scripts/check-install.sh   (from the repository; SWIFT=swift)
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/peerlink-install.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
D=$SCRATCH/root
PREFIX=/opt/peerlink-test
fail() { echo "check-install: FAIL: $*" >&2; exit 1; }
step() { echo "check-install: $*"; }

step "make install DESTDIR=$D PREFIX=$PREFIX"
make --no-print-directory install DESTDIR="$D" PREFIX="$PREFIX" SWIFT="${SWIFT:-swift}" >"$SCRATCH/install.log" 2>&1 \
    || { cat "$SCRATCH/install.log" >&2; fail "make install exited non-zero"; }

want=(
    "$PREFIX/bin/peerlinkd:755"
    "$PREFIX/share/man/man1/peerlink.1:644"
    "$PREFIX/share/man/man5/peerlink.conf.5:644"
    "$PREFIX/share/man/man8/peerlinkd.8:644"
    "$PREFIX/share/bash-completion/completions/peerlink:644"
    "$PREFIX/share/zsh/site-functions/_peerlink:644"
    "/etc/systemd/system/peerlinkd.service:644"
    "/etc/peerlink/peerlink.conf:644"
)
for w in "${want[@]}"; do
    f=${w%:*} mode=${w##*:}
    [ -f "$D$f" ] || fail "$f was not installed"
    [ "$(stat -c %a "$D$f")" = "$mode" ] || fail "$f has mode $(stat -c %a "$D$f"), not $mode"
done
got=$(cd "$D" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort)
expected=$( (printf '%s\n' "${want[@]%:*}"; echo "$PREFIX/bin/peerlink") | sort)
[ "$got" = "$expected" ] || fail "installed files differ from the list: $(diff <(echo "$expected") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
[ "$(readlink "$D$PREFIX/bin/peerlink")" = peerlinkd ] || fail "$PREFIX/bin/peerlink is not a link to peerlinkd"
step "installed: $(echo "$got" | wc -l) files; peerlinkd $(du -k "$D$PREFIX/bin/peerlinkd" | cut -f1) KiB"

# Both names run from the installed tree (the multi-call binary picks its part by its name).
v=$("$D$PREFIX/bin/peerlinkd" --version) || fail "peerlinkd --version failed"
[[ $v == peerlinkd\ * ]] || fail "peerlinkd --version printed '$v'"
"$D$PREFIX/bin/peerlink" --help | grep -q '^USAGE: peerlink' || fail "peerlink --help (through the link) is not the CLI's"
# The unit runs the installed binary.
exec_start=$(sed -n 's/^ExecStart=//p' "$D/etc/systemd/system/peerlinkd.service")
[[ $exec_start == "$PREFIX/bin/peerlinkd"* ]] || fail "the unit's ExecStart is '$exec_start', not $PREFIX/bin/peerlinkd"
for pair in docs/man/peerlink.1:share/man/man1/peerlink.1 docs/completions/_peerlink:share/zsh/site-functions/_peerlink; do
    cmp -s "${pair%%:*}" "$D$PREFIX/${pair##*:}" || fail "$PREFIX/${pair##*:} is not ${pair%%:*}"
done

step "a second install keeps the owner's configuration"
echo "# edited by the owner" >>"$D/etc/peerlink/peerlink.conf"
make --no-print-directory install DESTDIR="$D" PREFIX="$PREFIX" SWIFT="${SWIFT:-swift}" >"$SCRATCH/install2.log" 2>&1 \
    || { cat "$SCRATCH/install2.log" >&2; fail "the second make install exited non-zero"; }
grep -q "edited by the owner" "$D/etc/peerlink/peerlink.conf" || fail "the second install replaced an edited /etc/peerlink/peerlink.conf"

step "make uninstall DESTDIR=$D PREFIX=$PREFIX"
out=$(make --no-print-directory uninstall DESTDIR="$D" PREFIX="$PREFIX" 2>&1) || fail "make uninstall exited non-zero: $out"
grep -q "Left in place: /etc/peerlink" <<<"$out" || fail "make uninstall does not say what it leaves: $out"
left=$(cd "$D" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort)
[ "$left" = /etc/peerlink/peerlink.conf ] || fail "make uninstall left: $(echo "$left" | tr '\n' ' ')"
step "ok"
