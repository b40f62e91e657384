package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/sandbox"
)

// helperSource is a small server and client the suite runs inside sandboxes that declare
// CapShell or CapPreview, so port, HTTP and git-over-HTTP cases need nothing installed in
// the sandbox beyond what the capability promises.
//
//	helper -port N [-delay D]           serve "ok <path>\n" on 0.0.0.0:N after D, printing
//	                                    "listening on N" once it listens
//	helper -port N -auth401 -log FILE   answer 401 with a Basic challenge, logging each
//	                                    request's Authorization header to FILE
//	helper -get URL                     print the body of GET URL
const helperSource = `package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	port := flag.Int("port", 0, "")
	delay := flag.Duration("delay", 0, "")
	auth := flag.Bool("auth401", false, "")
	logf := flag.String("log", "", "")
	get := flag.String("get", "", "")
	flag.Parse()
	if *get != "" {
		resp, err := http.Get(*get)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(os.Stdout, resp.Body)
		return
	}
	time.Sleep(*delay)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if *auth {
			if f, err := os.OpenFile(*logf, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintf(f, "%s %s auth=%s\n", r.Method, r.URL.Path, r.Header.Get("Authorization"))
				f.Close()
			}
			time.Sleep(300 * time.Millisecond)
			w.Header().Set("WWW-Authenticate", "Basic realm=\"sbt\"")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})
	ln, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %d\n", *port)
	http.Serve(ln, nil)
}
`

// helperPath is where the helper lands in a sandbox.
const helperPath = "/tmp/sbt-helper"

// helper builds the helper for the sandbox's architecture (once per run and architecture),
// writes it into b and returns its path. Without the Go toolchain it skips (fails under
// CI=true).
func (c *C) helper(b *sandbox.Sandbox) string {
	c.Helper()
	arch := map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "riscv64": "riscv64", "s390x": "s390x", "ppc64le": "ppc64le"}[strings.TrimSpace(c.Out(b, "uname -m"))]
	if arch == "" {
		c.Fatalf("unknown sandbox architecture %q", strings.TrimSpace(c.Out(b, "uname -m")))
	}
	bin, err := c.s.buildHelper(arch)
	if err != nil {
		if err == errNoGo {
			testenv.Skip(c.t, "the go toolchain is needed to build the sandbox helper server")
		}
		c.Fatalf("building the helper: %v", err)
	}
	if err := b.Files.Write(c.Ctx, helperPath, bin, sandbox.WriteOptions{Mode: sandbox.Mode(0o755)}); err != nil {
		c.Fatalf("writing the helper: %v", err)
	}
	return helperPath
}

type helperError string

func (e helperError) Error() string { return string(e) }

const errNoGo = helperError("no go toolchain")

func (s *suite) buildHelper(arch string) ([]byte, error) {
	s.helperMu.Lock()
	defer s.helperMu.Unlock()
	if bin, ok := s.helperBin[arch]; ok {
		return bin, nil
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			return nil, errNoGo
		}
	}
	dir, err := os.MkdirTemp("", "sbt-helper-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(helperSource), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module sbthelper\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "helper")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, helperError("go build: " + err.Error() + ": " + string(msg))
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	if s.helperBin == nil {
		s.helperBin = map[string][]byte{}
	}
	s.helperBin[arch] = bin
	return bin, nil
}
