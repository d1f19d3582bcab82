package server

import (
	"net/http"

	"github.com/tine-run/tine/api"
	metric "github.com/tine-run/tine/internal/metrics"
)

// metrics are what GET /metrics serves, on a registry of the server's own.
type metrics struct {
	registry *metric.Registry
	serve    http.Handler
	latency  *metric.HistogramVec
	failures *metric.CounterVec
	execs    *metric.CounterVec
	expired  *metric.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: metric.NewRegistry(),
		latency: metric.NewHistogramVec("tine_http_request_duration_seconds",
			"Time to answer an API request, by route and status; an exec stream counts until it closes.",
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
			"route", "code"),
		failures: metric.NewCounterVec("tine_failures_total",
			"Failed API requests and exec streams, by error code (invalid_argument, capacity, internal, ...).",
			"reason"),
		execs: metric.NewCounterVec("tine_execs_total",
			"Commands exec'd into live sandboxes, by how they ended (exit, signal, oom, timeout, not-found, ...).",
			"reason"),
		expired: metric.NewCounterVec("tine_sandboxes_expired_total",
			"Sandboxes destroyed by the daemon, by why: ttl or idle.",
			"why"),
	}
	m.registry.MustRegister(m.latency, m.failures, m.execs, m.expired,
		// The sandboxes in each state at scrape time, and what they count
		// against the budget.
		metric.NewFunc("tine_sandboxes", "Sandboxes known to the daemon, by state.",
			metric.GaugeType, []string{"state"}, func(emit func(float64, ...string)) {
				counts := s.countStates()
				for _, st := range api.States {
					emit(float64(counts[st]), string(st))
				}
			}),
		metric.NewFunc("tine_budget_memory_bytes", "Memory the live sandboxes count against the budget (used), and the budget (max).",
			metric.GaugeType, []string{"kind"}, func(emit func(float64, ...string)) {
				_, used := s.capacity.used()
				emit(float64(used), "used")
				emit(float64(s.capacity.maxMemory), "max")
			}),
		metric.NewGoCollector(),
		metric.NewProcessCollector(),
	)
	m.serve = m.registry
	return m
}
