package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewScript extends a lock only if we still hold it.
var renewScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)

// releaseScript deletes a lock only if we still hold it.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

// Lock takes key for owner for ttl if nobody holds it, or extends it if
// owner already does. It reports whether owner holds the lock afterwards.
func (c *Client) Lock(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, err := renewScript.Run(ctx, c.rdb, []string{key}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("stream: renew lock %s: %w", key, err)
	}
	if n == 1 {
		return true, nil
	}
	ok, err := c.rdb.SetNX(ctx, key, owner, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("stream: lock %s: %w", key, err)
	}
	return ok, nil
}

// Unlock releases key if owner holds it.
func (c *Client) Unlock(ctx context.Context, key, owner string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := releaseScript.Run(ctx, c.rdb, []string{key}, owner).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("stream: unlock %s: %w", key, err)
	}
	return nil
}

// PushList appends val to a list kept at most max long (oldest dropped).
func (c *Client) PushList(ctx context.Context, key string, max int64, vals ...[]byte) error {
	if len(vals) == 0 {
		return nil
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	pipe := c.rdb.TxPipeline()
	pipe.RPush(ctx, key, args...)
	pipe.LTrim(ctx, key, -max, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("stream: push %s: %w", key, err)
	}
	return nil
}

// List returns a whole list.
func (c *Client) List(ctx context.Context, key string) ([][]byte, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	vals, err := c.rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("stream: lrange %s: %w", key, err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out, nil
}

// ReadOwnPending re-reads entries delivered to consumer but not acked
// (XREADGROUP from id 0), oldest first.
func (c *Client) ReadOwnPending(ctx context.Context, stream, group, consumer string, count int64) ([]Entry, error) {
	if c.maxEntry > 0 {
		es, err := c.readBounded(ctx, stream, group, consumer, count, "0")
		return redelivered(es), err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{stream, "0"}, Count: count, Block: -1,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: xreadgroup pending %s/%s: %w", stream, group, err)
	}
	var out []Entry
	for _, s := range res {
		out = append(out, toEntries(s.Messages)...)
	}
	return redelivered(out), nil
}

// HDel deletes hash fields.
func (c *Client) HDel(ctx context.Context, key string, fields ...string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.rdb.HDel(ctx, key, fields...).Err(); err != nil {
		return fmt.Errorf("stream: hdel %s: %w", key, err)
	}
	return nil
}

// MemoryUsage returns the bytes Redis uses for key (0 when missing).
func (c *Client) MemoryUsage(ctx context.Context, key string) (int64, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, err := c.rdb.MemoryUsage(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
