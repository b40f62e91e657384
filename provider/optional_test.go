package provider

import (
	"context"
	"errors"
	"testing"
)

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

// lister is a provider whose sandboxes (lister's Prototype) pause and cold-pause, which has
// volumes, and which refuses the cold pause here.
type lister struct{ Provider }

type listerInstance struct{ Instance }

func (listerInstance) Pause(context.Context) error     { return nil }
func (listerInstance) Resume(context.Context) error    { return nil }
func (listerInstance) PauseCold(context.Context) error { return nil }

func (lister) Capabilities() Capabilities {
	return NewCapabilities(CapShell, CapTerminal) // terminal: a declared interface name, ignored
}
func (lister) Prototype() Instance { return (*listerInstance)(nil) }
func (lister) Refuse(c Capability) error {
	if c == CapPauseCold {
		return Errorf(CodeUnsupported, "no cold pause here")
	}
	return nil
}
func (lister) CreateVolume(context.Context, VolumeRequest) (VolumeInfo, error) {
	return VolumeInfo{}, nil
}
func (lister) Volumes(context.Context) ([]VolumeInfo, error)          { return nil, nil }
func (lister) VolumeInfo(context.Context, string) (VolumeInfo, error) { return VolumeInfo{}, nil }
func (lister) DeleteVolume(context.Context, string) error             { return nil }

func TestCapabilitiesOf(t *testing.T) {
	p := lister{}
	if got, want := CapabilitiesOf(p).String(), "pause,shell,volumes"; got != want {
		t.Errorf("CapabilitiesOf = %s, want %s", got, want)
	}
	if got, want := CapabilitiesOfInstance(p, listerInstance{}).String(), "pause,shell,volumes"; got != want {
		t.Errorf("CapabilitiesOfInstance = %s, want %s", got, want)
	}
	if got, want := CapabilitiesOfInstance(p, struct{ Instance }{}).String(), "shell,volumes"; got != want {
		t.Errorf("CapabilitiesOfInstance of a sandbox without Pauser = %s, want %s", got, want)
	}
	if got, want := CapabilitiesOfInstance(p, refusingInstance{}).String(), "pause-cold,shell,volumes"; got != want {
		t.Errorf("CapabilitiesOfInstance of a sandbox that refuses for itself = %s, want %s", got, want)
	}
	if err := Refusal(p, CapPauseCold); !errors.Is(err, CodeUnsupported) {
		t.Errorf("Refusal(pause-cold) = %v", err)
	}
	if got := NewCapabilities(CapPause, CapShell, CapExactKey).Declared().String(); got != "shell" {
		t.Errorf("Declared = %s, want shell", got)
	}
}

// refusingInstance answers for itself: it refuses pause, not the cold pause its provider
// refuses.
type refusingInstance struct{ listerInstance }

func (refusingInstance) Refuse(c Capability) error {
	if c == CapPause {
		return Errorf(CodeUnsupported, "not this one")
	}
	return nil
}
