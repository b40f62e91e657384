package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/httpcode"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/internal/httpjson"
)

// MaxJSONBody is the largest JSON request body; past it the server answers 413.
const MaxJSONBody = 8 << 20

// toAPIError turns err into the wire form: its code (provider.CodeOf) and its message without
// that code (provider.MessageOf: clients print "code: message"), stripped of credentials.
func toAPIError(err error) api.Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return api.Error{Code: provider.CodeResourceExhausted, Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	}
	code := provider.CodeOf(err)
	if !code.Valid() {
		code = provider.CodeInternal
	}
	return api.Error{Code: code, Message: provider.MessageOf(err)}
}

func statusOf(e api.Error, err error) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return httpcode.Status(e.Code)
}

// writeError answers with the JSON error for err.
func writeError(w http.ResponseWriter, err error) {
	e := toAPIError(err)
	writeJSON(w, statusOf(e, err), e)
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	httpjson.Write(w, status, v, `{"code":"internal","message":"encoding the response failed"}`)
}

func badRequest(format string, args ...any) error {
	return provider.Errorf(provider.CodeInvalidArgument, format, args...)
}

// decode reads a JSON body into v: at most MaxJSONBody bytes (413 past it), unknown fields
// and trailing data rejected (400). An empty body decodes as {} when allowEmpty.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	body := http.MaxBytesReader(w, r.Body, MaxJSONBody)
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("malformed JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return badRequest("malformed JSON body: data after the object")
	}
	return nil
}

// durMS converts milliseconds from the wire, rejecting negatives.
func durMS(name string, ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, badRequest("%s must not be negative", name)
	}
	if ms > int64(100*365*24*time.Hour/time.Millisecond) {
		return 0, badRequest("%s is too large", name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// decodeMS decodes r's body, which may be empty, into req, and returns the milliseconds
// *ms of one of its fields (name on the wire) as a duration; else it answers the error and
// returns false.
func decodeMS(w http.ResponseWriter, r *http.Request, req any, name string, ms *int64) (time.Duration, bool) {
	if err := decode(w, r, req, true); err != nil {
		writeError(w, err)
		return 0, false
	}
	d, err := durMS(name, *ms)
	if err != nil {
		writeError(w, err)
		return 0, false
	}
	return d, true
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("query parameter %s=%q is not a boolean", name, v)
	}
	return b, nil
}

func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, badRequest("query parameter %s=%q is not an integer", name, v)
	}
	return n, nil
}

// queryTime reads a query parameter that is an RFC 3339 time or Unix milliseconds; the zero
// time when it is absent.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		ms, err2 := strconv.ParseInt(v, 10, 64)
		if err2 != nil {
			return time.Time{}, badRequest("%s=%q is not an RFC 3339 time or unix milliseconds", name, v)
		}
		t = time.UnixMilli(ms)
	}
	return t, nil
}

// wantStream picks the streaming format from Accept: "ndjson", "sse" or "" for plain JSON.
func wantStream(r *http.Request) string {
	acc := r.Header.Get("Accept")
	switch {
	case strings.Contains(acc, "application/x-ndjson"):
		return "ndjson"
	case strings.Contains(acc, "text/event-stream"):
		return "sse"
	}
	return ""
}

// streamWriter writes events as NDJSON lines ({"type": …, …fields}) or as server-sent events
// (event: type, data: fields), flushing after each.
type streamWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	format string
}

func startStream(w http.ResponseWriter, format string) *streamWriter {
	ct := "application/x-ndjson"
	if format == "sse" {
		ct = "text/event-stream"
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), format: format}
	_ = sw.rc.Flush()
	return sw
}

// send writes one event. fields must marshal to a JSON object.
func (s *streamWriter) send(typ string, fields any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return err
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	var line []byte
	if s.format == "sse" {
		line = fmt.Appendf(nil, "event: %s\ndata: %s\n\n", typ, data)
	} else {
		// {"type":"x", …} : splice the type into the object.
		line = fmt.Appendf(nil, `{"type":%q`, typ)
		if len(data) > 2 {
			line = append(line, ',')
			line = append(line, data[1:]...)
		} else {
			line = append(line, '}')
		}
		line = append(line, '\n')
	}
	if _, err := s.w.Write(line); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *streamWriter) sendError(err error) {
	_ = s.send("error", toAPIError(err))
}
