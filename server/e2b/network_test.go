package e2b

import (
	"slices"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// TestNetworkFromE2B: E2B's allow-wins lists become our deny-wins policy exactly, or are
// refused.
func TestNetworkFromE2B(t *testing.T) {
	for _, c := range []struct {
		allow, deny       []string
		mode              provider.NetworkMode
		wantAllow, wantDe []string
		unsupported       bool
	}{
		{nil, nil, provider.NetworkAll, nil, nil, false},
		{[]string{"pypi.org"}, nil, provider.NetworkAll, nil, nil, false},
		{nil, []string{"0.0.0.0/0"}, provider.NetworkNone, nil, nil, false},
		{[]string{"pypi.org", "1.1.1.1"}, []string{"0.0.0.0/0", "1.1.1.1"}, provider.NetworkAllow, []string{"pypi.org", "1.1.1.1"}, nil, false},
		{nil, []string{"8.8.8.0/24"}, provider.NetworkAllow, nil, []string{"8.8.8.0/24"}, false},
		{[]string{"1.1.1.1"}, []string{"8.8.8.0/24"}, provider.NetworkAllow, nil, []string{"8.8.8.0/24"}, false},
		{[]string{"8.8.8.8"}, []string{"8.8.8.0/24"}, "", nil, nil, true},
		{[]string{"pypi.org"}, []string{"8.8.8.0/24"}, "", nil, nil, true},
	} {
		n, err := networkFromE2B(c.allow, c.deny)
		if c.unsupported {
			if provider.CodeOf(err) != provider.CodeUnsupported {
				t.Errorf("allow %v deny %v: %v, want unsupported", c.allow, c.deny, err)
			}
			continue
		}
		if err != nil || n.Mode != c.mode || !slices.Equal(n.Allow, c.wantAllow) || !slices.Equal(n.Deny, c.wantDe) {
			t.Errorf("allow %v deny %v: %+v, %v", c.allow, c.deny, n, err)
		}
	}
}
