package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// network.maskRequestHost (E2B's create): the sandbox's ports see the mask, ${PORT} replaced
// by the port, as Host, and the client's host in X-Forwarded-Host, as behind E2B's proxy;
// getInfo reports it; a mask that is no host is 400 with E2B's message. A sandbox without one
// sees localhost:PORT. (The mask was accepted and ignored.)
func TestMaskRequestHost(t *testing.T) {
	type seen struct{ host, forwarded string }
	var (
		mu   sync.Mutex
		last seen
	)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = seen{r.Host, r.Header.Get("X-Forwarded-Host")}
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	defer backend.Close()
	prov := newPausable(false)
	prov.dial = backend.Listener.Addr().String()
	e := newEnv(t, func(c *Config) { c.Provider = prov; c.Domain = "sandboxes.test" })

	for _, bad := range []string{"a b", "app.example.com/x", "user@app.example.com", "app.example.com:port", "\u00e9.example.com"} {
		var ae struct{ Message string }
		body := `{"templateID":"base","network":{"maskRequestHost":` + quote(bad) + `}}`
		e.want(400, &ae, "POST", "/v2/sandboxes", "", body, "X-API-Key", e.key)
		if ae.Message != "mask request host is not valid: "+bad {
			t.Errorf("mask %q: %q", bad, ae.Message)
		}
	}
	var masked, plain struct{ SandboxID string }
	e.want(201, &masked, "POST", "/v2/sandboxes", "", `{"templateID":"base","network":{"maskRequestHost":"${PORT}-app.example.com"}}`, "X-API-Key", e.key)
	e.want(201, &plain, "POST", "/v2/sandboxes", "", `{"templateID":"base"}`, "X-API-Key", e.key)
	var d struct {
		Network *struct {
			AllowPublicTraffic bool
			MaskRequestHost    string
		}
	}
	e.want(200, &d, "GET", "/sandboxes/"+masked.SandboxID, "", nil, "X-API-Key", e.key)
	if d.Network == nil || d.Network.MaskRequestHost != "${PORT}-app.example.com" || !d.Network.AllowPublicTraffic {
		t.Errorf("getInfo's network: %+v", d.Network)
	}
	for _, c := range []struct {
		id   string
		port string
		want seen
	}{
		{masked.SandboxID, "8080", seen{"8080-app.example.com", "8080-" + masked.SandboxID + ".sandboxes.test"}},
		{masked.SandboxID, "3000", seen{"3000-app.example.com", "3000-" + masked.SandboxID + ".sandboxes.test"}},
		{plain.SandboxID, "8080", seen{"localhost:8080", "8080-" + plain.SandboxID + ".sandboxes.test"}},
	} {
		host := c.port + "-" + c.id + ".sandboxes.test"
		e.want(200, nil, "GET", "/index.html", e.key, nil, "Host", host)
		mu.Lock()
		got := last
		mu.Unlock()
		if got != c.want {
			t.Errorf("%s: the sandbox saw %+v, want %+v", host, got, c.want)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
