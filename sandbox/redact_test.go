package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// feed pushes data through a stream redactor in pieces of the given sizes and returns what
// came out.
func feed(r *redactor, data string, sizes ...int) string {
	s := r.stream()
	var out strings.Builder
	for _, n := range sizes {
		n = min(n, len(data))
		out.Write(s.write([]byte(data[:n])))
		data = data[n:]
	}
	out.Write(s.write([]byte(data)))
	out.Write(s.flush())
	return out.String()
}

func TestStreamRedactorAcrossChunkBoundaries(t *testing.T) {
	r := newRedactor()
	r.add(map[string]string{"A": "hunter2", "B": "hunter2-long-secret"})
	data := "x hunter2 y hunter2-long-secret z hunter"
	want := "x *** y *** z hunter"
	// Every way of cutting the stream in two and three pieces.
	for i := 0; i <= len(data); i++ {
		for j := 0; j <= len(data)-i; j++ {
			if got := feed(r, data, i, j); got != want {
				t.Fatalf("cut at %d,%d: got %q, want %q", i, i+j, got, want)
			}
		}
	}
	// One byte at a time.
	ones := make([]int, len(data))
	for i := range ones {
		ones[i] = 1
	}
	if got := feed(r, data, ones...); got != want {
		t.Fatalf("byte by byte: got %q, want %q", got, want)
	}
}

func TestStreamRedactorHoldsOnlyPossiblePrefixes(t *testing.T) {
	r := newRedactor()
	r.add(map[string]string{"A": "secret"})
	s := r.stream()
	if got := string(s.write([]byte("abc sec"))); got != "abc " {
		t.Fatalf("emitted %q before the possible secret, want %q", got, "abc ")
	}
	if got := string(s.write([]byte("ond"))); got != "second" {
		t.Fatalf("emitted %q once it could not be a secret, want %q", got, "second")
	}
}

func TestRedactorErr(t *testing.T) {
	r := newRedactor()
	r.add(map[string]string{"T": "tok123"})
	err := r.Err(errorf(CodeNotFound, "files.read", "no such file: /x/tok123"))
	if strings.Contains(err.Error(), "tok123") {
		t.Fatalf("secret in error: %v", err)
	}
	if !errors.Is(err, CodeNotFound) {
		t.Fatalf("code lost: %v", err)
	}
	if r.Err(nil) != nil {
		t.Fatal("Err(nil) is not nil")
	}
}

func TestLimitedBuffer(t *testing.T) {
	var b limitedBuffer
	b.limit = 5
	b.Write([]byte("abc"))
	b.Write([]byte("defg"))
	if b.String() != "abcde" || b.dropped != 2 {
		t.Fatalf("got %q dropped %d", b.String(), b.dropped)
	}
}

func TestSafeCut(t *testing.T) {
	secrets := []string{"topsecret"}
	for _, tc := range []struct {
		data string
		want int
		cut  int
	}{
		{"aaaa topsecret bbb", 8, 5},    // crosses: cut before it
		{"topsecret bbb", 4, 9},         // starts at 0: take it whole
		{"aaaa topsecret bbb", 15, 15},  // after it
		{"aaaa topsecret bbb", 5, 5},    // right before it
		{"aaaa topsecret bbb", 14, 14},  // right after it
		{"no secret here at all", 7, 7}, // nothing to avoid
	} {
		if got := safeCut([]byte(tc.data), tc.want, secrets); got != tc.cut {
			t.Errorf("safeCut(%q, %d) = %d, want %d", tc.data, tc.want, got, tc.cut)
		}
	}
}
