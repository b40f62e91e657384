package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/agent"
	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/internal/steps"
	"github.com/tupper-dev/tupper/provider"
)

// Paths inside every container.
const (
	agentPort    = 49983 // the agent's TCP port, envd's
	agentBinPath = "/.tupper/bin/tupper"
	agentSocket  = "/.tupper/agent.sock" // the agent's, in a container with no network
	workspace    = "/workspace"
)

// Create makes and starts a container whose init is the agent, in named, undoable steps:
// image, labels, agent config, network, container, kept config, agent binary, start, agent
// ready.
// A failure or a done ctx removes the container.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	c, err := p.newCreation(ctx, spec)
	if err != nil {
		return nil, err
	}
	// The steps' errors say what failed already: not prefixed with the step's name.
	if err := (steps.Runner{Unnamed: true}).Run(ctx, c.steps(ctx)); err != nil {
		if err == ctx.Err() {
			// Done between two steps, as the engine's next call would have found.
			return nil, p.err(err, "create")
		}
		return nil, err
	}
	p.rememberConfig(c.id, c.cfgJSON)
	return c.inst, nil
}

// creation is one Create under way: what its spec resolved to (newCreation), and what its
// steps made so far, which the later steps and the undo read.
type creation struct {
	p         *Provider
	spec      provider.CreateSpec
	none      bool   // network "none"
	agentPath string // the agent binary for the engine's architecture
	template  string
	rt        string // the OCI runtime

	// Made by the steps.
	image     string
	img       client.ImageInspectResult
	id, token string
	deadline  time.Time // until the sandbox is ready (see makeLabels)
	hostBased bool
	labels    map[string]string
	workdir   string
	cfgJSON   []byte // the agent's config
	cid       string // the container
	inst      *Instance
}

// newCreation checks a create's spec and resolves what it names: network, agent binary,
// template, runtime.
func (p *Provider) newCreation(ctx context.Context, spec provider.CreateSpec) (*creation, error) {
	if len(spec.BoundSecrets) > 0 {
		return nil, provider.Errorf(provider.CodeUnsupported, "docker: bound secrets need an egress proxy outside the sandbox, which this provider has not (the local provider, on Linux, has one)")
	}
	c := &creation{p: p, spec: spec, template: spec.Template, rt: spec.Runtime}
	switch spec.Network.Mode {
	case "", provider.NetworkAll:
	case provider.NetworkNone:
		c.none = true
	default:
		return nil, provider.Errorf(provider.CodeUnsupported, "docker: network %q is not supported (\"all\" or \"none\")", spec.Network.Mode)
	}
	p.reapSome(ctx)
	arch, err := p.engineArch(ctx)
	if err != nil {
		return nil, err
	}
	if c.agentPath, err = p.agentBinary(arch); err != nil {
		return nil, err
	}
	if c.template == "" {
		c.template = p.cfg.Template
	}
	if c.rt == "" {
		c.rt = p.cfg.Runtime
	}
	return c, nil
}

// steps are the creation's steps, in order, each with its undo.
func (c *creation) steps(ctx context.Context) []steps.Step {
	return []steps.Step{
		{Name: "image", Do: c.resolveImage},
		{Name: "labels", Do: c.makeLabels},
		{Name: "agent config", Do: c.agentConfig},
		{Name: "network", Do: c.network},
		{Name: "container", Do: c.container, Undo: func() error { c.removeContainer(ctx); return nil }},
		{Name: "kept config", Do: c.keepConfig},
		{Name: "agent binary", Do: c.copyAgent},
		{Name: "start", Do: c.start},
		{Name: "agent", Do: c.agentReady},
	}
}

