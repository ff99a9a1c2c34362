package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned by Get and HGet for a missing key or field.
var ErrNotFound = errors.New("stream: not found")

// Entry is one stream entry.
type Entry struct {
	ID      string
	Payload []byte
	MAC     string
	// Redelivered: read from a consumer group's pending list (ReadOwnPending,
	// Claim), so delivered to a consumer of the group before; a new entry
	// (ReadGroup) is not.
	Redelivered bool
	// Oversize: the entry was larger than Config.MaxEntry; Redis deleted
	// it and sent its id only.
	Oversize bool
}

// Client is a connection pool for one ACL user.
type Client struct {
	rdb      redis.UniversalClient
	keys     Keys
	op       time.Duration
	maxEntry int
	// cluster: rdb is a Redis Cluster client (several addresses, no
	// MasterName); writes that span hash slots are split per slot.
	cluster bool
}

// slogPrintf routes go-redis's own messages (pool dial failures) through
// log/slog at debug level: callers already log the errors they get, with
// context, and the wrapper's stderr must not fill with unstructured lines.
type slogPrintf struct{}

func (slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

var setLogger sync.Once

// Open connects and checks the server answers (PING).
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	setLogger.Do(func() { redis.SetLogger(slogPrintf{}) })
	pw, err := readPassword(cfg.PasswordFile, cfg.Private)
	if err != nil {
		return nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs:        cfg.Addrs,
		MasterName:   cfg.MasterName,
		Username:     cfg.User,
		Password:     pw,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.OpTimeout,
		WriteTimeout: cfg.OpTimeout,
		// The reporter user may only XADD; CLIENT SETINFO would be refused.
		DisableIdentity: true,
		// RESP2: plain replies, and HELLO is not needed for ACL'd users.
		Protocol:   2,
		MaxRetries: 1,
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s has no certificate", ErrConfig, cfg.CAFile)
		}
		opts.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 3 * time.Second
		opts.WriteTimeout = 3 * time.Second
	}
	c := &Client{rdb: redis.NewUniversalClient(opts), keys: Keys{Cluster: cfg.Cluster}, op: opts.ReadTimeout, maxEntry: cfg.MaxEntry}
	_, c.cluster = c.rdb.(*redis.ClusterClient)
	if err := c.Ping(ctx); err != nil {
		_ = c.rdb.Close()
		return nil, err
	}
	return c, nil
}

// Keys names this cluster's keys.
func (c *Client) Keys() Keys { return c.keys }

// Close closes the pool.
func (c *Client) Close() error { return c.rdb.Close() }

func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.op)
}

// Ping checks the server answers.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("stream: ping: %w", err)
	}
	return nil
}

// Append adds an entry to a stream bounded at about maxLen entries
// (XADD MAXLEN ~). It returns the entry id.
func (c *Client) Append(ctx context.Context, stream string, payload []byte, mac string, maxLen int64) (string, error) {
	return c.xadd(ctx, stream, maxLen, "m", string(payload), "mac", mac)
}

// AppendFrom is Append for a relay (isched-relay) that appends on a
// reporter's behalf: the entry also carries the uid MUNGE vouched for
// ("uid", for an operator reading the stream; the coordinator trusts only
// the report's own credential and MAC).
func (c *Client) AppendFrom(ctx context.Context, stream string, payload []byte, mac string, uid int, maxLen int64) (string, error) {
	return c.xadd(ctx, stream, maxLen, "m", string(payload), "mac", mac, "uid", strconv.Itoa(uid))
}

func (c *Client) xadd(ctx context.Context, stream string, maxLen int64, values ...string) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	id, err := c.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: stream,
		MaxLen: maxLen,
		Approx: maxLen > 0,
		Values: values,
	}).Result()
	if err != nil {
		return "", fmt.Errorf("stream: xadd %s: %w", stream, err)
	}
	return id, nil
}

func toEntries(msgs []redis.XMessage) []Entry {
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e := Entry{ID: m.ID}
		if v, ok := m.Values["m"].(string); ok {
			e.Payload = []byte(v)
		}
		if v, ok := m.Values["mac"].(string); ok {
			e.MAC = v
		}
		out = append(out, e)
	}
	return out
}

// ReadAfter reads up to count entries after afterID ("0" for the start),
// waiting up to block for new ones (block <= 0: do not wait). No entries is
// not an error.
func (c *Client) ReadAfter(ctx context.Context, stream, afterID string, count int64, block time.Duration) ([]Entry, error) {
	args := &redis.XReadArgs{Streams: []string{stream, afterID}, Count: count, Block: -1}
	if block > 0 {
		args.Block = block
	}
	res, err := c.rdb.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: xread %s: %w", stream, err)
	}
	var out []Entry
	for _, s := range res {
		out = append(out, toEntries(s.Messages)...)
	}
	return out, nil
}

// Range returns up to count entries of a stream between start and end ids
// ("-" and "+" for all).
func (c *Client) Range(ctx context.Context, stream, start, end string, count int64) ([]Entry, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	res, err := c.rdb.XRangeN(ctx, stream, start, end, count).Result()
	if err != nil {
		return nil, fmt.Errorf("stream: xrange %s: %w", stream, err)
	}
	return toEntries(res), nil
}

