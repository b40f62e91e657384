package agentinst

import (
	"context"
	"io"
	"net"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/internal/filemode"
	"github.com/tupper-dev/tupper/provider"
)

// Agent is Envd and what only Tupper's agent serves. Create it with NewAgent.
type Agent struct {
	*Envd
}

var (
	_ provider.FileSystem        = (*Agent)(nil)
	_ provider.RangeReader       = (*Agent)(nil)
	_ provider.ActivityReporter  = (*Agent)(nil)
	_ provider.PortDialer        = (*Agent)(nil)
	_ provider.Terminaler        = (*Agent)(nil)
	_ provider.CommandTerminaler = (*Agent)(nil)
)

// NewAgent returns the instance half for cfg, whose Client reaches Tupper's agent.
func NewAgent(cfg Config) *Agent { return &Agent{Envd: NewEnvd(cfg)} }

// ReadFile streams a file from the sandbox. See provider.Instance.
func (a *Agent) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return a.ReadFileRange(ctx, path, 0, -1)
}

// ReadFileRange streams length bytes of a file from offset (length < 0: to the end), with
// the agent's offset and length parameters of GET /files. See provider.RangeReader.
func (a *Agent) ReadFileRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "negative offset")
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if length < 0 {
		length = 0 // the client's "to the end"
	}
	rc, err := a.c.ReadFile(ctx, path, client.ReadOptions{Offset: offset, Length: length})
	if err != nil {
		return nil, a.Err(ctx, err, "files.read")
	}
	return rc, nil
}

// WriteFile writes r to path, with the mode in the same request (the agent's mode
// parameter of POST /files). The agent reads mode 0 as "the default", so that one is set
// with chmod afterwards. See provider.Instance.
func (a *Agent) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	if err := checkMode(mode); err != nil {
		return err
	}
	if err := a.check(ctx); err != nil {
		return err
	}
	var o client.WriteOptions
	if mode != nil {
		o.Mode = filemode.FromUnix(*mode)
	}
	if err := a.c.WriteFile(ctx, path, r, o); err != nil {
		return a.Err(ctx, err, "files.write")
	}
	if mode != nil && *mode == 0 {
		return a.chmod(ctx, path, 0)
	}
	return nil
}

// Busy reports whether a command started through the agent is running (GET /tupper/busy).
// A sandbox that Config.Check refuses with CodeConflict (paused) counts as busy. See
// provider.ActivityReporter.
func (a *Agent) Busy(ctx context.Context) (bool, error) {
	if err := a.check(ctx); err != nil {
		if provider.CodeOf(err) == provider.CodeConflict {
			return true, nil
		}
		return false, err
	}
	b, err := a.c.Busy(ctx)
	if err != nil {
		return false, a.Err(ctx, err, "busy")
	}
	return b.Busy, nil
}

// DialPort connects to port inside the sandbox (its 127.0.0.1:port) through the agent's
// tunnel, which works with any network mode. See provider.PortDialer.
func (a *Agent) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	c, err := a.c.DialPort(ctx, port)
	if err != nil {
		return nil, a.Err(ctx, err, "dial_port")
	}
	return c, nil
}

// SetDeadline tells the agent the sandbox's lifetime deadline, at which it kills every
// process and exits (the zero time clears it); the provider keeps its own record, which
// rules. The agent counts whole seconds: the deadline is rounded up, so the agent never
// ends the sandbox before the provider's time. Config.Check is not consulted.
func (a *Agent) SetDeadline(ctx context.Context, t time.Time) error {
	if !t.IsZero() {
		t = t.Add(999 * time.Millisecond)
	}
	return a.Err(ctx, a.c.SetDeadline(ctx, t), "set_timeout")
}
