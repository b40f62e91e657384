//go:build linux

package template

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
)

// BenchmarkImport imports an image of three layers (16 MiB each: many small files, some
// large ones, half incompressible) from the in-process registry into an empty store, per
// iteration: fetch over loopback, decompress, verify both digests, unpack, sync. b.SetBytes
// is the uncompressed size, so MB/s is the import throughput.
func BenchmarkImport(b *testing.B) {
	needRoot(b)
	rng := rand.New(rand.NewPCG(1, 2))
	var tars [][]byte
	var total int64
	for l := range 3 {
		var ents []ent
		size := 0
		for i := 0; size < 16<<20; i++ {
			n := 4 << 10
			if i%64 == 0 {
				n = 1 << 20
			}
			body := make([]byte, n)
			if i%2 == 0 {
				for j := range body {
					body[j] = byte(rng.IntN(256))
				}
			} else {
				for j := range body {
					body[j] = "abcdefgh"[j%8]
				}
			}
			ents = append(ents, ent{name: fmt.Sprintf("l%d/d%d/f%d", l, i/100, i), body: string(body)})
			size += n
		}
		t := tarOf(b, ents...)
		tars = append(tars, t)
		total += int64(len(t))
	}
	reg := newRegistry(b)
	push(b, reg+"/bench:1", imageOf(b, "amd64", testConfig, tars...))
	b.SetBytes(total)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		home, err := os.MkdirTemp("", "bench-store-")
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(home)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Import(bg, "bench", Source{Ref: reg + "/bench:1"}, ImportOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(home)
		b.StartTimer()
	}
}