// resolveImage finds the image: the snapshot's (spec.From), the host template's, or the
// template's, pulled if missing.
func (c *creation) resolveImage(ctx context.Context) error {
	p, spec := c.p, c.spec
	var err error
	switch {
	case spec.From != "":
		if !validID(spec.From) {
			return provider.Errorf(provider.CodeNotFound, "snapshot %s not found", spec.From)
		}
		c.image = snapshotRepo + ":" + spec.From
		si, err := p.cli.ImageInspect(ctx, c.image)
		if err != nil {
			if e := p.err(err, "create"); provider.CodeOf(e) == provider.CodeNotFound {
				return provider.Errorf(provider.CodeNotFound, "snapshot %s not found", spec.From)
			}
			return p.err(err, "create")
		}
		if si.Config != nil && expired(si.Config.Labels, time.Now()) {
			p.cli.ImageRemove(ctx, c.image, client.ImageRemoveOptions{})
			return provider.Errorf(provider.CodeNotFound, "snapshot %s has expired", spec.From)
		}
	case c.template == HostTemplate:
		if c.image, err = p.hostImage(ctx); err != nil {
			return err
		}
	default:
		if c.image, err = p.ensureImage(ctx, c.template); err != nil {
			return err
		}
	}
	if c.img, err = p.cli.ImageInspect(ctx, c.image); err != nil {
		return p.err(err, "create: image "+c.image)
	}
	return nil
}

// makeLabels makes the sandbox's id and token and its container's labels.
func (c *creation) makeLabels(ctx context.Context) error {
	p, spec, img := c.p, c.spec, c.img
	c.id, c.token = newID(), newToken()
	// The lifetime counts from when the sandbox is ready (SetTimeout in agentReady); until
	// then the deadline in the label and the agent's config is later by the ready timeout,
	// so a sandbox whose Create died halfway still ends.
	if spec.Timeout > 0 {
		c.deadline = time.Now().Add(spec.Timeout + p.cfg.ReadyTimeout)
	}
	deadline := c.deadline
	labels := map[string]string{
		labelSandbox:  c.id,
		labelKey:      spec.Key,
		labelTemplate: c.template,
		labelRuntime:  c.rt,
		labelToken:    c.token,
		labelDeadline: "0",
	}
	if spec.From != "" {
		labels[labelTemplate] = "snapshot:" + spec.From
	}
	c.hostBased = c.template == HostTemplate && spec.From == "" || img.Config != nil && img.Config.Labels[labelHostTmpl] != ""
	caps := p.Capabilities()
	if !c.hostBased {
		delete(caps, provider.CapShell)
		delete(caps, provider.CapGit)
		delete(caps, provider.CapUsers)
	} else {
		labels[labelHostTmpl] = "1"
	}
	labels[labelNet] = string(provider.NetworkAll)
	if c.none {
		labels[labelNet] = string(provider.NetworkNone)
	}
	labels[labelCaps] = caps.String()
	if !deadline.IsZero() {
		labels[labelDeadline] = strconv.FormatInt(deadline.Unix(), 10)
	}
	if len(spec.Labels) > 0 {
		b, _ := json.Marshal(spec.Labels)
		labels[labelUsers] = string(b)
	} else {
		labels[labelUsers] = "{}"
	}
	c.labels = labels
	return nil
}

// agentConfig makes the agent's config: the image's environment under the spec's, and the
// image's working directory.
func (c *creation) agentConfig(ctx context.Context) error {
	spec, img := c.spec, c.img
	env := map[string]string{}
	if img.Config != nil {
		for _, kv := range img.Config.Env {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				env[k] = v
			}
		}
	}
	maps.Copy(env, spec.Env)
	maps.Copy(env, spec.Secrets)
	// The image's working directory (its WORKDIR) is where commands given no cwd run, as under
	// docker run; /workspace where it names none.
	c.workdir = workspace
	if img.Config != nil && img.Config.WorkingDir != "" {
		c.workdir = path.Clean("/" + img.Config.WorkingDir)
	}
	acfg := agent.Config{
		Env: env, DefaultWorkdir: c.workdir, AccessToken: c.token,
		IdleTimeoutSeconds: int64((spec.IdleTimeout + time.Second - 1) / time.Second),
		Protocol:           agentspec.Version,
	}
	if !c.deadline.IsZero() {
		acfg.DeadlineUnix = c.deadline.Unix() + 1
	}
	var err error
	if c.cfgJSON, err = json.Marshal(acfg); err != nil {
		return provider.Wrap(err, provider.CodeInternal, "create")
	}
	return nil
}

