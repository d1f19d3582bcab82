package handoff

import (
	"strconv"
	"unicode/utf8"
)

// appendJSON appends r as encoding/json would marshal it (the same
// members, names, omissions and order), without reflection: the client's
// first json.Marshal built the encoders of Request's types at every tine
// run handed to the daemon, ~4% of that client's CPU (ADR 0023, seventh
// session). The daemon decodes it with encoding/json.
func (r *Request) appendJSON(b []byte) []byte {
	b = append(b, `{"args":`...)
	b = appendStrings(b, r.Args)
	if len(r.Env) > 0 {
		b = append(b, `,"env":`...)
		b = appendStrings(b, r.Env)
	}
	b = appendStringMember(b, "workdir", r.Workdir)
	b = appendStringMember(b, "hostname", r.Hostname)
	b = appendStringMember(b, "rootfs", r.RootFS)
	if len(r.Layers) > 0 {
		b = append(b, `,"layers":`...)
		b = appendStrings(b, r.Layers)
	}
	if u := r.User; u != nil {
		b = append(b, `,"user":{"uid":`...)
		b = strconv.AppendUint(b, uint64(u.UID), 10)
		b = append(b, `,"gid":`...)
		b = strconv.AppendUint(b, uint64(u.GID), 10)
		if len(u.Groups) > 0 {
			b = append(b, `,"groups":[`...)
			for i, g := range u.Groups {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(g), 10)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = appendStringMember(b, "host_view", r.HostView)
	if r.UserNS {
		b = append(b, `,"userns":true`...)
	}
	b = appendIntMember(b, "disk_bytes", r.DiskBytes)
	if len(r.Binds) > 0 {
		b = append(b, `,"binds":[`...)
		for i, bd := range r.Binds {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"source":`...)
			b = appendString(b, bd.Source)
			b = append(b, `,"target":`...)
			b = appendString(b, bd.Target)
			if bd.ReadOnly {
				b = append(b, `,"read_only":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if l := r.Limits; l.MemoryBytes != 0 || l.CPUs != 0 || l.Pids != 0 {
		b = append(b, `,"limits":{`...)
		n := len(b)
		b = appendIntMember(b, "memory_bytes", l.MemoryBytes)
		if l.CPUs != 0 {
			b = append(b, `,"cpus":`...)
			b = appendFloat(b, l.CPUs)
		}
		b = appendIntMember(b, "pids", l.Pids)
		if b[n] == ',' { // the first member's comma
			b = append(b[:n], b[n+1:]...)
		}
		b = append(b, '}')
	}
	b = appendIntMember(b, "timeout_ms", r.TimeoutMs)
	b = appendStringMember(b, "seccomp", r.Seccomp)
	return append(b, '}')
}

// appendStrings appends a JSON array of ss (nil is null).
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendStringMember(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, s)
}

func appendIntMember(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendFloat formats f as encoding/json does (ES6 number formatting); f
// is finite (Dial leaves the others to encoding/json, which refuses them).
func appendFloat(b []byte, f float64) []byte {
	abs, format := f, byte('f')
	if abs < 0 {
		abs = -abs
	}
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it (HTML characters too; invalid UTF-8 becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
