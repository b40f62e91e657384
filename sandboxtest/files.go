package sandboxtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func fileCases() []testCase {
	return []testCase{
		{"ReadWriteText", filesText},
		{"ReadWriteBytes", filesBytes},
		{"Open", filesOpen},
		{"WriteMany", filesWriteMany},
		{"WriteCreatesDirectories", filesMkParents},
		{"Overwrite", filesOverwrite},
		{"RelativePaths", filesRelative},
		{"SeenByCommands", filesSeenByRun},
		{"ReadErrors", filesReadErrors},
		{"ModeValidation", filesModeValidation},
		{"Mode", filesMode},
		{"Edit", filesEdit},
		{"EditNotFound", filesEditNotFound},
		{"EditNotUnique", filesEditNotUnique},
		{"EditKeepsMode", filesEditMode},
		{"List", filesList},
		{"ListRecursive", filesListRecursive},
		{"ListGlob", filesListGlob},
		{"ListErrors", filesListErrors},
		{"Stat", filesStat},
		{"StatSymlink", filesStatSymlink},
		{"Exists", filesExists},
		{"RemoveFile", filesRemoveFile},
		{"RemoveNonEmptyDir", filesRemoveNonEmpty},
		{"RemoveRecursive", filesRemoveRecursive},
		{"MakeDirRename", filesMkdirRename},
		{"Upload", filesUpload},
		{"UploadSymlinkNotFollowed", filesUploadSymlink},
		{"Download", filesDownload},
		{"DownloadStaysInside", filesDownloadInside},
		{"Search", filesSearch},
		{"SearchPathGlobMax", filesSearchOptions},
		{"SearchErrors", filesSearchErrors},
	}
}

func filesText(c *C) {
	b := c.Box()
	c.NoErr("Write", b.Files.Write(c.Ctx, "/workspace/a.txt", []byte("hello\nworld\n"), sandbox.WriteOptions{}))
	s, err := b.Files.ReadText(c.Ctx, "/workspace/a.txt")
	c.NoErr("ReadText", err)
	Eq(c, "ReadText", s, "hello\nworld\n")
	c.NoErr("Write empty", b.Files.Write(c.Ctx, "empty", nil, sandbox.WriteOptions{}))
	Eq(c, "empty file", c.Read(b, "empty"), "")
}

func filesBytes(c *C) {
	b := c.Box()
	data := make([]byte, 0, 256*8)
	for range 8 {
		for i := range 256 {
			data = append(data, byte(i))
		}
	}
	c.NoErr("Write", b.Files.Write(c.Ctx, "bin.dat", data, sandbox.WriteOptions{}))
	got, err := b.Files.Read(c.Ctx, "bin.dat")
	c.NoErr("Read", err)
	if !bytes.Equal(got, data) {
		c.Errorf("binary round trip differs (%d bytes back, %d written)", len(got), len(data))
	}
	Eq(c, "wc -c", strings.TrimSpace(c.Out(b, "wc -c < bin.dat")), fmt.Sprint(len(data)))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	c.NoErr("Write 4 MiB", b.Files.Write(c.Ctx, "big.dat", big, sandbox.WriteOptions{}))
	got, err = b.Files.Read(c.Ctx, "big.dat")
	c.NoErr("Read 4 MiB", err)
	if !bytes.Equal(got, big) {
		c.Errorf("4 MiB round trip differs (%d bytes back)", len(got))
	}
}