// network makes the engine's network for sandboxes, unless the sandbox has none.
func (c *creation) network(ctx context.Context) error {
	if c.none {
		return nil
	}
	return c.p.ensureNetwork(ctx)
}

// container creates the container. With a network, the agent listens on a TCP port
// published on the host's loopback; with none, on a unix socket in the container, reached
// through the engine's exec (relay).
func (c *creation) container(ctx context.Context) error {
	p := c.p
	port := network.MustParsePort(fmt.Sprintf("%d/tcp", agentPort))
	listen, exposed := fmt.Sprintf("tcp:0.0.0.0:%d", agentPort), network.PortSet{port: struct{}{}}
	netMode := container.NetworkMode(p.cfg.Network)
	bindings := network.PortMap{port: []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}}
	if c.none {
		listen, exposed, netMode, bindings = "unix:"+agentSocket, nil, "none", nil
	}
	size := c.spec.Size.Resolved()
	hc := &container.HostConfig{
		NetworkMode:  netMode,
		PortBindings: bindings,
		Runtime:      c.rt,
		Resources: container.Resources{
			PidsLimit: &p.cfg.PidsLimit,
		},
		LogConfig: container.LogConfig{Type: "none"},
	}
	if size.CPU > 0 {
		hc.Resources.NanoCPUs = int64(size.CPU * 1e9)
	}
	if size.MemoryMB > 0 {
		hc.Resources.Memory = int64(size.MemoryMB) << 20
		hc.Resources.MemorySwap = hc.Resources.Memory
	}
	if !*p.cfg.CopyAgent {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: c.agentPath, Target: agentBinPath, ReadOnly: true})
	}
	if c.hostBased {
		hc.Mounts = append(hc.Mounts, hostMounts()...)
	}
	created, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: namePrefix + c.id,
		Config: &container.Config{
			Image:        c.image,
			Entrypoint:   []string{agentBinPath, "agent", "--listen", listen, "--config", "-"},
			Cmd:          nil,
			User:         "0:0",
			WorkingDir:   c.workdir, // made by the engine where the image lacks it
			OpenStdin:    true,
			StdinOnce:    true,
			AttachStdin:  true,
			Hostname:     c.id[:12],
			Labels:       c.labels,
			ExposedPorts: exposed,
			StopSignal:   "SIGKILL",
		},
		HostConfig: hc,
	})
	if err != nil {
		return p.err(err, "create")
	}
	c.cid = created.ID
	return nil
}

