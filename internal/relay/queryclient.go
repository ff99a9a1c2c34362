package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/isched/isched/internal/stream"
)

// QueryClient reads the coordinator's records through a relay's status
// queries, for `isched status` on a site that keeps each user's jobs
// private: one connection, authenticated once with a MUNGE credential
// (the relay learns the uid from MUNGE), then one Query per read. Its Get
// and List have the CLI store's signatures: a key that is missing or not
// the user's to see is stream.ErrNotFound.
type QueryClient struct {
	Addr string
	// Cred makes the connection's credential (Credential).
	Cred func(ctx context.Context) (string, error)
	// Dial opens the connection (nil: TCP).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	mu sync.Mutex
	nc net.Conn
	r  *bufio.Reader
}

// Connect opens and authenticates the connection (again after a failure).
func (c *QueryClient) Connect(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connectLocked(ctx)
}

func (c *QueryClient) connectLocked(ctx context.Context) error {
	if c.nc != nil {
		return nil
	}
	cred, err := c.Cred(ctx)
	if err != nil {
		return err
	}
	dial := c.Dial
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	nc, err := dial(ctx, c.Addr)
	if err != nil {
		return fmt.Errorf("relay %s: %w", c.Addr, err)
	}
	c.nc, c.r = nc, bufio.NewReader(nc)
	var r Reply
	if err := c.roundTrip(ctx, Hello{V: Version, Cred: cred, Mode: ModeQuery}, &r, MaxFrame); err != nil {
		c.closeLocked()
		return err
	}
	if !r.OK {
		c.closeLocked()
		return &Refused{r}
	}
	return nil
}

// Get reads one value.
func (c *QueryClient) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := c.query(ctx, Query{Op: OpGet, Key: key})
	if err != nil {
		return nil, err
	}
	return []byte(r.Value), nil
}

// List reads a list's values; a missing list is empty, as with Redis.
func (c *QueryClient) List(ctx context.Context, key string) ([][]byte, error) {
	r, err := c.query(ctx, Query{Op: OpList, Key: key})
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		return nil, err
	}
	out := make([][]byte, len(r.Values))
	for i, v := range r.Values {
		out[i] = []byte(v)
	}
	return out, nil
}

// Close closes the connection.
func (c *QueryClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	return nil
}

func (c *QueryClient) closeLocked() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.r = nil, nil
	}
}

// query sends q and reads its reply: stream.ErrNotFound when nothing was
// found, a *QueryRefused when the relay refused.
func (c *QueryClient) query(ctx context.Context, q Query) (QueryReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connectLocked(ctx); err != nil {
		return QueryReply{}, err
	}
	var r QueryReply
	if err := c.roundTrip(ctx, q, &r, MaxQueryReply); err != nil {
		c.closeLocked()
		return QueryReply{}, err
	}
	switch {
	case !r.OK:
		return r, &QueryRefused{Code: r.Code, Err: r.Err}
	case !r.Found:
		return r, stream.ErrNotFound
	}
	return r, nil
}

// QueryRefused is a status query the relay refused.
type QueryRefused struct{ Code, Err string }

func (e *QueryRefused) Error() string {
	return fmt.Sprintf("relay: status query refused (%s): %s", e.Code, e.Err)
}

func (e *QueryRefused) Unwrap() error { return ErrRefused }

// roundTrip sends v and decodes the reply frame (at most max bytes) into
// out, within ctx's deadline.
func (c *QueryClient) roundTrip(ctx context.Context, v, out any, max int) error {
	b, err := encode(v)
	if err != nil {
		return fmt.Errorf("relay: encode: %w", err)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	_ = c.nc.SetDeadline(dl)
	if _, err := c.nc.Write(appendFrame(nil, b)); err != nil {
		return fmt.Errorf("relay %s: send: %w", c.Addr, err)
	}
	rb, err := readFrame(c.r, max)
	if err != nil {
		return fmt.Errorf("relay %s: reply: %w", c.Addr, err)
	}
	if err := decodeStrict(rb, out); err != nil {
		return fmt.Errorf("relay %s: reply: %w", c.Addr, err)
	}
	return nil
}
