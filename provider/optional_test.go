package provider

import "testing"

func TestCapabilitiesClone(t *testing.T) {
	own := NewCapabilities(CapShell, CapPause)
	c := own.Clone()
	c[CapSnapshot] = true
	delete(c, CapShell)
	if got := own.String(); got != "pause,shell" {
		t.Errorf("writing into a clone changed the original: %s", got)
	}
	if got := c.String(); got != "pause,snapshot" {
		t.Errorf("clone after writes: %s", got)
	}
	if Capabilities(nil).Clone() != nil {
		t.Error("the clone of a nil set is not nil")
	}
}
