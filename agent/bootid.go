//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// kernelBootID is where Linux shows the id of the current boot.
const kernelBootID = "/proc/sys/kernel/random/boot_id"

// newBootID writes a new random boot id to file (Config.BootIDFile) and binds the file,
// read-only, over kernelBootID in the calling process's mount namespace. The file is opened
// without following a final symbolic link.
func newBootID(file string) error {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return err
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(u[:])
	id := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "\n"
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return fmt.Errorf("agent: boot id: %w", err)
	}
	_, err = f.WriteString(id)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(file, 0o444) // a file left by an earlier boot keeps its mode
	}
	if err != nil {
		return fmt.Errorf("agent: boot id: %w", err)
	}
	if err := unix.Mount(file, kernelBootID, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("agent: boot id: bind over %s: %w", kernelBootID, err)
	}
	// Read-only; nosuid, nodev and noexec as the source's mount may be, which a remount
	// inside a user namespace must keep.
	if err := unix.Mount("", kernelBootID, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("agent: boot id: make it read-only: %w", err)
	}
	return nil
}
