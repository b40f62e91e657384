package docker

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/provider"
)

// A pause without memory (provider.ColdPauser) stops the sandbox's container: its agent,
// PID 1, and every process end, and the container keeps its filesystem, labels, network and
// published port. Two things record it in the engine, so a tupper started later knows it:
//
//   - the container's name ends in coldSuffix (tupper-<id>[.<deadline>].cold), which tells
//     a cold-paused container from one whose agent exited (which is removed as ended);
//   - a volume, tupper-cold-<id>, carries the agent's config (its environment and secrets,
//     which are never a file in the container) in its label labelAgentConfig, for the start
//     that resumes it. Create makes it, so that any tupper process can pause the sandbox so.
//     The container mounts nothing of it; it is removed with the sandbox.
//
// Resume starts the container again, hands the agent its config on its standard input as
// Create does, waits for it as Create does, and renames the container back.
const (
	coldSuffix       = ".cold"
	coldVolumePrefix = "tupper-cold-"
	labelAgentConfig = labelPrefix + "agent-config" // on a cold pause's volume: the agent's config, JSON
)

var _ provider.ColdPauser = (*Instance)(nil)

// isCold reports whether a container's name marks it paused without its memory.
func isCold(name string) bool { return strings.HasSuffix(name, coldSuffix) }

// coldName is the name of a container paused without its memory; warmName undoes it.
func coldName(name string) string {
	name = strings.TrimPrefix(name, "/")
	if isCold(name) {
		return name
	}
	return name + coldSuffix
}

func warmName(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(name, "/"), coldSuffix)
}

// coldPaused reports whether an inspected container is paused without its memory: stopped,
// with the cold name.
func coldPaused(in container.InspectResponse) bool {
	return isCold(in.Name) && in.State != nil && !in.State.Running && !in.State.Paused
}

// rememberConfig keeps the agent config of a sandbox this provider made, for a pause
// without memory.
func (p *Provider) rememberConfig(id string, cfg []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.configs[id] = cfg
}

// agentConfig is the agent config of sandbox id: the one this provider made it with, else
// the one a pause without memory saved in the engine; nil when neither is known.
func (p *Provider) agentConfig(ctx context.Context, id string) ([]byte, error) {
	p.mu.Lock()
	cfg := p.configs[id]
	p.mu.Unlock()
	if cfg != nil {
		return cfg, nil
	}
	res, err := p.cli.VolumeInspect(ctx, coldVolumePrefix+id, client.VolumeInspectOptions{})
	if err != nil {
		if e := p.err(err, ""); provider.CodeOf(e) == provider.CodeNotFound {
			return nil, nil
		}
		return nil, p.err(err, "pause")
	}
	if s := res.Volume.Labels[labelAgentConfig]; s != "" && res.Volume.Labels[labelSandbox] == id {
		return []byte(s), nil
	}
	return nil, nil
}

// boots is how many times this provider started sandbox id again after a pause without
// memory; booted counts one more.
func (p *Provider) boots(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.boot[id]
}

func (p *Provider) booted(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.boot[id]++
}

// keepConfig keeps the agent config of sandbox id in the engine, in the label of the volume
// tupper-cold-<id> (made again, it is the same volume): Create does, so that any tupper
// process can pause the sandbox without its memory; PauseCold does again for a sandbox made
// before Create did.
func (p *Provider) keepConfig(ctx context.Context, id string, cfg []byte) error {
	if _, err := p.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
		Name:   coldVolumePrefix + id,
		Labels: map[string]string{labelSandbox: id, labelAgentConfig: string(cfg)},
	}); err != nil {
		return p.err(err, "keeping the agent's config")
	}
	return nil
}

