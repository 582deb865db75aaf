# PeerLink: the two commands are `make demo` and `make check` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := build

# The Swift toolchain lives in /opt/swift on these machines; use it if PATH lacks it.
export PATH := $(PATH):/opt/swift/usr/bin
SWIFT ?= swift
PREFIX ?= /usr/local
DESTDIR ?=
BIN := $(shell $(SWIFT) build --show-bin-path 2>/dev/null || echo .build/debug)

.PHONY: build release deb deps deps-lab deps-deb unit lab check demo bench soak man fuzz install uninstall clean help

help:
	@echo "make check    all tests: unit tests on the host, then the virtual Bluetooth lab"
	@echo "make demo     the whole system in the virtual lab (two daemons, two controllers)"
	@echo "make unit     unit tests only (no VM)"
	@echo "make lab      lab tests only (boots the VM; LAB=scenario-name to run one)"
	@echo "make bench    benchmarks in the lab (release build): ours against the baselines, as ratios"
	@echo "make build    debug build;  make release: optimised build"
	@echo "make soak     two daemons under a steady mix in the lab, SOAK_MINUTES=30, restarts of bluetoothd and avahi-daemon"
	@echo "make fuzz     libFuzzer on every decoder of outside input (FUZZ_SECONDS=120 each, FUZZ_TARGETS=...)"
	@echo "make man      regenerate docs/man/* and docs/completions/* from the command and config tables"
	@echo "make deb      .build/package/peerlink_<version>_<arch>.deb (static Swift runtime), checked by lintian"
	@echo "make install  install binaries, man pages, completions, systemd unit, example config (as root)"

# Installs (as root) or names (otherwise) what the build and the lab need.
deps:
	@scripts/install-deps.sh
deps-lab:
	@scripts/install-deps.sh --lab
deps-deb:
	@scripts/install-deps.sh --deb

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

# The Debian package: docs/packaging.md.
deb: deps-deb
	SWIFT=$(SWIFT) scripts/make-deb.sh

unit: deps
	$(SWIFT) build --build-tests
	SWIFT=$(SWIFT) scripts/unit-tests.sh

# The lab installs the package too (scenario 80-package): it is built first. The scenarios run
# the package's binary (release, static: scripts/make-deb.sh --build-only gives its directory,
# with peerlink beside peerlinkd as the package has it): what a board runs, and under the
# emulator about a quarter faster than the debug build (68-peer-transfer 191 -> 133 s).
LAB_BIN = bin=$$(SWIFT=$(SWIFT) scripts/make-deb.sh --build-only) || exit 1
lab: deps-lab deps-deb
	SWIFT=$(SWIFT) scripts/make-deb.sh
	@$(LAB_BIN); echo "PEERLINK_BIN=$$bin Tests/Lab/run.sh $(LAB)"; PEERLINK_BIN=$$bin Tests/Lab/run.sh $(LAB)

# Unit tests (scripts/unit-tests.sh: a hang fails with the tests that never ended), the
# package (built and checked by lintian), `make install` into a scratch DESTDIR, then the
# lab; the lab's summary
# ("N passed, N failed") is the last line.
check: deps-lab deps-deb
	$(SWIFT) build --build-tests
	SWIFT=$(SWIFT) scripts/unit-tests.sh
	SWIFT=$(SWIFT) scripts/make-deb.sh
	SWIFT=$(SWIFT) scripts/check-install.sh
	@$(LAB_BIN); echo "PEERLINK_BIN=$$bin Tests/Lab/run.sh"; PEERLINK_BIN=$$bin Tests/Lab/run.sh

demo: deps-lab build
	PEERLINK_BIN=$(BIN) Tests/Lab/run.sh --demo

# Release binaries, one lab boot for every Tests/Lab/bench/*.sh, then the results side by side.
# Exit status: the lab's (a benchmark fails only when it could not measure something).
# The CLI figures use the package's static binary (scripts/make-deb.sh --build-only), on the
# host (scripts/cli-bench-host.sh) and in the guest (Tests/Lab/bench/80-cli.sh); so does the
# transfer on the host's loopback (scripts/transfer-bench-host.sh; in the guest:
# Tests/Lab/bench/61-peer-transfer.sh) and the peer messages (scripts/peer-bench-host.sh; in
# the guest: Tests/Lab/bench/60-peer-throughput.sh).
bench: deps-lab deps-deb
	$(SWIFT) build -c release
	@results=.build/lab/bench-$$(date +%Y%m%d-%H%M%S); \
	static=$$(SWIFT=$(SWIFT) scripts/make-deb.sh --build-only) || exit 1; \
	scripts/cli-bench-host.sh $$static $$results/scenarios/host-cli/output.log || exit 1; \
	scripts/transfer-bench-host.sh $$static $$results/scenarios/host-transfer/output.log || exit 1; \
	scripts/peer-bench-host.sh $$static $$results/scenarios/host-peer/output.log || exit 1; \
	LAB_TIMEOUT=$${LAB_TIMEOUT:-3600} LAB_MEMORY=$${LAB_MEMORY:-4G} PEERLINK_BIN=$$($(SWIFT) build -c release --show-bin-path) \
	  PEERLINK_STATIC_BIN=$$static LAB_RESULTS_DIR=$$results \
	  Tests/Lab/run.sh Tests/Lab/bench/[0-9]*.sh; rc=$$?; \
	/usr/bin/python3 Tests/Lab/bench/summary.py $$results || rc=1; exit $$rc

