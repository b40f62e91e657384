//go:build linux

package local

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// newBootProvider is a runsc provider with boot images on.
func newBootProvider(t testing.TB) *Provider {
	t.Helper()
	return newTestProviderConfig(t, Config{Runtime: RuntimeRunsc, BootImages: true})
}

// bootImageDirs are the complete boot images in p's Home, and whatever else is there.
func bootImageDirs(t *testing.T, p *Provider) (images, other []string) {
	t.Helper()
	ents, err := os.ReadDir(p.lay.bootImages())
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), ".lock-"):
		case e.IsDir() && !strings.HasPrefix(e.Name(), "."):
			images = append(images, e.Name())
		default:
			other = append(other, e.Name())
		}
	}
	return images, other
}

func bootKeyOf(t *testing.T, p *Provider, inst *Instance) string {
	t.Helper()
	rec, err := p.lay.readRecord(inst.ID())
	if err != nil {
		t.Fatal(err)
	}
	return rec.BootImage
}

// bootProbe is what a user could see of a new sandbox that a boot image could change. The
// process list is read with shell builtins only, so that the probe's own processes are the
// same two shells every time.
const bootProbe = `echo "host=$(hostname)"; echo "tmp=$(ls -A /tmp | tr '\n' ' ')"; ` +
	`echo "ws=$(ls -A /workspace 2>/dev/null | tr '\n' ' ')"; echo "root=$(ls -A /root 2>/dev/null | tr '\n' ' ')"; ` +
	`echo "procs=$(for p in /proc/[0-9]*; do read -r c <$p/comm && printf '%s ' "$c"; done 2>/dev/null)"; ` +
	`echo "machine-id=$(cat /etc/machine-id 2>/dev/null)"; echo "env=$(env | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' | sort | tr '\n' ' ')"`

