package server_test

import (
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

func servertestSkip(t *testing.T, reason string) { t.Helper(); testenv.Skip(t, reason) }

func localFilter() provider.ListFilter { return provider.ListFilter{} }
