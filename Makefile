# tine: two entry points for a fresh Debian/Ubuntu machine, as root.
#   make demo  installs what is missing, builds tine, and runs a command in a
#              sandbox on the embedded default (the host's root, read-only).
#   make test  installs what the tests need and runs the whole suite (Go, a
#              short fuzz of every fuzz target, then the Python SDK's tests
#              against a real daemon).
#   make fuzz  fuzzes every target for FUZZTIME each (default 5m); see
#              docs/fuzzing.md.

GO      ?= $(shell command -v go || echo /usr/local/go/bin/go)
PYTHON  ?= /usr/bin/python3
BIN     := bin/tine
APT_PKGS := bubblewrap util-linux iproute2 nftables curl python3 ca-certificates nodejs xvfb openbox xterm x11-utils gcc libc6-dev libjpeg62-turbo-dev e2fsprogs containerd runc busybox-static python3-matplotlib ffmpeg wmctrl xdotool socat xclip python3-xlib python3-pyatspi dbus at-spi2-core python3-gi gir1.2-gtk-3.0 chromium python3-pil dbus-x11 scrot x11-xserver-utils x11vnc novnc
# Installed without their recommended packages: gnome-terminal's (nautilus,
# yelp, gvfs) are 145 packages and 235 MiB on Debian 12; an OSWorld
# desktop needs the terminal and sudo only (docs/osworld.md); the E2B desktop
# template, XFCE's session, window manager and desktop (docs/e2b.md).
APT_PKGS_LEAN := sudo gnome-terminal xfce4-session xfwm4 xfdesktop4

.PHONY: build demo test deps criu containerd2 clean bench fuzz fuzz-ci

# Static binaries. bin/tine is the small front (cmd/tine-run): it runs `tine
# run` itself, whose start is on every one-shot sandbox's path and costs a
# fraction of the full program's, and execs bin/tine-full (cmd/tine, every
# command) for everything else (ADR 0023); bin/tine-run is the same file,
# `tine run` alone. bin/tine-runc is tine's OCI runtime (runc's command
# line; docs/kubernetes.md). All are pure Go (CGO_ENABLED=0): no dynamic
# loader and no cgo runtime at every start (each costs ~0.6 ms of a tine
# run here). bin/tine-guest is the full program with libjpeg-turbo linked
# in (cgo, static libc too; needs gcc and libjpeg62-turbo-dev): desktops
# run it as their guest, found next to bin/tine-full, for JPEG screenshots five
# times faster. GUEST_TAGS= skips it (desktops then run bin/tine-full, image/jpeg).
TAGS       ?=
GUEST_TAGS ?= turbojpeg
GUEST_BIN  := $(BIN)-guest

build:
	CGO_ENABLED=0 $(GO) build -tags "$(TAGS)" -o $(BIN)-full ./cmd/tine
	CGO_ENABLED=0 $(GO) build -tags "$(TAGS)" -o $(BIN)-runc ./cmd/tine-runc
	CGO_ENABLED=0 $(GO) build -tags "$(TAGS)" -o $(BIN) ./cmd/tine-run
	ln -f $(BIN) $(BIN)-run
ifneq ($(findstring turbojpeg,$(GUEST_TAGS)),)
	@[ -e /usr/include/jpeglib.h ] && command -v gcc >/dev/null || { \
		echo "bin/tine-guest links libjpeg-turbo: it needs gcc and libjpeg62-turbo-dev (make deps installs them); GUEST_TAGS= skips it"; exit 1; }
	CGO_ENABLED=1 $(GO) build -tags "$(TAGS) $(GUEST_TAGS) netgo osusergo" -ldflags '-linkmode external -extldflags "-static"' -o $(GUEST_BIN) ./cmd/tine
else
	rm -f $(GUEST_BIN)
endif

deps:
	@$(GO) version >/dev/null 2>&1 || { echo "Go 1.26 is needed: put it on PATH or at /usr/local/go (https://go.dev/dl)"; exit 1; }
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	lean=""; for p in $(APT_PKGS_LEAN); do dpkg -s $$p >/dev/null 2>&1 || lean="$$lean $$p"; done; \
	if [ -n "$$missing$$lean" ]; then \
		echo "installing:$$missing$$lean"; \
		apt-get update -qq; \
		if [ -n "$$missing" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; fi; \
		if [ -n "$$lean" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$lean >/dev/null || exit 1; fi; \
	fi
	$(GO) mod download
	@# The E2B and MCP SDKs test/e2b drives, pinned by its package-lock.json
	@# (npm is Debian's own package; NodeSource's nodejs bundles it).
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm ci --prefix test/e2b --no-audit --no-fund --loglevel=error

# criu >= 4.1 for the memory snapshot tier: Debian 12's own 3.17 fails on
# kernels >= 6.13, so scripts/install-criu fetches Debian 13's into
# /opt/tine/criu (a no-op when a working criu is there or on PATH).
criu:
	./scripts/install-criu

# containerd >= 2.0 for the kubelet's checkpoint API through tine-runc
# (test/oci's TestCRICheckpoint): Debian 12's 1.6 answers it Unimplemented,
# so scripts/install-containerd2 unpacks Debian sid's into
# /opt/tine/containerd2 (a no-op when a 2.x is there; the system's
# containerd is left alone).
containerd2:
	./scripts/install-containerd2

demo: deps build
	./$(BIN) doctor
	./$(BIN) run --memory 256m --pids 128 --timeout 10s -- /bin/sh -c 'echo "hello from $$(hostname), pid $$$$"; id; touch /etc/written-inside && echo "wrote /etc/written-inside (the host never sees it)"'
	@test ! -e /etc/written-inside && echo "host /etc/written-inside: absent, as it should be"

# CGO_ENABLED=0: the tests build what make build ships (bin/tine is pure Go;
# a cgo build's PID 1 keeps its copy of tine, ADR 0014).
# -p 1: one test package at a time. The desktop packages drive real X
# servers with XTEST typing; next to another package's load, a lagging xterm
# can read a keystroke after its spare keycode was remapped (seen in CI).
test: deps criu containerd2 build
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -p 1 -count=1 -timeout 30m ./...
	CGO_ENABLED=1 $(GO) vet -tags turbojpeg ./internal/desktop/encode/
	CGO_ENABLED=1 $(GO) test -count=1 -tags turbojpeg ./internal/desktop/encode/
	$(MAKE) fuzz-ci
	$(PYTHON) -m unittest discover -s sdk/python/tests

# The chaos test alone, longer: SIGKILL of the daemon, tine run, desktop
# guests and zygotes at random moments, checking after each round that
# nothing is left behind. CHAOS_SEED=N replays a run (its log prints it).
CHAOS_ROUNDS ?= 400
CHAOS_SEED   ?= 0
.PHONY: chaos
chaos: deps build
	$(GO) test -count=1 -timeout 60m -v -run 'TestChaos$$' ./test/api/ -args -chaos.rounds=$(CHAOS_ROUNDS) -chaos.seed=$(CHAOS_SEED)

# Fuzzing (docs/fuzzing.md): every func FuzzX of a fuzz_test.go, one after
# the other (go test -fuzz takes one target at a time). Plain go test
# already replays each target's seeds and testdata/fuzz crashers; fuzz-ci
# adds a few seconds of new inputs per target, bounded for CI.
FUZZTIME    ?= 5m
FUZZTIME_CI ?= 3s

fuzz:
	GO=$(GO) test/fuzz.sh $(FUZZTIME)

fuzz-ci:
	GO=$(GO) test/fuzz.sh $(FUZZTIME_CI)

bench: build
	./$(BIN) bench cold

clean:
	rm -rf bin
