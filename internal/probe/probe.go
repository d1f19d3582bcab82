// Package probe finds out which host features tine can use. It tries each
// feature where a try is cheap and leaves nothing behind — creating a
// namespace, mounting an overlay in a throwaway mount namespace, asking the
// kernel for its Landlock ABI, running `criu check` — rather than reading
// configuration, which can claim what the kernel refuses.
//
// `tine doctor` prints these checks, the daemon serves them, and the test
// gates in internal/require skip on them, so what the product reports and
// what the tests skip never disagree.
package probe

import (
	"sync"
)

// Check is the outcome of one probe.
type Check struct {
	// Name is a stable id: "root", "userns", "ns.pid", "overlayfs", ...
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail is what was observed, e.g. "Landlock ABI 7".
	Detail string `json:"detail"`
	// Affects says, in user terms, what does not work without the feature.
	Affects string `json:"affects,omitempty"`
	// Fix is a command or setting that provides the feature; set only when
	// the check failed.
	Fix string `json:"fix,omitempty"`
	// Value is a numeric level where the feature has one (Landlock ABI).
	Value int `json:"value,omitempty"`
	// Version is the version of the tool found (criu, bwrap).
	Version string `json:"version,omitempty"`
}

// probe is one entry of the registry; its result is computed once per
// process, since test gates ask for the same checks over and over.
type probe struct {
	name    string
	affects string
	run     func() Check
	once    sync.Once
	result  Check
}

func (p *probe) get() Check {
	p.once.Do(func() {
		c := p.run()
		c.Name = p.name
		c.Affects = p.affects
		if c.OK {
			c.Fix = ""
		}
		p.result = c
	})
	return p.result
}

var byName = func() map[string]*probe {
	m := make(map[string]*probe, len(registry))
	for _, p := range registry {
		m[p.name] = p
	}
	return m
}()

// Get runs the named check (once per process) and returns its result. An
// unknown name yields a failed Check saying so; Known tells them apart.
func Get(name string) Check {
	p, ok := byName[name]
	if !ok {
		return Check{Name: name, Detail: "no such check"}
	}
	return p.get()
}

// Known reports whether name is a check of this package.
func Known(name string) bool {
	_, ok := byName[name]
	return ok
}

// Names lists every check in the order All returns them.
func Names() []string {
	names := make([]string, len(registry))
	for i, p := range registry {
		names[i] = p.name
	}
	return names
}

// All runs every check and returns them in a stable order. The checks run
// concurrently: most are a fork and an exec, and `criu check` dominates.
func All() []Check {
	checks := make([]Check, len(registry))
	var wg sync.WaitGroup
	for i, p := range registry {
		wg.Go(func() { checks[i] = p.get() })
	}
	wg.Wait()
	return checks
}

// Blockers lists what stops `tine run` on this host, empty when it can run:
// it needs root or unprivileged user namespaces, every namespace kind,
// overlayfs and seccomp.
func Blockers() []string {
	var missing []string
	if !Get("root").OK && !Get("userns").OK {
		missing = append(missing, "root or userns")
	}
	for _, name := range []string{"ns.pid", "ns.mount", "ns.ipc", "ns.uts", "ns.net", "ns.cgroup", "overlayfs", "seccomp"} {
		if !Get(name).OK {
			missing = append(missing, name)
		}
	}
	return missing
}
