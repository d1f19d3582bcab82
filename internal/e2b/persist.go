package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tine-run/tine/api"
)

// Paused sandboxes outlive the daemon: a paused sandbox is only its pause
// snapshots (in tine's store, which persists) and its E2B identity, which
// is kept in Config.StateFile (mode 0600: it holds the access tokens) at
// every pause, resume and kill, and read back at start. Running sandboxes
// do not: tine's sandboxes end with the daemon.

// pausedRecord is one paused sandbox in the state file.
type pausedRecord struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	Token       string            `json:"token"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Internet    bool              `json:"internet,omitempty"`
	OnPause     bool              `json:"on_pause,omitempty"`
	PauseMemory bool              `json:"pause_memory,omitempty"`
	Resume      bool              `json:"resume,omitempty"`
	Started     time.Time         `json:"started"`
	EndAt       time.Time         `json:"end_at"`
	Snapshots   []string          `json:"snapshots"`
	Spec        api.SandboxSpec   `json:"spec"`
}

// stateFormat is the state file's version.
const stateFormat = 1

type stateFile struct {
	Format int            `json:"format"`
	Paused []pausedRecord `json:"paused"`
}

// persist writes the paused sandboxes to the state file (atomically: a
// temporary file renamed over it). Nothing without a state file.
func (s *Server) persist() {
	if s.cfg.StateFile == "" {
		return
	}
	st := stateFile{Format: stateFormat, Paused: []pausedRecord{}}
	for _, b := range s.sorted() {
		b.mu.Lock()
		if b.state == statePaused && !b.gone {
			st.Paused = append(st.Paused, pausedRecord{
				ID: b.id, Template: b.template, Token: b.token, Metadata: b.metadata, Env: b.env,
				Internet: b.internet, OnPause: b.onPause, PauseMemory: b.pauseMemory, Resume: b.resume,
				Started: b.started, EndAt: b.endAt, Snapshots: b.snapshots, Spec: b.spec,
			})
		}
		b.mu.Unlock()
	}
	if err := writeState(s.cfg.StateFile, &st); err != nil {
		s.log.Warn("e2b: cannot keep the paused sandboxes", "file", s.cfg.StateFile, "err", err)
	}
}

func writeState(path string, st *stateFile) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".e2b-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// restore reads the paused sandboxes of an earlier daemon back.
func (s *Server) restore() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("e2b: read paused sandboxes: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil || st.Format != stateFormat {
		return fmt.Errorf("e2b: %s is not a state file of this version (format %d, want %d; %v): move it away to start without its paused sandboxes", s.cfg.StateFile, st.Format, stateFormat, err)
	}
	for _, r := range st.Paused {
		if r.ID == "" || r.Token == "" || len(r.Snapshots) == 0 {
			return fmt.Errorf("e2b: %s: a paused sandbox without id, token or snapshot: move the file away to start without its paused sandboxes", s.cfg.StateFile)
		}
		s.boxes[r.ID] = &box{
			id: r.ID, template: r.Template, token: r.Token, metadata: r.Metadata, env: r.Env,
			internet: r.Internet, onPause: r.OnPause, pauseMemory: r.PauseMemory, resume: r.Resume,
			started: r.Started, endAt: r.EndAt, state: statePaused, snapshots: r.Snapshots, spec: r.Spec,
		}
	}
	return nil
}