func filesOpen(c *C) {
	b := c.Box()
	c.Write(b, "o.txt", "streamed")
	rc, err := b.Files.Open(c.Ctx, "o.txt")
	c.NoErr("Open", err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	rc.Close()
	c.NoErr("read", err)
	Eq(c, "Open", buf.String(), "streamed")
	c.NoErr("WriteFrom", b.Files.WriteFrom(c.Ctx, "wf.txt", strings.NewReader("from reader"), sandbox.WriteOptions{}))
	Eq(c, "WriteFrom", c.Read(b, "wf.txt"), "from reader")
}

func filesWriteMany(c *C) {
	b := c.Box()
	files := map[string][]byte{"m/a.txt": []byte("A"), "m/sub/b.txt": []byte("B"), "/tmp/m-c.txt": []byte("C")}
	c.NoErr("WriteMany", b.Files.WriteMany(c.Ctx, files, sandbox.WriteOptions{Mode: sandbox.Mode(0o640)}))
	for p, want := range files {
		Eq(c, p, c.Read(b, p), string(want))
		st, err := b.Files.Stat(c.Ctx, p)
		c.NoErr("Stat", err)
		Eq(c, p+" mode", st.Mode&0o7777, uint32(0o640))
	}
	err := b.Files.WriteMany(c.Ctx, map[string][]byte{"ok.txt": nil, "": nil}, sandbox.WriteOptions{})
	c.WantCode("WriteMany with an empty path", err, sandbox.CodeInvalidArgument)
	if ok, _ := b.Files.Exists(c.Ctx, "ok.txt"); ok {
		c.Errorf("WriteMany wrote a file before rejecting an invalid path")
	}
}

func filesMkParents(c *C) {
	b := c.Box()
	c.Write(b, "deep/er/and/deeper/f.txt", "x")
	st, err := b.Files.Stat(c.Ctx, "deep/er/and")
	c.NoErr("Stat", err)
	Eq(c, "parent type", st.Type, provider.TypeDir)
	Eq(c, "seen by ls", c.Out(b, "ls deep/er/and/deeper"), "f.txt\n")
}

func filesOverwrite(c *C) {
	b := c.Box()
	c.Write(b, "o.txt", "a long first version")
	c.Write(b, "o.txt", "short")
	Eq(c, "after overwrite", c.Read(b, "o.txt"), "short")
}

func filesRelative(c *C) {
	b := c.Box()
	c.Write(b, "rel/x.txt", "r")
	Eq(c, "absolute read", c.Read(b, "/workspace/rel/x.txt"), "r")
	Eq(c, "dot path", c.Read(b, "./rel/../rel/x.txt"), "r")
}

func filesSeenByRun(c *C) {
	b := c.Box()
	c.Write(b, "from-files.txt", "written by Files\n")
	Eq(c, "cat", c.Out(b, "cat from-files.txt"), "written by Files\n")
	c.MustRun(b, "echo 'written by run' > from-run.txt")
	Eq(c, "Read", c.Read(b, "from-run.txt"), "written by run\n")
}

func filesReadErrors(c *C) {
	b := c.Box()
	_, err := b.Files.Read(c.Ctx, "missing.txt")
	c.WantCode("Read of a missing file", err, sandbox.CodeNotFound)
	c.MustRun(b, "mkdir -p d")
	_, err = b.Files.Read(c.Ctx, "d")
	c.WantCode("Read of a directory", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.Read(c.Ctx, "")
	c.WantCode("Read of an empty path", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.Read(c.Ctx, "a\x00b")
	c.WantCode("Read of a path with NUL", err, sandbox.CodeInvalidArgument)
	c.WantCode("Write to an empty path", b.Files.Write(c.Ctx, "", []byte("x"), sandbox.WriteOptions{}), sandbox.CodeInvalidArgument)
}

func filesModeValidation(c *C) {
	b := c.Box()
	for _, m := range []int{-1, 0o10000, 1 << 40} {
		err := b.Files.Write(c.Ctx, "m.txt", []byte("x"), sandbox.WriteOptions{Mode: sandbox.Mode(m)})
		c.WantCode(fmt.Sprintf("mode %#o", m), err, sandbox.CodeInvalidArgument)
		err = b.Files.WriteMany(c.Ctx, map[string][]byte{"m.txt": []byte("x")}, sandbox.WriteOptions{Mode: sandbox.Mode(m)})
		c.WantCode(fmt.Sprintf("WriteMany mode %#o", m), err, sandbox.CodeInvalidArgument)
	}
	if ok, _ := b.Files.Exists(c.Ctx, "m.txt"); ok {
		c.Errorf("a write with an invalid mode created the file")
	}
	c.NoErr("mode 0o7777", b.Files.Write(c.Ctx, "max.txt", []byte("x"), sandbox.WriteOptions{Mode: sandbox.Mode(0o7777)}))
	c.NoErr("mode 0", b.Files.Write(c.Ctx, "zero.txt", []byte("x"), sandbox.WriteOptions{Mode: sandbox.Mode(0)}))
	st, err := b.Files.Stat(c.Ctx, "zero.txt")
	c.NoErr("Stat", err)
	Eq(c, "mode 0 applied", st.Mode&0o7777, uint32(0))
}

func filesMode(c *C) {
	b := c.Box()
	c.NoErr("Write 0600", b.Files.Write(c.Ctx, "secret.txt", []byte("x"), sandbox.WriteOptions{Mode: sandbox.Mode(0o600)}))
	st, err := b.Files.Stat(c.Ctx, "secret.txt")
	c.NoErr("Stat", err)
	Eq(c, "Stat mode", st.Mode&0o7777, uint32(0o600))
	Eq(c, "stat -c %a", strings.TrimSpace(c.Out(b, "stat -c %a secret.txt")), "600")
	c.NoErr("Write 0755", b.Files.Write(c.Ctx, "run.sh", []byte("#!/bin/sh\necho ran\n"), sandbox.WriteOptions{Mode: sandbox.Mode(0o755)}))
	st, err = b.Files.Stat(c.Ctx, "run.sh")
	c.NoErr("Stat", err)
	Eq(c, "Stat mode 0755", st.Mode&0o7777, uint32(0o755))
	c.Write(b, "default.txt", "x")
	st, err = b.Files.Stat(c.Ctx, "default.txt")
	c.NoErr("Stat", err)
	Eq(c, "default mode of a new file", st.Mode&0o777, uint32(0o644))
	// Rewriting with a mode changes it.
	c.NoErr("rewrite 0600", b.Files.Write(c.Ctx, "default.txt", []byte("y"), sandbox.WriteOptions{Mode: sandbox.Mode(0o600)}))
	st, err = b.Files.Stat(c.Ctx, "default.txt")
	c.NoErr("Stat", err)
	Eq(c, "mode after rewrite", st.Mode&0o7777, uint32(0o600))
}

func filesEdit(c *C) {
	b := c.Box()
	c.Write(b, "main.go", "package main\n\nfunc main() { foo() }\n")
	c.NoErr("Edit", b.Files.Edit(c.Ctx, "main.go", "foo()", "bar(1, 2)"))
	Eq(c, "after Edit", c.Read(b, "main.go"), "package main\n\nfunc main() { bar(1, 2) }\n")
	c.NoErr("Edit to empty", b.Files.Edit(c.Ctx, "main.go", "\n\n", "\n"))
	Eq(c, "after second Edit", c.Read(b, "main.go"), "package main\nfunc main() { bar(1, 2) }\n")
	c.WantCode("Edit with an empty find", b.Files.Edit(c.Ctx, "main.go", "", "x"), sandbox.CodeInvalidArgument)
	c.WantCode("Edit of a missing file", b.Files.Edit(c.Ctx, "nope.go", "a", "b"), sandbox.CodeNotFound)
}

func filesEditNotFound(c *C) {
	b := c.Box()
	orig := "alpha\nbeta\n"
	c.Write(b, "f.txt", orig)
	err := b.Files.Edit(c.Ctx, "f.txt", "gamma", "delta")
	c.WantCode("Edit of absent text", err, sandbox.CodeEditNotFound)
	if !errorsIs(err, sandbox.CodeEditNotFound) {
		c.Errorf("errors.Is(err, CodeEditNotFound) is false")
	}
	Eq(c, "file after a failed edit", c.Read(b, "f.txt"), orig)
}

func filesEditNotUnique(c *C) {
	b := c.Box()
	orig := "x = 1\nx = 1\n"
	c.Write(b, "f.txt", orig)
	err := b.Files.Edit(c.Ctx, "f.txt", "x = 1", "x = 2")
	c.WantCode("Edit of repeated text", err, sandbox.CodeEditNotUnique)
	Eq(c, "file after a failed edit", c.Read(b, "f.txt"), orig)
	c.NoErr("Edit with more context", b.Files.Edit(c.Ctx, "f.txt", "x = 1\nx = 1\n", "x = 1\nx = 2\n"))
	Eq(c, "after the unique edit", c.Read(b, "f.txt"), "x = 1\nx = 2\n")
}

func filesEditMode(c *C) {
	b := c.Box()
	c.NoErr("Write", b.Files.Write(c.Ctx, "s.sh", []byte("echo a\n"), sandbox.WriteOptions{Mode: sandbox.Mode(0o700)}))
	c.NoErr("Edit", b.Files.Edit(c.Ctx, "s.sh", "a", "b"))
	st, err := b.Files.Stat(c.Ctx, "s.sh")
	c.NoErr("Stat", err)
	Eq(c, "mode after Edit", st.Mode&0o7777, uint32(0o700))
}

func paths(infos []sandbox.FileInfo) string {
	var ps []string
	for _, fi := range infos {
		ps = append(ps, fi.Path)
	}
	return strings.Join(ps, ",")
}

func tree(c *C, b *sandbox.Sandbox) {
	c.NoErr("WriteMany", b.Files.WriteMany(c.Ctx, map[string][]byte{
		"t/a.go": []byte("package a\n"), "t/b.txt": []byte("bee"), "t/sub/c.go": []byte("package c\n"),
		"t/sub/deep/d.txt": []byte("dee"),
	}, sandbox.WriteOptions{}))
}

func filesList(c *C) {
	b := c.Box()
	tree(c, b)
	infos, err := b.Files.List(c.Ctx, "t", sandbox.FileListOptions{})
	c.NoErr("List", err)
	Eq(c, "List", paths(infos), "/workspace/t/a.go,/workspace/t/b.txt,/workspace/t/sub")
	for _, fi := range infos {
		switch fi.Path {
		case "/workspace/t/b.txt":
			Eq(c, "b.txt type", fi.Type, provider.TypeFile)
			Eq(c, "b.txt size", fi.Size, int64(3))
			if time.Since(fi.ModifiedAt) > time.Minute || time.Until(fi.ModifiedAt) > time.Minute {
				c.Errorf("b.txt ModifiedAt = %v", fi.ModifiedAt)
			}
		case "/workspace/t/sub":
			Eq(c, "sub type", fi.Type, provider.TypeDir)
		}
	}
	c.MustRun(b, "mkdir -p /workspace/emptydir")
	infos, err = b.Files.List(c.Ctx, "emptydir", sandbox.FileListOptions{})
	c.NoErr("List of an empty dir", err)
	Eq(c, "entries of an empty dir", len(infos), 0)
	// "" is /workspace.
	infos, err = b.Files.List(c.Ctx, "", sandbox.FileListOptions{})
	c.NoErr("List of /workspace", err)
	if !strings.Contains(paths(infos), "/workspace/t") {
		c.Errorf("List(\"\") = %s; want /workspace's entries", paths(infos))
	}
}

func filesListRecursive(c *C) {
	b := c.Box()
	tree(c, b)
	infos, err := b.Files.List(c.Ctx, "/workspace/t", sandbox.FileListOptions{Recursive: true})
	c.NoErr("List", err)
	Eq(c, "recursive List", paths(infos),
		"/workspace/t/a.go,/workspace/t/b.txt,/workspace/t/sub,/workspace/t/sub/c.go,/workspace/t/sub/deep,/workspace/t/sub/deep/d.txt")
}

func filesListGlob(c *C) {
	b := c.Box()
	tree(c, b)
	for glob, want := range map[string]string{
		"*.go":      "/workspace/t/a.go,/workspace/t/sub/c.go",
		"**/*.txt":  "/workspace/t/b.txt,/workspace/t/sub/deep/d.txt",
		"sub/*.go":  "/workspace/t/sub/c.go",
		"*.nothing": "",
	} {
		infos, err := b.Files.List(c.Ctx, "t", sandbox.FileListOptions{Recursive: true, Glob: glob})
		c.NoErr("List "+glob, err)
		Eq(c, "glob "+glob, paths(infos), want)
	}
	infos, err := b.Files.List(c.Ctx, "t", sandbox.FileListOptions{Glob: "*.go"})
	c.NoErr("List", err)
	Eq(c, "non-recursive glob", paths(infos), "/workspace/t/a.go")
}

func filesListErrors(c *C) {
	b := c.Box()
	c.Write(b, "file.txt", "x")
	_, err := b.Files.List(c.Ctx, "nodir", sandbox.FileListOptions{})
	c.WantCode("List of a missing dir", err, sandbox.CodeNotFound)
	_, err = b.Files.List(c.Ctx, "file.txt", sandbox.FileListOptions{})
	c.WantCode("List of a file", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.List(c.Ctx, "", sandbox.FileListOptions{Glob: "[unclosed"})
	c.WantCode("List with an invalid glob", err, sandbox.CodeInvalidArgument)
}

func filesStat(c *C) {
	b := c.Box()
	before := time.Now().Add(-2 * time.Second)
	c.Write(b, "s/f.txt", "12345")
	st, err := b.Files.Stat(c.Ctx, "s/f.txt")
	c.NoErr("Stat file", err)
	Eq(c, "Path", st.Path, "/workspace/s/f.txt")
	Eq(c, "Type", st.Type, provider.TypeFile)
	Eq(c, "Size", st.Size, int64(5))
	if st.ModifiedAt.Before(before) || st.ModifiedAt.After(time.Now().Add(2*time.Second)) {
		c.Errorf("ModifiedAt = %v; want about now", st.ModifiedAt)
	}
	st, err = b.Files.Stat(c.Ctx, "s")
	c.NoErr("Stat dir", err)
	Eq(c, "dir Type", st.Type, provider.TypeDir)
	Eq(c, "dir Path", st.Path, "/workspace/s")
	_, err = b.Files.Stat(c.Ctx, "s/missing")
	c.WantCode("Stat of a missing path", err, sandbox.CodeNotFound)
}

func filesStatSymlink(c *C) {
	b := c.Box()
	c.Write(b, "target.txt", "t")
	c.MustRun(b, "ln -s target.txt link && ln -s /nonexistent dangling")
	st, err := b.Files.Stat(c.Ctx, "link")
	c.NoErr("Stat link", err)
	Eq(c, "link Type (not followed)", st.Type, provider.TypeSymlink)
	st, err = b.Files.Stat(c.Ctx, "dangling")
	c.NoErr("Stat dangling link", err)
	Eq(c, "dangling Type", st.Type, provider.TypeSymlink)
	ok, err := b.Files.Exists(c.Ctx, "dangling")
	c.NoErr("Exists", err)
	Eq(c, "a dangling symlink exists", ok, true)
	Eq(c, "read through the link", c.Read(b, "link"), "t")
}

func filesExists(c *C) {
	b := c.Box()
	c.Write(b, "e.txt", "x")
	for p, want := range map[string]bool{"e.txt": true, "/workspace": true, "nope.txt": false, "/workspace/nope/deeper": false} {
		ok, err := b.Files.Exists(c.Ctx, p)
		c.NoErr("Exists "+p, err)
		Eq(c, "Exists "+p, ok, want)
	}
	_, err := b.Files.Exists(c.Ctx, "")
	c.WantCode("Exists of an empty path", err, sandbox.CodeInvalidArgument)
}

func filesRemoveFile(c *C) {
	b := c.Box()
	c.Write(b, "r.txt", "x")
	c.NoErr("Remove", b.Files.Remove(c.Ctx, "r.txt", sandbox.RemoveOptions{}))
	ok, _ := b.Files.Exists(c.Ctx, "r.txt")
	Eq(c, "exists after Remove", ok, false)
	c.WantCode("Remove of a missing file", b.Files.Remove(c.Ctx, "r.txt", sandbox.RemoveOptions{}), sandbox.CodeNotFound)
	c.WantCode("Remove /", b.Files.Remove(c.Ctx, "/", sandbox.RemoveOptions{Recursive: true}), sandbox.CodeInvalidArgument)
	c.MustRun(b, "mkdir -p emptydir")
	c.NoErr("Remove an empty dir", b.Files.Remove(c.Ctx, "emptydir", sandbox.RemoveOptions{}))
	ok, _ = b.Files.Exists(c.Ctx, "emptydir")
	Eq(c, "empty dir exists after Remove", ok, false)
}

func filesRemoveNonEmpty(c *C) {
	b := c.Box()
	c.Write(b, "full/f.txt", "x")
	err := b.Files.Remove(c.Ctx, "full", sandbox.RemoveOptions{})
	if err == nil {
		c.Errorf("Remove of a non-empty directory without Recursive succeeded")
	} else {
		c.CheckErr("Remove non-empty", err)
		if code := sandbox.CodeOf(err); code != sandbox.CodeInvalidArgument && code != sandbox.CodeConflict {
			c.Errorf("Remove of a non-empty directory: code %s (%v); want invalid_argument or conflict", code, err)
		}
	}
	Eq(c, "file after the refused Remove", c.Read(b, "full/f.txt"), "x")
}

func filesRemoveRecursive(c *C) {
	b := c.Box()
	tree(c, b)
	c.NoErr("Remove recursive", b.Files.Remove(c.Ctx, "t", sandbox.RemoveOptions{Recursive: true}))
	ok, _ := b.Files.Exists(c.Ctx, "t")
	Eq(c, "exists after recursive Remove", ok, false)
	Eq(c, "ls", c.Out(b, "ls /workspace"), "")
}

func filesMkdirRename(c *C) {
	b := c.Box()
	c.NoErr("MakeDir", b.Files.MakeDir(c.Ctx, "x/y/z"))
	c.NoErr("MakeDir existing", b.Files.MakeDir(c.Ctx, "x/y/z"))
	st, err := b.Files.Stat(c.Ctx, "x/y/z")
	c.NoErr("Stat", err)
	Eq(c, "made dir type", st.Type, provider.TypeDir)
	c.Write(b, "x/from.txt", "moved")
	c.Write(b, "x/to.txt", "old")
	c.NoErr("Rename", b.Files.Rename(c.Ctx, "x/from.txt", "x/to.txt"))
	Eq(c, "renamed", c.Read(b, "x/to.txt"), "moved")
	ok, _ := b.Files.Exists(c.Ctx, "x/from.txt")
	Eq(c, "source after Rename", ok, false)
	c.WantCode("Rename of a missing file", b.Files.Rename(c.Ctx, "x/none", "x/other"), sandbox.CodeNotFound)
}

// localTree writes files under dir.
func localTree(c *C, dir string, files map[string]string) {
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			c.Fatalf("local: %v", err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			c.Fatalf("local: %v", err)
		}
	}
}

func tempDir(c *C) string {
	dir, err := os.MkdirTemp("", "sbt-files-")
	if err != nil {
		c.Fatalf("MkdirTemp: %v", err)
	}
	c.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func filesUpload(c *C) {
	b := c.Box()
	dir := tempDir(c)
	localTree(c, dir, map[string]string{
		"main.go": "package main\n", "lib/util.go": "package lib\n", "debug.log": "log",
		"node_modules/x/index.js": "x", "lib/node_modules/y.js": "y", "lib/keep.txt": "keep",
		"build/out.bin": "bin",
	})
	if err := os.Chmod(filepath.Join(dir, "main.go"), 0o755); err != nil {
		c.Fatalf("chmod: %v", err)
	}
	c.NoErr("Upload", b.Files.Upload(c.Ctx, dir, "up", sandbox.UploadOptions{Ignore: []string{"node_modules", "*.log", "build/**"}}))
	infos, err := b.Files.List(c.Ctx, "up", sandbox.FileListOptions{Recursive: true})
	c.NoErr("List", err)
	var files []string
	for _, fi := range infos {
		if fi.Type == provider.TypeFile {
			files = append(files, strings.TrimPrefix(fi.Path, "/workspace/up/"))
		}
	}
	sort.Strings(files)
	Eq(c, "uploaded files", strings.Join(files, ","), "lib/keep.txt,lib/util.go,main.go")
	Eq(c, "content", c.Read(b, "up/lib/util.go"), "package lib\n")
	st, err := b.Files.Stat(c.Ctx, "up/main.go")
	c.NoErr("Stat", err)
	Eq(c, "mode kept", st.Mode&0o777, uint32(0o755))
	c.WantCode("Upload with an invalid pattern", b.Files.Upload(c.Ctx, dir, "up2", sandbox.UploadOptions{Ignore: []string{"[bad"}}), sandbox.CodeInvalidArgument)
	c.WantCode("Upload of a missing local dir", b.Files.Upload(c.Ctx, filepath.Join(dir, "nope"), "up3", sandbox.UploadOptions{}), sandbox.CodeInvalidArgument)
}

func filesUploadSymlink(c *C) {
	b := c.Box()
	outside := tempDir(c)
	localTree(c, outside, map[string]string{"private.key": "PRIVATE"})
	dir := tempDir(c)
	localTree(c, dir, map[string]string{"real.txt": "real"})
	if err := os.Symlink(filepath.Join(outside, "private.key"), filepath.Join(dir, "link.key")); err != nil {
		c.Skipf("cannot make a local symlink: %v", err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		c.Fatalf("symlink: %v", err)
	}
	c.NoErr("Upload", b.Files.Upload(c.Ctx, dir, "up", sandbox.UploadOptions{}))
	infos, err := b.Files.List(c.Ctx, "up", sandbox.FileListOptions{Recursive: true})
	c.NoErr("List", err)
	Eq(c, "uploaded", paths(infos), "/workspace/up/real.txt")
	ms, err := b.Files.Search(c.Ctx, "PRIVATE", sandbox.SearchOptions{Path: "/workspace"})
	c.NoErr("Search", err)
	Eq(c, "the symlinked file's content in the sandbox", len(ms), 0)
}

func filesDownload(c *C) {
	b := c.Box()
	tree(c, b)
	c.NoErr("Write", b.Files.Write(c.Ctx, "t/x.sh", []byte("#!/bin/sh\n"), sandbox.WriteOptions{Mode: sandbox.Mode(0o755)}))
	c.MustRun(b, "mkdir -p t/emptydir && ln -s /etc t/etclink")
	dir := filepath.Join(tempDir(c), "dl")
	c.NoErr("Download", b.Files.Download(c.Ctx, "t", dir))
	var got []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." {
			got = append(got, filepath.ToSlash(rel))
		}
		return nil
	})
	c.NoErr("walk", err)
	sort.Strings(got)
	Eq(c, "downloaded", strings.Join(got, ","), "a.go,b.txt,emptydir,sub,sub/c.go,sub/deep,sub/deep/d.txt,x.sh")
	data, err := os.ReadFile(filepath.Join(dir, "sub", "deep", "d.txt"))
	c.NoErr("read", err)
	Eq(c, "content", string(data), "dee")
	if fi, err := os.Stat(filepath.Join(dir, "x.sh")); err == nil && fi.Mode().Perm()&0o100 == 0 {
		c.Errorf("x.sh lost its executable bit: %v", fi.Mode())
	}
	err = b.Files.Download(c.Ctx, "nowhere", filepath.Join(dir, "n"))
	c.WantCode("Download of a missing dir", err, sandbox.CodeNotFound)
}

func filesDownloadInside(c *C) {
	b := c.Box()
	c.Write(b, "t/sub/f.txt", "payload")
	c.Write(b, "t/top.txt", "top")
	base := tempDir(c)
	outside := filepath.Join(base, "outside")
	dir := filepath.Join(base, "dl")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		c.Fatalf("mkdir: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.Fatalf("mkdir: %v", err)
	}
	// A symlink already in the local dir must not carry a download outside it.
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		c.Skipf("cannot make a local symlink: %v", err)
	}
	if err := os.Symlink(filepath.Join(outside, "top-target.txt"), filepath.Join(dir, "top.txt")); err != nil {
		c.Fatalf("symlink: %v", err)
	}
	err := b.Files.Download(c.Ctx, "t", dir)
	c.CheckErr("Download", err)
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		c.Errorf("Download wrote outside the local dir, through a symlink: %v", names)
	}
	if err == nil {
		data, rerr := os.ReadFile(filepath.Join(dir, "top.txt"))
		if rerr != nil || string(data) != "top" {
			c.Errorf("top.txt after Download: %q, %v", data, rerr)
		}
	}
}

