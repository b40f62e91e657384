package sandbox

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// Busy reports whether the sandbox has an SDK command in flight or an SDK background process
// running: the provider's provider.ActivityReporter when it has one, else a look for the
// SDK's marker variable in the sandbox's processes (which needs provider.CapShell). When it
// cannot tell, it returns true with the error, so a caller that reaps idle sandboxes keeps
// the sandbox: CodeUnsupported without either way, CodeProvider when the check itself fails.
func (b *Sandbox) Busy(ctx context.Context) (bool, error) {
	busy, err := activity(ctx, b.inst, b.Capabilities, b.Provider)
	if err != nil {
		return true, wrapProvider(err, "busy")
	}
	return busy, nil
}

// busy is Busy for the sandbox id, for Reap.
func busy(ctx context.Context, p provider.Provider, id string) (bool, error) {
	inst, err := p.Connect(ctx, id)
	if err != nil {
		return true, err
	}
	defer inst.Close()
	caps := p.Capabilities()
	if cr, ok := inst.(provider.CapabilityReporter); ok {
		caps = cr.Capabilities()
	}
	return activity(ctx, inst, caps, p.Name())
}

func activity(ctx context.Context, inst provider.Instance, caps provider.Capabilities, prov string) (bool, error) {
	if ar, ok := inst.(provider.ActivityReporter); ok {
		return ar.Busy(ctx)
	}
	if !caps.Has(provider.CapShell) {
		return true, errorf(CodeUnsupported, "busy", "provider %s cannot report activity", prov)
	}
	// Look for processes that carry the SDK's marker variable. The check itself does not.
	res, err := inst.Exec(ctx, provider.ExecRequest{
		Command: `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -qx ` + envSDKRun + `=1`,
		Cwd:     "/",
	})
	if err != nil {
		return true, err
	}
	switch res.ExitCode {
	case 0:
		return true, nil
	case 1:
		return false, nil
	}
	return true, errorf(CodeProvider, "busy", "activity check exited %d", res.ExitCode)
}
