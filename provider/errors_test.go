package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCodeOf(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	for _, tc := range []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"an *Error", Errorf(CodeNotFound, "no sandbox"), CodeNotFound},
		{"a wrapped *Error", fmt.Errorf("connect: %w", Errorf(CodeConflict, "taken")), CodeConflict},
		{"a deadline", ctx.Err(), CodeTimeout},
		{"a wrapped deadline", fmt.Errorf("exec: %w", ctx.Err()), CodeTimeout},
		{"a cancellation", context.Canceled, CodeAborted},
		{"a joined cancellation", errors.Join(errors.New("write failed"), context.Canceled), CodeAborted},
		// The first *Error decides, even around a context error: its code was chosen.
		{"an *Error around a deadline", Wrap(ctx.Err(), CodeUnavailable, "dial"), CodeUnavailable},
		{"a foreign error", errors.New("boom"), CodeInternal},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("%s: CodeOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Codes are the one family of errors.Is targets; an *Error is not one.
func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("op: %w", Errorf(CodeNotFound, "no sandbox %s", "x"))
	if !errors.Is(err, CodeNotFound) {
		t.Error("errors.Is(err, CodeNotFound) is false for a not_found error")
	}
	if errors.Is(err, CodeConflict) {
		t.Error("errors.Is(err, CodeConflict) is true for a not_found error")
	}
	if errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Error("an *Error template still matches as an errors.Is target")
	}
	for _, c := range Codes() {
		if !c.Valid() || !errors.Is(Errorf(c, "x"), c) {
			t.Errorf("%s: not valid or not its own target", c)
		}
	}
	if Code("nope").Valid() {
		t.Error("an unknown code is valid")
	}
}

// MessageOf is what an API sends beside the code: without the op and code an *Error renders, so that a client's "code: message" shows the code once; text wrapped around it
// stays.
func TestMessageOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"an *Error", Errorf(CodeNotFound, "no sandbox %q", "x"), `no sandbox "x"`},
		{"with an op", &Error{Code: CodeNotFound, Op: "snapshot", Message: "no snapshot s"}, "no snapshot s"},
		{"wrapped", fmt.Errorf("creating: %w", &Error{Code: CodeConflict, Op: "volume", Message: "taken"}), "creating: taken"},
		{"a cause without a message", &Error{Code: CodeProvider, Err: errors.New("boom")}, "boom"},
		{"credentials", Errorf(CodeUnauthorized, "bad key ak_0123456789abcdef0123"), "bad key " + StripCredentials("ak_0123456789abcdef0123")},
		{"a foreign error", errors.New("boom"), "boom"},
	} {
		got := MessageOf(tc.err)
		if got != tc.want {
			t.Errorf("%s: MessageOf = %q, want %q", tc.name, got, tc.want)
		}
		if tc.err == nil {
			continue
		}
		// A client's error made of the code and the message renders the code once.
		client := &Error{Code: CodeOf(tc.err), Message: got}
		if n := strings.Count(client.Error(), string(client.Code)); n != 1 {
			t.Errorf("%s: the client's %q holds the code %d times", tc.name, client.Error(), n)
		}
	}
}
