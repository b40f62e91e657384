package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Code is a stable error class that callers branch on. The set is fixed (docs/errors.md). A
// Code is also the errors.Is target for its class: errors.Is(err, CodeNotFound) is true for
// any *Error of that code in err's chain. Package provider/httpcode maps codes to HTTP
// statuses and back; the codes themselves know nothing of HTTP.
type Code string

// The error codes. Every failure of a sandbox, a provider or a request carries one of these.
const (
	CodeNotFound          Code = "not_found"
	CodeUnsupported       Code = "unsupported"
	CodeInvalidArgument   Code = "invalid_argument"
	CodeConflict          Code = "conflict"
	CodeProcessExited     Code = "process_exited"
	CodeEditNotFound      Code = "edit_not_found"
	CodeEditNotUnique     Code = "edit_not_unique"
	CodeTimeout           Code = "timeout"
	CodeAborted           Code = "aborted"
	CodeUnauthorized      Code = "unauthorized"
	CodeForbidden         Code = "forbidden"
	CodeUnavailable       Code = "unavailable"
	CodeResourceExhausted Code = "resource_exhausted"
	CodeProvider          Code = "provider"
	CodeInternal          Code = "internal"
)

// codes is the fixed set, in the order Codes lists them.
var codes = []Code{
	CodeInvalidArgument, CodeUnauthorized, CodeForbidden, CodeNotFound, CodeConflict,
	CodeEditNotFound, CodeEditNotUnique, CodeProcessExited, CodeResourceExhausted, CodeAborted,
	CodeInternal, CodeUnsupported, CodeProvider, CodeUnavailable, CodeTimeout,
}

// Codes lists every error code.
func Codes() []Code { return slices.Clone(codes) }

// Valid reports whether c is one of the fixed codes.
func (c Code) Valid() bool { return slices.Contains(codes, c) }

// Error is the one error type of Tupper. The sandbox package exposes it as sandbox.Error.
//
// Branch on its class with errors.Is and the code itself, the one family of targets; use
// errors.As to get at the message or the cause:
//
//	errors.Is(err, provider.CodeNotFound)
type Error struct {
	Code    Code   // the error class
	Message string // lower-case, without credentials
	Op      string // the operation that failed, e.g. "files.read"; may be empty
	Err     error  // the cause, if any; its text is redacted when printed
}

func (e *Error) Error() string {
	msg := e.text()
	if e.Op != "" {
		return fmt.Sprintf("%s: %s: %s", e.Op, e.Code, msg)
	}
	return fmt.Sprintf("%s: %s", e.Code, msg)
}

// text is the message (else the cause's text) without the op and code, credentials removed.
func (e *Error) text() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return StripCredentials(msg)
}

// MessageOf is err's text without the "op: code: " that its first *Error renders before its
// message, credentials removed: what an API sends beside the code ({"code", "message"}),
// since every client renders an error as "code: message", as Error does one without an op
// (which is what a client's error is; the client's own call names its op). The text of the
// errors that wrap the *Error stays. An err without an *Error is its text.
func MessageOf(err error) string {
	if err == nil {
		return ""
	}
	full := err.Error()
	var e *Error
	if errors.As(err, &e) {
		if i := strings.Index(full, e.Error()); i >= 0 {
			full = full[:i] + e.text() + full[i+len(e.Error()):]
		} else {
			full = e.text()
		}
	}
	return StripCredentials(full)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, CodeX) true for an Error of code CodeX.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && e.Code == c
}

// Error lets a bare Code be used as an errors.Is target.
func (c Code) Error() string { return string(c) }

// Errorf returns an *Error with code c and a formatted message. A %w verb sets the cause.
func Errorf(c Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: c, Message: wrapped.Error(), Err: errors.Unwrap(wrapped)}
}

// CodeOf returns the code of err: the code of the first *Error in its chain; else
// CodeTimeout for context.DeadlineExceeded and CodeAborted for context.Canceled anywhere in
// the chain; else CodeInternal. CodeOf(nil) is "".
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeAborted
	}
	return CodeInternal
}

// Wrap returns err as an *Error: unchanged if it already is one, else with code c and op.
func Wrap(err error, c Code, op string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: c, Op: op, Message: err.Error(), Err: err}
}

// credentialPatterns are compiled on first use, not at start-up of every program.
var credentialPatterns = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		// user:password@ in URLs
		regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/\s:@]+(:[^/\s@]*)?@`),
		// bearer and basic tokens
		regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}`),
		// our own key forms
		regexp.MustCompile(`\b(ak|e2b|sbt)_[A-Za-z0-9]{16,}\b`),
		// well-known token prefixes (GitHub, GitLab)
		regexp.MustCompile(`\b(ghp|gho|ghu|ghs|ghr|github_pat|glpat)_[A-Za-z0-9_]{10,}\b`),
	}
})

// StripCredentials removes things that look like credentials from s: user information in
// URLs, bearer/basic tokens, and API-key shaped strings. Providers call it on every message
// they pass up; Error.Error applies it too.
func StripCredentials(s string) string {
	for i, re := range credentialPatterns() {
		if i == 0 {
			s = re.ReplaceAllString(s, "${1}***@")
			continue
		}
		s = re.ReplaceAllString(s, "***")
	}
	return s
}
