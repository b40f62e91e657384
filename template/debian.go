package template

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Debian is the name of the built-in template made on first use from the machine's own
// distribution and package mirror (EnsureDebian): no container registry is needed.
const Debian = "debian"

// Distro is a Debian-family distribution release and the package mirror it is fetched from.
type Distro struct {
	ID       string // os-release ID: debian, ubuntu
	Codename string // bookworm, trixie, noble
	Mirror   string // the URI of an apt source serving Codename
}

// HostDistro reads the distribution of the machine whose root is root ("/" on a host) from
// its os-release, and its mirror from its own apt sources: the URIs of a deb822
// sources.list.d/*.sources stanza, or a one-line "deb URI SUITE …" entry, that serves the
// release's codename. Commented-out entries are not read. A machine that is not of the
// Debian family, or has no such source, is an unsupported error saying so.
func HostDistro(root string) (Distro, error) {
	var d Distro
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok {
				continue
			}
			v = strings.Trim(v, `"'`)
			switch k {
			case "ID":
				d.ID = v
			case "VERSION_CODENAME":
				d.Codename = v
			}
		}
		break
	}
	if d.ID != "debian" && d.ID != "ubuntu" || d.Codename == "" {
		return d, provider.Errorf(provider.CodeUnsupported, "template %s: made from the machine's own Debian or Ubuntu release, and this machine's os-release says ID=%q VERSION_CODENAME=%q", Debian, d.ID, d.Codename)
	}
	d.Mirror = aptMirror(root, d.Codename)
	if d.Mirror == "" {
		return d, provider.Errorf(provider.CodeUnsupported, "template %s: no apt source for %s in %s or %s, so there is no mirror to fetch it from", Debian, d.Codename,
			filepath.Join(root, "etc/apt/sources.list"), filepath.Join(root, "etc/apt/sources.list.d"))
	}
	return d, nil
}

// aptMirror returns the first URI of an apt source (deb822 or one-line) that serves suite,
// or "".
func aptMirror(root, suite string) string {
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	sources, _ := filepath.Glob(filepath.Join(dir, "*.sources"))
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// Stanzas are separated by blank lines; each has Types, URIs and Suites fields.
		for _, stanza := range strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n\n") {
			fields := map[string][]string{}
			for _, line := range strings.Split(stanza, "\n") {
				if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
					continue
				}
				k, v, ok := strings.Cut(line, ":")
				if !ok {
					continue
				}
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
			}
			if !slices.Contains(fields["types"], "deb") || !slices.Contains(fields["suites"], suite) || len(fields["uris"]) == 0 {
				continue
			}
			if en := fields["enabled"]; len(en) == 1 && strings.EqualFold(en[0], "no") {
				continue
			}
			return fields["uris"][0]
		}
	}
	lists, _ := filepath.Glob(filepath.Join(dir, "*.list"))
	for _, f := range append([]string{filepath.Join(root, "etc/apt/sources.list")}, lists...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			if len(w) < 3 || w[0] != "deb" {
				continue
			}
			w = w[1:]
			if strings.HasPrefix(w[0], "[") { // options: [arch=amd64 signed-by=…]
				for len(w) > 0 && !strings.HasSuffix(w[0], "]") {
					w = w[1:]
				}
				if len(w) > 0 {
					w = w[1:]
				}
			}
			if len(w) >= 2 && w[1] == suite {
				return w[0]
			}
		}
	}
	return ""
}

// DebianOptions configure EnsureDebian.
type DebianOptions struct {
	// Root is the machine root whose os-release and apt sources say what to fetch ("" is /).
	Root string
	// Debootstrap is the debootstrap program ("" finds it on PATH).
	Debootstrap string
	// Output receives debootstrap's progress (nil: discarded).
	Output io.Writer
}

// ResolveMirror records uri, an apt source's URI, as a Mirror: its host's IPv4 addresses as
// this machine resolves them now, each with the URI's port. A URI with no network host
// (file:, cdrom:, or a scheme apt reaches through another program, such as tor+http:) is
// recorded without addresses; so is a host that does not resolve, which is no error: the
// template is made from what the machine has, and its sandboxes are simply given nothing.
// The lookup takes at most 5 s.
func ResolveMirror(ctx context.Context, uri string) *Mirror {
	m := &Mirror{URI: uri}
	u, err := url.Parse(uri)
	if err != nil || u.Hostname() == "" {
		return m
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "http":
		port = "80"
	case u.Scheme == "https":
		port = "443"
	default:
		return m
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return m
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip4", u.Hostname()); err != nil {
			return m
		}
	}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && !slices.Contains(m.Addrs, netip.AddrPortFrom(a, uint16(n))) {
			m.Addrs = append(m.Addrs, netip.AddrPortFrom(a, uint16(n)))
		}
	}
	return m
}
