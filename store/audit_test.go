package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestAudit(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		k, _, err := s.CreateKey(ctx, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutSandbox(ctx, Sandbox{ID: "sbA", Provider: "memory", APIKeyID: k.ID, CreatedAt: time.Now()}, Hash(NewToken())); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-48 * time.Hour)
		if err := s.AppendAudit(ctx,
			AuditEntry{Time: old, Via: "key", KeyID: k.ID, Source: "192.0.2.1", API: "rest", Action: "sandbox.create", Target: "sbA", Result: "ok", Status: 201},
			// A token's call takes the key of the sandbox's owner.
			AuditEntry{Via: "token", KeyOf: "sbA", Source: "192.0.2.2", API: "e2b", Action: "sandbox.exec", Target: "sbA", Result: "ok", Status: 200},
			// A sandbox the store does not know: no key.
			AuditEntry{Via: "token", KeyOf: "sbGone", API: "rest", Action: "file.write", Target: "sbGone", Result: "not_found", Status: 404},
			AuditEntry{Via: "local", Source: "local", API: "cli", Action: "key.revoke", Target: "key_x", Result: "ok"},
		); err != nil {
			t.Fatal(err)
		}
		all, err := s.Audit(ctx, AuditFilter{})
		if err != nil || len(all) != 4 {
			t.Fatalf("Audit = %d entries, %v", len(all), err)
		}
		if all[1].KeyID != k.ID || all[2].KeyID != "" || all[0].Source != "192.0.2.1" || all[0].Status != 201 || !all[0].Time.Equal(old.Truncate(time.Millisecond)) {
			t.Errorf("entries = %+v", all)
		}
		for i := 1; i < len(all); i++ {
			if all[i].ID <= all[i-1].ID {
				t.Errorf("ids not increasing: %d after %d", all[i].ID, all[i-1].ID)
			}
		}
		for _, c := range []struct {
			f    AuditFilter
			want int
		}{
			{AuditFilter{KeyID: k.ID}, 2},
			{AuditFilter{Action: "sandbox.*"}, 2},
			{AuditFilter{Action: "sandbox.exec"}, 1},
			{AuditFilter{Action: "sandbox.ex"}, 0},
			{AuditFilter{Target: "sbA"}, 2},
			{AuditFilter{From: time.Now().Add(-time.Hour)}, 3},
			{AuditFilter{To: time.Now().Add(-time.Hour)}, 1},
			{AuditFilter{After: all[1].ID}, 2},
			{AuditFilter{Limit: 3}, 3},
		} {
			got, err := s.Audit(ctx, c.f)
			if err != nil || len(got) != c.want {
				t.Errorf("Audit(%+v) = %d entries, %v; want %d", c.f, len(got), err, c.want)
			}
		}
		if err := s.AppendAudit(ctx, AuditEntry{Via: "key"}); err == nil {
			t.Error("an entry without an action or result was stored")
		}
		n, err := s.PruneAudit(ctx, time.Now().Add(-24*time.Hour))
		if err != nil || n != 1 {
			t.Fatalf("PruneAudit = %d, %v; want 1", n, err)
		}
		if got, _ := s.Audit(ctx, AuditFilter{}); len(got) != 3 || got[0].ID != all[1].ID {
			t.Errorf("after the prune: %+v", got)
		}
		// Survives a reopen.
		s.Close()
		s2 := open(t, spec)
		if got, _ := s2.Audit(ctx, AuditFilter{}); len(got) != 3 {
			t.Errorf("after a reopen: %d entries", len(got))
		}
	})
}

// TestPruneAuditManyBatches prunes more entries than one batch deletes.
func TestPruneAuditManyBatches(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		old := time.Now().Add(-time.Hour)
		batch := make([]AuditEntry, 0, 12001)
		for i := range 12000 {
			batch = append(batch, AuditEntry{Time: old, API: "rest", Action: "sandbox.exec", Target: fmt.Sprint("sb", i), Result: "ok"})
		}
		batch = append(batch, AuditEntry{API: "rest", Action: "sandbox.exec", Result: "ok"})
		if err := s.AppendAudit(ctx, batch...); err != nil {
			t.Fatal(err)
		}
		n, err := s.PruneAudit(ctx, time.Now().Add(-time.Minute))
		if err != nil || n != 12000 {
			t.Fatalf("PruneAudit = %d, %v; want 12000", n, err)
		}
		if got, _ := s.Audit(ctx, AuditFilter{}); len(got) != 1 {
			t.Errorf("%d entries left, want 1", len(got))
		}
	})
}
