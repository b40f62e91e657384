package template

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/tupper-dev/tupper/provider"
)

// fromRegistry resolves ref in its registry, with credentials from the Docker configuration
// ($DOCKER_CONFIG/config.json or ~/.docker/config.json, credential helpers included).
func (s *Store) fromRegistry(ctx context.Context, ref string, plat v1.Platform, insecure bool) (*image, error) {
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image reference %q: %w", ref, err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure
	}
	f := &registryFetcher{repo: r.Context(), opts: []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(httpGuard{base: base, insecure: insecure}),
		remote.WithUserAgent("tupper"),
	}}
	desc, err := remote.Get(r, f.opts...)
	if err != nil {
		return nil, registryErr(ref, err)
	}
	img, err := resolve(ctx, f, desc.Descriptor, desc.Manifest, plat)
	if err != nil {
		return nil, err
	}
	img.source = r.String()
	if img.digest != "" {
		img.source = r.Context().String() + "@" + img.digest
	}
	return img, nil
}

type registryFetcher struct {
	repo name.Repository
	opts []remote.Option
}

func (r *registryFetcher) manifest(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	desc, err := remote.Get(r.repo.Digest(d.Digest.String()), append(r.opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, registryErr(r.repo.String(), err)
	}
	return desc.Manifest, nil
}

func (r *registryFetcher) blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	l, err := remote.Layer(r.repo.Digest(d.Digest.String()), append(r.opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, registryErr(r.repo.String(), err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, registryErr(r.repo.String(), err)
	}
	return rc, nil
}

// registryErr gives a registry's answer its code.
func registryErr(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized:
			return provider.Errorf(provider.CodeUnauthorized, "registry refused %s (log in with docker login, or set DOCKER_CONFIG): %w", ref, err)
		case http.StatusForbidden:
			return provider.Errorf(provider.CodeForbidden, "registry forbids %s: %w", ref, err)
		case http.StatusNotFound:
			return provider.Errorf(provider.CodeNotFound, "image %s not found: %w", ref, err)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return provider.Errorf(provider.CodeNotFound, "image %s not found: %w", ref, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return provider.Errorf(provider.CodeUnauthorized, "registry refused %s: %w", ref, err)
			}
		}
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return provider.Errorf(provider.CodeUnavailable, "registry for %s: %w", ref, err)
}

// httpGuard refuses plain HTTP to a registry that is not on loopback unless insecure: the
// library would otherwise fall back to HTTP for private network addresses on its own.
type httpGuard struct {
	base     http.RoundTripper
	insecure bool
}

func (g httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.insecure && !loopback(req.URL.Hostname()) {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "plain HTTP to %s refused: only loopback registries are reached without TLS unless insecure (--insecure)", req.URL.Host)
	}
	return g.base.RoundTrip(req)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
