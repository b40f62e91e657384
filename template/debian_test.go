//go:build linux

package template

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHostDistro(t *testing.T) {
	const osRelease = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_CODENAME=bookworm\n"
	cases := []struct {
		name  string
		files map[string]string
		want  string // mirror; "" = unsupported
	}{
		{"deb822", map[string]string{
			"etc/os-release": osRelease,
			"etc/apt/sources.list.d/debian.sources": "# Types: deb\n# URIs: http://commented.invalid/debian\n# Suites: bookworm\n\n" +
				"Types: deb\nURIs: http://security.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n\n" +
				"Types: deb deb-src\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
		}, "http://mirror.invalid/debian"},
		{"deb822 disabled stanza", map[string]string{
			"etc/os-release": osRelease,
			"etc/apt/sources.list.d/a.sources": "Enabled: no\nTypes: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\n\n" +
				"Types: deb\nURIs: http://on.invalid/debian\nSuites: bookworm\n",
		}, "http://on.invalid/debian"},
		{"one-line with options", map[string]string{
			"usr/lib/os-release":            osRelease,
			"etc/apt/sources.list":          "#deb http://commented.invalid/debian bookworm main\ndeb-src http://src.invalid/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://line.invalid/debian bookworm main\n",
			"etc/apt/sources.list.d/x.list": "deb http://other.invalid/debian trixie main\n",
		}, "http://line.invalid/debian"},
		{"no source for the release", map[string]string{
			"etc/os-release":       osRelease,
			"etc/apt/sources.list": "deb http://other.invalid/debian trixie main\n",
		}, ""},
		{"not debian", map[string]string{
			"etc/os-release":       "ID=fedora\nVERSION_CODENAME=\n",
			"etc/apt/sources.list": "deb http://line.invalid/debian bookworm main\n",
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, c.files)
			d, err := HostDistro(root)
			if c.want == "" {
				if provider.CodeOf(err) != provider.CodeUnsupported {
					t.Fatalf("HostDistro = %+v, %v; want unsupported", d, err)
				}
				return
			}
			if err != nil || d.Mirror != c.want || d.Codename != "bookworm" || d.ID != "debian" {
				t.Fatalf("HostDistro = %+v, %v; want mirror %s", d, err, c.want)
			}
		})
	}
}

// ResolveMirror records the address and port apt reaches a mirror at; a URI without a
// network host records none. No name here needs a nameserver.
func TestResolveMirror(t *testing.T) {
	for _, c := range []struct {
		uri  string
		want []string
	}{
		{"http://203.0.113.80/debian", []string{"203.0.113.80:80"}},
		{"https://10.1.2.3/debian", []string{"10.1.2.3:443"}},
		{"http://10.1.2.3:3142/debian", []string{"10.1.2.3:3142"}},
		{"http://localhost:3142/debian", []string{"127.0.0.1:3142"}},
		{"file:/srv/mirror", nil},
		{"cdrom:[Debian]/", nil},
		{"tor+http://10.1.2.3/debian", nil},
		{"http://10.1.2.3:0/debian", nil},
		{"http://[fd00::1]/debian", nil}, // sandboxes have IPv4 only
	} {
		m := ResolveMirror(context.Background(), c.uri)
		var got []string
		for _, a := range m.Addrs {
			got = append(got, a.String())
		}
		if m.URI != c.uri || !slices.Equal(got, c.want) {
			t.Errorf("ResolveMirror(%q) = %q %v, want %v", c.uri, m.URI, got, c.want)
		}
	}
}
