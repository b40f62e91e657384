//go:build !linux

package main

import (
	"context"
	"errors"
)

// localSections refuses: the local provider exists on Linux only, and the bench without
// --provider docker measures it.
func (b *bencher) localSections(context.Context) error {
	return errors.New("bench of the local provider runs on Linux only; use --provider docker (the default here)")
}
