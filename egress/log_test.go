package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogOnceAndReadBack: the proxy logs an allowed entry once and a refusal at most once a
// second, and ReadLog gives back what was logged, page by page, sanitized.
func TestLogOnceAndReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	p, err := NewProxy(Config{Log: path}, MustParse([]string{"a.test"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.log(Entry{Kind: "dns", Name: "a.test", Type: "A", Allowed: true})
		p.log(Entry{Kind: "dns", Name: "b.test", Type: "A", Reason: "name not allowed"})
	}
	// A name from the sandbox with bytes no host name has, and one too long.
	p.log(Entry{Kind: "dns", Name: "x\n\x1b[31m\"y.test", Type: "A", Reason: "name not allowed"})
	p.log(Entry{Kind: "connect", Name: strings.Repeat("a", 300), Dest: "11.22.34.1:443", Reason: "name not allowed"})
	entries, next, more, err := ReadLog(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if more || len(entries) != 4 {
		t.Fatalf("read %d entries (more %v), want 4: %+v", len(entries), more, entries)
	}
	if e := entries[0]; e.Name != "a.test" || !e.Allowed || e.Time.IsZero() {
		t.Errorf("first entry %+v", e)
	}
	if e := entries[1]; e.Name != "b.test" || e.Allowed || e.Reason != "name not allowed" {
		t.Errorf("second entry %+v", e)
	}
	if got := entries[2].Name; got != "x???31m?y.test" {
		t.Errorf("sanitized name %q", got)
	}
	if got := entries[3].Name; len(got) != 253 {
		t.Errorf("a 300-byte name is %d bytes, want 253", len(got))
	}
	// Past a second, the same refusal is logged again; the allowed entry still is not.
	time.Sleep(1100 * time.Millisecond)
	p.log(Entry{Kind: "dns", Name: "b.test", Type: "A", Reason: "name not allowed"})
	p.log(Entry{Kind: "dns", Name: "a.test", Type: "A", Allowed: true})
	// A line being written (no newline yet) waits for the next read.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"kind":"dns","name":"half`)
	f.Close()
	entries, next2, _, err := ReadLog(path, next)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name != "b.test" {
		t.Errorf("after a second: %+v, want b.test refused again only", entries)
	}
	st, _ := os.Stat(path)
	if next2 >= st.Size() {
		t.Errorf("cursor %d went past the unfinished line (file %d bytes)", next2, st.Size())
	}
}

// TestReadLogRefusesForgedLines: lines that are not entries of the proxy are skipped.
func TestReadLogRefusesForgedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	lines := []string{
		`not json`,
		`{"kind":"shell","name":"x"}`,
		`{"kind":"connect","dest":"not an address"}`,
		`{"kind":"dns","name":"` + strings.Repeat("a", 3000) + `"}`,
		`{"kind":"connect","dest":"11.22.34.1:80","name":"ok.test","allowed":true}`,
	}
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	entries, _, _, err := ReadLog(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name != "ok.test" {
		t.Errorf("entries %+v, want only ok.test", entries)
	}
	if entries, next, more, err := ReadLog(filepath.Join(t.TempDir(), "none"), 7); err != nil || len(entries) != 0 || next != 7 || more {
		t.Errorf("no log: %v %d %v %v", entries, next, more, err)
	}
}
