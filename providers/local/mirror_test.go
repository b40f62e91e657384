//go:build linux

package local

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// labMirror is the package mirror of TestTemplateMirror's template: a private address of
// the lab's upstream namespace, which serves TCP on labPort at every address it holds and,
// for this test, on labMirrorOther of the mirror's address too.
var labMirror = netip.AddrPortFrom(labPrivate, labPort)

const labMirrorOther = 7003

// TestTemplateMirror: a sandbox of a template recorded with a package mirror on a private
// address reaches that address on that port, with network "all" and through its egress
// proxy under a policy, and nothing else private; a template built from it keeps the mirror
// (its RUN steps reach it too); a sandbox of another template does not reach it, nor one of
// a provider with NoTemplateMirror. Every address is in network namespaces the test makes
// (netsec_test.go's lab).
func TestTemplateMirror(t *testing.T) {
	forRuntimesInNetns(t, true, func(t *testing.T, rt string) {
		l := newNetLabOn(t, rt, "tpmir"+rt)
		inNetns(t, l.up, func() {
			l.serveTCP(t, net.JoinHostPort(labPrivate.String(), strconv.Itoa(labMirrorOther)), l.upTCP)
		})
		l.mirror(t)
	})
}

// mirrorTemplates puts into p's store "plain", a busybox template with the lab's helper,
// and "mirrored", the same recorded as made from labMirror.
func (l *netLab) mirrorTemplates(t *testing.T, p *Provider) {
	t.Helper()
	busyboxTemplate(t, p, "plain", template.Config{})
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := st.Get("plain")
	if err != nil {
		t.Fatal(err)
	}
	helper := testLayer(t, st, "mirror/helper", func(dir string) {
		p := filepath.Join(dir, strings.TrimPrefix(mirrorHelper, "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, l.helper, 0o755); err != nil {
			t.Fatal(err)
		}
	})
	tp.Layers = append(tp.Layers, helper)
	if err := st.Put(tp); err != nil {
		t.Fatal(err)
	}
	mirrored := *tp
	mirrored.Name = "mirrored"
	mirrored.Mirror = &template.Mirror{URI: "http://" + labMirror.String() + "/debian", Addrs: []netip.AddrPort{labMirror}}
	if err := st.Put(&mirrored); err != nil {
		t.Fatal(err)
	}
}

// egressEntry waits for inst's egress record to have a connection to dest and returns it.
func egressEntry(t *testing.T, inst *Instance, dest string) provider.EgressEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err := inst.Egress(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range log.Entries {
			if e.Kind == "connect" && e.Dest == dest {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection to %s in the egress record: %+v", dest, log.Entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mirrorHelper is where the lab's helper is in the templates of mirrorTemplates.
const mirrorHelper = "/usr/local/bin/tphelper"

func (l *netLab) mirror(t *testing.T) {
	off := newTestProviderConfig(t, Config{Runtime: l.rt, Subnet: l.subnet.String(), Bridge: l.bridge, NoTemplateMirror: true})
	for _, p := range []*Provider{l.q, off} {
		l.mirrorTemplates(t, p)
	}
	const refused = "EHOSTUNREACH" // the firewall's REJECT
	hp := func(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), strconv.Itoa(port)) }
	connect := func(t *testing.T, inst *Instance, addr string) string {
		t.Helper()
		_, r, _ := strings.Cut(strings.TrimSpace(run(t, inst, mirrorHelper+" connect "+addr)), " ")
		return r
	}
	expect := func(t *testing.T, inst *Instance, who, addr, want string) {
		t.Helper()
		if got := connect(t, inst, addr); got != want {
			t.Errorf("%s to %s: %s, want %s", who, addr, got, want)
		}
	}
	mirrored := create(t, l.q, provider.CreateSpec{Template: "mirrored"})
	plain := create(t, l.q, provider.CreateSpec{Template: "plain"})
	host := l.create(t, l.q, provider.NetworkAll)
	offBox := create(t, off, provider.CreateSpec{Template: "mirrored"})

	t.Run("network_all", func(t *testing.T) {
		expect(t, mirrored, "mirrored", labMirror.String(), "connected")
		expect(t, mirrored, "mirrored, the mirror's other port", hp(labPrivate, labMirrorOther), refused)
		for _, a := range []netip.Addr{labClosed, labOpened, labResolver, labUpTransit} {
			expect(t, mirrored, "mirrored", hp(a, labPort), refused)
		}
		expect(t, mirrored, "mirrored (metadata)", hp(labMetadata, 80), refused)
		expect(t, mirrored, "mirrored (the host)", hp(l.q.net.Gateway(), labPort), refused)
		expect(t, mirrored, "mirrored (public)", hp(labPublic, labPort), "connected")
		expect(t, plain, "plain", labMirror.String(), refused)
		if got := l.connect(t, host, labMirror.String()); got != refused {
			t.Errorf("template host to %s: %s, want %s", labMirror, got, refused)
		}
		expect(t, offBox, "NoTemplateMirror", labMirror.String(), refused)
		rec, err := l.q.lay.readRecord(mirrored.ID())
		if err != nil || !slices.Equal(rec.Mirror, []netip.AddrPort{labMirror}) {
			t.Errorf("the mirrored sandbox's record: mirror %v (%v)", rec.Mirror, err)
		}
	})

	t.Run("policy", func(t *testing.T) {
		// The policy allows the whole range; of it, the proxy dials the mirror only. The
		// proxy accepts every connection and then relays or resets it, so what it did is
		// read from its egress record.
		pol := provider.Network{Allow: []string{"10.77.0.0/16"}}
		withPol := create(t, l.q, provider.CreateSpec{Template: "mirrored", Network: pol})
		plainPol := create(t, l.q, provider.CreateSpec{Template: "plain", Network: pol})
		for _, c := range []struct {
			inst   *Instance
			who    string
			addr   string
			reason string // "" for relayed
		}{
			{withPol, "mirrored with a policy", labMirror.String(), ""},
			{withPol, "mirrored with a policy, the mirror's other port", hp(labPrivate, labMirrorOther), "not public"},
			{withPol, "mirrored with a policy", hp(labResolver, labPort), "not public"},
			{plainPol, "plain with a policy", labMirror.String(), "not public"},
		} {
			connect(t, c.inst, c.addr)
			e := egressEntry(t, c.inst, c.addr)
			if c.reason == "" && !e.Allowed || c.reason != "" && (e.Allowed || !strings.HasPrefix(e.Reason, c.reason)) {
				t.Errorf("%s to %s: the proxy logged %+v, want reason %q", c.who, c.addr, e, c.reason)
			}
		}
	})

	t.Run("build", func(t *testing.T) {
		// A template built FROM the mirrored one keeps its mirror, and its RUN steps reach
		// it: the build fails unless the step connects.
		st, err := template.Open(l.q.cfg.Home)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		built, err := st.Build(ctx, template.BuildOptions{Name: "built", Runner: l.q.BuildRunner(),
			DockerfileText: "FROM mirrored\nRUN " + mirrorHelper + " connect " + labMirror.String() + " | grep -q ' connected$'\n"})
		if err != nil {
			t.Fatal(err)
		}
		if built.Mirror == nil || !slices.Equal(built.Mirror.Addrs, []netip.AddrPort{labMirror}) {
			t.Errorf("the built template's mirror: %+v", built.Mirror)
		}
		box := create(t, l.q, provider.CreateSpec{Template: "built"})
		expect(t, box, "built", labMirror.String(), "connected")
		expect(t, box, "built, the mirror's other port", hp(labPrivate, labMirrorOther), refused)
	})

	t.Run("doctor", func(t *testing.T) {
		lines := strings.Join(l.q.MirrorReport(context.Background()), "\n")
		if !strings.Contains(lines, "template mirrored: made from http://"+labMirror.String()+"/debian; its sandboxes reach it at "+labMirror.String()) {
			t.Errorf("MirrorReport:\n%s", lines)
		}
		if lines := strings.Join(off.MirrorReport(context.Background()), "\n"); !strings.Contains(lines, "template mirrored: made from http://"+labMirror.String()+"/debian; its sandboxes are given no way to it") {
			t.Errorf("MirrorReport with NoTemplateMirror:\n%s", lines)
		}
	})

	// Nothing private but the mirror's port accepted a connection.
	for local, peers := range l.upTCP.all() {
		if local != labMirror.String() && local != hp(labPublic, labPort) {
			t.Errorf("ESCAPE: upstream %s accepted %v", local, peers)
		}
	}
	for local, peers := range l.hostTCP.all() {
		t.Errorf("ESCAPE: the host's listener at %s accepted %v", local, peers)
	}
}
