package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// A second claim on a state directory fails at once, naming the holder; once the holder
// lets go, the directory can be claimed again.
func TestLockServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a, err := LockServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockServer(dir)
	want := fmt.Sprintf("another tupper server (pid %d) is using the state directory %s", os.Getpid(), dir)
	if !errors.Is(err, provider.CodeConflict) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second claim: %v; want conflict saying %q", err, want)
	}
	if err := a.Serving("http://127.0.0.1:7423"); err != nil {
		t.Fatal(err)
	}
	if _, err := LockServer(dir); err == nil || !strings.Contains(err.Error(), "serving on http://127.0.0.1:7423") {
		t.Fatalf("second claim after Serving: %v; want the address", err)
	}
	a.Unlock()
	a.Unlock()
	b, err := LockServer(dir)
	if err != nil {
		t.Fatalf("claim after Unlock: %v", err)
	}
	b.Unlock()
}