// EnsureGroup creates a consumer group (and the stream) if missing; an
// existing group is fine.
func (c *Client) EnsureGroup(ctx context.Context, stream, group string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	err := c.rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("stream: create group %s on %s: %w", group, stream, err)
	}
	return nil
}

// ReadGroup reads new entries for a consumer, waiting up to block (finite).
func (c *Client) ReadGroup(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]Entry, error) {
	if block <= 0 {
		block = time.Millisecond
	}
	if c.maxEntry > 0 {
		return c.readGroupBounded(ctx, stream, group, consumer, count, block)
	}
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: count, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: xreadgroup %s/%s: %w", stream, group, err)
	}
	var out []Entry
	for _, s := range res {
		out = append(out, toEntries(s.Messages)...)
	}
	return out, nil
}

// Ack acknowledges processed entries; call it only after processing succeeded.
func (c *Client) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.rdb.XAck(ctx, stream, group, ids...).Err(); err != nil {
		return fmt.Errorf("stream: xack %s/%s: %w", stream, group, err)
	}
	return nil
}

// Claim takes over entries idle for at least minIdle from dead consumers
// (XAUTOCLAIM), up to count. With Config.MaxEntry set it returns their
// ids only: read them with ReadOwnPending.
func (c *Client) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]Entry, error) {
	if c.maxEntry > 0 {
		return c.claimIDs(ctx, stream, group, consumer, minIdle, count)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	msgs, _, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: group, Consumer: consumer, MinIdle: minIdle, Start: "0-0", Count: count,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("stream: xautoclaim %s/%s: %w", stream, group, err)
	}
	return redelivered(toEntries(msgs)), nil
}

func redelivered(es []Entry) []Entry {
	for i := range es {
		es[i].Redelivered = true
	}
	return es
}

// Set stores a value; ttl 0 means no expiry.
func (c *Client) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.rdb.Set(ctx, key, val, ttl).Err(); err != nil {
		return fmt.Errorf("stream: set %s: %w", key, err)
	}
	return nil
}

// SetNX stores a value only if the key is absent and reports whether it did.
func (c *Client) SetNX(ctx context.Context, key string, val []byte, ttl time.Duration) (bool, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	ok, err := c.rdb.SetNX(ctx, key, val, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("stream: setnx %s: %w", key, err)
	}
	return ok, nil
}

// Get returns a value or ErrNotFound.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	b, err := c.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stream: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("stream: get %s: %w", key, err)
	}
	return b, nil
}

// Del deletes keys (on a Redis Cluster, one DEL per hash slot).
func (c *Client) Del(ctx context.Context, keys ...string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for _, ks := range c.bySlot(keys) {
		if err := c.rdb.Del(ctx, ks...).Err(); err != nil {
			return fmt.Errorf("stream: del %s: %w", strings.Join(ks, " "), err)
		}
	}
	return nil
}

// bySlot splits keys into groups a multi-key command may take: all of
// them on a single server, one group per hash slot on a Redis Cluster.
func (c *Client) bySlot(keys []string) [][]string {
	if !c.cluster || len(keys) < 2 {
		return [][]string{keys}
	}
	var out [][]string
	at := map[int]int{}
	for _, k := range keys {
		s := Slot(k)
		i, ok := at[s]
		if !ok {
			i = len(out)
			at[s] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], k)
	}
	return out
}

// HSet sets hash fields (pairs of field, value).
func (c *Client) HSet(ctx context.Context, key string, fieldValues ...string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.rdb.HSet(ctx, key, fieldValues).Err(); err != nil {
		return fmt.Errorf("stream: hset %s: %w", key, err)
	}
	return nil
}

// HGet returns a hash field or ErrNotFound.
func (c *Client) HGet(ctx context.Context, key, field string) (string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	v, err := c.rdb.HGet(ctx, key, field).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("stream: hget %s %s: %w", key, field, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("stream: hget %s %s: %w", key, field, err)
	}
	return v, nil
}

// HGetAll returns a whole hash (empty when missing).
func (c *Client) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	m, err := c.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("stream: hgetall %s: %w", key, err)
	}
	return m, nil
}

// Len returns a stream's length.
func (c *Client) Len(ctx context.Context, stream string) (int64, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, err := c.rdb.XLen(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("stream: xlen %s: %w", stream, err)
	}
	return n, nil
}

// MaxMemory is the server's `maxmemory` in bytes (0: unlimited), from
// INFO's memory section: the one INFO a reporter may run (`+info|memory`
// in its ACL). On a Redis Cluster it is one node's (each master's is
// usually the same).
func (c *Client) MaxMemory(ctx context.Context) (int64, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	info, err := c.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("stream: info memory: %w", err)
	}
	return ParseMaxMemory(info)
}

// ParseMaxMemory reads the maxmemory field of an INFO reply.
func ParseMaxMemory(info string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("stream: info memory: maxmemory %q", v)
		}
		return n, nil
	}
	return 0, errors.New("stream: info memory: no maxmemory field")
}
