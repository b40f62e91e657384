package sandboxtest

import (
	"context"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func volumeCases() []testCase {
	return []testCase{
		{"VolumesUnsupported", volumesUnsupported},
		{"SharedVolume", volumeShared},
	}
}

func volumesUnsupported(c *C) {
	c.NeedNot(provider.CapVolumes, "Volumes/SharedVolume")
	_, err := sandbox.CreateVolume(c.Ctx, c.P(), "v"+c.s.runID, sandbox.VolumeOptions{})
	c.WantCode("CreateVolume", err, sandbox.CodeUnsupported)
	_, err = c.TryCreate(sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: "v" + c.s.runID, Path: "/data"}}})
	c.WantCode("Create with a volume", err, sandbox.CodeUnsupported)
	c.nothingCreated("a create with a volume")
}

// volumeShared: a volume mounted by two sandboxes, one read-only, is one set of files; it
// cannot be deleted while mounted, and keeps its files after both are destroyed.
func volumeShared(c *C) {
	c.Need(provider.CapVolumes)
	name := "sbt-" + c.s.runID + "-" + randHex(3)
	info, err := sandbox.CreateVolume(c.Ctx, c.P(), name, sandbox.VolumeOptions{SizeMB: 32})
	c.NoErr("CreateVolume", err)
	c.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sandbox.DeleteVolume(ctx, c.P(), name); err != nil && sandbox.CodeOf(err) != sandbox.CodeNotFound {
			c.Errorf("cleanup: DeleteVolume: %v", err)
		}
	})
	Eq(c, "size", info.SizeMB, 32)
	_, err = sandbox.CreateVolume(c.Ctx, c.P(), name, sandbox.VolumeOptions{SizeMB: 32})
	c.WantCode("CreateVolume again", err, sandbox.CodeConflict)
	rw := c.Create(sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: name, Path: "/data"}}})
	ro := c.Create(sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: name, Path: "/mnt/in", ReadOnly: true}}})
	c.NoErr("Write", rw.Files.Write(c.Ctx, "/data/f.txt", []byte("shared"), sandbox.WriteOptions{}))
	Eq(c, "read through the read-only mount", c.Read(ro, "/mnt/in/f.txt"), "shared")
	if err := ro.Files.Write(c.Ctx, "/mnt/in/g.txt", []byte("x"), sandbox.WriteOptions{}); err == nil {
		c.Errorf("a write through the read-only mount succeeded")
	}
	got, err := sandbox.InspectVolume(c.Ctx, c.P(), name)
	c.NoErr("InspectVolume", err)
	Eq(c, "mounted by", len(got.MountedBy), 2)
	c.WantCode("DeleteVolume while mounted", sandbox.DeleteVolume(c.Ctx, c.P(), name), sandbox.CodeConflict)
	c.NoErr("Destroy", rw.Destroy(c.Ctx))
	c.NoErr("Destroy", ro.Destroy(c.Ctx))
	again := c.Create(sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: name, Path: "/data"}}})
	Eq(c, "after both are destroyed", c.Read(again, "/data/f.txt"), "shared")
	c.NoErr("Destroy", again.Destroy(c.Ctx))
	c.NoErr("DeleteVolume", sandbox.DeleteVolume(c.Ctx, c.P(), name))
	_, err = sandbox.InspectVolume(c.Ctx, c.P(), name)
	c.WantCode("InspectVolume after delete", err, sandbox.CodeNotFound)
}
