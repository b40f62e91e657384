package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// remotePath splits "ID:PATH"; a local path (even one holding a colon, like ./a:b) has a slash
// or dot before any colon.
func remotePath(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.ContainsAny(id, "/.\\") {
		return "", "", false
	}
	if path == "" {
		path = "." // the sandbox's working directory
	}
	return id, path, true
}

func newCpCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between this machine and a sandbox",
		Long: "cp copies a file or a directory. Exactly one of SRC and DST is ID:PATH in a sandbox;\n" +
			"relative sandbox paths are under its working directory (the template's WORKDIR, else\n" +
			"/workspace). A directory is copied with its contents;\n" +
			"symbolic links are skipped, never followed.",
		Example: "  tupper cp ./src $id:/workspace/src\n  tupper cp $id:/workspace/out.txt ./out.txt",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := remotePath(args[0])
			dstID, dstPath, dstRemote := remotePath(args[1])
			if srcRemote == dstRemote {
				return fmt.Errorf("exactly one of SRC and DST must be ID:PATH")
			}
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			id := srcID
			if dstRemote {
				id = dstID
			}
			box, err := sandbox.Connect(ctx, prov, id, sandbox.ConnectOptions{})
			if err != nil {
				return err
			}
			defer box.Close()
			if dstRemote {
				return upload(ctx, box, args[0], dstPath)
			}
			return download(ctx, box, srcPath, args[1])
		},
	}
	pf.register(cmd)
	return cmd
}

func upload(ctx context.Context, box *sandbox.Sandbox, local, remote string) error {
	st, err := os.Stat(local)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return box.Files.Upload(ctx, local, remote, sandbox.UploadOptions{})
	}
	// Copying a file onto an existing directory puts it inside.
	if rs, err := box.Files.Stat(ctx, remote); err == nil && rs.Type == provider.TypeDir {
		remote = strings.TrimSuffix(remote, "/") + "/" + filepath.Base(local)
	}
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	mode := int(st.Mode().Perm())
	bar := newProgress(filepath.Base(local), st.Size())
	defer bar.finish()
	return box.Files.WriteFrom(ctx, remote, bar.reader(f), sandbox.WriteOptions{Mode: &mode})
}

func download(ctx context.Context, box *sandbox.Sandbox, remote, local string) error {
	rs, err := box.Files.Stat(ctx, remote)
	if err != nil {
		return err
	}
	if rs.Type == provider.TypeDir {
		return box.Files.Download(ctx, remote, local)
	}
	if ls, err := os.Stat(local); err == nil && ls.IsDir() {
		local = filepath.Join(local, filepath.Base(rs.Path))
	}
	rc, err := box.Files.Open(ctx, remote)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(local), ".tupper-cp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bar := newProgress(filepath.Base(rs.Path), rs.Size)
	_, err = io.Copy(tmp, bar.reader(rc))
	bar.finish()
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(os.FileMode(rs.Mode & 0o777)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Rename into place so a failure halfway leaves no partial file.
	return os.Rename(tmp.Name(), local)
}
