package lease

import (
	"errors"
	"strconv"
	"testing"
)

func TestLeases(t *testing.T) {
	gone := map[string]bool{"b": true}
	d := New(t.TempDir(), func(h string) bool { return gone[h] })
	if empty, err := d.Empty(); !empty || err != nil {
		t.Fatalf("new directory: empty %v, %v", empty, err)
	}
	if ok, err := d.Take("x", "a"); !ok || err != nil {
		t.Fatalf("take x: %v, %v", ok, err)
	}
	if ok, err := d.Take("x", "b"); ok || err != nil {
		t.Fatalf("take x again: %v, %v; want refused", ok, err)
	}
	if h := d.Holder("x"); h != "a" {
		t.Errorf("holder of x: %q", h)
	}
	if err := d.Release("x", "b"); err != nil || d.Holder("x") != "a" {
		t.Errorf("a release by another holder let go of the lease: %v", err)
	}
	// Two names: the second Any takes the other, the third finds none until a stale
	// holder's lease is cleaned.
	i, err := d.Any(2, func(i int) string { return strconv.Itoa(i) }, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Any(2, func(i int) string { return strconv.Itoa(i) }, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Any(2, func(i int) string { return strconv.Itoa(i) }, "a"); err != nil {
		t.Fatalf("b's lease is stale and taken back: %v", err)
	}
	if h := d.Holder(strconv.Itoa(i)); h != "a" {
		t.Errorf("b's name is held by %q, want a", h)
	}
	if _, err := d.Any(2, func(i int) string { return strconv.Itoa(i) }, "d"); !errors.Is(err, ErrExhausted) {
		t.Errorf("every name leased: %v, want ErrExhausted", err)
	}
	if err := d.Release("x", "a"); err != nil || d.Holder("x") != "" {
		t.Errorf("release: %v", err)
	}
	if empty, _ := d.Empty(); empty {
		t.Error("Empty with two leases")
	}
}
