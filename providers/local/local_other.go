//go:build !linux

package local

import "github.com/tupper-dev/tupper/provider"

// errNeedsLinux is what the local provider is off Linux: it drives Linux's OCI runtimes and
// namespaces itself, so there is nothing for it to run here.
var errNeedsLinux = provider.Errorf(provider.CodeUnavailable, "the local provider runs on Linux only; use --provider docker (Docker Desktop or another Docker Engine)")

// The registration stays, so that `--provider local` says why it cannot be used rather than
// that no such provider exists. It is not Implicit: Resolve picks docker here.
func init() {
	provider.Register(provider.Registration{
		Name:    "local",
		Factory: func() (provider.Provider, error) { return nil, errNeedsLinux },
	})
}
