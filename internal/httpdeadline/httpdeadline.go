// Package httpdeadline lifts an HTTP server's per-connection timeouts for one request.
//
// tupper serve sets read and write timeouts on its http.Server (a client that sends a body
// or reads an answer slowly cannot hold a connection for ever), and lifts them once a
// request is authenticated: the read timeout for every such request (net/http cancels a
// request's context when the read deadline passes while its handler still runs), the write
// timeout for the requests whose answers last as long as the caller asks (streams, commands,
// big files, previews, terminals).
package httpdeadline

import (
	"net/http"
	"time"
)

// LiftRead removes the read deadline of w's connection for the rest of the request.
func LiftRead(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// Lift removes both the read and the write deadline of w's connection for the rest of the
// request.
func Lift(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}
