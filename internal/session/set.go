package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Set is the sessions of one sandbox, by id.
type Set struct {
	sandbox string
	launch  Launcher

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
}

// NewSet is an empty set for the sandbox named sandboxID, whose sessions
// start through l.
func NewSet(sandboxID string, l Launcher) *Set {
	return &Set{sandbox: sandboxID, launch: l, sessions: map[string]*Session{}}
}

// Start starts a new session and adds it to the set.
func (s *Set) Start(o Options) (*Session, error) {
	sess, err := Start(newID(), s.sandbox, s.launch, o)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sess.Close()
		return nil, fmt.Errorf("%w: the sandbox is going", ErrDead)
	}
	s.sessions[sess.id] = sess
	return sess, nil
}

// Adopt adds a session made elsewhere (a live fork's copy, whose sandbox
// this set is); a closed set ends it instead.
func (s *Set) Adopt(sess *Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sess.Close()
		return fmt.Errorf("%w: the sandbox is going", ErrDead)
	}
	s.sessions[sess.id] = sess
	return nil
}

// Get finds a session by id.
func (s *Set) Get(id string) (*Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[id]
	if sess == nil {
		return nil, fmt.Errorf("%w %q in sandbox %s (list them with GET /v1/sandboxes/%s/sessions)", ErrNoSession, id, s.sandbox, s.sandbox)
	}
	return sess, nil
}

// List describes the sessions, oldest first.
func (s *Set) List() []*Session {
	s.mu.Lock()
	list := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		list = append(list, sess)
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b *Session) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return list
}

// Delete ends a session and removes it.
func (s *Set) Delete(id string) error {
	sess, err := s.Get(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.sessions, id)
	s.mu.Unlock()
	sess.Close()
	return nil
}

// Close ends every session; the set takes no more.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	all := s.sessions
	s.sessions = map[string]*Session{}
	s.mu.Unlock()
	for _, sess := range all {
		sess.Close()
	}
}

// newID is a fresh session id: "s" and 12 hex digits.
func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "s" + hex.EncodeToString(b)
}
