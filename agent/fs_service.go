//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tupper-dev/tupper/agent/spec/filesystem"
	"github.com/tupper-dev/tupper/agent/spec/filesystem/filesystemconnect"
)

type fsService struct{ a *Agent }

var _ filesystemconnect.FilesystemHandler = (*fsService)(nil)

type headered interface{ Header() http.Header }

// resolve makes p absolute for the request's user; errors are Connect errors.
func (s *fsService) resolve(p string, req headered) (string, *osUser, error) {
	u, err := s.a.userFor("", req.Header())
	if err != nil {
		return "", nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	abs, err := s.a.resolvePath(p, u)
	if err != nil {
		return "", nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return abs, u, nil
}

// entryInfo describes path like envd: for a symlink, type and mode are the
// target's and symlink_target is set; permissions is the Lstat mode string.
func (a *Agent) entryInfo(path string) (*filesystem.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fsError(err, "stat")
	}
	return a.entryFromInfo(path, fi), nil
}

func (a *Agent) entryFromInfo(path string, fi fs.FileInfo) *filesystem.EntryInfo {
	e := &filesystem.EntryInfo{
		Name:         fi.Name(),
		Path:         path,
		Size:         fi.Size(),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if path == "/" {
		e.Name = "/"
	}
	mode := fi.Mode()
	if mode&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target = path
		}
		e.SymlinkTarget = &target
		if ti, err := os.Stat(target); err == nil {
			e.Type = fileType(ti.Mode())
			e.Mode = uint32(ti.Mode().Perm())
		}
	} else {
		e.Type = fileType(mode)
		e.Mode = uint32(mode.Perm())
		e.Metadata = metadataAt(path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = a.users.names(st.Uid, st.Gid)
	}
	return e
}

func fileType(m fs.FileMode) filesystem.FileType {
	switch {
	case m.IsRegular():
		return filesystem.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	}
	return filesystem.FileType_FILE_TYPE_UNSPECIFIED
}

// fsError maps an OS error to the Connect code E2B's SDKs expect.
func fsError(err error, op string) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrExist):
		code = connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission):
		code = connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG):
		code = connect.CodeInvalidArgument
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = connect.CodeResourceExhausted
	case errors.Is(err, syscall.ELOOP):
		code = connect.CodeFailedPrecondition
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", op, err))
}

func (s *fsService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	p, _, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return nil, err
	}
	e, err := s.a.entryInfo(p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (s *fsService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	p, u, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fsError(err, "stat")
	}
	if err := s.a.ensureDirs(p, u); err != nil {
		return nil, err
	}
	e, err := s.a.entryInfo(p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

// ensureDirs creates dir and its missing parents (0755), owned by u.
func (a *Agent) ensureDirs(dir string, u *osUser) error {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is a file: %s", p))
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fsError(err, "stat")
		}
		missing = append(missing, p)
		if p == "/" {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fsError(err, "mkdir")
		}
		a.chown(missing[i], u)
	}
	return nil
}

func (a *Agent) chown(p string, u *osUser) {
	if a.euid == 0 {
		_ = os.Lchown(p, int(u.UID), int(u.GID))
	}
}

func (s *fsService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	src, u, err := s.resolve(req.Msg.GetSource(), req)
	if err != nil {
		return nil, err
	}
	dst, _, err := s.resolve(req.Msg.GetDestination(), req)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, fsError(err, "source")
	}
	if err := s.a.ensureDirs(filepath.Dir(dst), u); err != nil {
		return nil, err
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError(err, "rename")
	}
	e, err := s.a.entryInfo(dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (s *fsService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	p, _, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fsError(err, "resolve")
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fsError(err, "stat")
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	var out []*filesystem.EntryInfo
	err = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != real && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if path == real {
			return nil
		}
		rel, _ := filepath.Rel(real, path)
		if strings.Count(rel, "/")+1 > depth {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished meanwhile
		}
		out = append(out, s.a.entryFromInfo(filepath.Join(p, rel), info))
		if d.IsDir() && strings.Count(rel, "/")+1 >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fsError(err, "read directory")
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: out}), nil
}

func (s *fsService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	p, _, err := s.resolve(req.Msg.GetPath(), req)
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, fsError(err, "remove")
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}
