package agentinst

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/connectcode"
)

// Err turns an error of a call to the agent into the contract's, for operation op: a
// *provider.Error passes unchanged; when ctx has ended (or err is a context error) the
// result wraps the context's error; an error the agent reported gets its code from
// provider/connectcode (the client gives REST statuses Connect's names); a connection
// that failed is CodeUnavailable; anything else CodeProvider. A CodeProvider or
// CodeUnavailable failure of a sandbox that Config.Gone says has stopped is CodeNotFound.
// An error the agent reported keeps its message, without the code it now carries as the
// contract's. The agent's messages are untrusted text: credentials are stripped from them.
func (e *Envd) Err(ctx context.Context, err error, op string) error {
	if err == nil {
		return nil
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	code := provider.CodeProvider
	var ne net.Error
	switch c := client.CodeOf(err); {
	case c != "":
		code = connectcode.FromName(string(c))
	case errors.As(err, &ne):
		code = provider.CodeUnavailable
	}
	if (code == provider.CodeProvider || code == provider.CodeUnavailable) && e.cfg.Gone != nil && e.cfg.Gone(context.WithoutCancel(ctx)) {
		return &provider.Error{Code: provider.CodeNotFound, Op: op, Message: fmt.Sprintf("sandbox %s has stopped", e.cfg.ID), Err: err}
	}
	msg := err.Error()
	if ce := (*client.Error)(nil); errors.As(err, &ce) && ce.Message != "" {
		// Its code is now the error's: its text ("agent: not_found: …") would show it twice.
		msg = ce.Message
	}
	return &provider.Error{Code: code, Op: op, Message: provider.StripCredentials(msg), Err: err}
}
