package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLocksExcludeEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	a, err := Acquire(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := TryAcquire(path); b != nil || err != nil {
		t.Fatalf("TryAcquire of a held lock = %v, %v; want nil, nil", b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock until the deadline = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := Acquire(context.Background(), path)
		if err == nil {
			b.Unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned (%v) while the lock was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	a.Unlock()
	a.Unlock() // idempotent
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return after Unlock")
	}
	c, err := TryAcquire(path)
	if c == nil || err != nil {
		t.Fatalf("TryAcquire of a free lock = %v, %v", c, err)
	}
	c.Unlock()
}

func TestSharedLocksShareAndExcludeExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	ctx := context.Background()
	a, err := AcquireShared(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := AcquireShared(ctx, path)
	if err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	if x, err := TryAcquire(path); x != nil || err != nil {
		t.Fatalf("TryAcquire while shared locks are held = %v, %v; want nil, nil", x, err)
	}
	a.Unlock()
	if x, err := TryAcquire(path); x != nil || err != nil {
		t.Fatalf("TryAcquire while one shared lock is held = %v, %v; want nil, nil", x, err)
	}
	b.Unlock()
	x, err := TryAcquire(path)
	if x == nil || err != nil {
		t.Fatalf("TryAcquire after the shared locks went = %v, %v", x, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := AcquireShared(short, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireShared while the exclusive lock is held = %v", err)
	}
	x.Unlock()
}
