package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/kernel/procstat"
	"github.com/tine-run/tine/internal/probe"
	"github.com/tine-run/tine/internal/testbin"
)

var (
	chaosRounds = flag.Int("chaos.rounds", 0, "rounds of TestChaos (default $TINE_CHAOS_ROUNDS, else 40)")
	chaosSeed   = flag.Uint64("chaos.seed", 0, "seed of TestChaos (default: from the clock; the test logs it)")
)

// TestChaos kills, with SIGKILL at a seeded random moment, the daemon, a
// `tine run`, a desktop's guest or a function's zygote while sandboxes are
// created, commands exec'd, files uploaded, functions called or desktops
// created; after each round nothing of what was killed remains — mounts,
// cgroups, processes, temporary files — and the daemon (restarted on the
// same --data-dir when it was the one killed) serves. Every check is
// scoped to what this test's daemons and runs made: other sandboxes may
// run on the host meanwhile.
func TestChaos(t *testing.T) {
	rounds := *chaosRounds
	if rounds == 0 {
		rounds, _ = strconv.Atoi(os.Getenv("TINE_CHAOS_ROUNDS"))
	}
	if rounds <= 0 {
		rounds = 40
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: seed %d, %d rounds (again: go test ./test/api -run TestChaos -args -chaos.seed=%d -chaos.rounds=%d)", seed, rounds, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed^0x7ea))

	c := &chaos{t: t, dir: t.TempDir(), mark: marker(), killed: map[string]int{}}
	c.tmp = filepath.Join(c.dir, "tmp")
	os.Mkdir(c.tmp, 0o755)
	c.handler = writeHandler(t, "import subprocess\ndef handler(n):\n    subprocess.run(['sleep', '0.02'])\n    return n\n")
	c.start()
	c.selfTest()
	haveX := haveBinaries("Xvfb", "openbox")

	ops := []string{"create", "exec", "upload", "invoke", "snapshot"}
	if haveX {
		ops = append(ops, "desktop")
	}
	if os.Getenv("TINE_CHAOS_OPS") != "" { // to aim the rounds at some
		ops = strings.Split(os.Getenv("TINE_CHAOS_OPS"), ",")
	} else if probe.Get("criu").OK {
		ops = append(ops, "memory")
		if haveX {
			ops = append(ops, "desktop memory")
		}
	}
	for i := range rounds {
		victim := []string{"daemon", "daemon", "run", "zygote", "guest"}[rng.IntN(5)]
		op := ops[rng.IntN(len(ops))]
		switch victim {
		case "zygote":
			op = "invoke"
		case "guest":
			if !haveX {
				victim = "daemon"
			} else {
				op = "desktop"
			}
		case "run":
			op = []string{"run in-process", "run handed off"}[rng.IntN(2)]
		}
		delay := time.Duration(rng.IntN(600)) * time.Millisecond
		t0 := time.Now()
		c.round(victim, op, delay)
		t.Logf("round %d: SIGKILL %s during %s after %v; checked in %v", i, victim, op, delay, time.Since(t0).Round(time.Millisecond))
		if t.Failed() {
			t.Fatalf("round %d (seed %d) left the above behind", i, seed)
		}
	}
	// The negative control: the rounds killed trees, not empty air.
	t.Logf("processes in the killed trees, by victim: %v", c.killed)
	for v, n := range c.killed {
		if n == 0 {
			t.Errorf("the rounds that killed a %s found nothing to kill", v)
		}
	}
}

// chaos is TestChaos's state: the current daemon and what it made.
type chaos struct {
	t       *testing.T
	dir     string // the daemon's socket and log; data in dir/data
	tmp     string // the daemon's TMPDIR
	mark    string // in the argv of every command the rounds start
	handler string
	d       *daemon
	// killed counts, per victim, the processes of the trees killed: the
	// proof that the rounds killed something.
	killed map[string]int
}

func (c *chaos) start() {
	// No pool: between rounds the daemon runs nothing at all, so any
	// process or cgroup of its left over is a leak. Its temporary files go
	// to a directory of the test's.
	os.Setenv("TMPDIR", c.tmp)
	defer os.Unsetenv("TMPDIR")
	c.d = startDaemonIn(c.t, c.dir, "--pool", "0")
}

// load runs op against the daemon until ctx ends; failures are the point.
func (c *chaos) load(ctx context.Context, op string, wg *sync.WaitGroup) {
	d := c.d
	arg := sleeperArg(c.mark)
	for w := range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				switch op {
				case "create":
					if sb, err := d.c.Create(ctx, &api.SandboxSpec{Limits: api.Limits{MemoryBytes: 64 << 20}}); err == nil {
						d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
						d.c.Delete(ctx, sb.ID)
					}
				case "exec", "upload":
					sb, err := d.c.Create(ctx, nil)
					if err != nil {
						continue
					}
					for k := 0; k < 20 && ctx.Err() == nil; k++ {
						if op == "exec" {
							// A background process that outlives its exec,
							// and one the timeout kills.
							d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "setsid sleep " + arg + " & echo x"}})
							d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep " + arg}, TimeoutMs: 50})
						} else {
							d.c.WriteFile(ctx, sb.ID, fmt.Sprintf("/tmp/up-%d-%d", w, k), bytes.NewReader(make([]byte, 4<<20)), nil)
							d.c.WriteArchive(ctx, sb.ID, "/tmp", bytes.NewReader(smallTar(k)))
						}
					}
					d.c.Delete(ctx, sb.ID)
				case "invoke":
					p, _ := json.Marshal(w)
					d.c.Invoke(ctx, "chaos", p)
				case "snapshot":
					// Snapshot and fork under way when the daemon dies.
					sb, err := d.c.Create(ctx, nil)
					if err != nil {
						continue
					}
					d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "head -c 4000000 /dev/urandom > /etc/chaos-state"}})
					if sn, err := d.c.Snapshot(ctx, sb.ID, nil); err == nil {
						if res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2}); err == nil {
							for _, r := range res.Sandboxes {
								d.c.Delete(ctx, r.ID)
							}
						}
						d.c.DeleteSnapshot(ctx, sn.ID)
					}
					d.c.Delete(ctx, sb.ID)
				case "memory":
					// A memory snapshot and fork under way when the daemon
					// dies: criu dumping into a draft, or restoring into a
					// replica. The sleeper must not come back anywhere.
					sb, err := d.c.Create(ctx, nil)
					if err != nil {
						continue
					}
					d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep " + arg + " </dev/null >/dev/null 2>&1 & echo x"}})
					if sn, err := d.c.Snapshot(ctx, sb.ID, &api.SnapshotRequest{Tier: api.TierMemory}); err == nil {
						if res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2}); err == nil {
							for _, r := range res.Sandboxes {
								d.c.Delete(ctx, r.ID)
							}
						}
						d.c.DeleteSnapshot(ctx, sn.ID)
					}
					d.c.Delete(ctx, sb.ID)
				case "desktop memory":
					// The same for a desktop: its guest, X server and window
					// manager dumped and restored.
					dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480, MemoryTier: true})
					if err != nil {
						continue
					}
					if sn, err := d.c.Snapshot(ctx, dt.ID, &api.SnapshotRequest{Tier: api.TierMemory}); err == nil {
						if res, err := d.c.Fork(ctx, sn.ID, &api.ForkRequest{Count: 2}); err == nil {
							for _, r := range res.Desktops {
								d.c.DeleteDesktop(ctx, r.ID)
							}
						}
						d.c.DeleteSnapshot(ctx, sn.ID)
					}
					d.c.DeleteDesktop(ctx, dt.ID)
				case "desktop":
					if dt, err := d.c.CreateDesktop(ctx, &api.DesktopSpec{Width: 640, Height: 480}); err == nil {
						d.c.DeleteDesktop(ctx, dt.ID)
					}
				}
			}
		})
	}
}

