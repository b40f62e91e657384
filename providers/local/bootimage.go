//go:build linux

package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/durable"
	"github.com/tupper-dev/tupper/template"
)

// Boot images (Config.BootImages; off by default). A runsc sandbox takes about two seconds
// to boot; restoring a checkpoint of one that has just booted can take less. So the first
// create of a shape checkpoints its own sandbox once the agent answers, before its
// template's start command runs and before it is handed out, and later creates of that shape
// restore the checkpoint instead of booting:
//
//	bootimages/<key>/meta.json        bootMeta: the key and everything it was made from
//	bootimages/<key>/image/           runsc's checkpoint of the freshly booted sandbox
//	bootimages/.tmp-<key>-<n>-<pid>/  an image being written; renamed to <key> when complete
//	bootimages/.lock-<key>            held by the create that writes <key> (kept: a lock file
//	                                  removed while another process opens it would let two
//	                                  writers in)
//
// The shape, and the key (a hash of it), is everything that makes a restored sandbox differ
// from a cold one: the template (name, layers, configuration, creation time), the runsc
// binary (path, file identity, version) and its flags, the agent binary (path, file identity)
// and protocol, the size, and the bundle's runtime spec (seccomp, capabilities, mounts,
// limits) built with placeholder paths. A change to any of them makes a new key; images of
// old keys are never used again and go with PruneBootImages (tupper template prune) or with
// their template (DeleteTemplate, tupper template rm).
//
// Only the checkpoint is kept, not the writable layer: a restored sandbox gets a new
// skeleton made as a cold one's is, its own empty /tmp, its own id, state directory, agent
// socket (the agent listens again there, as in a fork: quiesce.go in package agent), its own
// deadline and idle timeout (the agent's limits are cleared before the checkpoint and set
// after the restore), labels and key. Its template's start and ready commands run after
// the restore, as after a cold boot. The checkpointed sandbox had run no command.
//
// A create uses a boot image, like the pool (pool.go), only for what can be applied to a
// running sandbox. It boots cold, and saves no image, when it asks for: a runtime other
// than runsc, a network other than "none" (gVisor cannot checkpoint the host's network
// stack), Env, Secrets or BoundSecrets (the agent holds its environment from boot),
// Volumes (mounted at boot), From (a snapshot), a negative Timeout or IdleTimeout, or when
// it is a template build's step sandbox. Pooled sandboxes boot cold (the pool already hides their boot).
//
// Writing is safe against concurrent creates and crashes: the writer holds .lock-<key>
// (a second first create that finds it held boots cold and writes nothing), writes into a
// temporary directory, syncs it and renames it into place, so an image is whole or absent.
// An image whose metadata is unreadable or names other inputs, or whose restore fails, is
// removed, and that create boots cold and succeeds.

func (l layout) bootImages() string          { return filepath.Join(l.home, "bootimages") }
func (l layout) bootImage(key string) string { return filepath.Join(l.bootImages(), key) }

// bootImageFormat changes when the layout of an image or the meaning of its inputs does.
const bootImageFormat = 1

// bootInputs is what a boot image is made from; its hash is the key.
type bootInputs struct {
	Format          int              `json:"format"`
	Template        string           `json:"template"`
	Layers          []string         `json:"layers,omitempty"`
	Config          *template.Config `json:"config,omitempty"`
	TemplateCreated time.Time        `json:"templateCreated,omitzero"`
	Runsc           string           `json:"runsc"` // path, file identity and --version
	RunscArgs       []string         `json:"runscArgs"`
	Agent           string           `json:"agent"` // path and file identity
	Protocol        int              `json:"protocol"`
	CPU             float64          `json:"cpu"`
	MemoryMB        int              `json:"memoryMB"`
	DiskGB          int              `json:"diskGB"`
	Spec            string           `json:"spec"` // hash of the bundle's config, placeholder paths
}

// key is the hash of the inputs.
func (in *bootInputs) key() string {
	b, _ := json.Marshal(in)
	return hashString(string(b))[:32]
}

// bootMeta is an image's meta.json.
type bootMeta struct {
	Key       string     `json:"key"`
	Inputs    bootInputs `json:"inputs"`
	CreatedAt time.Time  `json:"createdAt"`
}

// bootImage is what a create does with a boot image: restore from it, or save it.
type bootImage struct {
	key    string
	inputs bootInputs
	save   bool        // there is none: this create writes it, holding lk
	lk     *flock.Lock // save only
}

func (b *bootImage) restoring() bool { return b != nil && !b.save }
func (b *bootImage) saving() bool    { return b != nil && b.save }

// release gives up the lock of an image being saved.
func (b *bootImage) release() {
	if b != nil {
		b.lk.Unlock()
	}
}

// runscIdentity is the runsc binary's path, file identity and version; the version is asked
// again when the file changes (an upgrade in place).
type runscIdentity struct {
	mu   sync.Mutex
	stat string // the file identity id was found for
	id   string
}

