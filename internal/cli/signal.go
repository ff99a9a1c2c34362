package cli

import (
	"context"
	"time"
)

// measuredCkpt is the checkpoint time the coordinator learned for an
// existing lineage (a resubmission with --lineage), for the signal lead; 0
// when there is none or Redis cannot say within a few seconds (the lead
// then assumes a default: a submission never waits on this).
func (a *App) measuredCkpt(lineage string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := a.openStore(ctx)
	if err != nil || st == nil {
		return 0
	}
	s, err := readStatus(ctx, st, lineage)
	if err != nil || s.CkptMS <= 0 {
		return 0
	}
	return time.Duration(s.CkptMS * float64(time.Millisecond))
}
