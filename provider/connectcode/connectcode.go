// Package connectcode maps the error codes of the Connect protocol (connectrpc.com/connect) to
// Tupper's. It is the one table, used wherever a Connect error reaches Tupper: every client
// of the agent's and envd's Connect services (package provider/agentinst, which the local
// and e2b providers embed). Its sibling provider/httpcode is the table for HTTP statuses;
// the two agree: a Connect code maps to the code whose HTTP status is the one the Connect
// protocol gives it (unauthenticated is 401, unauthorized; permission_denied is 403,
// forbidden), so a failure means the same whether it came over /files or over an RPC.
//
// There is no table the other way: Tupper's own services speak HTTP, not Connect.
package connectcode

import (
	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/provider"
)

// table maps each Connect code that has a counterpart to it. Every other code (unknown,
// internal, canceled by the peer, aborted, unimplemented, data_loss, ...) says the backend
// failed: provider.CodeProvider.
var table = []struct {
	connect connect.Code
	code    provider.Code
}{
	{connect.CodeNotFound, provider.CodeNotFound},
	{connect.CodeAlreadyExists, provider.CodeConflict},
	{connect.CodeInvalidArgument, provider.CodeInvalidArgument},
	{connect.CodeFailedPrecondition, provider.CodeInvalidArgument},
	{connect.CodeUnauthenticated, provider.CodeUnauthorized},
	{connect.CodePermissionDenied, provider.CodeForbidden},
	{connect.CodeResourceExhausted, provider.CodeResourceExhausted},
	{connect.CodeDeadlineExceeded, provider.CodeTimeout},
	{connect.CodeUnavailable, provider.CodeUnavailable},
}

// FromConnect is Tupper's code for Connect code c; CodeProvider for a code without a
// counterpart.
func FromConnect(c connect.Code) provider.Code {
	for _, e := range table {
		if e.connect == c {
			return e.code
		}
	}
	return provider.CodeProvider
}

// FromName is FromConnect for a code given by its name in the Connect protocol
// ("not_found"), as the agent's client reports it; CodeProvider for a name that is no code.
func FromName(name string) provider.Code {
	var c connect.Code
	if c.UnmarshalText([]byte(name)) != nil {
		return provider.CodeProvider
	}
	return FromConnect(c)
}