func (p *Provider) runscID(rt ociRuntime) string {
	r := &p.bootRunsc
	r.mu.Lock()
	defer r.mu.Unlock()
	var st unix.Stat_t
	if unix.Stat(rt.path, &st) != nil {
		return ""
	}
	if r.id != "" && r.stat == statKey(&st) {
		return r.id
	}
	r.id = ""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := rt.output(ctx, "none", "--version")
	if err != nil {
		return ""
	}
	r.stat = statKey(&st)
	r.id = rt.path + " " + r.stat + " " + strings.Join(strings.Fields(string(out)), " ")
	return r.id
}

// bootEligible reports whether a create of spec may use or save a boot image (see above).
func (p *Provider) bootEligible(spec provider.CreateSpec, rtName string, netMode provider.NetworkMode, pooled bool, given *sandboxTemplate) bool {
	return p.cfg.BootImages && !pooled && given == nil && rtName == RuntimeRunsc &&
		netMode == provider.NetworkNone && spec.From == "" && len(spec.Env) == 0 &&
		len(spec.Secrets) == 0 && len(spec.BoundSecrets) == 0 && len(spec.Volumes) == 0 &&
		spec.Timeout >= 0 && spec.IdleTimeout >= 0
}

// bootInputsFor are the inputs of the image of a sandbox of template tp and size on rt.
func (p *Provider) bootInputsFor(rt ociRuntime, tp *sandboxTemplate, size provider.Size, agentPath string) (bootInputs, error) {
	rid := p.runscID(rt)
	if rid == "" {
		return bootInputs{}, errors.New("runsc's version is unknown")
	}
	var st unix.Stat_t
	if err := unix.Stat(agentPath, &st); err != nil {
		return bootInputs{}, err
	}
	in := bootInputs{
		Format: bootImageFormat, Template: tp.name, Runsc: rid, RunscArgs: rt.globalArgs("none")[2:],
		Agent: agentPath + " " + statKey(&st), Protocol: agentspec.Version,
		CPU: size.CPU, MemoryMB: size.MemoryMB, DiskGB: size.DiskGB,
	}
	if tp.image != nil {
		cfg := tp.image.Config
		in.Layers, in.Config, in.TemplateCreated = tp.image.Layers, &cfg, tp.image.Created
	}
	s := buildSpec(bundleSpec{
		id: "boot", runtime: RuntimeRunsc, rootfs: "/rootfs", agentPath: "/agent", runDir: "/run",
		tmpDir: "/tmp", cpu: size.CPU, memoryMB: size.MemoryMB, limitSwap: swapAccounted(), pids: p.cfg.PidsLimit,
	})
	b, err := json.Marshal(s)
	if err != nil {
		return bootInputs{}, err
	}
	in.Spec = hashString(string(b))
	return in, nil
}

// bootImageFor returns what an eligible create does with a boot image: nil to boot cold
// and save nothing (no inputs, or another create is saving the image), a restore when a
// sound image exists, else a save (the caller must release it).
func (p *Provider) bootImageFor(ctx context.Context, rt ociRuntime, tp *sandboxTemplate, size provider.Size, agentPath string) *bootImage {
	in, err := p.bootInputsFor(rt, tp, size, agentPath)
	if err != nil {
		return nil
	}
	key := in.key()
	if p.bootImageSound(key, &in) {
		return &bootImage{key: key, inputs: in}
	}
	if err := os.MkdirAll(p.lay.bootImages(), 0o700); err != nil {
		return nil
	}
	lk, err := flock.TryAcquire(filepath.Join(p.lay.bootImages(), ".lock-"+key))
	if err != nil || lk == nil {
		return nil
	}
	if p.bootImageSound(key, &in) { // saved while we looked
		lk.Unlock()
		return &bootImage{key: key, inputs: in}
	}
	// What is there (unsound) goes; a crash's leftovers of this key with it.
	p.discardBootImage(key)
	return &bootImage{key: key, inputs: in, save: true, lk: lk}
}

