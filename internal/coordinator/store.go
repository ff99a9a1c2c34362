package coordinator

import (
	"context"
	"time"

	"github.com/isched/isched/internal/stream"
)

// Store is what the coordinator needs from Redis; *stream.Client implements it.
type Store interface {
	Keys() stream.Keys
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
	Get(ctx context.Context, key string) ([]byte, error)
	Del(ctx context.Context, keys ...string) error
	Append(ctx context.Context, stream string, payload []byte, mac string, maxLen int64) (string, error)
	ReadAfter(ctx context.Context, stream, afterID string, count int64, block time.Duration) ([]stream.Entry, error)
	EnsureGroup(ctx context.Context, stream, group string) error
	ReadGroup(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]stream.Entry, error)
	ReadOwnPending(ctx context.Context, stream, group, consumer string, count int64) ([]stream.Entry, error)
	Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]stream.Entry, error)
	Ack(ctx context.Context, stream, group string, ids ...string) error
	HSet(ctx context.Context, key string, fieldValues ...string) error
	HGet(ctx context.Context, key, field string) (string, error)
	HGetAll(ctx context.Context, key string) (map[string]string, error)
	HDel(ctx context.Context, key string, fields ...string) error
	Lock(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	Unlock(ctx context.Context, key, owner string) error
	PushList(ctx context.Context, key string, max int64, vals ...[]byte) error
	List(ctx context.Context, key string) ([][]byte, error)
	// WriteBatch sends queued writes in one round trip (MULTI/EXEC).
	WriteBatch(ctx context.Context, b *stream.Batch) error
}
