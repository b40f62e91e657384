// Package httpcode maps Tupper's error codes to HTTP statuses and back. It is the one table,
// used by the server (REST and E2B dialects) and by clients of HTTP APIs (providers/remote,
// providers/e2b), so a code means the same in-process, through the server and through the
// E2B API. The codes themselves (package provider) know nothing of HTTP.
package httpcode

import (
	"net/http"

	"github.com/tupper-dev/tupper/provider"
)

// StatusClientClosedRequest is the status of CodeAborted: the caller gave up.
const StatusClientClosedRequest = 499

// table maps each code to its status. Status and FromStatus both read it.
var table = []struct {
	code   provider.Code
	status int
}{
	{provider.CodeInvalidArgument, http.StatusBadRequest},
	{provider.CodeUnauthorized, http.StatusUnauthorized},
	{provider.CodeForbidden, http.StatusForbidden},
	{provider.CodeNotFound, http.StatusNotFound},
	{provider.CodeConflict, http.StatusConflict},
	{provider.CodeEditNotFound, http.StatusUnprocessableEntity},
	{provider.CodeEditNotUnique, http.StatusUnprocessableEntity},
	{provider.CodeProcessExited, http.StatusUnprocessableEntity},
	{provider.CodeResourceExhausted, http.StatusTooManyRequests},
	{provider.CodeAborted, StatusClientClosedRequest},
	{provider.CodeInternal, http.StatusInternalServerError},
	{provider.CodeUnsupported, http.StatusNotImplemented},
	{provider.CodeProvider, http.StatusBadGateway},
	{provider.CodeUnavailable, http.StatusServiceUnavailable},
	{provider.CodeTimeout, http.StatusGatewayTimeout},
}

// Status is the HTTP status of code c (500 for a code outside the fixed set).
func Status(c provider.Code) int {
	for _, e := range table {
		if e.code == c {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// StatusOf is the HTTP status of err's code (provider.CodeOf): 504 for a deadline, 499 for
// a cancellation, 500 for an error without a code.
func StatusOf(err error) int { return Status(provider.CodeOf(err)) }

// FromStatus maps an HTTP status back to a code. A status several codes share maps to the
// most general of them (422 to invalid_argument); servers send the code itself in the body,
// which wins over the status. Other 5xx statuses are provider errors, other 4xx statuses
// invalid arguments.
func FromStatus(status int) provider.Code {
	switch status {
	case http.StatusUnprocessableEntity:
		return provider.CodeInvalidArgument
	case http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage:
		return provider.CodeResourceExhausted
	}
	for _, e := range table {
		if e.status == status {
			return e.code
		}
	}
	switch {
	case status >= 500:
		return provider.CodeProvider
	case status >= 400:
		return provider.CodeInvalidArgument
	}
	return provider.CodeInternal
}
