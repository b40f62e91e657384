package provider

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
)

// Code is a stable error class that callers branch on. The set is fixed; see DESIGN.md.
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

// codeStatus is the one table mapping codes to HTTP statuses. StatusCode and CodeFromStatus
// both read it, so a code means the same in-process, through the server and through the E2B API.
var codeStatus = []struct {
	code   Code
	status int
}{
	{CodeInvalidArgument, http.StatusBadRequest},
	{CodeUnauthorized, http.StatusUnauthorized},
	{CodeForbidden, http.StatusForbidden},
	{CodeNotFound, http.StatusNotFound},
	{CodeConflict, http.StatusConflict},
	{CodeEditNotFound, http.StatusUnprocessableEntity},
	{CodeEditNotUnique, http.StatusUnprocessableEntity},
	{CodeProcessExited, http.StatusUnprocessableEntity},
	{CodeResourceExhausted, http.StatusTooManyRequests},
	{CodeAborted, 499},
	{CodeInternal, http.StatusInternalServerError},
	{CodeUnsupported, http.StatusNotImplemented},
	{CodeProvider, http.StatusBadGateway},
	{CodeUnavailable, http.StatusServiceUnavailable},
	{CodeTimeout, http.StatusGatewayTimeout},
}

// Codes lists every error code.
func Codes() []Code {
	out := make([]Code, len(codeStatus))
	for i, c := range codeStatus {
		out[i] = c.code
	}
	return out
}

// StatusCode is the HTTP status for c (500 for an unknown code).
func (c Code) StatusCode() int {
	for _, e := range codeStatus {
		if e.code == c {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// Valid reports whether c is one of the fixed codes.
func (c Code) Valid() bool {
	for _, e := range codeStatus {
		if e.code == c {
			return true
		}
	}
	return false
}

// CodeFromStatus maps an HTTP status back to a code. Statuses shared by several codes map to
// the most general one; servers send the code itself in the body, which wins over the status.
func CodeFromStatus(status int) Code {
	switch status {
	case http.StatusUnprocessableEntity:
		return CodeInvalidArgument
	case http.StatusRequestEntityTooLarge:
		return CodeResourceExhausted
	case http.StatusInsufficientStorage:
		return CodeResourceExhausted
	}
	for _, e := range codeStatus {
		if e.status == status {
			return e.code
		}
	}
	switch {
	case status >= 500:
		return CodeProvider
	case status >= 400:
		return CodeInvalidArgument
	}
	return CodeInternal
}

// Error is the one error type of Tupper. The sandbox package exposes it as sandbox.Error.
//
// Use errors.As to get at the code, or errors.Is with a bare code value:
//
//	errors.Is(err, provider.CodeNotFound)
type Error struct {
	Code    Code   // the error class
	Message string // lower-case, without credentials
	Op      string // the operation that failed, e.g. "files.read"; may be empty
	Err     error  // the cause, if any; its text is redacted when printed
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	msg = StripCredentials(msg)
	if e.Op != "" {
		return fmt.Sprintf("%s: %s: %s", e.Op, e.Code, msg)
	}
	return fmt.Sprintf("%s: %s", e.Code, msg)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, CodeX) and errors.Is(err, &Error{Code: CodeX}) true for an Error of that code.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Code:
		return e.Code == t
	case *Error:
		return t.Message == "" && t.Code == e.Code
	}
	return false
}

// Error lets a bare Code be used as an errors.Is target.
func (c Code) Error() string { return string(c) }

// Errorf returns an *Error with code c and a formatted message. A %w verb sets the cause.
func Errorf(c Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: c, Message: wrapped.Error(), Err: errors.Unwrap(wrapped)}
}

// CodeOf returns the code of err: the code of the first *Error in its chain, CodeTimeout or
// CodeAborted for context errors, and CodeInternal otherwise. CodeOf(nil) is "".
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
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
