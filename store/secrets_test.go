package store

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// TestSecrets: a key's secrets are its own (another key neither lists, reads, updates,
// deletes nor resolves them), names are unique per key, updates count versions, values
// come out only through SecretValues, and revoking a key deletes its secrets.
func TestSecrets(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		a, _, err := s.CreateKey(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.CreateKey(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		sec, err := s.CreateSecret(ctx, a.ID, "tok", "value-a", map[string]string{"env": "test"})
		if err != nil {
			t.Fatal(err)
		}
		if !IsSecretID(sec.ID) || sec.Version != 1 || sec.Metadata["env"] != "test" || sec.CreatedAt.IsZero() || !sec.CreatedAt.Equal(sec.UpdatedAt) {
			t.Errorf("created %+v", sec)
		}
		if _, err := s.CreateSecret(ctx, a.ID, "tok", "again", nil); !errors.Is(err, provider.CodeConflict) {
			t.Errorf("a second tok for key a: %v, want conflict", err)
		}
		// The same name under another key is another secret.
		if _, err := s.CreateSecret(ctx, b.ID, "tok", "value-b", nil); err != nil {
			t.Fatalf("tok for key b: %v", err)
		}
		for _, ref := range []string{sec.ID, "tok"} {
			got, err := s.GetSecret(ctx, a.ID, ref)
			if err != nil || got.ID != sec.ID || got.Metadata == nil {
				t.Errorf("get %s: %+v %v", ref, got, err)
			}
		}
		if _, err := s.GetSecret(ctx, b.ID, sec.ID); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("key b reading key a's secret by id: %v, want not found", err)
		}
		if _, err := s.UpdateSecret(ctx, b.ID, sec.ID, "stolen", nil); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("key b updating key a's secret: %v, want not found", err)
		}
		if err := s.DeleteSecret(ctx, b.ID, sec.ID); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("key b deleting key a's secret: %v, want not found", err)
		}
		up, err := s.UpdateSecret(ctx, a.ID, "tok", "value-a2", nil)
		if err != nil || up.Version != 2 || up.Metadata["env"] != "test" || up.UpdatedAt.Before(up.CreatedAt) {
			t.Errorf("update keeping metadata: %+v %v", up, err)
		}
		up, err = s.UpdateSecret(ctx, a.ID, sec.ID, "value-a3", map[string]string{})
		if err != nil || up.Version != 3 || len(up.Metadata) != 0 {
			t.Errorf("update clearing metadata: %+v %v", up, err)
		}
		for key, want := range map[string]string{a.ID: "value-a3", b.ID: "value-b"} {
			got, err := s.SecretValues(ctx, key, []string{"tok", "tok"})
			if err != nil || !maps.Equal(got, map[string]string{"tok": want}) {
				t.Errorf("values of %s: %v %v", key, got, err)
			}
		}
		if _, err := s.SecretValues(ctx, b.ID, []string{"tok", "other"}); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("a name key b has no secret of: %v, want not found", err)
		}

		// Paging: oldest first, a cursor per page.
		for _, n := range []string{"x1", "x2", "x3"} {
			if _, err := s.CreateSecret(ctx, a.ID, n, "v", nil); err != nil {
				t.Fatal(err)
			}
		}
		var names []string
		var cursor int64
		for pages := 0; ; pages++ {
			list, next, err := s.Secrets(ctx, a.ID, cursor, 3)
			if err != nil || pages > 2 {
				t.Fatalf("page %d: %v", pages, err)
			}
			for _, sec := range list {
				names = append(names, sec.Name)
			}
			if next == 0 {
				break
			}
			cursor = next
		}
		if want := []string{"tok", "x1", "x2", "x3"}; !slices.Equal(names, want) {
			t.Errorf("listed %q, want %q", names, want)
		}
		if list, _, _ := s.Secrets(ctx, b.ID, 0, 100); len(list) != 1 || list[0].Name != "tok" {
			t.Errorf("key b lists %+v, want its own tok only", list)
		}

		if err := s.DeleteSecret(ctx, a.ID, "x1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSecret(ctx, a.ID, "x1"); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("deleting twice: %v, want not found", err)
		}
		if _, err := s.RevokeKey(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM secrets WHERE api_key_id = ?`, a.ID).Scan(&left); err != nil || left != 0 {
			t.Errorf("a revoked key's secrets left in the store: %d %v", left, err)
		}
		if _, err := s.SecretValues(ctx, b.ID, []string{"tok"}); err != nil {
			t.Errorf("revoking key a took key b's secret: %v", err)
		}
	})
}
