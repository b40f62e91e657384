package api

import (
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// FileInfo is a file system entry on the wire (GET files/stat, each of files/list's
// entries). ModifiedAt is in UTC.
type FileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

// Info is f as the provider contract's.
func (f FileInfo) Info() provider.FileInfo {
	return provider.FileInfo{Path: f.Path, Type: provider.FileType(f.Type), Size: f.Size, Mode: f.Mode, ModifiedAt: f.ModifiedAt}
}

// PathRequest is the body of POST files/read and files/mkdir.
type PathRequest struct {
	Path string `json:"path"`
}

// RemoveRequest is the body of POST files/remove.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// RenameRequest is the body of POST files/rename.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// SearchRequest is the body of POST files/search.
type SearchRequest struct {
	Query      string `json:"query"`
	Path       string `json:"path,omitempty"`
	Glob       string `json:"glob,omitempty"`
	MaxMatches int    `json:"maxMatches,omitempty"`
}

// Match is one line files/search found.
type Match struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// Matches is the answer of POST files/search.
type Matches struct {
	Matches []Match `json:"matches"`
}

// MarkRequest is the body of POST files/mark (optional; no name: the server makes one).
type MarkRequest struct {
	Name string `json:"name,omitempty"`
}

// Changes is the answer of GET files/changes: what changed under /workspace since a mark.
// The lists are never null.
type Changes struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Removed  []string `json:"removed"`
	Patch    string   `json:"patch"`
}

// WriteFile is the body of POST files/write: Content is UTF-8 text, or base64 with Encoding
// "base64"; Mode is octal ("0644").
type WriteFile struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty"`
	Mode     string `json:"mode,omitempty"`
}

// EditRequest is the body of POST files/edit: replace the one occurrence of Find.
type EditRequest struct {
	Path    string `json:"path"`
	Find    string `json:"find"`
	Replace string `json:"replace"`
}

// PresignRequest is the body of POST /v1/sandboxes/{id}/files/presign: a URL that
// downloads (GET, the default) or uploads (PUT) one file without a credential.
type PresignRequest struct {
	Path        string `json:"path"`
	Method      string `json:"method,omitempty"`
	ExpiresInMS int64  `json:"expiresInMs,omitempty"`
}

// FileList is the answer of GET files/list.
type FileList struct {
	Entries []FileInfo `json:"entries"`
}

// FileContent is the answer of POST files/read: Content is the file as UTF-8 text, or base64
// (Encoding "base64") when it is not valid UTF-8.
type FileContent struct {
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Path     string `json:"path"`
}

// Exists is the answer of GET files/exists.
type Exists struct {
	Exists bool `json:"exists"`
}

// Marked is the answer of POST files/mark: the mark set.
type Marked struct {
	Name string `json:"name"`
}
