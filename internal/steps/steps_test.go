package steps

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// recorder makes steps that log what they do and undo.
type recorder struct{ log []string }

func (r *recorder) step(name string, doErr, undoErr error) Step {
	return Step{Name: name, Do: func(context.Context) error {
		r.log = append(r.log, "do "+name)
		return doErr
	}, Undo: func() error {
		r.log = append(r.log, "undo "+name)
		return undoErr
	}}
}

func TestRunAllSucceed(t *testing.T) {
	var r recorder
	if err := Run(context.Background(), []Step{r.step("a", nil, nil), r.step("b", nil, nil)}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"do a", "do b"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v: nothing is undone when all succeed", r.log, want)
	}
}

func TestRunUndoesInReverse(t *testing.T) {
	var r recorder
	boom := errors.New("boom")
	err := Run(context.Background(), []Step{r.step("a", nil, nil), r.step("b", nil, nil), r.step("c", boom, nil), r.step("d", nil, nil)})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "c: boom") {
		t.Errorf("err %v, want c: boom", err)
	}
	if want := []string{"do a", "do b", "do c", "undo c", "undo b", "undo a"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v", r.log, want)
	}
}

func TestRunJoinsUndoErrors(t *testing.T) {
	var r recorder
	boom, ua, ub := errors.New("boom"), errors.New("ua"), errors.New("ub")
	err := Run(context.Background(), []Step{r.step("a", nil, ua), r.step("b", nil, ub), r.step("c", boom, nil)})
	for _, e := range []error{boom, ua, ub} {
		if !errors.Is(err, e) {
			t.Errorf("err %v does not hold %v", err, e)
		}
	}
	if !strings.Contains(err.Error(), "undo a: ua") || !strings.Contains(err.Error(), "undo b: ub") {
		t.Errorf("err %q does not name the undos that failed", err)
	}
	// A failed undo does not stop the ones before it.
	if want := []string{"do a", "do b", "do c", "undo c", "undo b", "undo a"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v", r.log, want)
	}
}

func TestRunNilUndo(t *testing.T) {
	var r recorder
	list := []Step{r.step("a", nil, nil), {Name: "b", Do: func(context.Context) error { return nil }}, r.step("c", errors.New("boom"), nil)}
	if err := Run(context.Background(), list); err == nil {
		t.Fatal("no error")
	}
	if want := []string{"do a", "do c", "undo c", "undo a"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v", r.log, want)
	}
}

func TestRunCanceled(t *testing.T) {
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	list := []Step{r.step("a", nil, nil), {Name: "b", Do: func(context.Context) error {
		r.log = append(r.log, "do b")
		cancel()
		return nil
	}}, r.step("c", nil, nil)}
	err := Run(ctx, list)
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "c: ") {
		t.Errorf("err %v, want c: context canceled", err)
	}
	// c never ran, but its undo does: an undo copes with a do that never ran.
	if want := []string{"do a", "do b", "undo c", "undo a"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v", r.log, want)
	}
}

func TestRunTimed(t *testing.T) {
	var r recorder
	var timed []string
	run := Runner{Timed: func(name string, d time.Duration) { timed = append(timed, name) }}
	err := run.Run(context.Background(), []Step{r.step("a", nil, nil), r.step("b", errors.New("boom"), nil), r.step("c", nil, nil)})
	if err == nil {
		t.Fatal("no error")
	}
	if want := []string{"a", "b"}; !slices.Equal(timed, want) {
		t.Errorf("timed %v, want %v", timed, want)
	}
}

func TestRunUnnamed(t *testing.T) {
	var r recorder
	boom, ua := errors.New("boom"), errors.New("ua")
	err := Runner{Unnamed: true}.Run(context.Background(), []Step{r.step("a", nil, ua), r.step("b", boom, nil)})
	if !errors.Is(err, boom) || !errors.Is(err, ua) || !strings.HasPrefix(err.Error(), "boom\n") || !strings.Contains(err.Error(), "undo a: ua") {
		t.Errorf("err %q, want boom as it was, then undo a: ua", err)
	}
	if want := []string{"do a", "do b", "undo b", "undo a"}; !slices.Equal(r.log, want) {
		t.Errorf("log %v, want %v", r.log, want)
	}
	// With no undo failing, the failure is the step's own error.
	err = Runner{Unnamed: true}.Run(context.Background(), []Step{r.step("c", boom, nil)})
	if err != boom {
		t.Errorf("err %v, want the step's error itself", err)
	}
}
