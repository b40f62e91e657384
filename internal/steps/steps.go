// Package steps runs a long procedure as an ordered table of named, undoable steps, so
// that a failure halfway leaves nothing behind: the steps that ran are undone in reverse
// order, and the failure names the step it came from (unless Runner.Unnamed).
//
// A procedure reads as its table: each step a name, a Do and, when it leaves something
// behind, an Undo, usually short methods of one struct that holds what the steps made for
// the steps after them and for the undos. The invariants Run keeps:
//
//   - Steps run in order, one at a time; none starts once ctx is done.
//   - When a step fails (or ctx is done before it starts), that step's Undo runs first, then
//     every earlier step's, last to first. An Undo therefore copes with a Do that stopped
//     halfway or never ran: it removes whatever part of the work exists.
//   - Every Undo runs even when one fails; their failures are joined to the step's.
//   - Nothing is undone when every step succeeds.
package steps

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Step is one named stage of a procedure.
type Step struct {
	Name string
	Do   func(ctx context.Context) error
	Undo func() error // nil: nothing to undo
}

// Run runs list in order. When a step fails, it undoes that step and every earlier one, in
// reverse order, and returns the failure as "NAME: error", with any undo failures ("undo
// NAME: error") joined to it.
func Run(ctx context.Context, list []Step) error {
	return Runner{}.Run(ctx, list)
}

// Runner runs steps as Run does, with options; the zero value is Run.
type Runner struct {
	// Timed, when not nil, is told how long each step's Do took (benchmarks and tests use
	// it to see where the time goes).
	Timed func(name string, d time.Duration)
	// Unnamed returns a step's failure as the step returned it, not prefixed with its
	// name: for steps whose errors say what failed already. Undo failures keep the name.
	Unnamed bool
}

// Run runs list in order (see the package doc).
func (r Runner) Run(ctx context.Context, list []Step) error {
	for i, s := range list {
		err := ctx.Err()
		if err == nil {
			start := time.Now()
			err = s.Do(ctx)
			if r.Timed != nil {
				r.Timed(s.Name, time.Since(start))
			}
		}
		if err == nil {
			continue
		}
		if !r.Unnamed {
			err = fmt.Errorf("%s: %w", s.Name, err)
		}
		for j := i; j >= 0; j-- {
			if list[j].Undo == nil {
				continue
			}
			if uerr := list[j].Undo(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo %s: %w", list[j].Name, uerr))
			}
		}
		return err
	}
	return nil
}