func filesSearch(c *C) {
	b := c.Box()
	c.NoErr("WriteMany", b.Files.WriteMany(c.Ctx, map[string][]byte{
		"s/a.go":     []byte("package a\n// needle one\nfunc x() {}\n"),
		"s/b.txt":    []byte("no\nneedle two\nneedle three\n"),
		"s/c.md":     []byte("a.c literal\nabc\n"),
		"other/d.go": []byte("needle elsewhere\n"),
	}, sandbox.WriteOptions{}))
	ms, err := b.Files.Search(c.Ctx, "needle", sandbox.SearchOptions{Path: "s"})
	c.NoErr("Search", err)
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
	}
	sort.Strings(got)
	Eq(c, "matches", strings.Join(got, "|"),
		"/workspace/s/a.go:2:// needle one|/workspace/s/b.txt:2:needle two|/workspace/s/b.txt:3:needle three")
	ms, err = b.Files.Search(c.Ctx, "a.c", sandbox.SearchOptions{Path: "s"})
	c.NoErr("Search", err)
	if len(ms) != 1 || ms[0].Text != "a.c literal" {
		c.Errorf("Search for %q (a literal) = %+v; want only the literal line", "a.c", ms)
	}
	ms, err = b.Files.Search(c.Ctx, "needle", sandbox.SearchOptions{})
	c.NoErr("Search of /workspace", err)
	Eq(c, "matches below /workspace", len(ms), 4)
}

