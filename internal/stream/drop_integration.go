//go:build integration

package stream

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// DropCluster unlinks every key of this client's cluster name
// (isched:<cluster>:*, on each master of a Redis Cluster): what a
// benchmark or a test run leaves behind. It returns how many it unlinked.
// Never point it at a cluster name in production use: that is why it is
// built only into the integration tier's test binaries (this file's build
// tag), never into a program.
func (c *Client) DropCluster(ctx context.Context) (int, error) {
	match := c.keys.prefix() + "*" // cluster names hold no glob character (Config.Validate)
	n := 0
	drop := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for {
			sctx, cancel := c.bound(ctx)
			keys, next, err := node.Scan(sctx, cursor, match, 1000).Result()
			cancel()
			if err != nil {
				return fmt.Errorf("stream: scan %s: %w", match, err)
			}
			for _, ks := range c.bySlot(keys) {
				if len(ks) == 0 {
					continue
				}
				uctx, cancel := c.bound(ctx)
				err := c.rdb.Unlink(uctx, ks...).Err()
				cancel()
				if err != nil {
					return fmt.Errorf("stream: unlink %d keys of %s: %w", len(ks), match, err)
				}
				n += len(ks)
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock() // n and the unlinks: one master at a time is fast enough here
			defer mu.Unlock()
			return drop(ctx, m)
		})
		return n, err
	}
	return n, drop(ctx, c.rdb)
}