// round runs op, kills victim after delay, and checks what is left.
func (c *chaos) round(victim, op string, delay time.Duration) {
	t := c.t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if op == "invoke" {
		putFunction(t, c.d, api.FunctionSpec{Name: "chaos", Entry: c.handler})
	}
	var wg sync.WaitGroup
	if strings.HasPrefix(op, "run") {
		c.runRound(op, delay)
		c.cleanup()
		return
	}
	c.load(ctx, op, &wg)
	time.Sleep(delay)

	switch victim {
	case "daemon":
		old := c.d
		snap := descendants(old.pid())
		c.killed[victim] += 1 + len(snap)
		old.kill()
		cancel()
		wg.Wait()
		c.start()
		c.cleanup() // what the restarted daemon brought back: registered functions
		c.checkGone(snap, old.pid())
	case "zygote", "guest":
		// The first one there, or the next one to show up.
		var pid int
		testbin.Eventually(patience, func() bool {
			pid = c.find(victim)
			return pid > 0
		})
		if pid == 0 {
			t.Errorf("no %s showed up to kill", victim)
			cancel()
			wg.Wait()
			return
		}
		// Its sandbox: PID 1 (its parent) and everything below it.
		snap := descendants(ppidOf(pid))
		snap[ppidOf(pid)] = startTimeOf(ppidOf(pid))
		c.killed[victim] += len(snap)
		syscall.Kill(pid, syscall.SIGKILL)
		if victim == "zygote" {
			// The function comes back: a later call is served.
			time.Sleep(delay)
			cancel()
			wg.Wait()
			if !testbin.Eventually(patience, func() bool {
				_, err := c.d.c.Invoke(context.Background(), "chaos", json.RawMessage("3"))
				return err == nil
			}) {
				t.Errorf("the function never served again after its zygote was killed")
			}
		} else {
			time.Sleep(delay)
			cancel()
			wg.Wait()
		}
		c.cleanup()
		c.checkGone(snap, 0)
	}
	c.cleanup()
}

