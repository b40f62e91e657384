//go:build linux

package agent

import (
	"mime"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The parsers of untrusted input (STYLE.md): requests come from whoever
// holds the token (through E2B's SDKs, from anywhere), and /etc/passwd and
// /etc/group belong to the sandbox's root. The seeds run as normal tests.

// checkResolved asserts what every resolved path must be: absolute, clean,
// with no ".." element, no NUL.
func checkResolved(t *testing.T, in, got string) {
	t.Helper()
	if !strings.HasPrefix(got, "/") || filepath.Clean(got) != got || strings.ContainsRune(got, 0) {
		t.Fatalf("resolvePath(%q) = %q: not a clean absolute path", in, got)
	}
	for _, el := range strings.Split(got, "/") {
		if el == ".." {
			t.Fatalf("resolvePath(%q) = %q keeps ..", in, got)
		}
	}
}

func FuzzPartFileName(f *testing.F) {
	for _, s := range []string{
		`form-data; name="file"; filename="/home/user/a.txt"`,
		`form-data; name="file"; filename="../../etc/passwd"`,
		`form-data; name="file"; filename="a \"quoted\" name"`,
		`form-data; name="file"; filename="unterminated`,
		`form-data; name="file"; filename=bare.txt; x=y`,
		`form-data; name="file"; filename*=UTF-8''%2Fetc%2Fshadow`,
		`form-data; filename=""`,
		`form-data; name=file; filename="a"; filename="b"`,
		`attachment; filename="\x00nul"`,
		"filename=",
		"",
		`form-data; name="file"; filename="C:\\Windows\\x"`,
	} {
		f.Add(s, "/home/user")
	}
	a := &Agent{}
	f.Fuzz(func(t *testing.T, cd, home string) {
		name := partFileName(cd)
		if _, params, err := mime.ParseMediaType(cd); err == nil && name != params["filename"] {
			t.Fatalf("partFileName(%q) = %q, mime says %q", cd, name, params["filename"])
		}
		if len(name) > len(cd) {
			t.Fatalf("partFileName(%q) = %q: longer than its input", cd, name)
		}
		if name == "" {
			return
		}
		// Whatever the name, it lands on a clean absolute path.
		u := &osUser{Name: "u", Home: cleanAbs(home)}
		p, err := a.resolvePath(name, u)
		if err != nil {
			if !strings.ContainsRune(name, 0) && !strings.ContainsRune(home, 0) && !strings.HasPrefix(name, "~") {
				t.Fatalf("resolvePath(%q): %v", name, err)
			}
			return
		}
		checkResolved(t, name, p)
	})
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range [][2]string{
		{"", "/root"}, {"a/b", "/home/user"}, {"../../../etc/passwd", "/home/user"},
		{"/a/../../b", "/"}, {"~", "/home/u"}, {"~/x/..", "/home/u"}, {"~root/x", "/home/u"},
		{"//a//b/", "/"}, {"./.", "/w"}, {"a\x00b", "/"}, {"..", "relative/home"},
		{"/workspace/link/../x", "/"}, {"~/../../..", "/home/u"},
	} {
		f.Add(s[0], s[1], "")
		f.Add(s[0], s[1], "/workspace")
	}
	f.Fuzz(func(t *testing.T, p, home, workdir string) {
		if workdir != "" && !filepath.IsAbs(workdir) {
			workdir = "/" + workdir
		}
		a := &Agent{cfg: Config{DefaultWorkdir: workdir}}
		u := &osUser{Name: "u", Home: cleanAbs(home)}
		got, err := a.resolvePath(p, u)
		if err != nil {
			if !strings.ContainsRune(p+workdir+home, 0) && !strings.HasPrefix(p, "~") && !(p == "" && strings.HasPrefix(workdir, "~")) {
				t.Fatalf("resolvePath(%q): unexpected error %v", p, err)
			}
			return
		}
		checkResolved(t, p, got)
		// Absolute paths are only cleaned: ".." stops at "/" and symlinks
		// are not followed (the agent's "/" is the sandbox's, so a link
		// cannot lead anywhere the agent could not go anyway).
		if strings.HasPrefix(p, "/") && got != filepath.Clean(p) {
			t.Fatalf("resolvePath(%q) = %q, want %q", p, got, filepath.Clean(p))
		}
		// A relative path without ".." stays under the home directory.
		if p != "" && !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "~") && !strings.Contains(p, "..") {
			if h := u.Home; got != h && !strings.HasPrefix(got, strings.TrimSuffix(h, "/")+"/") {
				t.Fatalf("resolvePath(%q) with home %q = %q: outside the home", p, h, got)
			}
		}
	})
}

func FuzzUserDB(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
		"root:x:0:\nusers:x:100:nobody,root\n", "nobody")
	f.Add("# comment\n\nbad line\nu:x:notanumber:1::/h:/bin/sh\nv:x:1:1\n", "g:x:1:v,,u\n:x::\n", "v")
	f.Add("a:x:4294967295:4294967296::/:/bin/sh\n", "", "a")
	f.Add(strings.Repeat("x", 5000)+":x:1:1::/h:/bin/sh\n", "g:x:1:"+strings.Repeat(",", 100)+"\n", "x")
	f.Fuzz(func(t *testing.T, passwd, group, name string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "group"), []byte(group), 0o644); err != nil {
			t.Fatal(err)
		}
		db := newUserDB(dir)
		u, err := db.lookup(name)
		if err == nil {
			if u.Name != name {
				t.Fatalf("lookup(%q) returned %q", name, u.Name)
			}
			if len(u.Groups) == 0 || u.Groups[0] != u.GID {
				t.Fatalf("lookup(%q): groups %v do not start with the primary group %d", name, u.Groups, u.GID)
			}
			_ = db.byUID(u.UID)
			db.names(u.UID, u.GID)
		}
		_ = db.byUID(0)
	})
}
