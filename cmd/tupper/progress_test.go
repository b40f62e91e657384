package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := &progress{w: &out, name: "big.bin", total: 3 << 20, start: time.Now().Add(-time.Second)}
	n, err := io.Copy(io.Discard, p.reader(bytes.NewReader(make([]byte, 3<<20))))
	if err != nil || n != 3<<20 {
		t.Fatal(n, err)
	}
	p.finish()
	last := strings.TrimRight(out.String(), "\n")
	last = last[strings.LastIndexByte(last, '\r')+1:]
	if !strings.HasPrefix(last, "big.bin [==============================] 3.0 MiB / 3.0 MiB") {
		t.Fatalf("final bar %q", last)
	}
	// Without a terminal there is no bar, and reader passes data through.
	var none *progress
	if r := none.reader(strings.NewReader("x")); r == nil {
		t.Fatal("nil progress lost the reader")
	}
	none.finish()
	if got := bytesHuman(1536); got != "1.5 KiB" {
		t.Fatalf("bytesHuman(1536) = %q", got)
	}
}
