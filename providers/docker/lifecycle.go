package docker

import (
	"context"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/provider"
)

// containers lists the provider's containers (running or not) that carry label=value
// (label alone when value is "").
func (p *Provider) containers(ctx context.Context, label, value string) ([]container.Summary, error) {
	f := make(client.Filters).Add("label", labelSandbox)
	if label != "" {
		if value != "" {
			f.Add("label", label+"="+value)
		} else {
			f.Add("label", label)
		}
	}
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, p.err(err, "list")
	}
	return res.Items, nil
}

// dead reports whether a listed container is a sandbox that has ended: stopped (its agent
// exited, at its deadline or idle) unless paused without its memory (its cold name says so),
// or past its lifetime deadline, whatever its agent did.
func dead(c container.Summary, now time.Time) bool {
	name := ""
	if len(c.Names) > 0 {
		name = c.Names[0][1:]
	}
	if c.State != container.StateRunning && c.State != container.StatePaused && c.State != container.StateCreated && !isCold(name) {
		return true
	}
	d := deadlineOf(name, c.Labels)
	return !d.IsZero() && now.After(d)
}

// remove removes a container and what it holds (force: it is killed first).
// When another remover got there first (a reap in this or another tupper process, at the
// sandbox's deadline), the engine refuses with a conflict; remove then asks again until that
// removal is done, so its caller sees the container gone as if it had removed it itself (and
// removes it, should the other removal have failed).
func (p *Provider) remove(ctx context.Context, cid string) error {
	for {
		_, err := p.cli.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			return nil
		case !removalInProgress(err):
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := p.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
			return nil
		}
	}
}

// removalInProgress reports whether the engine refused a removal because another one of the
// same container is under way (its words: "removal of container … is already in progress").
func removalInProgress(err error) bool {
	return cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")
}

// Reap removes every sandbox container that has ended (see dead) and returns how many.
func (p *Provider) Reap(ctx context.Context) (int, error) {
	cs, err := p.containers(ctx, "", "")
	if err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	for _, c := range cs {
		if dead(c, now) && p.remove(ctx, c.ID) == nil {
			p.forgetCold(ctx, c.Labels[labelSandbox])
			n++
		}
	}
	p.removeExpiredSnapshots(ctx, now)
	return n, nil
}

// expired reports whether a snapshot image's labels say it expired before now.
func expired(labels map[string]string, now time.Time) bool {
	ms, err := strconv.ParseInt(labels[labelExpires], 10, 64)
	return err == nil && now.UnixMilli() >= ms
}

// removeExpiredSnapshots removes the snapshot images whose expiry has passed.
func (p *Provider) removeExpiredSnapshots(ctx context.Context, now time.Time) {
	res, err := p.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", labelExpires)})
	if err != nil {
		return
	}
	for _, im := range res.Items {
		if expired(im.Labels, now) {
			for _, ref := range im.RepoTags {
				if strings.HasPrefix(ref, snapshotRepo+":") {
					p.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{})
				}
			}
		}
	}
}

// reapSome reaps before a create, ignoring failures: a create must not fail because an old
// container could not be removed.
func (p *Provider) reapSome(ctx context.Context) { p.Reap(ctx) }

// List returns the live sandboxes whose labels include filter's, removing those that have
// ended on the way.
func (p *Provider) List(ctx context.Context, filter provider.ListFilter) ([]provider.Info, error) {
	cs, err := p.containers(ctx, "", "")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []provider.Info
	for _, c := range cs {
		if dead(c, now) {
			if p.remove(ctx, c.ID) == nil {
				p.forgetCold(ctx, c.Labels[labelSandbox])
			}
			continue
		}
		in, err := p.inspectID(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		inf := info(in.Container)
		if filter.Matches(inf.Labels) {
			out = append(out, inf)
		}
	}
	return out, nil
}

// FindByKey returns the live sandbox created with key.
func (p *Provider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	if key == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "empty key")
	}
	cs, err := p.containers(ctx, labelKey, key)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, c := range cs {
		if c.Labels[labelKey] != key || dead(c, now) {
			continue
		}
		in, err := p.inspectID(ctx, c.ID)
		if err != nil {
			continue
		}
		return p.instance(in.Container), nil
	}
	return nil, provider.Errorf(provider.CodeNotFound, "no sandbox with key %q", key)
}

// Connect returns the handle of the live sandbox id. One that has ended is removed:
// CodeNotFound.
func (p *Provider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	in, err := p.inspect(ctx, id)
	if err != nil {
		return nil, err
	}
	return p.instance(in), nil
}

// inspect finds the live container of sandbox id, removing it when it has ended.
func (p *Provider) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	if !validID(id) {
		return container.InspectResponse{}, errNotFound(id)
	}
	cs, err := p.containers(ctx, labelSandbox, id)
	if err != nil {
		return container.InspectResponse{}, err
	}
	for _, c := range cs {
		if c.Labels[labelSandbox] != id {
			continue
		}
		if dead(c, time.Now()) {
			if p.remove(ctx, c.ID) == nil {
				p.forgetCold(ctx, id)
			}
			break
		}
		in, err := p.inspectID(ctx, c.ID)
		if err != nil {
			break
		}
		return in.Container, nil
	}
	return container.InspectResponse{}, errNotFound(id)
}

func (p *Provider) inspectID(ctx context.Context, cid string) (client.ContainerInspectResult, error) {
	return p.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
}

// Destroy removes the sandbox's container. One that is already gone is CodeNotFound.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if !validID(id) {
		return errNotFound(id)
	}
	cs, err := p.containers(ctx, labelSandbox, id)
	if err != nil {
		return err
	}
	p.previews.CloseSandbox(id)
	p.setPaused(id, false)
	found := false
	for _, c := range cs {
		if c.Labels[labelSandbox] != id {
			continue
		}
		found = true
		if err := p.remove(ctx, c.ID); err != nil && provider.CodeOf(p.err(err, "")) != provider.CodeNotFound {
			return p.err(err, "destroy")
		}
	}
	if !found {
		return errNotFound(id)
	}
	p.forgetCold(ctx, id)
	return nil
}
