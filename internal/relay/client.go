package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

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

	mu  sync.Mutex
	nc  net.Conn
	r   *bufio.Reader
	out []byte
}

// Connect opens the connection now (the wrapper's connect step), so that a
// relay that is down or refuses the credential is told at once.
func (c *Client) Connect(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connectLocked(ctx)
}

func (c *Client) connectLocked(ctx context.Context) error {
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
	if _, err := c.roundTrip(ctx, Hello{V: Version, Cred: cred}); err != nil {
		c.closeLocked()
		return err
	}
	return nil
}

// Append sends one report and waits for its stream id.
func (c *Client) Append(ctx context.Context, _ string, payload []byte, mac string, _ int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connectLocked(ctx); err != nil {
		return "", err
	}
	r, err := c.roundTrip(ctx, Entry{M: string(payload), MAC: mac})
	var ref *Refused
	if err != nil && !(errors.As(err, &ref) && ref.Code == CodeThrottled) {
		// lost, or a reply the connection cannot be trusted after: a new
		// connection for the next try
		c.closeLocked()
	}
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	return nil
}

func (c *Client) closeLocked() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.r = nil, nil
	}
}

// roundTrip sends one frame and reads its Reply, within ctx's deadline.
func (c *Client) roundTrip(ctx context.Context, v any) (Reply, error) {
	b, err := encode(v)
	if err != nil {
		return Reply{}, fmt.Errorf("relay: encode: %w", err)
	}
	if len(b) > MaxFrame {
		return Reply{}, &Refused{Reply{Code: CodeOversize, Err: fmt.Sprintf("frame of %d bytes, limit %d", len(b), MaxFrame)}}
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	_ = c.nc.SetDeadline(dl)
	c.out = appendFrame(c.out[:0], b)
	if _, err := c.nc.Write(c.out); err != nil {
		return Reply{}, fmt.Errorf("relay %s: send: %w", c.Addr, err)
	}
	rb, err := readFrame(c.r, MaxFrame)
	if err != nil {
		return Reply{}, fmt.Errorf("relay %s: reply: %w", c.Addr, err)
	}
	var r Reply
	if err := decodeStrict(rb, &r); err != nil {
		return Reply{}, fmt.Errorf("relay %s: reply: %w", c.Addr, err)
	}
	if !r.OK {
		return r, &Refused{r}
	}
	return r, nil
}
