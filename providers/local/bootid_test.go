//go:build linux

package local

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// TestBootID: a sandbox has a boot id of its own (/proc/sys/kernel/random/boot_id), not the
// host's: two sandboxes differ, the id stays the same for every command of one boot, and
// a resume without memory is a new boot with a new id. Root inside can neither rewrite it
// nor uncover the host's.
func TestBootID(t *testing.T) {
	host, err := os.ReadFile(kernelBootID)
	if err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	forRuntimesAsRoot(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		spec := provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}}
		a, b := create(t, p, spec), create(t, p, spec)
		read := func(inst *Instance) string {
			t.Helper()
			id := run(t, inst, "cat "+kernelBootID)
			if !uuid.MatchString(id) {
				t.Errorf("%s's boot id %q is not a version 4 UUID", inst.ID(), id)
			}
			return id
		}
		first, other := read(a), read(b)
		if first == strings.TrimSpace(string(host)) || other == strings.TrimSpace(string(host)) {
			t.Errorf("a sandbox reads the host's boot id %s", host)
		}
		if first == other {
			t.Errorf("two sandboxes share the boot id %s", first)
		}
		if again := read(a); again != first {
			t.Errorf("the boot id changed within one boot: %s, then %s", first, again)
		}
		// Root inside (without CAP_SYS_ADMIN, as every command is) cannot change it.
		runCode(t, a, "echo 00000000-0000-4000-8000-000000000000 > "+kernelBootID+"; umount "+kernelBootID+"; umount -l "+kernelBootID)
		if got := read(a); got != first {
			t.Errorf("root inside changed its boot id from %s to %s", first, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := a.PauseCold(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if after := read(a); after == first || after == other || after == strings.TrimSpace(string(host)) {
			t.Errorf("after a resume without memory the boot id is %s (before %s, the other sandbox's %s)", after, first, other)
		}
	})
}

// kernelBootID is where Linux shows the id of the current boot (agent/bootid.go binds a
// sandbox's own over it).
const kernelBootID = "/proc/sys/kernel/random/boot_id"