// forgetCold drops what a pause without memory kept of sandbox id (its volume), when the
// sandbox is gone.
func (p *Provider) forgetCold(ctx context.Context, id string) {
	p.mu.Lock()
	delete(p.configs, id)
	delete(p.boot, id)
	p.mu.Unlock()
	if id != "" {
		p.cli.VolumeRemove(ctx, coldVolumePrefix+id, client.VolumeRemoveOptions{Force: true})
	}
}

// PauseCold stops the container, keeping its filesystem, labels, network and port: every
// process ends and its memory is released. In order: the agent's config is saved in the
// engine (a volume's label), the container is renamed to its cold name, then stopped; a
// crash between leaves it running (a running container is running whatever its name). A
// sandbox already paused, either way, is left as it is.
func (i *Instance) PauseCold(ctx context.Context) error {
	res, err := i.p.inspectID(ctx, i.cid)
	if err != nil {
		return i.lifecycleErr(err, "pause")
	}
	in := res.Container
	if in.State == nil || in.State.Paused || coldPaused(in) {
		return nil
	}
	if !in.State.Running {
		return errNotFound(i.id)
	}
	cfg, err := i.p.agentConfig(ctx, i.id)
	if err != nil {
		return err
	}
	if cfg == nil {
		return provider.Errorf(provider.CodeUnsupported, "docker: sandbox %s was made by another tupper process (an older one, which kept its agent's config to itself): it can be paused keeping its memory only", i.id)
	}
	if err := i.p.keepConfig(ctx, i.id, cfg); err != nil {
		return err
	}
	if name := coldName(in.Name); name != strings.TrimPrefix(in.Name, "/") {
		if _, err := i.p.cli.ContainerRename(ctx, i.cid, client.ContainerRenameOptions{NewName: name}); err != nil {
			return i.lifecycleErr(err, "pause")
		}
	}
	i.p.setPaused(i.id, true)
	if _, err := i.p.cli.ContainerStop(ctx, i.cid, client.ContainerStopOptions{}); err != nil {
		i.p.setPaused(i.id, false)
		return i.lifecycleErr(err, "pause")
	}
	return nil
}

// resumeCold starts a container paused without its memory: its agent gets its config again
// (its deadline the one the container's name holds now), the instance dials the agent's new
// port, and once the agent answers the container gets its name back. A failure stops it
// again, paused as it was.
func (i *Instance) resumeCold(ctx context.Context, in container.InspectResponse) error {
	raw, err := i.p.agentConfig(ctx, i.id)
	if err != nil {
		return err
	}
	if raw == nil {
		return provider.Errorf(provider.CodeProvider, "docker: sandbox %s was paused without its memory, and its agent's config (volume %s%s) is gone", i.id, coldVolumePrefix, i.id)
	}
	acfg, err := agent.ParseConfig(raw)
	if err != nil {
		return provider.Errorf(provider.CodeProvider, "docker: the saved config of sandbox %s: %v", i.id, err)
	}
	acfg.DeadlineUnix = 0
	if d := deadlineOf(warmName(in.Name), in.Config.Labels); !d.IsZero() {
		acfg.DeadlineUnix = d.Unix()
	}
	cfg, err := json.Marshal(acfg)
	if err != nil {
		return provider.Wrap(err, provider.CodeInternal, "resume")
	}
	ok := false
	defer func() {
		if !ok {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			i.p.cli.ContainerStop(sctx, i.cid, client.ContainerStopOptions{})
		}
	}()
	if err := i.p.start(ctx, i.cid, cfg); err != nil {
		return err
	}
	i.p.booted(i.id) // every handle's next dial finds the agent's new port
	i.p.setPaused(i.id, false)
	if err := i.p.waitAgent(ctx, i); err != nil {
		i.p.setPaused(i.id, true)
		return err
	}
	if _, err := i.p.cli.ContainerRename(ctx, i.cid, client.ContainerRenameOptions{NewName: warmName(in.Name)}); err != nil {
		i.p.setPaused(i.id, true)
		return i.lifecycleErr(err, "resume")
	}
	ok = true
	return nil
}
