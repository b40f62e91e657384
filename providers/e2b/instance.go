package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// envdPort is the port E2B routes to envd.
const envdPort = 49983

// Instance is one sandbox of an E2B-compatible API. The embedded agentinst.Envd talks to
// the sandbox's envd (exec, files, file-system operations); the methods here use the
// control plane: Info, PreviewURL, SetTimeout, Pause and Resume. Every method may be called
// concurrently.
type Instance struct {
	*agentinst.Envd
	p  *Provider
	sb sandboxJSON // as created or fetched
}

var (
	_ provider.Instance      = (*Instance)(nil)
	_ provider.FileSystem    = (*Instance)(nil)
	_ provider.TimeoutSetter = (*Instance)(nil)
	_ provider.Pauser        = (*Instance)(nil)
)

// instance is the handle of sb: its envd is reached at its base URL with E2B's routing
// headers and its access token, as root unless a command says otherwise.
func (p *Provider) instance(sb sandboxJSON) *Instance {
	in := &Instance{p: p, sb: sb}
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.SandboxID)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(envdPort))
	c := client.NewWithOptions(client.Options{
		HTTPClient: p.hc, BaseURL: p.envdURL(sb), Header: h,
		AccessToken: sb.EnvdAccessToken, User: "root",
	})
	in.Envd = agentinst.NewEnvd(agentinst.Config{ID: sb.SandboxID, Client: c, Gone: in.gone})
	return in
}

// gone asks the control plane whether the sandbox still exists: E2B's proxy answers 502 for
// a sandbox it does not know.
func (in *Instance) gone(ctx context.Context) bool {
	_, err := in.p.get(ctx, in.sb.SandboxID)
	return errors.Is(err, provider.CodeNotFound)
}

// Info fetches the sandbox: GET /sandboxes/{id}.
func (in *Instance) Info(ctx context.Context) (provider.Info, error) {
	sb, err := in.p.get(ctx, in.sb.SandboxID)
	if err != nil {
		return provider.Info{}, err
	}
	return sb.info(), nil
}

// PreviewURL is https://{port}-{id}.{domain}, where E2B routes a sandbox's ports. A server
// reached through E2B_SANDBOX_URL (tupper serve on a plain URL) has none: CodeUnsupported.
func (in *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if in.p.cfg.SandboxURL != "" {
		return "", provider.Errorf(provider.CodeUnsupported, "e2b: no preview URLs when E2B_SANDBOX_URL is set")
	}
	return "https://" + in.p.previewHost(in.sb, port), nil
}

// SetTimeout moves the lifetime deadline to d from now: POST /sandboxes/{id}/timeout.
func (in *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	return in.p.call(ctx, "POST", "/sandboxes/"+in.sb.SandboxID+"/timeout", map[string]int64{"timeout": seconds(d)}, nil, "set_timeout")
}

// Pause freezes the sandbox: POST /sandboxes/{id}/pause (409, already paused, is success).
func (in *Instance) Pause(ctx context.Context) error {
	if err := in.p.Refuse(provider.CapPause); err != nil {
		return err
	}
	err := in.p.call(ctx, "POST", "/sandboxes/"+in.sb.SandboxID+"/pause", map[string]any{}, nil, "pause")
	if errors.Is(err, provider.CodeConflict) {
		return nil
	}
	return err
}

// Resume thaws it: POST /v2/sandboxes/{id}/connect, which also extends its lifetime if it
// would end within E2B's default five minutes.
func (in *Instance) Resume(ctx context.Context) error {
	if err := in.p.Refuse(provider.CapPause); err != nil {
		return err
	}
	var sb sandboxJSON
	if err := in.p.call(ctx, "POST", "/v2/sandboxes/"+in.sb.SandboxID+"/connect", map[string]any{}, &sb, "resume"); err != nil {
		return err
	}
	return nil
}
