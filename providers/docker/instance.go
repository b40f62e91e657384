package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	agentclient "github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// Instance is one sandbox: a container. The embedded agentinst.Agent talks to its agent
// through the published port (exec, files, file-system operations, activity, ranged reads,
// port tunnels, terminals); the methods here use the engine: Info, Capabilities, Pause,
// Resume, SetTimeout, PreviewURL, Snapshot. Every method may be called concurrently.
type Instance struct {
	*agentinst.Agent
	p   *Provider
	id  string
	cid string // the container's id
	in  container.InspectResponse

	amu  sync.Mutex
	addr string // the agent's published port on the host; a start after a cold pause moves it
	boot int    // the provider's count of the container's cold starts when addr was read
}

var (
	_ provider.Instance           = (*Instance)(nil)
	_ provider.FileSystem         = (*Instance)(nil)
	_ provider.Pauser             = (*Instance)(nil)
	_ provider.TimeoutSetter      = (*Instance)(nil)
	_ provider.Snapshotter        = (*Instance)(nil)
	_ provider.CapabilityReporter = (*Instance)(nil)
	_ provider.PortDialer         = (*Instance)(nil)
	_ provider.Terminaler         = (*Instance)(nil)
)

// instance is the handle of the container in.
func (p *Provider) instance(in container.InspectResponse) *Instance {
	i := &Instance{p: p, id: in.Config.Labels[labelSandbox], cid: in.ID, in: in, addr: agentAddr(in), boot: p.boots(in.Config.Labels[labelSandbox])}
	dial := func(ctx context.Context) (net.Conn, error) {
		addr, err := i.agentAddr(ctx)
		if err != nil {
			return nil, err
		}
		if addr == "" {
			return nil, fmt.Errorf("the agent's port is not published (the container is not running)")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	if in.Config.Labels[labelNet] == string(provider.NetworkNone) {
		dial = p.relayDial(in.ID)
	}
	c := agentclient.NewWithOptions(agentclient.Options{Dial: dial, AccessToken: in.Config.Labels[labelToken]})
	i.Agent = agentinst.NewAgent(agentinst.Config{ID: i.id, Client: c, Check: i.check, Gone: i.gone})
	if in.State != nil {
		p.setPaused(i.id, in.State.Paused || coldPaused(in))
	}
	return i
}

// agentAddr is the agent's address on the host. A resume after a pause without memory
// (through any handle of this provider) starts the container again on a new port: then the
// container is inspected again.
func (i *Instance) agentAddr(ctx context.Context) (string, error) {
	i.amu.Lock()
	defer i.amu.Unlock()
	if b := i.p.boots(i.id); b != i.boot || i.addr == "" {
		res, err := i.p.inspectID(ctx, i.cid)
		if err != nil {
			return "", i.lifecycleErr(err, "dial")
		}
		i.addr, i.boot = agentAddr(res.Container), b
	}
	return i.addr, nil
}

// agentAddr is the host address of the agent's published port, "" when there is none.
func agentAddr(in container.InspectResponse) string {
	if in.NetworkSettings == nil {
		return ""
	}
	port := network.MustParsePort(fmt.Sprintf("%d/tcp", agentPort))
	for _, b := range in.NetworkSettings.Ports[port] {
		if b.HostIP.IsLoopback() && b.HostPort != "" {
			return net.JoinHostPort(b.HostIP.String(), b.HostPort)
		}
	}
	return ""
}

// check refuses calls to a paused sandbox's agent, which cannot answer: CodeConflict. It
// knows of pauses made through this provider (in this process); a call to a sandbox paused
// by another waits for its context.
func (i *Instance) check(ctx context.Context) error {
	if i.p.isPaused(i.id) {
		return provider.Errorf(provider.CodeConflict, "sandbox %s is paused", i.id)
	}
	return nil
}

// gone reports whether the container has stopped or been removed.
func (i *Instance) gone(ctx context.Context) bool {
	in, err := i.p.inspectID(ctx, i.cid)
	if err != nil {
		return provider.CodeOf(i.p.err(err, "")) == provider.CodeNotFound
	}
	return !in.Container.State.Running
}

// Info inspects the container.
func (i *Instance) Info(ctx context.Context) (provider.Info, error) {
	in, err := i.p.inspectID(ctx, i.cid)
	if err != nil {
		if provider.CodeOf(i.p.err(err, "")) == provider.CodeNotFound {
			return provider.Info{}, errNotFound(i.id)
		}
		return provider.Info{}, i.p.err(err, "info")
	}
	return info(in.Container), nil
}

// Capabilities are the sandbox's own, recorded at creation (shell, git and users depend on
// its template), less the names of optional interfaces a record from before they stopped
// being declared holds.
func (i *Instance) Capabilities() provider.Capabilities {
	var caps []provider.Capability
	for c := range strings.SplitSeq(i.in.Config.Labels[labelCaps], ",") {
		if c != "" {
			caps = append(caps, provider.Capability(c))
		}
	}
	if len(caps) == 0 {
		return i.p.Capabilities()
	}
	return provider.NewCapabilities(caps...).Declared()
}

// Pause freezes the container (docker pause); pausing a paused sandbox is fine.
func (i *Instance) Pause(ctx context.Context) error {
	_, err := i.p.cli.ContainerPause(ctx, i.cid, client.ContainerPauseOptions{})
	if err != nil && !strings.Contains(err.Error(), "already paused") {
		return i.lifecycleErr(err, "pause")
	}
	i.p.setPaused(i.id, true)
	return nil
}

// Resume thaws it (docker unpause), or starts it again when it was paused without its
// memory (PauseCold); resuming a running sandbox is fine.
func (i *Instance) Resume(ctx context.Context) error {
	res, err := i.p.inspectID(ctx, i.cid)
	if err != nil {
		return i.lifecycleErr(err, "resume")
	}
	if in := res.Container; isCold(in.Name) {
		if coldPaused(in) {
			return i.resumeCold(ctx, in)
		}
		if in.State != nil && in.State.Running && !in.State.Paused {
			// A resume that ended before the rename back: running already.
			if _, err := i.p.cli.ContainerRename(ctx, i.cid, client.ContainerRenameOptions{NewName: warmName(in.Name)}); err != nil {
				return i.lifecycleErr(err, "resume")
			}
			i.p.setPaused(i.id, false)
			return nil
		}
	}
	_, err = i.p.cli.ContainerUnpause(ctx, i.cid, client.ContainerUnpauseOptions{})
	if err != nil && !strings.Contains(err.Error(), "not paused") {
		return i.lifecycleErr(err, "resume")
	}
	i.p.setPaused(i.id, false)
	return nil
}

func (i *Instance) lifecycleErr(err error, op string) error {
	e := i.p.err(err, op)
	if provider.CodeOf(e) == provider.CodeNotFound {
		return errNotFound(i.id)
	}
	return e
}

// SetTimeout moves the lifetime deadline to d from now: the container is renamed
// tupper-<id>.<deadline> (labels cannot change), then the agent is told.
func (i *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "timeout must be positive")
	}
	if err := i.check(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	name := fmt.Sprintf("%s%s.%d", namePrefix, i.id, deadline.Unix()+1)
	if _, err := i.p.cli.ContainerRename(ctx, i.cid, client.ContainerRenameOptions{NewName: name}); err != nil {
		return i.lifecycleErr(err, "set_timeout")
	}
	return i.SetDeadline(ctx, deadline)
}

// PreviewURL is a loopback URL that this process forwards to port inside the sandbox
// through the agent's tunnel, so a server listening on the sandbox's 127.0.0.1 is reached
// too. It lives as long as the provider.
func (i *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if err := i.check(ctx); err != nil {
		return "", err
	}
	c := i.Client()
	addr, err := i.p.previews.Open(i.id, port, func(ctx context.Context) (net.Conn, error) { return c.DialPort(ctx, port) }, nil)
	if err != nil {
		return "", err
	}
	return "http://" + addr + "/", nil
}

// Snapshot commits the container's filesystem to the image tupper-snapshot:<id> (docker
// commit pauses it meanwhile). Processes and memory are not kept. A snapshot with an expiry
// carries it as a label; from then on a create from it fails with CodeNotFound and removes
// it, and so does every Reap.
func (i *Instance) Snapshot(ctx context.Context, expires time.Duration) (string, error) {
	if err := i.check(ctx); err != nil {
		return "", err
	}
	sid := newID()
	labels := map[string]string{labelSnapshot: sid, labelSnapshot + "-network": i.p.cfg.Network}
	if expires > 0 {
		labels[labelExpires] = strconv.FormatInt(time.Now().Add(expires).UnixMilli(), 10)
	}
	if i.in.Config.Labels[labelHostTmpl] != "" || i.in.Config.Labels[labelTemplate] == HostTemplate {
		labels[labelHostTmpl] = "1"
	}
	_, err := i.p.cli.ContainerCommit(ctx, i.cid, client.ContainerCommitOptions{
		Reference: snapshotRepo + ":" + sid,
		Comment:   "tupper snapshot of sandbox " + i.id,
		Config:    &container.Config{Labels: labels},
	})
	if err != nil {
		return "", i.lifecycleErr(err, "snapshot")
	}
	return sid, nil
}

// DeleteSnapshot removes a snapshot's image; one that does not exist is CodeNotFound.
func (p *Provider) DeleteSnapshot(ctx context.Context, id string) error {
	if !validID(id) {
		return provider.Errorf(provider.CodeNotFound, "snapshot %s not found", id)
	}
	_, err := p.cli.ImageRemove(ctx, snapshotRepo+":"+id, client.ImageRemoveOptions{})
	if err != nil {
		e := p.err(err, "delete_snapshot")
		if provider.CodeOf(e) == provider.CodeNotFound {
			return provider.Errorf(provider.CodeNotFound, "snapshot %s not found", id)
		}
		return e
	}
	return nil
}

// info is the contract's description of a sandbox's container.
func info(in container.InspectResponse) provider.Info {
	l := in.Config.Labels
	out := provider.Info{
		ID: l[labelSandbox], Key: l[labelKey], Template: l[labelTemplate], Runtime: l[labelRuntime],
		State: provider.StateStopped, Deadline: deadlineOf(strings.TrimPrefix(in.Name, "/"), l),
		Workdir: in.Config.WorkingDir, // the image's WORKDIR, else /workspace (create.go)
	}
	json.Unmarshal([]byte(l[labelUsers]), &out.Labels)
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if t, err := time.Parse(time.RFC3339Nano, in.Created); err == nil {
		out.CreatedAt = t
	}
	if s := in.State; s != nil {
		// A sandbox exists from when its container started (it is made and started in one
		// Create); the container's own creation time is earlier by the copy of the agent's
		// files.
		if t, err := time.Parse(time.RFC3339Nano, s.StartedAt); err == nil && t.After(out.CreatedAt) {
			out.CreatedAt = t
		}
		switch {
		case s.Paused, coldPaused(in):
			out.State = provider.StatePaused
		case s.Running:
			out.State = provider.StateRunning
		}
	}
	return out
}

// deadlineOf is a container's lifetime deadline: the one in its name (tupper-<id>.<unix>,
// and .cold after it while paused without its memory), set by SetTimeout, else its label's;
// zero for none.
func deadlineOf(name string, labels map[string]string) time.Time {
	name = warmName(name)
	s := labels[labelDeadline]
	if _, suffix, ok := strings.Cut(name, "."); ok {
		s = suffix
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// isPaused says whether the sandbox is paused, as far as this provider knows (see
// Instance.check).
func (p *Provider) isPaused(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused[id]
}

func (p *Provider) setPaused(id string, v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v {
		p.paused[id] = true
	} else {
		delete(p.paused, id)
	}
}
