package relayproto

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

// conn is what Client and QueryClient share: one connection to the
// relay, opened on first use and again after a failure, with a fresh
// credential each time (MUNGE opens a credential once), and framed round
// trips on it. Its methods are called with mu held.
type conn struct {
	addr string
	cred func(ctx context.Context) (string, error)
	dial func(ctx context.Context, addr string) (net.Conn, error)
	mode string        // the Hello's Mode
	wait time.Duration // a round trip's deadline when ctx has none

	mu  sync.Mutex
	nc  net.Conn
	r   *bufio.Reader
	out []byte
}

// connect opens and authenticates the connection unless it is open: a
// Hello, answered by a Reply that is OK or a *Refused.
func (c *conn) connect(ctx context.Context) error {
	if c.nc != nil {
		return nil
	}
	cred, err := c.cred(ctx)
	if err != nil {
		return err
	}
	dial := c.dial
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	nc, err := dial(ctx, c.addr)
	if err != nil {
		return fmt.Errorf("relay %s: %w", c.addr, err)
	}
	c.nc, c.r = nc, bufio.NewReader(nc)
	var r Reply
	if err := c.roundTrip(ctx, Hello{V: Version, Cred: cred, Mode: c.mode}, &r, MaxFrame); err != nil {
		c.close()
		return err
	}
	if !r.OK {
		c.close()
		return &Refused{r}
	}
	return nil
}

func (c *conn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.r = nil, nil
	}
}

// roundTrip sends v and decodes the reply frame (at most max bytes) into
// out, within ctx's deadline (c.wait from now when it has none).
func (c *conn) roundTrip(ctx context.Context, v, out any, max int) error {
	b, err := Encode(v)
	if err != nil {
		return fmt.Errorf("relay: encode: %w", err)
	}
	if len(b) > MaxFrame {
		return &Refused{Reply{Code: CodeOversize, Err: fmt.Sprintf("frame of %d bytes, limit %d", len(b), MaxFrame)}}
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(c.wait)
	}
	_ = c.nc.SetDeadline(dl)
	c.out = AppendFrame(c.out[:0], b)
	if _, err := c.nc.Write(c.out); err != nil {
		return fmt.Errorf("relay %s: send: %w", c.addr, err)
	}
	rb, err := ReadFrame(c.r, max)
	if err != nil {
		return fmt.Errorf("relay %s: reply: %w", c.addr, err)
	}
	if err := DecodeStrict(rb, out); err != nil {
		return fmt.Errorf("relay %s: reply: %w", c.addr, err)
	}
	return nil
}

// Client sends reports through a relay, for a wrapper. It connects on
// first use and again after any failure, with a fresh credential each
// time (MUNGE opens a credential once). Its Append has the signature of
// the wrapper's direct Redis appender; the stream and the cap are the
// relay's to choose, so they are ignored.
type Client struct {
	Addr string
	// Cred makes the credential of a new connection (Credential).
	Cred func(ctx context.Context) (string, error)
	// Dial opens the connection (nil: TCP).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	c conn
}

// conn is c's connection, set up from its fields on first use.
func (c *Client) conn() *conn {
	if c.c.cred == nil {
		c.c.addr, c.c.cred, c.c.dial, c.c.wait = c.Addr, c.Cred, c.Dial, 10*time.Second
	}
	return &c.c
}

// Connect opens the connection now (the wrapper's connect step), so that a
// relay that is down or refuses the credential is told at once.
func (c *Client) Connect(ctx context.Context) error {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.conn().connect(ctx)
}

// Append sends one report and waits for its stream id.
func (c *Client) Append(ctx context.Context, _ string, payload []byte, mac string, _ int64) (string, error) {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	cn := c.conn()
	if err := cn.connect(ctx); err != nil {
		return "", err
	}
	var r Reply
	err := cn.roundTrip(ctx, Entry{M: string(payload), MAC: mac}, &r, MaxFrame)
	if err == nil && !r.OK {
		err = &Refused{r}
	}
	var ref *Refused
	if err != nil && !(errors.As(err, &ref) && ref.Code == CodeThrottled) {
		// lost, or a reply the connection cannot be trusted after: a new
		// connection for the next try
		cn.close()
	}
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	c.c.close()
	return nil
}

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

	c conn
}

// conn is c's connection, set up from its fields on first use.
func (c *QueryClient) conn() *conn {
	if c.c.cred == nil {
		c.c.addr, c.c.cred, c.c.dial, c.c.wait, c.c.mode = c.Addr, c.Cred, c.Dial, 30*time.Second, ModeQuery
	}
	return &c.c
}

// Connect opens and authenticates the connection (again after a failure).
func (c *QueryClient) Connect(ctx context.Context) error {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.conn().connect(ctx)
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
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	c.c.close()
	return nil
}

// query sends q and reads its reply: stream.ErrNotFound when nothing was
// found, a *QueryRefused when the relay refused.
func (c *QueryClient) query(ctx context.Context, q Query) (QueryReply, error) {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	cn := c.conn()
	if err := cn.connect(ctx); err != nil {
		return QueryReply{}, err
	}
	var r QueryReply
	if err := cn.roundTrip(ctx, q, &r, MaxQueryReply); err != nil {
		cn.close()
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
