package sandbox

import "github.com/tupper-dev/tupper/provider"

// Error is the error type of every failure of a sandbox, a provider or a request. Branch on
// its class with errors.Is and the code itself; errors.As gets at the message and cause:
//
//	if errors.Is(err, sandbox.CodeNotFound) { … }
//	var se *sandbox.Error
//	if errors.As(err, &se) { log.Print(se.Code, se.Message) }
//
// Messages never contain secrets or credentials.
type Error = provider.Error

// Code is a stable error class; see the constants.
type Code = provider.Code

// The error codes (docs/errors.md). Each is also the errors.Is target for its class.
const (
	CodeNotFound          = provider.CodeNotFound
	CodeUnsupported       = provider.CodeUnsupported
	CodeInvalidArgument   = provider.CodeInvalidArgument
	CodeConflict          = provider.CodeConflict
	CodeProcessExited     = provider.CodeProcessExited
	CodeEditNotFound      = provider.CodeEditNotFound
	CodeEditNotUnique     = provider.CodeEditNotUnique
	CodeTimeout           = provider.CodeTimeout
	CodeAborted           = provider.CodeAborted
	CodeUnauthorized      = provider.CodeUnauthorized
	CodeForbidden         = provider.CodeForbidden
	CodeUnavailable       = provider.CodeUnavailable
	CodeResourceExhausted = provider.CodeResourceExhausted
	CodeProvider          = provider.CodeProvider
	CodeInternal          = provider.CodeInternal
)

// A second spelling of the codes, as variables of type error: each holds its code, so
// errors.Is(err, sandbox.ErrNotFound) is errors.Is(err, sandbox.CodeNotFound).
//
// Deprecated: use the codes, e.g. errors.Is(err, sandbox.CodeNotFound).
var (
	ErrNotFound          error = CodeNotFound
	ErrUnsupported       error = CodeUnsupported
	ErrInvalidArgument   error = CodeInvalidArgument
	ErrConflict          error = CodeConflict
	ErrProcessExited     error = CodeProcessExited
	ErrEditNotFound      error = CodeEditNotFound
	ErrEditNotUnique     error = CodeEditNotUnique
	ErrTimeout           error = CodeTimeout
	ErrAborted           error = CodeAborted
	ErrUnauthorized      error = CodeUnauthorized
	ErrForbidden         error = CodeForbidden
	ErrUnavailable       error = CodeUnavailable
	ErrResourceExhausted error = CodeResourceExhausted
	ErrProvider          error = CodeProvider
	ErrInternal          error = CodeInternal
)

func errorf(c Code, op, format string, args ...any) error {
	e := provider.Errorf(c, format, args...)
	e.Op = op
	return e
}

// CodeOf returns err's code: "" for nil, timeout or aborted for a context error, internal
// for another foreign error (see provider.CodeOf).
func CodeOf(err error) Code { return provider.CodeOf(err) }
