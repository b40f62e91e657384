package sandbox

import "github.com/tupper-dev/tupper/provider"

// Error is the error type of every failure of a sandbox, a provider or a request. Branch on
// its Code with errors.As, or with errors.Is and a bare code:
//
//	if errors.Is(err, sandbox.ErrNotFound) { … }
//	var se *sandbox.Error
//	if errors.As(err, &se) && se.Code == sandbox.CodeUnsupported { … }
//
// Messages never contain secrets or credentials.
type Error = provider.Error

// Code is a stable error class; see the constants.
type Code = provider.Code

// The error codes (DESIGN.md "Errors").
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

// Sentinel targets for errors.Is: errors.Is(err, sandbox.ErrNotFound) is true for any *Error
// with that code.
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

// CodeOf returns err's code ("" for nil, internal for a foreign error).
func CodeOf(err error) Code { return provider.CodeOf(err) }
