//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// stepHook, when set (by tests and benchmarks), is told how long each step took.
var stepHook func(name string, d time.Duration)

// step is one named, undoable stage of building a sandbox. undo must cope with a do that
// stopped halfway (or never ran): it removes whatever part of the step's work exists.
type step struct {
	name string
	do   func(ctx context.Context) error
	undo func() error // nil: nothing to undo
}

// runSteps runs steps in order. When one fails, it undoes it and every earlier one, in
// reverse order, and returns the failure (with any undo failures joined to it).
func runSteps(ctx context.Context, steps []step) error {
	for i, s := range steps {
		err := ctx.Err()
		if err == nil {
			start := time.Now()
			err = s.do(ctx)
			if h := stepHook; h != nil {
				h(s.name, time.Since(start))
			}
		}
		if err == nil {
			continue
		}
		err = fmt.Errorf("%s: %w", s.name, err)
		for j := i; j >= 0; j-- {
			if steps[j].undo == nil {
				continue
			}
			if uerr := steps[j].undo(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo %s: %w", steps[j].name, uerr))
			}
		}
		return err
	}
	return nil
}
