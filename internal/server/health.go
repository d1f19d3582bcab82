package server

import (
	"net/http"
	"os"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/probe"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	if s.isClosing() {
		return ErrShuttingDown
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: api.Version, Pid: os.Getpid(), PoolReady: s.rt.PoolReady()})
	return nil
}

// features reports the host checks of `tine doctor` (run once per daemon).
func (s *Server) features(w http.ResponseWriter, r *http.Request) error {
	checks := probe.All()
	out := api.Features{Checks: make([]api.Feature, 0, len(checks))}
	for _, c := range checks {
		out.Checks = append(out.Checks, api.Feature{
			Name: c.Name, OK: c.OK, Detail: c.Detail, Affects: c.Affects, Fix: c.Fix, Value: c.Value, Version: c.Version,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
