//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/spec/filesystem"
)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MOVE_SELF | unix.IN_ATTRIB |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// maxPolledEvents bounds the events a CreateWatcher watcher keeps between
// two GetWatcherEvents calls; older ones are dropped.
const maxPolledEvents = 10000

// watcher is an inotify instance over a directory (and, if recursive, every
// directory below it, including ones created later).
type watcher struct {
	a            *Agent
	f            *os.File
	root         string
	recursive    bool
	includeEntry bool

	mu  sync.Mutex
	wds map[int32]string
}

func (a *Agent) newWatcher(root string, recursive, includeEntry bool) (*watcher, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError(err, "watch")
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s is not a directory", root))
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("inotify: %w", err))
	}
	w := &watcher{a: a, f: os.NewFile(uintptr(fd), "inotify"), root: root, recursive: recursive, includeEntry: includeEntry, wds: map[int32]string{}}
	if err := w.add(root); err != nil {
		w.f.Close()
		return nil, fsError(err, "watch")
	}
	if recursive {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != root {
				_ = w.add(p)
			}
			return nil
		})
	}
	return w, nil
}

func (w *watcher) add(dir string) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var aerr error
	if err := rc.Control(func(fd uintptr) { wd, aerr = unix.InotifyAddWatch(int(fd), dir, watchMask) }); err != nil {
		return err
	}
	if aerr != nil {
		return aerr
	}
	w.mu.Lock()
	w.wds[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

func (w *watcher) close() { w.f.Close() }

// run reads events until the watcher is closed, calling emit for each.
func (w *watcher) run(emit func(*filesystem.FilesystemEvent)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : min(n, off+unix.SizeofInotifyEvent+int(ev.Len))]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := strings.TrimRight(string(nameBytes), "\x00")
			w.handle(ev.Wd, ev.Mask, name, emit)
		}
	}
}

func (w *watcher) handle(wd int32, mask uint32, name string, emit func(*filesystem.FilesystemEvent)) {
	w.mu.Lock()
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd)
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	full := dir
	if name != "" {
		full = filepath.Join(dir, name)
	}
	self := name == ""
	if self && dir != w.root {
		return // reported by the parent directory's watch
	}
	var typ filesystem.EventType
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		typ = filesystem.EventType_EVENT_TYPE_CREATE
	case mask&unix.IN_MODIFY != 0:
		typ = filesystem.EventType_EVENT_TYPE_WRITE
	case mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
		typ = filesystem.EventType_EVENT_TYPE_REMOVE
	case mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0:
		typ = filesystem.EventType_EVENT_TYPE_RENAME
	case mask&unix.IN_ATTRIB != 0:
		typ = filesystem.EventType_EVENT_TYPE_CHMOD
	default:
		return
	}
	w.emit(full, typ, emit)
	if typ == filesystem.EventType_EVENT_TYPE_CREATE && mask&unix.IN_ISDIR != 0 && w.recursive {
		// Watch the new directory, then report what was created in it before
		// the watch existed.
		if w.add(full) == nil {
			_ = filepath.WalkDir(full, func(p string, d fs.DirEntry, err error) error {
				if err != nil || p == full {
					return nil
				}
				if d.IsDir() {
					_ = w.add(p)
				}
				w.emit(p, filesystem.EventType_EVENT_TYPE_CREATE, emit)
				return nil
			})
		}
	}
}

func (w *watcher) emit(full string, typ filesystem.EventType, emit func(*filesystem.FilesystemEvent)) {
	rel, err := filepath.Rel(w.root, full)
	if err != nil {
		return
	}
	ev := &filesystem.FilesystemEvent{Name: rel, Type: typ}
	if w.includeEntry && (typ == filesystem.EventType_EVENT_TYPE_CREATE || typ == filesystem.EventType_EVENT_TYPE_WRITE || typ == filesystem.EventType_EVENT_TYPE_CHMOD) {
		if e, err := w.a.entryInfo(full); err == nil {
			ev.Entry = e
		}
	}
	emit(ev)
}

func (s *fsService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	p, _, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return err
	}
	w, err := s.a.newWatcher(p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return err
	}
	defer w.close()
	events := make(chan *filesystem.FilesystemEvent, 256)
	done := make(chan struct{})
	go func() {
		defer close(events)
		w.run(func(ev *filesystem.FilesystemEvent) {
			select {
			case events <- ev:
			case <-done:
			}
		})
	}()
	defer close(done)
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	keepalive := keepaliveInterval(req.Header())
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher stopped"))
			}
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			tick.Reset(keepalive)
		case <-tick.C:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
			return ctx.Err()
		}
	}
}

// polledWatcher is a watcher whose events wait for GetWatcherEvents.
type polledWatcher struct {
	w      *watcher
	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
}

type watcherTable struct {
	mu sync.Mutex
	m  map[string]*polledWatcher
}

func newWatcherTable() *watcherTable { return &watcherTable{m: map[string]*polledWatcher{}} }

func (t *watcherTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, pw := range t.m {
		pw.w.close()
		delete(t.m, id)
	}
}

func (s *fsService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	p, _, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return nil, err
	}
	w, err := s.a.newWatcher(p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pw := &polledWatcher{w: w}
	s.a.watchers.mu.Lock()
	s.a.watchers.m[id] = pw
	s.a.watchers.mu.Unlock()
	go w.run(func(ev *filesystem.FilesystemEvent) {
		pw.mu.Lock()
		if len(pw.events) >= maxPolledEvents {
			pw.events = pw.events[1:]
		}
		pw.events = append(pw.events, ev)
		pw.mu.Unlock()
	})
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *fsService) polled(id string) (*polledWatcher, error) {
	s.a.watchers.mu.Lock()
	defer s.a.watchers.mu.Unlock()
	pw := s.a.watchers.m[id]
	if pw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return pw, nil
}

func (s *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	pw, err := s.polled(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	events := pw.events
	pw.events = nil
	pw.mu.Unlock()
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

func (s *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	pw, err := s.polled(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.a.watchers.mu.Lock()
	delete(s.a.watchers.m, req.Msg.GetWatcherId())
	s.a.watchers.mu.Unlock()
	pw.w.close()
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
