package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A failure of the server's store is not about what the machine lacks: no `tupper doctor`
// hint follows it.
func TestStoreErrorHasNoDoctorHint(t *testing.T) {
	home := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(home, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := tupper(t, home, "", "keys", "list")
	if r.code != exitTupperError || !strings.Contains(r.stderr, "store directory") {
		t.Fatalf("keys list with a file for home: exit %d, stderr %q; want exit %d about the store directory", r.code, r.stderr, exitTupperError)
	}
	if strings.Contains(r.stderr, "doctor") {
		t.Errorf("a store error sends the user to tupper doctor: %q", r.stderr)
	}
}
