//go:build linux

package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/servertest"
)

// Through a real server: Fork goes to the server's fork route (provider.Forker) and gives
// independent children with the parent's files; a named snapshot is listed, inspected and
// deleted through /v1/snapshots.
func TestRemoteForkAndSnapshots(t *testing.T) {
	srv := servertest.Start(t, servertest.Provider(t, 72), "")
	p := remote.New(remote.Config{URL: srv.URL, APIKey: srv.Key})
	ctx := context.Background()
	box, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Destroy(context.Background()) })
	if err := box.Files.Write(ctx, "/workspace/f", []byte("parent"), sandbox.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	kids, err := box.Fork(ctx, sandbox.ForkOptions{N: 2, Labels: map[string]string{"role": "kid"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 2 || kids[0].ID == kids[1].ID {
		t.Fatalf("children: %v", kids)
	}
	for _, k := range kids {
		t.Cleanup(func() { k.Destroy(context.Background()) })
		if got, err := k.Files.Read(ctx, "/workspace/f"); err != nil || string(got) != "parent" {
			t.Errorf("%s: %q %v", k.ID, got, err)
		}
	}
	if err := kids[0].Files.Write(ctx, "/workspace/f", []byte("kid"), sandbox.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*sandbox.Sandbox{box, kids[1]} {
		if got, _ := o.Files.Read(ctx, "/workspace/f"); string(got) != "parent" {
			t.Errorf("%s sees its sibling's write: %q", o.ID, got)
		}
	}
	list, err := sandbox.List(ctx, p, sandbox.ListOptions{Labels: map[string]string{"role": "kid"}})
	if err != nil || len(list) != 2 {
		t.Errorf("children listed by label: %v %v", list, err)
	}

	snap, err := box.Snapshot(ctx, sandbox.SnapshotOptions{Name: "named"})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := sandbox.Snapshots(ctx, p)
	if err != nil || len(snaps) != 1 || snaps[0].ID != snap || snaps[0].Name != "named" || snaps[0].Kind != sandbox.SnapshotFilesystem || snaps[0].Source != box.ID {
		t.Errorf("snapshots: %+v %v", snaps, err)
	}
	if info, err := sandbox.InspectSnapshot(ctx, p, snap); err != nil || info.ID != snap {
		t.Errorf("inspect: %+v %v", info, err)
	}
	if err := sandbox.DeleteSnapshot(ctx, p, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.InspectSnapshot(ctx, p, snap); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("inspect after delete: %v", err)
	}
	// A snapshot says which volumes its sandbox mounted (where the server's provider has
	// volumes: the local one with loop devices).
	if provider.CapabilitiesOf(p).Has(provider.CapVolumes) {
		if _, err := sandbox.CreateVolume(ctx, p, "snapvol", sandbox.VolumeOptions{SizeMB: provider.MinVolumeSizeMB}); err != nil {
			t.Fatal(err)
		}
		mounts := []provider.VolumeMount{{Name: "snapvol", Path: "/data", ReadOnly: true}}
		vb, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone, Volumes: mounts})
		if err != nil {
			t.Fatal(err)
		}
		vsnap, err := vb.Snapshot(ctx, sandbox.SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if info, err := sandbox.InspectSnapshot(ctx, p, vsnap); err != nil || len(info.Volumes) != 1 || info.Volumes[0] != mounts[0] {
			t.Errorf("a snapshot's volumes over the server: %+v %v, want %+v", info.Volumes, err, mounts)
		}
		sandbox.DeleteSnapshot(ctx, p, vsnap)
		vb.Destroy(ctx)
		if err := sandbox.DeleteVolume(ctx, p, "snapvol"); err != nil {
			t.Error(err)
		}
	} else {
		t.Logf("the server's provider has no volumes: a snapshot's volumes not checked")
	}
	if _, err := box.Snapshot(ctx, sandbox.SnapshotOptions{Kind: sandbox.SnapshotFull}); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("a full snapshot of a sandbox without snapshot-full: %v", err)
	}
}
