//go:build linux

package servertest

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// BusyboxTemplate imports a small image template called name into prov's template store
// (prov must keep its templates in a store under its Home, as the local provider does), from a root file system tarball made of the
// host's static busybox (Debian's busybox-static): /bin/busybox with a link per applet,
// /bin/bash a script running busybox's sh (E2B's SDKs start commands with /bin/bash -l -c),
// and /etc/passwd and /etc/group with root. It skips (fails under CI=true) without a static
// busybox. It takes a second: no mirror, no registry.
func BusyboxTemplate(t testing.TB, prov provider.Provider, name string) *template.Template {
	t.Helper()
	b, ok := prov.(interface{ Home() string }) // test set-up: the store opened as the provider does
	if !ok {
		t.Fatalf("provider %s has no template store", prov.Name())
	}
	p := BusyboxRootFS(t)
	st, err := template.Open(b.Home())
	if err != nil {
		t.Fatal(err)
	}
	tp, err := st.Import(context.Background(), name, template.Source{Path: p, Format: template.FormatRootFS}, template.ImportOptions{})
	if err != nil {
		t.Fatalf("importing the busybox template: %v", err)
	}
	return tp
}

// BusyboxRootFS writes the root file system of BusyboxTemplate as a tarball in a temporary
// directory and returns its path: for a Dockerfile's ADD of it FROM scratch, as a user
// builds an image from a root file system.
func BusyboxRootFS(t testing.TB) string {
	t.Helper()
	bb := testenv.RequireBinary(t, "busybox")
	f, err := elf.Open(bb)
	if err != nil {
		t.Fatal(err)
	}
	static := true
	for _, ph := range f.Progs {
		static = static && ph.Type != elf.PT_INTERP
	}
	f.Close()
	testenv.Require(t, static, bb+" is not static: apt-get install busybox-static (scripts/setup.sh --test does)")
	applets, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			tw.Write([]byte(body))
		}
	}
	for _, d := range []string{"bin/", "etc/", "tmp/", "root/", "usr/", "usr/bin/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode}, "")
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, string(bin))
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && a != "bash" {
			add(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, "")
		}
	}
	add(&tar.Header{Name: "bin/bash", Typeflag: tar.TypeReg, Mode: 0o755}, "#!/bin/sh\nexec /bin/busybox sh \"$@\"\n")
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, "root:x:0:0:root:/root:/bin/sh\n")
	add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, "root:x:0:\n")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "busybox-rootfs.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
