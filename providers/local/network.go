//go:build linux

package local

import (
	"fmt"
)

// netnsPath is where the host enters the network namespace of running sandbox rec: under
// runsc the namespace bound in its directory, which only its mount namespace shows (reached
// through the holder's root); under runc and crun the container's, its init's.
func (p *Provider) netnsPath(rec *record) (string, error) {
	if rec.Runtime == RuntimeRunsc {
		if !holderAlive(rec) {
			return "", fmt.Errorf("sandbox %s's holder is gone: its network namespace is out of reach", rec.ID)
		}
		return fmt.Sprintf("/proc/%d/root%s", rec.HolderPID, p.lay.netns(rec.ID)), nil
	}
	if rec.InitPID <= 0 || procStart(rec.InitPID) != rec.InitStart {
		return "", fmt.Errorf("sandbox %s's init process is gone", rec.ID)
	}
	return fmt.Sprintf("/proc/%d/ns/net", rec.InitPID), nil
}
