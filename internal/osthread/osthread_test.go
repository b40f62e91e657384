//go:build linux

package osthread

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// threadsNamed returns the ids of this process's threads whose name is name.
func threadsNamed(t *testing.T, name string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			tid, _ := strconv.Atoi(e.Name())
			out = append(out, tid)
		}
	}
	return out
}

// TestThreadState: what setup changes on the thread (here its name) is seen by every Do and
// by no other thread, the thread is not the main one, and Close ends it.
func TestThreadState(t *testing.T) {
	const name = "osthread-test"
	th, err := Start(func() error {
		b, err := unix.BytePtrFromString(name)
		if err != nil {
			return err
		}
		return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := th.Do(func() {
				mu.Lock()
				tids = append(tids, unix.Gettid())
				mu.Unlock()
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	named := threadsNamed(t, name)
	if len(named) != 1 {
		t.Fatalf("threads named %q: %v, want one", name, named)
	}
	for _, tid := range tids {
		if tid != named[0] {
			t.Errorf("Do ran on thread %d, not the named %d", tid, named[0])
		}
	}
	if named[0] == os.Getpid() {
		t.Error("the thread is the main thread")
	}
	th.Close()
	th.Close() // idempotent
	// The runtime ends a locked thread after its goroutine has returned, which is when Close
	// returns: the thread goes a moment later, with no event to wait on.
	var left []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if left = threadsNamed(t, name); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) != 0 {
		t.Errorf("threads named %q 5 s after Close: %v", name, left)
	}
	ran := false
	if err := th.Do(func() { ran = true }); !errors.Is(err, ErrClosed) || ran {
		t.Errorf("Do after Close: %v, ran %v", err, ran)
	}
}

func TestSetupFails(t *testing.T) {
	want := errors.New("no")
	if _, err := Start(func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("Start: %v, want %v", err, want)
	}
}

// TestMountNamespace: a process started from the thread after it unshared its mount
// namespace is in that namespace; the process's own stays as it was.
func TestMountNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	th, err := Start(func() error { return unix.Unshare(unix.CLONE_NEWNS) })
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	var threadNS string
	var out []byte
	var runErr error
	if err := th.Do(func() {
		threadNS, _ = os.Readlink("/proc/thread-self/ns/mnt")
		out, runErr = exec.Command("readlink", "/proc/self/ns/mnt").Output()
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	if threadNS == self {
		t.Fatalf("the thread's namespace is the process's (%s)", self)
	}
	if got := strings.TrimSpace(string(out)); got != threadNS {
		t.Errorf("a process started from the thread is in %s, want the thread's %s", got, threadNS)
	}
	if now, _ := os.Readlink("/proc/self/ns/mnt"); now != self {
		t.Errorf("the process's namespace changed: %s, was %s", now, self)
	}
}
