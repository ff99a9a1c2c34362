package agent

import "context"

// Background is an agent run in a goroutine until Close: the tests' way to
// start one beside their own work. The programs call Run.
type Background struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// Start runs a in the background until Close.
func Start(ctx context.Context, a *Agent) *Background {
	ctx, cancel := context.WithCancel(ctx)
	b := &Background{cancel: cancel, done: make(chan struct{})}
	go func() {
		b.err = a.Run(ctx)
		close(b.done)
	}()
	return b
}

// Close stops the agent and waits for it (or for ctx), returning Run's error.
func (b *Background) Close(ctx context.Context) error {
	b.cancel()
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