# Two daemons under a steady mix for SOAK_MINUTES (default 30) in one lab boot, bluetoothd and
# avahi-daemon restarted every SOAK_RESTART_SECONDS (240); Tests/Lab/soak/soak-report.py
# judges the samples and the accounting (README, Reliability). Debug build, as make check's lab.
SOAK_MINUTES ?= 30
soak: deps-lab build
	@[[ "$(SOAK_MINUTES)" =~ ^[0-9]+$$ ]] || { echo "make soak: SOAK_MINUTES=$(SOAK_MINUTES) is not a whole number of minutes" >&2; exit 2; }
	SOAK_MINUTES=$(SOAK_MINUTES) LAB_SCENARIO_TIMEOUT=$$(( $(SOAK_MINUTES) * 60 + 900 )) \
	  LAB_TIMEOUT=$$(( $(SOAK_MINUTES) * 60 + 1800 )) LAB_RESULTS_DIR=.build/lab/soak-$$(date +%Y%m%d-%H%M%S) \
	  PEERLINK_BIN=$(BIN) Tests/Lab/run.sh Tests/Lab/soak/10-soak.sh

# Every fuzz target for FUZZ_SECONDS (default 120) each, or those in FUZZ_TARGETS; prints
# executions, exec/s, coverage and crashes per target, and fails naming any that crashed.
# The corpora are replayed (no fuzzing) by the unit tests, so by make check. docs/fuzzing.md.
fuzz: deps
	SWIFT=$(SWIFT) scripts/fuzz.sh

# Man pages and shell completions, generated from the tables the binaries use (the CLI's
# command table, peerlinkd's options, the configuration keys). They are committed;
# DocGenTests fails, naming this target, when a table changed and they were not regenerated.
man:
	$(SWIFT) build --product peerlink-docgen
	$$($(SWIFT) build --show-bin-path)/peerlink-docgen .

MANDIR := $(PREFIX)/share/man
BASHCOMPDIR := $(PREFIX)/share/bash-completion/completions
# Where Debian's zsh looks: vendor-completions for the system's own prefix (the package),
# site-functions for /usr/local and others (already in zsh's default fpath there).
ZSHCOMPDIR := $(if $(filter /usr,$(PREFIX)),$(PREFIX)/share/zsh/vendor-completions,$(PREFIX)/share/zsh/site-functions)

# The package's binary (the Swift runtime linked in, stripped), `peerlink` a link to it.
# scripts/check-install.sh (run by make check) installs into a DESTDIR and uninstalls.
install: deps-deb
	@bin=$$(SWIFT=$(SWIFT) scripts/make-deb.sh --build-only) || exit 1; \
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)/etc/systemd/system $(DESTDIR)/etc/peerlink && \
	install -m 0755 $$bin/peerlinkd $(DESTDIR)$(PREFIX)/bin/peerlinkd && \
	strip --remove-section=.comment --remove-section=.note $(DESTDIR)$(PREFIX)/bin/peerlinkd && \
	ln -sf peerlinkd $(DESTDIR)$(PREFIX)/bin/peerlink
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	install -m 0644 docs/man/peerlink.1 $(DESTDIR)$(MANDIR)/man1/peerlink.1
	install -m 0644 docs/man/peerlink.conf.5 $(DESTDIR)$(MANDIR)/man5/peerlink.conf.5
	install -m 0644 docs/man/peerlinkd.8 $(DESTDIR)$(MANDIR)/man8/peerlinkd.8
	install -m 0644 docs/completions/peerlink.bash $(DESTDIR)$(BASHCOMPDIR)/peerlink
	install -m 0644 docs/completions/_peerlink $(DESTDIR)$(ZSHCOMPDIR)/_peerlink
	sed 's|/usr/local/bin|$(PREFIX)/bin|g' systemd/peerlinkd.service > $(DESTDIR)/etc/systemd/system/peerlinkd.service
	rm -f $(DESTDIR)/etc/udev/rules.d/70-peerlink.rules  # an earlier version's (it started the daemon even when disabled)
	[ -e $(DESTDIR)/etc/peerlink/peerlink.conf ] || install -m 0644 examples/peerlink.conf $(DESTDIR)/etc/peerlink/peerlink.conf
	@if [ -z "$(DESTDIR)" ]; then \
	  getent group peerlink >/dev/null || groupadd --system peerlink; \
	  getent passwd peerlink >/dev/null || useradd --system --gid peerlink --no-create-home --home-dir /var/lib/peerlink --shell /usr/sbin/nologin peerlink; \
	  getent group bluetooth >/dev/null && usermod -a -G bluetooth peerlink || true; \
	  systemctl daemon-reload 2>/dev/null || true; \
	  echo "Installed. Start it with: systemctl enable --now peerlinkd"; \
	  echo "Let a user run 'peerlink': usermod -a -G peerlink USER (and set socket_group = peerlink in /etc/peerlink/peerlink.conf)"; \
	fi

uninstall:
	-[ -n "$(DESTDIR)" ] || systemctl disable --now peerlinkd 2>/dev/null
	rm -f $(DESTDIR)$(PREFIX)/bin/peerlinkd $(DESTDIR)$(PREFIX)/bin/peerlink
	rm -f $(DESTDIR)$(MANDIR)/man1/peerlink.1 $(DESTDIR)$(MANDIR)/man5/peerlink.conf.5 $(DESTDIR)$(MANDIR)/man8/peerlinkd.8
	rm -f $(DESTDIR)$(BASHCOMPDIR)/peerlink $(DESTDIR)$(ZSHCOMPDIR)/_peerlink
	rm -f $(DESTDIR)/etc/systemd/system/peerlinkd.service $(DESTDIR)/etc/udev/rules.d/70-peerlink.rules
	@echo "Left in place: /etc/peerlink, /var/lib/peerlink and the peerlink user."

clean:
	rm -rf .build
