// Package hostbin finds the host's programs that the local provider runs (runtimes, ip,
// iptables, nsenter, unshare…), where a root shell would: a non-root PATH often lacks the
// sbin directories.
package hostbin

import (
	"errors"
	"os"
	"os/exec"
)

// Find looks name up on PATH and in the sbin directories a non-root PATH may lack, the
// local ones first as on a usual PATH (scripts/setup.sh puts a current runsc in
// /usr/local/sbin, ahead of a distribution's older one).
func Find(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + " not found")
}
