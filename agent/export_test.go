//go:build linux

package agent

import "time"

// SetDrainGrace sets the grace after a process's exit for a test and returns
// what restores it.
func SetDrainGrace(d time.Duration) (restore func()) {
	old := drainGrace
	drainGrace = d
	return func() { drainGrace = old }
}
