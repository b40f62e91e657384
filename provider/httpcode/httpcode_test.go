package httpcode

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// Every code has an error status, and a status that only one code has maps back to it.
func TestEveryCodeRoundTrips(t *testing.T) {
	shared := map[int]int{}
	for _, c := range provider.Codes() {
		shared[Status(c)]++
	}
	for _, c := range provider.Codes() {
		s := Status(c)
		if s < 400 || s > 599 {
			t.Errorf("%s maps to status %d", c, s)
		}
		back := FromStatus(s)
		if !back.Valid() || (shared[s] == 1 && back != c) {
			t.Errorf("%s: status %d maps back to %q", c, s, back)
		}
	}
	if len(table) != len(provider.Codes()) {
		t.Errorf("the table has %d rows for %d codes", len(table), len(provider.Codes()))
	}
}

func TestStatuses(t *testing.T) {
	for _, tc := range []struct {
		code   provider.Code
		status int
	}{
		{provider.CodeNotFound, http.StatusNotFound},
		{provider.CodeInvalidArgument, http.StatusBadRequest},
		{provider.CodeTimeout, http.StatusGatewayTimeout},
		{provider.CodeAborted, 499},
		{"no_such_code", http.StatusInternalServerError},
	} {
		if got := Status(tc.code); got != tc.status {
			t.Errorf("Status(%q) = %d, want %d", tc.code, got, tc.status)
		}
	}
	for _, tc := range []struct {
		status int
		code   provider.Code
	}{
		{http.StatusUnprocessableEntity, provider.CodeInvalidArgument},
		{http.StatusRequestEntityTooLarge, provider.CodeResourceExhausted},
		{http.StatusInsufficientStorage, provider.CodeResourceExhausted},
		{http.StatusTeapot, provider.CodeInvalidArgument},
		{http.StatusHTTPVersionNotSupported, provider.CodeProvider},
		{http.StatusFound, provider.CodeInternal},
	} {
		if got := FromStatus(tc.status); got != tc.code {
			t.Errorf("FromStatus(%d) = %q, want %q", tc.status, got, tc.code)
		}
	}
}

// Context errors get the statuses of their codes without anyone patching them on the way.
func TestStatusOfContextErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	if got := StatusOf(fmt.Errorf("exec: %w", ctx.Err())); got != http.StatusGatewayTimeout {
		t.Errorf("a deadline: %d, want 504", got)
	}
	if got := StatusOf(fmt.Errorf("exec: %w", context.Canceled)); got != 499 {
		t.Errorf("a cancellation: %d, want 499", got)
	}
	if got := StatusOf(provider.Errorf(provider.CodeConflict, "taken")); got != http.StatusConflict {
		t.Errorf("a conflict: %d, want 409", got)
	}
}
