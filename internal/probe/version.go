package probe

import (
	"strconv"
	"strings"
)

// VersionAtLeast reports whether the dotted version have is min or newer,
// comparing numerically field by field ("3.17.1" < "4.1" < "4.1.1"; a
// missing field counts as 0). Each field's leading digits count, so
// "4.1-rc1" reads as 4.1. An unreadable have is never at least anything.
func VersionAtLeast(have, min string) bool {
	h, ok := parseVersion(have)
	if !ok {
		return false
	}
	m, _ := parseVersion(min)
	for i := 0; i < max(len(h), len(m)); i++ {
		var a, b int
		if i < len(h) {
			a = h[i]
		}
		if i < len(m) {
			b = m[i]
		}
		if a != b {
			return a > b
		}
	}
	return true
}

// parseVersion splits "3.17.1" into [3 17 1]; ok is false when the first
// field has no leading digits.
func parseVersion(v string) (fields []int, ok bool) {
	for i, part := range strings.Split(strings.TrimSpace(v), ".") {
		end := 0
		for end < len(part) && part[end] >= '0' && part[end] <= '9' {
			end++
		}
		if end == 0 {
			if i == 0 {
				return nil, false
			}
			break
		}
		n, err := strconv.Atoi(part[:end])
		if err != nil {
			return nil, false
		}
		fields = append(fields, n)
		if end < len(part) {
			break // "1-rc1": the rest is a suffix
		}
	}
	return fields, true
}