// runRound kills a `tine run`, in-process or handed to the daemon.
func (c *chaos) runRound(op string, delay time.Duration) {
	t := c.t
	args := []string{"run", "--socket", c.d.sock}
	if op == "run in-process" {
		args = append(args, "--in-process")
	}
	arg := sleeperArg(c.mark)
	cmd := exec.Command(tineBin, append(args, "--", "sh", "-c", "setsid sleep "+arg+" & sleep "+arg)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay)
	snap := descendants(cmd.Process.Pid)
	c.killed["run"] += 1 + len(snap)
	cmd.Process.Kill()
	cmd.Wait()
	if op == "run in-process" {
		// Its cgroup outlives it, empty, until the next tine reaps it.
		if out, err := exec.Command(tineBin, "run", "--in-process", "--", "true").CombinedOutput(); err != nil {
			t.Errorf("tine run after the killed one: %v\n%s", err, out)
		}
	}
	c.checkGone(snap, cmd.Process.Pid)
}

// find returns a victim of the current daemon's: a desktop's guest (the
// tine binary run as `guest`), or a function's zygote (the Python agent
// whose parent is not one too: requests and spares are its forks).
func (c *chaos) find(victim string) int {
	for pid := range descendants(c.d.pid()) {
		argv := cmdline(pid)
		switch victim {
		case "guest":
			if len(argv) > 1 && argv[1] == "guest" {
				return pid
			}
		case "zygote":
			const agent = "tine's Python zygote agent"
			if strings.Contains(strings.Join(argv, " "), agent) && !strings.Contains(strings.Join(cmdline(ppidOf(pid)), " "), agent) {
				return pid
			}
		}
	}
	return 0
}

func cmdline(pid int) []string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// cleanup destroys what the rounds made through the API, leaving the
// daemon with nothing. A create whose client went away still completes in
// the daemon, so it looks again until the daemon lists nothing.
func (c *chaos) cleanup() {
	ctx := context.Background()
	d := c.d
	testbin.Eventually(patience, func() bool {
		n := 0
		if l, err := d.c.List(ctx); err == nil {
			for _, sb := range l {
				d.c.Delete(ctx, sb.ID)
				n++
			}
		}
		if l, err := d.c.Desktops(ctx); err == nil {
			for _, dt := range l {
				d.c.DeleteDesktop(ctx, dt.ID)
				n++
			}
		}
		if l, err := d.c.Functions(ctx); err == nil {
			for _, f := range l {
				d.c.DeleteFunction(ctx, f.Spec.Name)
				n++
			}
		}
		if l, err := d.c.Snapshots(ctx); err == nil {
			for _, sn := range l {
				d.c.DeleteSnapshot(ctx, sn.ID)
				n++
			}
		}
		return n == 0
	})
}

