package server

import (
	_ "embed"
	"net/http"
	"strconv"
)

// OpenAPI is the OpenAPI 3.1 document of the native API, checked in as openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ *caller) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(OpenAPI)))
	_, _ = w.Write(OpenAPI)
}
