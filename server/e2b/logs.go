package e2b

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// maxLogs is the most log entries one answer holds (E2B's limit, and its default).
const maxLogs = 1000

// logEntry is E2B's SandboxLogEntry.
type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logLine is E2B's SandboxLog: one entry as a line of text.
type logLine struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// logLevels ranks E2B's log levels.
var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// sandboxLogs reads the sandbox's log: the events the server recorded about it (created,
// paused, resumed, timeout set, snapshots, processes started and exited, ports exposed, and
// how it ended), oldest first, as E2B's log entries. A sandbox that has ended keeps its log;
// one the server never had is CodeNotFound.
func (s *Server) sandboxLogs(r *http.Request, id string) ([]logEntry, error) {
	ctx := r.Context()
	var events []store.Event
	for after := ""; ; {
		page, err := s.st.Events(ctx, store.EventFilter{SandboxID: id, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		events = append(events, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	if len(events) == 0 {
		// A sandbox without events yet (a server without them): it must be one of ours.
		if _, err := s.lc.Get(ctx, id); err != nil {
			return nil, e2bError(id, err)
		}
	}
	out := make([]logEntry, 0, len(events))
	for _, ev := range events {
		out = append(out, entryOf(ev))
	}
	return out, nil
}

// entryOf is an event as a log entry: its type is the message, its data the fields (strings
// as they are, other values as JSON, labels as the sandbox's metadata). The end of a sandbox the server did not ask for is a
// warning.
func entryOf(ev store.Event) logEntry {
	e := logEntry{Timestamp: ev.CreatedAt.UTC(), Level: "info", Message: ev.Type, Fields: map[string]string{}}
	if ev.Type == lifecycle.EventExpired || ev.Type == lifecycle.EventTimedOut {
		e.Level = "warn"
	}
	var data map[string]json.RawMessage
	if json.Unmarshal(ev.Data, &data) == nil {
		for k, raw := range data {
			var str string
			var labels map[string]string
			switch {
			case k == "labels" && json.Unmarshal(raw, &labels) == nil:
				b, _ := json.Marshal(metadata(labels)) // as E2B shows them
				e.Fields["metadata"] = string(b)
			case json.Unmarshal(raw, &str) == nil:
				if str != "" {
					e.Fields[k] = str
				}
			default:
				e.Fields[k] = string(raw)
			}
		}
	}
	return e
}

// line is an entry as one line of text: its message, then its fields as key=value, sorted.
func (e logEntry) line() string {
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(e.Message)
	for _, k := range keys {
		b.WriteString(" " + k + "=" + e.Fields[k])
	}
	return b.String()
}

// queryInt reads an integer query parameter in [lo, hi]; def when absent.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, provider.Errorf(provider.CodeInvalidArgument, "%s must be an integer between %d and %d", name, lo, hi)
	}
	return n, nil
}

// logsV1 is the deprecated GET /sandboxes/{id}/logs: the entries at or after start (unix
// milliseconds), oldest first, at most limit, each also as a line.
func (s *Server) logsV1(w http.ResponseWriter, r *http.Request, _ string) {
	start, err := queryInt(r, "start", 0, 0, 1<<62)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := queryInt(r, "limit", maxLogs, 0, 1<<31-1)
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := s.sandboxLogs(r, r.PathValue("sandboxID"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		Logs       []logLine  `json:"logs"`
		LogEntries []logEntry `json:"logEntries"`
	}{Logs: []logLine{}, LogEntries: []logEntry{}}
	for _, e := range all {
		if int64(len(out.LogEntries)) >= min(limit, maxLogs) {
			break
		}
		if e.Timestamp.UnixMilli() >= start {
			out.LogEntries = append(out.LogEntries, e)
			out.Logs = append(out.Logs, logLine{Timestamp: e.Timestamp, Line: e.line()})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// logsV2 is GET /v2/sandboxes/{id}/logs: from cursor (unix milliseconds; default now for
// backward, the beginning for forward), newest first (direction backward, the default) or
// oldest first (forward), at level or above, whose message holds search; at most limit.
func (s *Server) logsV2(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", maxLogs, 0, maxLogs)
	if err != nil {
		writeError(w, err)
		return
	}
	backward := true
	switch q.Get("direction") {
	case "", "backward":
	case "forward":
		backward = false
	default:
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "direction must be forward or backward"))
		return
	}
	var cursor *int64
	if q.Has("cursor") {
		c, err := queryInt(r, "cursor", 0, 0, 1<<62)
		if err != nil {
			writeError(w, err)
			return
		}
		cursor = &c
	}
	minLevel := 0
	if v := q.Get("level"); v != "" {
		l, ok := logLevels[v]
		if !ok {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "level must be debug, info, warn or error"))
			return
		}
		minLevel = l
	}
	search := q.Get("search")
	if len(search) > 256 {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "search is longer than 256 bytes"))
		return
	}
	all, err := s.sandboxLogs(r, r.PathValue("sandboxID"))
	if err != nil {
		writeError(w, err)
		return
	}
	if backward {
		slices.Reverse(all)
	}
	out := []logEntry{}
	for _, e := range all {
		if int64(len(out)) >= limit {
			break
		}
		at := e.Timestamp.UnixMilli()
		if cursor != nil && ((backward && at > *cursor) || (!backward && at < *cursor)) {
			continue
		}
		if logLevels[e.Level] < minLevel || !strings.Contains(e.Message, search) {
			continue
		}
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": out})
}
