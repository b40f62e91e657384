//go:build linux

package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/flock"
)

// The key index maps a sandbox key to the sandbox created with it: Home/keys/<hash of the
// key> holds the sandbox's id. FindByKey and GetOrCreate read one file instead of every
// record, so their cost does not grow with the number of sandboxes. The record stays the
// truth: an entry whose sandbox is gone, dead or of another key is no entry.
//
// A Home from before the index has no keys directory; the first lookup builds it from the
// records (indexKeysOnce).

func (l layout) keys() string { return filepath.Join(l.home, "keys") }

func (l layout) keyEntry(key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(l.keys(), hex.EncodeToString(h[:16]))
}

// indexKey points key's entry at rec, unless it points at another live sandbox with that key
// already (the oldest one keeps it, as FindByKey has always answered).
func (p *Provider) indexKey(rec *record) error {
	if rec.Key == "" {
		return nil
	}
	if err := os.MkdirAll(p.lay.keys(), 0o700); err != nil {
		return err
	}
	entry := p.lay.keyEntry(rec.Key)
	if cur, err := p.keyedRecord(rec.Key); err == nil && cur.ID != rec.ID {
		return nil
	}
	tmp := entry + "." + rec.ID + ".tmp"
	if err := os.WriteFile(tmp, []byte(rec.ID), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, entry); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// unindexKey removes key's entry if it points at id. The entry is taken by a rename and
// checked after: one that a create replaced in the meantime is put back (a link, which does
// not replace a newer one).
func (p *Provider) unindexKey(key, id string) {
	if key == "" {
		return
	}
	entry := p.lay.keyEntry(key)
	if b, err := os.ReadFile(entry); err != nil || strings.TrimSpace(string(b)) != id {
		return
	}
	taken := entry + "." + id + ".rm"
	if os.Rename(entry, taken) != nil {
		return
	}
	if b, err := os.ReadFile(taken); err == nil && strings.TrimSpace(string(b)) != id {
		os.Link(taken, entry)
	}
	os.Remove(taken)
}

// keyedRecord returns the live, ready sandbox key's entry names, or an error.
func (p *Provider) keyedRecord(key string) (*record, error) {
	b, err := os.ReadFile(p.lay.keyEntry(key))
	if err != nil {
		return nil, err
	}
	rec, err := p.lay.readRecord(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, err
	}
	if rec.Key != key || rec.Status != statusReady || rec.Pooled || p.dead(rec, time.Now()) {
		return nil, errNotFound(rec.ID)
	}
	return rec, nil
}

// indexKeysOnce builds the key index of a Home made before it existed, once, under a lock.
func (p *Provider) indexKeysOnce(ctx context.Context) error {
	if _, err := os.Stat(p.lay.keys()); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.lay.locks(), 0o700); err != nil {
		return err
	}
	lk, err := flock.Acquire(ctx, filepath.Join(p.lay.locks(), "keyindex.lock"))
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if _, err := os.Stat(p.lay.keys()); err == nil {
		return nil
	}
	tmp := p.lay.keys() + ".tmp"
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	ids, err := p.lay.ids()
	if err != nil {
		return err
	}
	oldest := map[string]*record{}
	for _, id := range ids {
		rec, err := p.lay.readRecord(id)
		if err != nil || rec.Key == "" || rec.Status != statusReady || rec.Pooled {
			continue
		}
		if o := oldest[rec.Key]; o == nil || rec.CreatedAt.Before(o.CreatedAt) {
			oldest[rec.Key] = rec
		}
	}
	for key, rec := range oldest {
		name := filepath.Base(p.lay.keyEntry(key))
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(rec.ID), 0o600); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, p.lay.keys()); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}