// checkGone checks that nothing of what was killed remains (leftovers)
// and that the daemon serves.
func (c *chaos) checkGone(snap map[int]uint64, killed int) {
	t := c.t
	t.Helper()
	for _, p := range c.leftovers(snap, killed, patience) {
		t.Error(p)
	}
	ctx := context.Background()
	sb, err := c.d.c.Create(ctx, nil)
	if err != nil {
		t.Errorf("the daemon after the round: create: %v", err)
		return
	}
	if res, err := c.d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("the daemon after the round: exec: %v %+v", err, res)
	}
	c.d.c.Delete(ctx, sb.ID)
}

// leftovers lists what remains, waiting up to wait for each to go: the
// processes of snap, the rounds' commands, processes cloned from a killed
// daemon, cgroups named after killed or after the (idle) daemon, the
// daemon's processes, mounts in the host's table, temporary and
// half-written files.
func (c *chaos) leftovers(snap map[int]uint64, killed int, wait time.Duration) []string {
	var probs []string
	// Debris first, before cleanup asks the daemon for its snapshots (which
	// opens its catalog, and opening removes debris): a restarted daemon
	// opens it at start, so what a killed one left must be gone by now.
	stateDir := filepath.Join(c.dir, "state")
	debris := func() []string {
		var out []string
		for _, n := range dirNames(filepath.Join(stateDir, "snapshots")) {
			if strings.HasPrefix(n, ".") {
				out = append(out, "snapshots/"+n)
			}
		}
		for _, n := range dirNames(filepath.Join(stateDir, "store", "tmp")) {
			out = append(out, "store/tmp/"+n)
		}
		return out
	}
	if !testbin.Eventually(wait, func() bool { return len(debris()) == 0 }) {
		probs = append(probs, fmt.Sprintf("half-made snapshots remain in the state directory: %v", debris()))
	}
	if !testbin.Eventually(wait, func() bool { return len(alive(snap)) == 0 }) {
		probs = append(probs, "processes of the killed tree remain:"+describe(alive(snap)))
	}
	// Sandbox PID 1s and exec helpers are clones of a daemon, so they carry
	// its argv, which names this test's directory: any such process not
	// under the live daemon is left over from a killed one.
	stray := func() []int {
		live := descendants(c.d.pid())
		var out []int
		for _, pid := range hostProcs(c.dir) {
			if _, ok := live[pid]; !ok && pid != c.d.pid() {
				out = append(out, pid)
			}
		}
		return out
	}
	if !testbin.Eventually(wait, func() bool { return len(stray()) == 0 }) {
		probs = append(probs, "processes of a killed daemon remain:"+describe(stray()))
	}
	arg := sleeperArg(c.mark)
	if !testbin.Eventually(wait, func() bool { return len(hostProcs(arg)) == 0 }) {
		probs = append(probs, "commands of the round remain:"+describe(hostProcs(arg)))
	}
	// A create whose client went away completes in the daemon after the
	// round's cleanup looked: cleanup again while waiting.
	if !testbin.Eventually(wait, func() bool { c.cleanup(); return len(descendants(c.d.pid())) == 0 }) {
		probs = append(probs, "the idle daemon still has processes:"+describe(keys(descendants(c.d.pid()))))
	}
	for _, pid := range []int{killed, c.d.pid()} {
		if pid > 0 && !testbin.Eventually(wait, func() bool { c.cleanup(); return len(testbin.CgroupsOf(pid)) == 0 }) {
			probs = append(probs, fmt.Sprintf("cgroups of tine pid %d remain: %v", pid, testbin.CgroupsOf(pid)))
		}
	}
	if m := testbin.StageMounts(); len(m) > 0 {
		probs = append(probs, fmt.Sprintf("host mountinfo mentions %s:\n%s", stageDir, strings.Join(m, "\n")))
	}
	if left, _ := os.ReadDir(c.tmp); len(left) > 0 {
		probs = append(probs, fmt.Sprintf("temporary files of the daemons remain in their TMPDIR: %v", names(left)))
	}
	filepath.WalkDir(filepath.Join(c.dir, "data"), func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), ".") {
			probs = append(probs, "half-written file in the data dir: "+p)
		}
		return nil
	})
	// Snapshots: no draft or half deletion once the (restarted) daemon
	// opened its catalog, no layer once every snapshot is deleted, nothing
	// in the store's tmp/.
	state := filepath.Join(c.dir, "state")
	if !testbin.Eventually(wait, func() bool { c.cleanup(); return len(dirNames(filepath.Join(state, "snapshots"))) == 0 }) {
		probs = append(probs, fmt.Sprintf("snapshots remain after deleting every snapshot: %v", dirNames(filepath.Join(state, "snapshots"))))
	}
	if left := dirNames(filepath.Join(state, "store", "layers")); len(left) > 0 {
		probs = append(probs, fmt.Sprintf("the layer store holds %v with no snapshot left", left))
	}
	left, _ := os.ReadDir(c.dir)
	for _, e := range left {
		if n := e.Name(); n != "tine.sock" && n != "data" && n != "tmp" && n != "state" && !strings.HasPrefix(n, "serve-") {
			probs = append(probs, "unexpected file in the socket directory: "+n)
		}
	}
	return probs
}

