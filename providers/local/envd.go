//go:build linux

package local

import (
	"context"
	"net"

	"github.com/tupper-dev/tupper/provider"
)

var _ provider.EnvdDialer = (*Instance)(nil)

// DialEnvd connects to the sandbox's agent on its unix socket. The agent speaks E2B's envd
// protocol over HTTP/1.1 (and h2c), so the server can pass E2B data-plane traffic through
// the connection unchanged. It dials like every other connection to the agent (dialAgent):
// a symlink planted in place of the socket is refused, never followed. A paused sandbox's agent cannot answer: CodeConflict; a sandbox
// that is gone: CodeNotFound.
func (i *Instance) DialEnvd(ctx context.Context) (net.Conn, error) {
	if err := i.check(ctx); err != nil {
		return nil, err
	}
	c, err := dialAgent(ctx, i.p.lay.socket(i.id))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if i.gone(ctx) {
			return nil, provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
		}
		return nil, provider.Errorf(provider.CodeUnavailable, "sandbox %s: connecting to the agent: %v", i.id, err)
	}
	return c, nil
}
