// Package capped is an output buffer with a ceiling: a command that floods
// its output is read to the end (it never blocks on a full pipe) but only
// the first bytes are kept.
package capped

import "bytes"

// Buffer keeps the first Max bytes written to it and drops the rest.
type Buffer struct {
	Max     int
	b       bytes.Buffer
	dropped bool
}

// New is a Buffer that keeps max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

// Write keeps what fits and always reports all of p written.
func (c *Buffer) Write(p []byte) (int, error) {
	if room := c.Max - c.b.Len(); room < len(p) {
		c.dropped = true
		if room > 0 {
			c.b.Write(p[:room])
		}
		return len(p), nil
	}
	c.b.Write(p)
	return len(p), nil
}

// Bytes are the kept bytes.
func (c *Buffer) Bytes() []byte { return c.b.Bytes() }

// String is the kept bytes as a string.
func (c *Buffer) String() string { return c.b.String() }

// Dropped says whether bytes past Max were written (and dropped).
func (c *Buffer) Dropped() bool { return c.dropped }