// selfTest plants one leftover of each kind leftovers looks for and
// checks that each is reported: the checks can fail.
func (c *chaos) selfTest() {
	t := c.t
	plant := exec.Command("sh", "-c", "sleep "+sleeperArg(c.mark)+"; : "+c.dir)
	plant.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := plant.Start(); err != nil {
		t.Fatal(err)
	}
	defer plant.Wait()
	defer syscall.Kill(-plant.Process.Pid, syscall.SIGKILL)
	testbin.Eventually(patience, func() bool { return len(hostProcs(sleeperArg(c.mark))) > 0 })
	for _, f := range []string{filepath.Join(c.tmp, "planted"), filepath.Join(c.dir, "data", ".planted"), filepath.Join(c.dir, "planted"),
		filepath.Join(c.dir, "state", "snapshots", ".draft-planted"), filepath.Join(c.dir, "state", "store", "tmp", "planted")} {
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, nil, 0o644)
		defer os.Remove(f)
	}
	snap := descendants(plant.Process.Pid)
	snap[plant.Process.Pid] = startTimeOf(plant.Process.Pid)
	probs := strings.Join(c.leftovers(snap, 0, 0), "\n")
	for _, want := range []string{"killed tree", "killed daemon", "commands of the round", "TMPDIR", "half-written", "socket directory", "half-made snapshots"} {
		if !strings.Contains(probs, want) {
			t.Errorf("a planted leftover (%s) was not reported; the report:\n%s", want, probs)
		}
	}
}

// descendants maps every process below root to its start time.
func descendants(root int) map[int]uint64 {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppidOf(pid); pp > 0 {
			children[pp] = append(children[pp], pid)
		}
	}
	out := map[int]uint64{}
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, ch := range children[p] {
			out[ch] = startTimeOf(ch)
			queue = append(queue, ch)
		}
	}
	return out
}

func ppidOf(pid int) int {
	f := procstat.Fields(pid)
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

func startTimeOf(pid int) uint64 {
	f := procstat.Fields(pid)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// alive returns the processes of snap that still run (same pid, same start
// time; a zombie counts as gone).
func alive(snap map[int]uint64) []int {
	var out []int
	for pid, start := range snap {
		f := procstat.Fields(pid)
		if len(f) >= 20 && f[0] != "Z" && startTimeOf(pid) == start {
			out = append(out, pid)
		}
	}
	return out
}

func keys(m map[int]uint64) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dirNames lists dir's entries ("" when it does not exist).
func dirNames(dir string) []string {
	es, _ := os.ReadDir(dir)
	return names(es)
}

func names(es []os.DirEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func haveBinaries(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return false
		}
	}
	return true
}

// smallTar is a tar of one small file.
func smallTar(k int) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	body := []byte(strings.Repeat("chaos", 100))
	tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("ar-%d", k), Mode: 0o644, Size: int64(len(body))})
	tw.Write(body)
	tw.Close()
	return b.Bytes()
}