// bootImageSound reports whether the image of key is complete and made from in; one that
// exists but is not is removed.
func (p *Provider) bootImageSound(key string, in *bootInputs) bool {
	b, err := os.ReadFile(filepath.Join(p.lay.bootImage(key), "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	var m bootMeta
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err == nil {
		want, _ := json.Marshal(in)
		got, _ := json.Marshal(&m.Inputs)
		if m.Key == key && bytes.Equal(want, got) {
			if ents, err := os.ReadDir(filepath.Join(p.lay.bootImage(key), "image")); err == nil && len(ents) > 0 {
				return true
			}
		}
	}
	p.discardBootImage(key)
	return false
}

// discardBootImage removes the image of key: renamed out of sight first, so a half-removed
// one is never found. A restore reading it meanwhile fails and boots cold.
func (p *Provider) discardBootImage(key string) {
	gone := filepath.Join(p.lay.bootImages(), ".rm-"+key+"-"+strconv.Itoa(os.Getpid()))
	if os.Rename(p.lay.bootImage(key), gone) == nil {
		os.RemoveAll(gone)
	}
}

// saveBootImage checkpoints the freshly booted sandbox rec into the image of b and lets it
// run on: its agent's limits are cleared (a restored sandbox must not inherit them) and its
// listener closed, the sandbox paused, checkpointed, resumed, and its agent told to listen
// again. A failure to save leaves no image and does not fail the create; a sandbox that
// cannot run on after it does (the returned error).
func (p *Provider) saveBootImage(ctx context.Context, rt ociRuntime, rec *record, b *bootImage) error {
	defer b.release()
	c := agentClient(p.lay.socket(rec.ID))
	err := c.SetLimits(ctx, time.Time{}, 0)
	if err == nil {
		err = c.Quiesce(ctx)
	}
	c.Close()
	if err != nil {
		return nil // the agent runs as it was: no image this time
	}
	bg := context.WithoutCancel(ctx)
	// Unique, though the lock makes this the only writer of key: the pid last, for prune.
	tmp := filepath.Join(p.lay.bootImages(), ".tmp-"+b.key+"-"+newID()+"-"+strconv.Itoa(os.Getpid()))
	net := runscNetwork(rec)
	if err := rt.run(ctx, net, "pause", rec.ID); err == nil {
		werr := p.writeBootImage(ctx, rt, rec, b, tmp)
		if err := rt.run(bg, net, "resume", rec.ID); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		if werr != nil {
			os.RemoveAll(tmp)
		}
	}
	// relisten gives the agent the record's deadline back; the record step sets the idle
	// timeout.
	return p.instance(rec).relisten(bg, rt, rec)
}

// writeBootImage writes the image of the paused sandbox rec to tmp, syncs it and renames
// it into place.
func (p *Provider) writeBootImage(ctx context.Context, rt ociRuntime, rec *record, b *bootImage, tmp string) error {
	img := filepath.Join(tmp, "image")
	if err := os.MkdirAll(img, 0o700); err != nil {
		return err
	}
	if err := checkpointRunning(ctx, rt, rec, img, "--exclude-committed-zero-pages"); err != nil {
		return err
	}
	if h := testHookBootImageWrite; h != nil {
		if err := h(tmp); err != nil {
			return err
		}
	}
	m, err := json.MarshalIndent(bootMeta{Key: b.key, Inputs: b.inputs, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), m, 0o600); err != nil {
		return err
	}
	if err := syncTree(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p.lay.bootImage(b.key)); err != nil {
		return err
	}
	return durable.SyncDir(p.lay.bootImages())
}

// testHookBootImageWrite, when set by a test, runs once a boot image's checkpoint is in its
// temporary directory and before its metadata is written: an error abandons the image there.
var testHookBootImageWrite func(tmp string) error

// syncTree fsyncs every file and directory below dir, dir included.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		serr := f.Sync()
		return errors.Join(serr, f.Close())
	})
}

// errBootRestore marks a create that failed restoring a boot image (which is removed): the
// create is made again, cold.
type errBootRestore struct{ err error }

func (e *errBootRestore) Error() string { return "restore from a boot image: " + e.err.Error() }
func (e *errBootRestore) Unwrap() error { return e.err }

// PruneBootImages removes the boot images that no create would use again: those of a
// template the store no longer has (or has made anew), those made from another runsc,
// agent or provider than this one's, unreadable ones, and what writes and removals that
// died halfway left. It returns how many images it removed. tupper template rm and prune
// call it; DeleteTemplate does.
func (p *Provider) PruneBootImages(ctx context.Context) (int, error) {
	p.probed()
	dir := p.lay.bootImages()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, provider.Wrap(err, provider.CodeProvider, "prune boot images")
	}
	var store *template.Store
	rt, haveRunsc := p.runtimes[RuntimeRunsc]
	agentPath, agentErr := p.agentPath()
	n := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") || strings.HasPrefix(name, ".rm-") {
			i := strings.LastIndexByte(name, '-')
			pid, err := strconv.Atoi(name[i+1:])
			if err == nil && pid != os.Getpid() && unix.Kill(pid, 0) == unix.ESRCH {
				os.RemoveAll(filepath.Join(dir, name))
			}
			continue
		}
		if !e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		stale := true
		b, err := os.ReadFile(filepath.Join(dir, name, "meta.json"))
		var m bootMeta
		if err == nil && json.Unmarshal(b, &m) == nil && m.Key == name {
			stale = false
			tp := &sandboxTemplate{name: m.Inputs.Template}
			if tp.name != TemplateHost {
				if store == nil {
					if store, err = p.templateStore(); err != nil {
						return n, err
					}
				}
				t, err := store.Get(tp.name)
				if err != nil {
					stale = provider.CodeOf(err) == provider.CodeNotFound
				} else {
					tp.image = t
				}
			}
			if !stale && haveRunsc && agentErr == nil {
				size := provider.Size{CPU: m.Inputs.CPU, MemoryMB: m.Inputs.MemoryMB, DiskGB: m.Inputs.DiskGB}
				in, err := p.bootInputsFor(rt, tp, size, agentPath)
				stale = err == nil && in.key() != name
			}
		}
		if stale {
			p.discardBootImage(name)
			n++
		}
	}
	return n, nil
}
