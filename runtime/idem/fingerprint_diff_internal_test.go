package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math/rand"
	"strings"
	"testing"
)

// oldFingerprinter is the Fingerprinter of 75c544c (streaming SHA-256 over the frames, every
// part through canonicalScalar), kept to check that the buffered one digests the same bytes.
type oldFingerprinter struct{ h hash.Hash }

func newOldFingerprinter(route string) *oldFingerprinter {
	f := &oldFingerprinter{h: sha256.New()}
	f.frame('v', "idemgen-fingerprint-1", nil)
	f.frame('r', route, nil)
	return f
}

func (f *oldFingerprinter) frame(kind byte, name string, value []byte) {
	b := []byte{kind}
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	f.h.Write(b)
	f.h.Write(value)
}

func (f *oldFingerprinter) Add(name string, v any) {
	b, err := canonicalScalar(v)
	if err != nil {
		return
	}
	f.frame('p', name, b)
}

func (f *oldFingerprinter) Sum() string { return hex.EncodeToString(f.h.Sum(nil)) }

var diffAlphabet = []string{"a", "Z", "0", "/", " ", "<", ">", "&", "\"", "\\", "\t", "\n", "\x00", "\x1f", "\x7f", "\x80", "\xff", "é", "\u2028", "\u2029", "\ufffd", "\xed\xa0\x80", "😀", "~"}

func randString(r *rand.Rand, n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if r.Intn(3) == 0 {
			sb.WriteString(diffAlphabet[r.Intn(len(diffAlphabet))])
		} else {
			sb.WriteByte(byte('a' + r.Intn(26)))
		}
	}
	return sb.String()
}

// TestFingerprintDifferentialAgainst75c544c: random sequences of parts and bodies, small and
// past the buffer's limits, strings JSON escapes or not, digest as the old Fingerprinter did.
func TestFingerprintDifferentialAgainst75c544c(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sizes := []int{0, 1, 5, 50, 250, 260, 1000, 4000, 4090, 4100, 9000}
	for iter := 0; iter < 20000; iter++ {
		route := "POST /" + randString(r, r.Intn(40))
		nf, of := NewFingerprinter(route), newOldFingerprinter(route)
		for p := r.Intn(8); p > 0; p-- {
			name := "query:" + randString(r, r.Intn(20))
			var v any
			switch r.Intn(5) {
			case 0, 1:
				v = randString(r, sizes[r.Intn(len(sizes))]/(1+r.Intn(4)))
			case 2:
				s := randString(r, r.Intn(300))
				v = &s
			case 3:
				v = (*string)(nil)
			case 4:
				v = r.Int63() - r.Int63()
			}
			if r.Intn(6) == 0 {
				body := []byte(randString(r, sizes[r.Intn(len(sizes))]))
				_ = nf.RawBody("text/plain", body)
				b, err := canonicalBody("text/plain", nil, body, nil)
				if err == nil {
					of.frame('b', "text/plain", b)
				}
				continue
			}
			_ = nf.Add(name, v)
			of.Add(name, v)
			if r.Intn(10) == 0 && nf.Sum() != of.Sum() {
				t.Fatalf("iteration %d: mid-way digest differs", iter)
			}
		}
		if nf.Sum() != of.Sum() {
			t.Fatalf("iteration %d: digest differs from 75c544c's", iter)
		}
	}
}
