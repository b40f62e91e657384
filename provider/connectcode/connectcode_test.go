package connectcode

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/spec/filesystem"
	"github.com/tupper-dev/tupper/agent/spec/filesystem/filesystemconnect"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/httpcode"
)

// failing answers every Stat with the error code its request's path names.
type failing struct {
	filesystemconnect.UnimplementedFilesystemHandler
}

func (failing) Stat(_ context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	var c connect.Code
	if err := c.UnmarshalText([]byte(req.Msg.GetPath())); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil, connect.NewError(c, nil)
}

// allCodes are the Connect protocol's codes, 1 to 16.
func allCodes() []connect.Code {
	var out []connect.Code
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		out = append(out, c)
	}
	return out
}

// The two tables agree: for every Connect code with a counterpart, the HTTP status a real
// Connect server answers with for that code is the status provider/httpcode gives the
// counterpart. Codes without one are provider errors. A real client reading the error sees
// the same code, by value and by name.
func TestAgreesWithHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(failing{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cl := filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL)
	mapped := 0
	for _, c := range allCodes() {
		_, err := cl.Stat(t.Context(), connect.NewRequest(&filesystem.StatRequest{Path: c.String()}))
		if got := connect.CodeOf(err); got != c {
			t.Fatalf("%s: the client read %s (%v)", c, got, err)
		}
		// The same call by hand, for the status on the wire (Connect's unary protocol, JSON).
		resp, err := srv.Client().Post(srv.URL+filesystemconnect.FilesystemStatProcedure, "application/json",
			bytes.NewReader([]byte(`{"path":"`+c.String()+`"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		code := FromConnect(c)
		if FromName(c.String()) != code {
			t.Errorf("%s: FromName gives %s, FromConnect %s", c, FromName(c.String()), code)
		}
		if code == provider.CodeProvider {
			continue
		}
		mapped++
		if want := httpcode.Status(code); resp.StatusCode != want {
			t.Errorf("%s: Connect answers %d, but it maps to %s, whose status is %d", c, resp.StatusCode, code, want)
		}
	}
	if mapped != len(table) {
		t.Errorf("%d codes mapped, the table has %d rows", mapped, len(table))
	}
}

func TestMapping(t *testing.T) {
	for _, tc := range []struct {
		in   connect.Code
		want provider.Code
	}{
		{connect.CodeNotFound, provider.CodeNotFound},
		{connect.CodeUnauthenticated, provider.CodeUnauthorized},
		{connect.CodePermissionDenied, provider.CodeForbidden},
		{connect.CodeFailedPrecondition, provider.CodeInvalidArgument},
		{connect.CodeInternal, provider.CodeProvider},
		{connect.CodeUnknown, provider.CodeProvider},
		{connect.Code(99), provider.CodeProvider},
	} {
		if got := FromConnect(tc.in); got != tc.want {
			t.Errorf("FromConnect(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, name := range []string{"", "not a code", "NOT_FOUND"} {
		if got := FromName(name); got != provider.CodeProvider {
			t.Errorf("FromName(%q) = %s, want provider", name, got)
		}
	}
}
