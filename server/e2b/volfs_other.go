//go:build !linux

package e2b

import (
	"io"
	"os"

	"github.com/tupper-dev/tupper/provider"
)

// A volume's contents are reached with openat2, under its root, on Linux only (volfs_linux.go);
// volumes are the local provider's, which runs on Linux only, so nothing here is reached.
var errVolumeContent = provider.Errorf(provider.CodeUnsupported, "volume contents are served on Linux only")

const volNoFollow = 0

func volClose(int)                                                     {}
func volErr(_ string, err error) error                                 { return err }
func volOpen(*os.File, string, int, uint32) (int, error)               { return -1, errVolumeContent }
func volStat(*os.File, string) (volEntry, error)                       { return volEntry{}, errVolumeContent }
func volList(*os.File, string, int) ([]volEntry, error)                { return nil, errVolumeContent }
func volOwn(int, *uint32, *uint32, *uint32) error                      { return errVolumeContent }
func volMkdir(*os.File, string, bool, *uint32, *uint32, *uint32) error { return errVolumeContent }
func volWrite(*os.File, string, io.Reader, bool, *uint32, *uint32, *uint32) error {
	return errVolumeContent
}
func volRemove(*os.File, string) error { return errVolumeContent }
