package client

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/spec/filesystem"
	"github.com/tupper-dev/tupper/internal/filemode"
)

// FileType is the kind of a directory entry.
type FileType string

// File types. A symlink reports its target's type and sets SymlinkTarget,
// as envd does; SymlinkType appears only when the agent cannot tell.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeOther   FileType = "other"
)

// FileInfo describes a file in the sandbox. Every field comes from the
// agent and is untrusted.
type FileInfo struct {
	Name          string
	Path          string
	Type          FileType
	Size          int64
	Mode          fs.FileMode // permission bits only
	Permissions   string      // like "-rw-r--r--"
	Owner, Group  string
	ModTime       time.Time
	SymlinkTarget string            // set for symlinks
	Metadata      map[string]string // the file's metadata (envd 0.6.2), if any
}

func fileInfo(e *filesystem.EntryInfo) FileInfo {
	fi := FileInfo{
		Name:          bounded(e.GetName()),
		Path:          bounded(e.GetPath()),
		Size:          e.GetSize(),
		Mode:          fs.FileMode(e.GetMode()) & fs.ModePerm,
		Permissions:   bounded(e.GetPermissions()),
		Owner:         bounded(e.GetOwner()),
		Group:         bounded(e.GetGroup()),
		SymlinkTarget: bounded(e.GetSymlinkTarget()),
	}
	if md := e.GetMetadata(); len(md) > 0 && len(md) <= 64 {
		fi.Metadata = make(map[string]string, len(md))
		for k, v := range md {
			fi.Metadata[bounded(k)] = bounded(v)
		}
	}
	if t := e.GetModifiedTime(); t != nil {
		fi.ModTime = t.AsTime()
	}
	switch e.GetType() {
	case filesystem.FileType_FILE_TYPE_FILE:
		fi.Type = FileTypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = FileTypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		fi.Type = FileTypeSymlink
	default:
		fi.Type = FileTypeOther
	}
	return fi
}

// ReadOptions select part of a file.
type ReadOptions struct {
	// Offset is where reading starts.
	Offset int64
	// Length is how many bytes to read at most; 0 means to the end.
	Length int64
}

// ReadFile streams a file from the sandbox; the caller closes the reader.
// Relative paths are relative to the user's home. A missing file is a
// CodeNotFound error, a directory CodeInvalidArgument.
func (c *Client) ReadFile(ctx context.Context, path string, o ReadOptions) (io.ReadCloser, error) {
	if o.Offset < 0 || o.Length < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "negative offset or length"}
	}
	q := url.Values{"path": {path}}
	if c.user != "" {
		q.Set("username", c.user)
	}
	if o.Offset > 0 || o.Length > 0 {
		q.Set("offset", strconv.FormatInt(o.Offset, 10))
		if o.Length > 0 {
			q.Set("length", strconv.FormatInt(o.Length, 10))
		}
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/files", q, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if resp.Header.Get("Content-Encoding") != "" {
		resp.Body.Close()
		return nil, errors.New("agent: unexpected Content-Encoding on a file read")
	}
	return resp.Body, nil
}

// WriteOptions control WriteFile.
type WriteOptions struct {
	// Mode sets the file's permission bits (also on an existing file); 0
	// means 0644 for a new file and unchanged for an existing one.
	Mode fs.FileMode
}

// WriteFile streams r into a file in the sandbox, creating missing parent
// directories and replacing any existing content. Relative paths are
// relative to the user's home. A full disk is CodeResourceExhausted.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, o WriteOptions) error {
	q := url.Values{"path": {path}}
	if c.user != "" {
		q.Set("username", c.user)
	}
	if o.Mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(filemode.Unix(o.Mode)), 8))
	}
	if r == nil {
		r = http.NoBody
	}
	return c.post(ctx, "/files", q, "application/octet-stream", r)
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	resp, err := c.fsRPC().Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		return FileInfo{}, rpcErr(err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

// ListDir lists dir to depth levels (0 means 1: the direct entries).
func (c *Client) ListDir(ctx context.Context, dir string, depth int) ([]FileInfo, error) {
	if depth < 0 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "negative depth"}
	}
	resp, err := c.fsRPC().ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: dir, Depth: uint32(depth)}))
	if err != nil {
		return nil, rpcErr(err)
	}
	out := make([]FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

// Remove deletes path and everything below it; a missing path is not an error.
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.fsRPC().Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: path}))
	return rpcErr(err)
}

