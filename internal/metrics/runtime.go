package metrics

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// NewGoCollector returns the Go runtime's figures an operator watches,
// under client_golang's names: go_goroutines, go_threads, go_info,
// go_sched_gomaxprocs_threads and the go_memstats_* gauges and counters of
// the heap and of the last GC. It reads runtime.ReadMemStats at scrape
// time (a brief stop-the-world), not runtime/metrics, whose package init
// every process start would pay.
func NewGoCollector() Collector { return goCollector{} }

type goCollector struct{}

func (goCollector) Collect(emit func(Family)) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	threads, _ := runtime.ThreadCreateProfile(nil)

	emit(value("go_goroutines", "Number of goroutines that currently exist.", GaugeType, float64(runtime.NumGoroutine())))
	emit(value("go_threads", "Number of OS threads created.", GaugeType, float64(threads)))
	emit(Family{Name: "go_info", Help: "Information about the Go environment.", Type: GaugeType,
		Labels: []string{"version"}, Series: []Series{{Values: []string{runtime.Version()}, Value: 1}}})
	emit(value("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously.", GaugeType, float64(runtime.GOMAXPROCS(0))))

	mem := func(name, help string, typ Type, v uint64) {
		emit(value("go_memstats_"+name, help, typ, float64(v)))
	}
	mem("alloc_bytes", "Number of bytes allocated in heap and currently in use.", GaugeType, ms.Alloc)
	mem("alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already.", CounterType, ms.TotalAlloc)
	mem("sys_bytes", "Number of bytes obtained from system.", GaugeType, ms.Sys)
	mem("mallocs_total", "Total number of heap objects allocated, both live and gc-ed.", CounterType, ms.Mallocs)
	mem("frees_total", "Total number of heap objects frees.", CounterType, ms.Frees)
	mem("heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes.", GaugeType, ms.HeapAlloc)
	mem("heap_sys_bytes", "Number of heap bytes obtained from system.", GaugeType, ms.HeapSys)
	mem("heap_idle_bytes", "Number of heap bytes waiting to be used.", GaugeType, ms.HeapIdle)
	mem("heap_inuse_bytes", "Number of heap bytes that are in use.", GaugeType, ms.HeapInuse)
	mem("heap_released_bytes", "Number of heap bytes released to OS.", GaugeType, ms.HeapReleased)
	mem("heap_objects", "Number of currently allocated objects.", GaugeType, ms.HeapObjects)
	mem("stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments.", GaugeType, ms.StackInuse)
	mem("stack_sys_bytes", "Number of bytes obtained from system for stack allocator.", GaugeType, ms.StackSys)
	mem("next_gc_bytes", "Number of heap bytes when next garbage collection will take place.", GaugeType, ms.NextGC)
	emit(value("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", GaugeType, float64(ms.LastGC)/1e9))
}

// NewProcessCollector returns the process's figures under
// client_golang's names, read from /proc at scrape time:
// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_start_time_seconds (from
// /proc/self/stat and /proc/stat), process_open_fds (/proc/self/fd),
// process_max_fds and process_virtual_memory_max_bytes (rlimits). A figure
// that cannot be read is left out of the scrape.
func NewProcessCollector() Collector { return &processCollector{} }

type processCollector struct {
	startOnce sync.Once
	start     float64 // 0 when unknown
}

// userHZ is the kernel's USER_HZ, the unit of /proc's clock ticks: 100 on
// every Linux architecture Go runs on (procfs assumes the same; reading
// sysconf(_SC_CLK_TCK) needs cgo).
const userHZ = 100

func (p *processCollector) Collect(emit func(Family)) {
	if st, ok := readSelfStat(); ok {
		emit(value("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", CounterType, float64(st.utime+st.stime)/userHZ))
		emit(value("process_resident_memory_bytes", "Resident memory size in bytes.", GaugeType, float64(st.rssPages)*float64(os.Getpagesize())))
		emit(value("process_virtual_memory_bytes", "Virtual memory size in bytes.", GaugeType, float64(st.vsize)))
		p.startOnce.Do(func() {
			if boot, ok := bootTime(); ok {
				p.start = boot + float64(st.starttime)/userHZ
			}
		})
		if p.start > 0 {
			emit(value("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", GaugeType, p.start))
		}
	}
	if n, ok := openFDs(); ok {
		emit(value("process_open_fds", "Number of open file descriptors.", GaugeType, float64(n)))
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		emit(value("process_max_fds", "Maximum number of open file descriptors.", GaugeType, float64(rl.Cur)))
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil {
		emit(value("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", GaugeType, float64(rl.Cur)))
	}
}

type selfStat struct {
	utime, stime, starttime, vsize, rssPages uint64
}

// readSelfStat parses /proc/self/stat (proc(5)); fields are counted after
// the command name, which is in parentheses and may hold spaces.
func readSelfStat() (selfStat, bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return selfStat{}, false
	}
	return parseStat(b)
}

func parseStat(b []byte) (selfStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return selfStat{}, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, state
	if len(f) < 22 {
		return selfStat{}, false
	}
	var st selfStat
	var ok = true
	num := func(field int) uint64 {
		n, err := strconv.ParseUint(string(f[field-3]), 10, 64)
		if err != nil {
			ok = false
		}
		return n
	}
	st.utime, st.stime = num(14), num(15)
	st.starttime, st.vsize = num(22), num(23)
	rss, err := strconv.ParseInt(string(f[24-3]), 10, 64)
	if err != nil || rss < 0 {
		rss = 0
	}
	st.rssPages = uint64(rss)
	return st, ok
}

// bootTime is the btime line of /proc/stat: the boot, in unix seconds.
func bootTime() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if rest, found := bytes.CutPrefix(line, []byte("btime ")); found {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			return float64(n), err == nil
		}
	}
	return 0, false
}

// openFDs counts /proc/self/fd, less the descriptor that reads it.
func openFDs() (int, bool) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	return len(names) - 1, true
}

// value is a family of one unlabelled series.
func value(name, help string, typ Type, v float64) Family {
	return Family{Name: name, Help: help, Type: typ, Series: []Series{{Value: v}}}
}