// removeContainer undoes container (and keepConfig, whose volume goes with it), even once
// ctx is done.
func (c *creation) removeContainer(ctx context.Context) {
	if c.cid == "" {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	c.p.cli.ContainerRemove(rctx, c.cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	c.p.forgetCold(rctx, c.id)
}

// keepConfig keeps the agent's config in the engine, for a pause without memory by any
// tupper process (cold.go). After the container: a crash between leaves a container that a
// reap removes, the volume with it.
func (c *creation) keepConfig(ctx context.Context) error {
	return c.p.keepConfig(ctx, c.id, c.cfgJSON)
}

// copyAgent copies the agent binary into the container, where the engine cannot
// bind-mount it (Config.CopyAgent).
func (c *creation) copyAgent(ctx context.Context) error {
	if !*c.p.cfg.CopyAgent {
		return nil
	}
	b, err := os.ReadFile(c.agentPath)
	if err != nil {
		return provider.Errorf(provider.CodeUnavailable, "docker: reading the agent: %v", err)
	}
	files := []tarFile{
		{name: ".tupper/", mode: 0o711 | dirBit},
		{name: ".tupper/bin/", mode: 0o755 | dirBit},
		{name: ".tupper/bin/tupper", mode: 0o755, data: b},
	}
	if _, err := c.p.cli.CopyToContainer(ctx, c.cid, client.CopyToContainerOptions{
		DestinationPath: "/", Content: bytes.NewReader(makeTar(files)),
	}); err != nil {
		return c.p.err(err, "create: copying the agent")
	}
	return nil
}

// start starts the container, handing the agent its config.
func (c *creation) start(ctx context.Context) error {
	return c.p.start(ctx, c.cid, c.cfgJSON)
}

// agentReady waits for the agent to answer, then starts the sandbox's lifetime.
func (c *creation) agentReady(ctx context.Context) error {
	in, err := c.p.inspectID(ctx, c.cid)
	if err != nil {
		return c.p.err(err, "create: inspect")
	}
	inst := c.p.instance(in.Container)
	if err := c.p.waitAgent(ctx, inst); err != nil {
		inst.Close()
		return err
	}
	if c.spec.Timeout > 0 {
		if err := inst.SetTimeout(ctx, c.spec.Timeout); err != nil {
			inst.Close()
			return err
		}
	}
	c.inst = inst
	return nil
}

// start starts a container whose init is the agent, handing the agent its config on its
// standard input (attached before the start, closed once written): Create's start, and the
// resume of a sandbox paused without its memory. The config (token, environment, secrets) is
// never a file in the container, so no snapshot (docker commit) keeps it.
func (p *Provider) start(ctx context.Context, cid string, cfg []byte) error {
	att, err := p.cli.ContainerAttach(ctx, cid, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return p.err(err, "start: attach")
	}
	sent := make(chan error, 1)
	go func() {
		_, err := att.Conn.Write(cfg)
		if err == nil {
			err = att.CloseWrite()
		}
		sent <- err
	}()
	_, err = p.cli.ContainerStart(ctx, cid, client.ContainerStartOptions{})
	if err != nil {
		att.Close()
		return p.err(err, "start")
	}
	select {
	case err = <-sent:
	case <-ctx.Done():
		err = ctx.Err()
	}
	att.Close()
	if err != nil {
		return provider.Errorf(provider.CodeProvider, "docker: handing the agent its config: %v", err)
	}
	return nil
}

// engineArch is the engine's architecture (x86_64, aarch64, ...), asked once: an engine
// does not change it while it answers on the same address, and Info is the slowest call of
// a create after the container's start.
func (p *Provider) engineArch(ctx context.Context) (string, error) {
	p.archMu.Lock()
	defer p.archMu.Unlock()
	if p.arch != "" {
		return p.arch, nil
	}
	info, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return "", p.err(err, "create")
	}
	p.arch = info.Info.Architecture
	return p.arch, nil
}

// waitAgent polls the agent until it answers /health, the container stops, or the ready
// timeout passes.
func (p *Provider) waitAgent(ctx context.Context, inst *Instance) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		err := inst.Client().Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		if in, ierr := p.inspectID(ctx, inst.cid); ierr == nil && !in.Container.State.Running {
			return provider.Errorf(provider.CodeProvider, "docker: the agent exited (status %d): %s", in.Container.State.ExitCode, p.logTail(ctx, inst.cid))
		}
		select {
		case <-ctx.Done():
			return provider.Errorf(provider.CodeTimeout, "docker: the agent did not answer: %v", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// logTail is the end of a container's output, for messages. Containers log nowhere (the
// agent's output is not kept), so this says so.
func (p *Provider) logTail(ctx context.Context, cid string) string {
	return "no log is kept; run the image with the agent by hand to see why"
}

// ensureImage returns ref when the engine has it, else pulls it first.
func (p *Provider) ensureImage(ctx context.Context, ref string) (string, error) {
	if _, err := p.cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if provider.CodeOf(p.err(err, "")) != provider.CodeNotFound {
		return "", p.err(err, "create: image "+ref)
	}
	resp, err := p.cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return "", p.err(err, "create: pulling "+ref)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return "", p.err(err, "create: pulling "+ref)
	}
	return ref, nil
}

// hostMounts are the host template's read-only binds: the host's /usr, and /bin, /sbin and
// /lib* where they are directories rather than merged-/usr links.
func hostMounts() []mount.Mount {
	ms := []mount.Mount{{Type: mount.TypeBind, Source: "/usr", Target: "/usr", ReadOnly: true}}
	for _, d := range hostTopDirs() {
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: "/" + d, Target: "/" + d, ReadOnly: true})
	}
	return ms
}

