package testenv

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// RequireDocker requires a Docker Engine that answers on DOCKER_HOST (a unix:// address),
// else on /var/run/docker.sock. scripts/test.sh starts a private dockerd and sets DOCKER_HOST
// when none answers; by hand: eval "DOCKER_HOST=$(scripts/dockerd.sh start /tmp/tupper-dockerd)".
func RequireDocker(t testing.TB) {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		// A TCP or SSH engine: the provider's own Available says whether it answers.
		return
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := hc.Get("http://docker/_ping")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
	}
	Skip(t, "no Docker Engine answers at "+host+" (scripts/test.sh starts one; install docker.io)")
}