// TestBootImage: the first runsc create saves a boot image of its fresh sandbox, later ones
// restore it, and what a user sees of a restored sandbox is what a cold one shows: nothing
// the first sandbox did (files, processes) leaks, each has its own random state, writable
// layer, deadline and identity.
func TestBootImage(t *testing.T) {
	p := newBootProvider(t)
	ctx := context.Background()
	first := create(t, p, provider.CreateSpec{Network: netNone, Timeout: time.Hour})
	if k := bootKeyOf(t, p, first); k != "" {
		t.Fatalf("the first create restored boot image %s: want a cold boot", k)
	}
	images, other := bootImageDirs(t, p)
	if len(images) != 1 || len(other) != 0 {
		t.Fatalf("after the first create, bootimages holds images %v and %v: want one image", images, other)
	}
	// The first sandbox runs on after its checkpoint, and what it does now is its own.
	run(t, first, "echo first >/tmp/first; echo first >/workspace/first; (sleep 3600 &) ; echo ok")

	a := create(t, p, provider.CreateSpec{Network: netNone, Labels: map[string]string{"k": "a"}})
	b := create(t, p, provider.CreateSpec{Network: netNone})
	for _, inst := range []*Instance{a, b} {
		if k := bootKeyOf(t, p, inst); k != images[0] {
			t.Fatalf("sandbox %s: boot image %q, want %q", inst.ID(), k, images[0])
		}
	}
	if rec, err := p.lay.readRecord(a.ID()); err != nil || rec.Labels["k"] != "a" {
		t.Fatalf("labels of a restored sandbox: %+v %v", rec, err)
	}
	// A cold sandbox of the same shape, for comparison.
	cold := create(t, newTestProvider(t, RuntimeRunsc), provider.CreateSpec{Network: netNone})
	want := run(t, cold, bootProbe)
	if strings.Contains(want, "first") || strings.Contains(want, "sleep") {
		t.Fatalf("the probe is wrong: %s", want)
	}
	for _, inst := range []*Instance{a, b} {
		if got := run(t, inst, bootProbe); got != want {
			t.Errorf("sandbox restored from a boot image shows\n%s\na cold one\n%s", got, want)
		}
	}
	// Independent of each other.
	run(t, a, "echo a >/workspace/mine; echo a >/tmp/mine")
	if out := run(t, b, "cat /workspace/mine /tmp/mine 2>&1; true"); strings.Contains(out, "a") && !strings.Contains(out, "No such") {
		t.Fatalf("a write in one restored sandbox is seen in another: %q", out)
	}
	// Their own random state.
	ra, rb := run(t, a, "head -c 16 /dev/urandom | od -An -tx1"), run(t, b, "head -c 16 /dev/urandom | od -An -tx1")
	if ra == rb {
		t.Fatalf("two restored sandboxes read the same random bytes %q", ra)
	}
	// The first sandbox's deadline (an hour) is not theirs: none is.
	for _, inst := range []*Instance{a, b} {
		rec, _ := p.lay.readRecord(inst.ID())
		if !rec.Deadline.IsZero() {
			t.Fatalf("a restored sandbox created without a timeout has deadline %v", rec.Deadline)
		}
	}
	// A short timeout of a restored sandbox is its own: the agent ends it.
	short := create(t, p, provider.CreateSpec{Network: netNone, Timeout: 2 * time.Second})
	if bootKeyOf(t, p, short) == "" {
		t.Fatal("not restored")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := short.Exec(ctx, provider.ExecRequest{Command: "true"}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a restored sandbox with a 2 s timeout still runs after 30 s")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Gone: removed now, not by the cleanup's destroys (one of which could reap it first).
	if err := p.Destroy(ctx, short.ID()); err != nil && provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatal(err)
	}
	// The first sandbox still runs, with its own files.
	if out := run(t, first, "cat /tmp/first /workspace/first"); out != "first\nfirst" {
		t.Fatalf("the first sandbox after the others: %q", out)
	}
}

// TestBootImageBypass: a create with what a running sandbox cannot take (env) boots cold,
// has it, and saves no image.
func TestBootImageBypass(t *testing.T) {
	p := newBootProvider(t)
	inst := create(t, p, provider.CreateSpec{Network: netNone, Env: map[string]string{"BOOT_TEST": "yes"}})
	if out := run(t, inst, "echo $BOOT_TEST"); out != "yes" {
		t.Fatalf("env: %q", out)
	}
	if images, other := bootImageDirs(t, p); len(images)+len(other) != 0 {
		t.Fatalf("a create with env saved a boot image: %v %v", images, other)
	}
	// Then an eligible one saves it, and a create with env still boots cold.
	create(t, p, provider.CreateSpec{Network: netNone})
	if images, _ := bootImageDirs(t, p); len(images) != 1 {
		t.Fatalf("images %v", images)
	}
	inst = create(t, p, provider.CreateSpec{Network: netNone, Env: map[string]string{"BOOT_TEST": "again"}})
	if k := bootKeyOf(t, p, inst); k != "" {
		t.Fatalf("a create with env restored boot image %s", k)
	}
	if out := run(t, inst, "echo $BOOT_TEST"); out != "again" {
		t.Fatalf("env: %q", out)
	}
}

// TestBootImageCorrupt: an image whose checkpoint is damaged, or whose metadata names other
// inputs, is removed, and the create boots cold and succeeds.
func TestBootImageCorrupt(t *testing.T) {
	p := newBootProvider(t)
	create(t, p, provider.CreateSpec{Network: netNone})
	images, _ := bootImageDirs(t, p)
	if len(images) != 1 {
		t.Fatalf("images %v", images)
	}
	key := images[0]
	img := filepath.Join(p.lay.bootImage(key), "image")
	ents, err := os.ReadDir(img)
	if err != nil || len(ents) == 0 {
		t.Fatal(ents, err)
	}
	for _, e := range ents {
		if err := os.WriteFile(filepath.Join(img, e.Name()), []byte("not a checkpoint"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	if k := bootKeyOf(t, p, inst); k != "" {
		t.Fatalf("restored from the corrupt image %s", k)
	}
	run(t, inst, "true")
	if images, other := bootImageDirs(t, p); len(images)+len(other) != 0 {
		t.Fatalf("the corrupt image is still there: %v %v", images, other)
	}
	// The next create saves a sound one, the one after restores it.
	create(t, p, provider.CreateSpec{Network: netNone})
	if images, _ := bootImageDirs(t, p); len(images) != 1 || images[0] != key {
		t.Fatalf("images %v, want [%s]", images, key)
	}
	inst = create(t, p, provider.CreateSpec{Network: netNone})
	if k := bootKeyOf(t, p, inst); k != key {
		t.Fatalf("boot image %q, want %q", k, key)
	}
	run(t, inst, "true")

	// Metadata of other inputs (as after a runsc upgrade in place): removed, cold, saved anew.
	metaPath := filepath.Join(p.lay.bootImage(key), "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	var m bootMeta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.Inputs.Runsc += " older"
	b, _ = json.Marshal(m)
	if err := os.WriteFile(metaPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	inst = create(t, p, provider.CreateSpec{Network: netNone})
	if k := bootKeyOf(t, p, inst); k != "" {
		t.Fatalf("restored from the stale image %s", k)
	}
	b, err = os.ReadFile(metaPath)
	if err != nil || strings.Contains(string(b), "older") {
		t.Fatalf("the stale image was not replaced: %s %v", b, err)
	}
}

// TestBootImageConcurrentFirst: two first creates at once both succeed; one image is
// written, whole, and no temporary directory is left.
func TestBootImageConcurrentFirst(t *testing.T) {
	p := newBootProvider(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			inst, err := p.Create(ctx, provider.CreateSpec{Network: netNone})
			errs[i] = err
			if err == nil {
				_, errs[i] = inst.Exec(ctx, provider.ExecRequest{Command: "true"})
				inst.Close()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	images, other := bootImageDirs(t, p)
	if len(images) != 1 || len(other) != 0 {
		t.Fatalf("bootimages holds images %v and %v: want one image", images, other)
	}
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	if k := bootKeyOf(t, p, inst); k != images[0] {
		t.Fatalf("boot image %q, want %q", k, images[0])
	}
	run(t, inst, "true")
}

// TestBootImageHalfWritten: a save that fails after the checkpoint leaves no image and no
// temporary directory, and the create that tried succeeds.
func TestBootImageHalfWritten(t *testing.T) {
	p := newBootProvider(t)
	testHookBootImageWrite = func(string) error { return os.ErrDeadlineExceeded }
	t.Cleanup(func() { testHookBootImageWrite = nil })
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	run(t, inst, "true")
	if images, other := bootImageDirs(t, p); len(images)+len(other) != 0 {
		t.Fatalf("a failed save left %v %v", images, other)
	}
}

// TestPruneBootImages: images of a template the store lacks and of other inputs go; the
// current one stays.
func TestPruneBootImages(t *testing.T) {
	p := newBootProvider(t)
	create(t, p, provider.CreateSpec{Network: netNone})
	images, _ := bootImageDirs(t, p)
	if len(images) != 1 {
		t.Fatalf("images %v", images)
	}
	for _, tc := range []struct{ name, template, runsc string }{
		{"gone", "no-such-template", ""},
		{"older", TemplateHost, " older"},
	} {
		b, err := os.ReadFile(filepath.Join(p.lay.bootImage(images[0]), "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m bootMeta
		json.Unmarshal(b, &m)
		if tc.template != "" {
			m.Inputs.Template = tc.template
		}
		m.Inputs.Runsc += tc.runsc
		m.Key = m.Inputs.key()
		b, _ = json.Marshal(m)
		if err := os.MkdirAll(filepath.Join(p.lay.bootImage(m.Key), "image"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.lay.bootImage(m.Key), "meta.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := p.PruneBootImages(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v: want 2", n, err)
	}
	if got, _ := bootImageDirs(t, p); len(got) != 1 || got[0] != images[0] {
		t.Fatalf("after prune: %v, want %v", got, images)
	}
}