// MakeDir creates dir and its parents. It returns false, nil when dir
// already exists as a directory.
func (c *Client) MakeDir(ctx context.Context, dir string) (bool, error) {
	_, err := c.fsRPC().MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir}))
	if err = rpcErr(err); CodeOf(err) == CodeAlreadyExists {
		return false, nil
	}
	return err == nil, err
}

// Move renames src to dst, creating dst's parent directories.
func (c *Client) Move(ctx context.Context, src, dst string) (FileInfo, error) {
	resp, err := c.fsRPC().Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: src, Destination: dst}))
	if err != nil {
		return FileInfo{}, rpcErr(err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

// WatchOp is the kind of a watch event.
type WatchOp string

// Watch event kinds.
const (
	OpCreate WatchOp = "create"
	OpWrite  WatchOp = "write"
	OpRemove WatchOp = "remove"
	OpRename WatchOp = "rename"
	OpChmod  WatchOp = "chmod"
)

// WatchEvent is one change under a watched directory.
type WatchEvent struct {
	// Name is the path relative to the watched directory (untrusted).
	Name string
	Op   WatchOp
}

// Watcher is an open watch. Next and Close may be called concurrently.
type Watcher struct {
	stream *connect.ServerStreamForClient[filesystem.WatchDirResponse]
	cancel context.CancelFunc
}

// Watch watches dir (and, if recursive, every directory below it). It
// returns once the agent has set up the watch, so later changes are seen.
func (c *Client) Watch(ctx context.Context, dir string, recursive bool) (*Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	req := connect.NewRequest(&filesystem.WatchDirRequest{Path: dir, Recursive: recursive})
	c.setUser(req.Header(), "")
	stream, err := c.fsRPC().WatchDir(ctx, req)
	if err != nil {
		cancel()
		return nil, rpcErr(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			err = errors.New("agent: expected a watch start event")
		}
		return nil, rpcErr(err)
	}
	return &Watcher{stream: stream, cancel: cancel}, nil
}

// Next blocks for the next event. After Close or a failure it returns an error.
func (w *Watcher) Next() (WatchEvent, error) {
	for w.stream.Receive() {
		ev := w.stream.Msg().GetFilesystem()
		if ev == nil {
			continue // keepalive
		}
		out := WatchEvent{Name: bounded(ev.GetName())}
		switch ev.GetType() {
		case filesystem.EventType_EVENT_TYPE_CREATE:
			out.Op = OpCreate
		case filesystem.EventType_EVENT_TYPE_WRITE:
			out.Op = OpWrite
		case filesystem.EventType_EVENT_TYPE_REMOVE:
			out.Op = OpRemove
		case filesystem.EventType_EVENT_TYPE_RENAME:
			out.Op = OpRename
		case filesystem.EventType_EVENT_TYPE_CHMOD:
			out.Op = OpChmod
		default:
			continue
		}
		return out, nil
	}
	if err := w.stream.Err(); err != nil {
		return WatchEvent{}, rpcErr(err)
	}
	return WatchEvent{}, io.EOF
}

// Close ends the watch. It is idempotent.
func (w *Watcher) Close() error {
	w.cancel()
	return nil
}

// LstatPerm is the permission bits of an entry itself from its EntryInfo's permissions
// string (as fs.FileMode prints it, ending in the nine rwx letters), else mode. An entry's
// mode is, as in E2B's envd, a symlink's target's; its permissions string is the link's own.
func LstatPerm(permissions string, mode uint32) uint32 {
	if len(permissions) < 9 {
		return mode & 0o777
	}
	var m uint32
	for i, ch := range []byte(permissions[len(permissions)-9:]) {
		switch ch {
		case "rwxrwxrwx"[i]:
			m |= 1 << (8 - i)
		case '-':
		default:
			return mode & 0o777
		}
	}
	return m
}
