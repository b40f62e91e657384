// Package httpjson writes JSON responses the same way for each of the server's API dialects
// (the native API in server, E2B's in server/e2b): each keeps its own error body, and they
// share how a body is encoded and sent.
package httpjson

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// Write answers with status and v as JSON, "<>&" not escaped, with its Content-Length.
// When v cannot be encoded it answers 500 with failed instead: the dialect's error body
// saying so.
func Write(w http.ResponseWriter, status int, v any, failed string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		buf.WriteString(failed)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