// hostTopDirs are /bin, /sbin, /lib, /lib32, /lib64 and /libx32 where they are directories.
func hostTopDirs() []string {
	var out []string
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// hostImage returns the host template's image, importing it on first need: the
// merged-/usr links of the host, a private /etc, and empty /usr, /tmp, /root, /home/user and
// /workspace; the host's /usr is bind-mounted at create. Its name holds a hash of its
// content, so every provider on the engine shares one.
func (p *Provider) hostImage(ctx context.Context) (string, error) {
	if !p.self {
		return "", provider.Errorf(provider.CodeInvalidArgument, "docker: the host template needs an engine on this Linux machine; name an image")
	}
	p.hostMu.Lock()
	defer p.hostMu.Unlock()
	if p.hostImg != "" {
		return p.hostImg, nil
	}
	files := []tarFile{
		{name: "usr/", mode: 0o755 | dirBit},
		{name: "etc/", mode: 0o755 | dirBit},
		{name: "tmp/", mode: 0o1777 | dirBit},
		{name: "root/", mode: 0o700 | dirBit},
		{name: "home/", mode: 0o755 | dirBit},
		{name: "home/user/", mode: 0o755 | dirBit, uid: 1000},
		{name: "workspace/", mode: 0o755 | dirBit},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/bash\n" +
			"user:x:1000:1000:user:/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n")},
	}
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if t, err := os.Readlink("/" + d); err == nil {
			files = append(files, tarFile{name: d, link: t})
		} else if fi, err := os.Stat("/" + d); err == nil && fi.IsDir() {
			files = append(files, tarFile{name: d + "/", mode: 0o755 | dirBit})
		}
	}
	archive := makeTar(files)
	sum := sha256.Sum256(archive)
	ref := hostImageRepo + ":" + hex.EncodeToString(sum[:8])
	if _, err := p.cli.ImageInspect(ctx, ref); err == nil {
		p.hostImg = ref
		return ref, nil
	}
	res, err := p.cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(archive), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{"LABEL " + labelHostTmpl + "=1"}, Message: "tupper host template"})
	if err != nil {
		return "", p.err(err, "create: importing the host template")
	}
	_, err = io.Copy(io.Discard, res)
	res.Close()
	if err != nil {
		return "", p.err(err, "create: importing the host template")
	}
	p.hostImg = ref
	return ref, nil
}

// ensureNetwork makes the provider's network when it is missing: a bridge whose containers
// cannot reach each other, labelled as the provider's.
func (p *Provider) ensureNetwork(ctx context.Context) error {
	p.netMu.Lock()
	defer p.netMu.Unlock()
	if _, err := p.cli.NetworkInspect(ctx, p.cfg.Network, client.NetworkInspectOptions{}); err == nil {
		return nil
	}
	_, err := p.cli.NetworkCreate(ctx, p.cfg.Network, client.NetworkCreateOptions{
		Driver:  "bridge",
		Labels:  map[string]string{labelNetwork: "1"},
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"},
	})
	if err != nil && provider.CodeOf(p.err(err, "")) != provider.CodeConflict {
		return p.err(err, "create: network "+p.cfg.Network)
	}
	return nil
}

// A tar entry of makeTar.
type tarFile struct {
	name string
	mode int64
	uid  int
	data []byte
	link string // a symlink to link
}

const dirBit = 1 << 40 // in tarFile.mode: a directory

// makeTar returns a tar archive of files, owned by root unless uid is set.
func makeTar(files []tarFile) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode &^ dirBit, Uid: f.uid, Gid: f.uid, ModTime: mt, Format: tar.FormatPAX}
		switch {
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		case f.mode&dirBit != 0:
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		tw.WriteHeader(h)
		tw.Write(f.data)
	}
	tw.Close()
	return buf.Bytes()
}
