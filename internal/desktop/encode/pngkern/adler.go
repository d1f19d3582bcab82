package pngkern

// Adler-32 (RFC 1950), the checksum ending every zlib stream, here so that
// the PNG writer can run it with AVX2: hash/adler32 goes a byte at a time
// and cost as much as the deflate of a screen's rows.
const (
	adlerBase = 65521
	// adlerNMAX is zlib's: the most bytes whose sums cannot overflow 32
	// bits before they are reduced.
	adlerNMAX = 5552
)

// Adler32 returns the Adler-32 of the bytes adler was computed over
// followed by p (Adler32(1, p) is the checksum of p).
func Adler32(adler uint32, p []byte) uint32 {
	s1, s2 := adler&0xffff, adler>>16
	if useAVX2 {
		for len(p) >= 32 {
			blocks := min(len(p)/32, adlerNMAX/32)
			s1, s2 = adlerBlocksAVX2(s1, s2, &p[0], blocks)
			s1, s2 = s1%adlerBase, s2%adlerBase
			p = p[blocks*32:]
		}
	}
	for len(p) > 0 {
		q := p[:min(len(p), adlerNMAX)]
		p = p[len(q):]
		for _, b := range q {
			s1 += uint32(b)
			s2 += s1
		}
		s1, s2 = s1%adlerBase, s2%adlerBase
	}
	return s2<<16 | s1
}