func filesSearchOptions(c *C) {
	b := c.Box()
	files := map[string][]byte{"s/a.go": []byte("hit\nhit\n"), "s/b.txt": []byte("hit\n"), "s/sub/c.go": []byte("hit\n")}
	c.NoErr("WriteMany", b.Files.WriteMany(c.Ctx, files, sandbox.WriteOptions{}))
	ms, err := b.Files.Search(c.Ctx, "hit", sandbox.SearchOptions{Path: "s", Glob: "*.go"})
	c.NoErr("Search glob", err)
	for _, m := range ms {
		if !strings.HasSuffix(m.Path, ".go") {
			c.Errorf("glob *.go matched %s", m.Path)
		}
	}
	Eq(c, "matches in *.go", len(ms), 3)
	ms, err = b.Files.Search(c.Ctx, "hit", sandbox.SearchOptions{Path: "s/sub"})
	c.NoErr("Search path", err)
	Eq(c, "matches in s/sub", len(ms), 1)
	ms, err = b.Files.Search(c.Ctx, "hit", sandbox.SearchOptions{Path: "s", MaxMatches: 2})
	c.NoErr("Search max", err)
	Eq(c, "matches with MaxMatches 2", len(ms), 2)
}

func filesSearchErrors(c *C) {
	b := c.Box()
	for what, tc := range map[string]struct {
		q    string
		opts sandbox.SearchOptions
		code sandbox.Code
	}{
		"empty query":    {"", sandbox.SearchOptions{}, sandbox.CodeInvalidArgument},
		"newline":        {"a\nb", sandbox.SearchOptions{}, sandbox.CodeInvalidArgument},
		"negative max":   {"a", sandbox.SearchOptions{MaxMatches: -1}, sandbox.CodeInvalidArgument},
		"invalid glob":   {"a", sandbox.SearchOptions{Glob: "[x"}, sandbox.CodeInvalidArgument},
		"missing path":   {"a", sandbox.SearchOptions{Path: "/no/such/dir"}, sandbox.CodeNotFound},
		"NUL in a query": {"a\x00", sandbox.SearchOptions{}, sandbox.CodeInvalidArgument},
	} {
		_, err := b.Files.Search(c.Ctx, tc.q, tc.opts)
		c.WantCode(what, err, tc.code)
	}
}
