package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tine-run/tine/api"
)

// metrics are what GET /metrics serves, on a registry of the server's own.
type metrics struct {
	registry *prometheus.Registry
	serve    http.Handler
	latency  *prometheus.HistogramVec
	failures *prometheus.CounterVec
	execs    *prometheus.CounterVec
	expired  *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tine_http_request_duration_seconds",
			Help:    "Time to answer an API request, by route and status; an exec stream counts until it closes.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "code"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tine_failures_total",
			Help: "Failed API requests and exec streams, by error code (invalid_argument, capacity, internal, ...).",
		}, []string{"reason"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tine_execs_total",
			Help: "Commands exec'd into live sandboxes, by how they ended (exit, signal, oom, timeout, not-found, ...).",
		}, []string{"reason"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tine_sandboxes_expired_total",
			Help: "Sandboxes destroyed by the daemon, by why: ttl or idle.",
		}, []string{"why"}),
	}
	m.registry.MustRegister(m.latency, m.failures, m.execs, m.expired,
		&stateCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.serve = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

// stateCollector counts the sandboxes in each state at scrape time, and
// what they count against the budget.
type stateCollector struct{ s *Server }

var (
	sandboxesDesc = prometheus.NewDesc("tine_sandboxes", "Sandboxes known to the daemon, by state.", []string{"state"}, nil)
	budgetDesc    = prometheus.NewDesc("tine_budget_memory_bytes", "Memory the live sandboxes count against the budget (used), and the budget (max).", []string{"kind"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- budgetDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.s.countStates()
	for _, st := range api.States {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	_, used := c.s.capacity.used()
	ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(used), "used")
	ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(c.s.capacity.maxMemory), "max")
}
