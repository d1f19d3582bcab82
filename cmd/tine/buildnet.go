package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"

	"github.com/tine-run/tine/internal/network"
)

// buildNetworks is how many egress networks of its own tine run can make
// for dependency builds from an index at once (one per process building),
// each named tinebN with the pool 10.202.(248+N).0/29: apart from a
// daemon's (tine, 10.201.0.0/16 by default), whose network is its own.
const buildNetworks = 8

// lazyBuildNet is tine run's egress for dependency builds from an index:
// its network is made at the build's first attach (a cached environment
// needs none), and removed by Close.
type lazyBuildNet struct{ m *network.Manager }

func (b *lazyBuildNet) Attach(p network.Policy, inject []network.Injection) (*network.Attachment, error) {
	if b.m == nil {
		m, err := buildNetwork()
		if err != nil {
			return nil, err
		}
		b.m = m
	}
	return b.m.Attach(p, inject)
}

func (b *lazyBuildNet) Close() {
	if b.m != nil {
		b.m.Close()
	}
}

// buildNetwork gives this process an egress network for a dependency
// build from a package index: the first of the build networks no live
// process holds (what a dead holder left is removed). Close it after the
// build; nothing is made on the host until the build needs it.
func buildNetwork() (*network.Manager, error) {
	for i := range buildNetworks {
		pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 202, byte(248 + i), 0}), 29)
		m, err := network.NewManager(network.Config{Name: fmt.Sprintf("tineb%d", i), Pool: pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, err
		}
		if _, err := m.Reap(); errors.Is(err, network.ErrInUse) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("--index-url: egress network for the build: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("--index-url: all %d build networks are in use by other tine processes: try again when a build ends", buildNetworks)
}
