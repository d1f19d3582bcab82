package handoff

import (
	"bytes"
	"strconv"

	"github.com/tine-run/tine/internal/sandbox"
)

// readFrameFast decodes the two frames the client waits for, started and
// outcome, when the line is exactly what the daemon's encoding/json writes
// for them (compact, members in order, plain strings); ok is false for
// anything else, which the caller decodes with encoding/json. Like the
// request (appendJSON), this spares the client building decoders by
// reflection at every hand-off (ADR 0023, seventh session).
func readFrameFast(line []byte) (f Frame, ok bool) {
	p := frameParser{b: bytes.TrimRight(line, "\n")}
	switch {
	case p.lit(`{"started":{"pooled":`):
		pooled, ok := p.bool()
		if !ok || !p.lit(`}}`) || !p.end() {
			return Frame{}, false
		}
		return Frame{Started: &Started{Pooled: pooled}}, true
	case p.lit(`{"outcome":{"exit_code":`):
		o := &sandbox.Outcome{}
		var ok bool
		if o.ExitCode, ok = p.int(); !ok || !p.lit(`,"reason":`) {
			return Frame{}, false
		}
		if o.Reason, ok = p.str(); !ok {
			return Frame{}, false
		}
		if p.lit(`,"signal":`) {
			if o.Signal, ok = p.int(); !ok {
				return Frame{}, false
			}
		}
		ok = p.lit(`,"phases_ms":{"plan":`) && p.float(&o.Phases.Plan) &&
			p.lit(`,"start":`) && p.float(&o.Phases.Start) &&
			p.lit(`,"run":`) && p.float(&o.Phases.Run) &&
			p.lit(`},"peak_memory_bytes":`) && p.int64(&o.PeakMemoryBytes) &&
			p.lit(`,"cpu_time_ms":`) && p.float(&o.CPUTimeMs) && p.lit(`,"cgroup":`)
		if !ok {
			return Frame{}, false
		}
		if o.Cgroup, ok = p.str(); !ok || !p.lit(`,"rootless":`) {
			return Frame{}, false
		}
		if o.Rootless, ok = p.bool(); !ok || !p.lit(`}}`) || !p.end() {
			return Frame{}, false
		}
		return Frame{Outcome: o}, true
	}
	return Frame{}, false
}

// frameParser reads a line left to right.
type frameParser struct{ b []byte }

func (p *frameParser) end() bool { return len(p.b) == 0 }

func (p *frameParser) lit(s string) bool {
	if !bytes.HasPrefix(p.b, []byte(s)) {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

func (p *frameParser) bool() (bool, bool) {
	switch {
	case p.lit("true"):
		return true, true
	case p.lit("false"):
		return false, true
	}
	return false, false
}

// number takes the longest run of a JSON number's characters; the caller's
// strconv parse rejects what is not a number of its kind.
func (p *frameParser) number() []byte {
	i := 0
	for i < len(p.b) && bytes.IndexByte([]byte("+-.0123456789eE"), p.b[i]) >= 0 {
		i++
	}
	n := p.b[:i]
	p.b = p.b[i:]
	return n
}

func (p *frameParser) int() (int, bool) {
	var v int64
	ok := p.int64(&v)
	return int(v), ok && int64(int(v)) == v
}

func (p *frameParser) int64(v *int64) bool {
	n := p.number()
	if !jsonNumber(n, true) {
		return false // a fraction or an exponent: left to encoding/json
	}
	x, err := strconv.ParseInt(string(n), 10, 64)
	*v = x
	return err == nil
}

func (p *frameParser) float(v *float64) bool {
	n := p.number()
	if !jsonNumber(n, false) {
		return false
	}
	x, err := strconv.ParseFloat(string(n), 64)
	*v = x
	return err == nil
}

// jsonNumber reports whether n is a JSON number (RFC 8259:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?); integer allows neither
// fraction nor exponent.
func jsonNumber(n []byte, integer bool) bool {
	i := 0
	digits := func() int {
		j := i
		for i < len(n) && n[i] >= '0' && n[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(n) && n[i] == '-' {
		i++
	}
	if i < len(n) && n[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(n) && n[i] == '.' && !integer {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(n) && (n[i] == 'e' || n[i] == 'E') && !integer {
		i++
		if i < len(n) && (n[i] == '+' || n[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(n)
}

// str takes a string of plain characters (printable ASCII, no quote, no
// backslash); a string with escapes or other bytes is left to encoding/json.
func (p *frameParser) str() (string, bool) {
	if len(p.b) == 0 || p.b[0] != '"' {
		return "", false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			s := string(p.b[1:i])
			p.b = p.b[i+1:]
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}
