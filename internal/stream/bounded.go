package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// boundedRead reads a consumer group's entries one at a time inside Redis
// (ARGV[5] ">" for new entries, else the pending ones after that id) and
// returns at most ARGV[3] of them as flat id, m, mac, flag quadruples. An
// entry with a field longer than ARGV[4] bytes, or with more than four
// fields, is deleted from the stream and comes back as its id with flag 1
// (oversize): whatever a writer of the stream sends, a reader gets at most
// count × max bytes. Flag 2: the entry is pending but gone (deleted).
var boundedRead = redis.NewScript(`
local key, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local count, max, from = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local out = {}
for _ = 1, count do
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', key, from)
  if not r then break end
  local e = r[1][2][1]
  if not e then break end
  local id, f = e[1], e[2]
  if from ~= '>' then from = id end
  local m, mac, flag = '', '', 0
  if not f then
    flag = 2
  elseif #f > 8 then
    flag = 1
  else
    for j = 1, #f, 2 do
      if #f[j] > max or #f[j + 1] > max then flag = 1 end
    end
    if flag == 0 then
      for j = 1, #f, 2 do
        if f[j] == 'm' then m = f[j + 1] elseif f[j] == 'mac' then mac = f[j + 1] end
      end
    end
  end
  if flag == 1 then redis.call('XDEL', key, id) end
  out[#out + 1] = id
  out[#out + 1] = m
  out[#out + 1] = mac
  out[#out + 1] = flag
end
return out
`)

// Read flags of boundedRead.
const (
	flagOK       = 0
	flagOversize = 1
	flagGone     = 2
)

// readBounded runs boundedRead once.
func (c *Client) readBounded(ctx context.Context, stream, group, consumer string, count int64, from string) ([]Entry, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	vals, err := boundedRead.Run(ctx, c.rdb, []string{stream}, group, consumer, count, c.maxEntry, from).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: bounded read %s/%s: %w", stream, group, err)
	}
	if len(vals)%4 != 0 {
		return nil, fmt.Errorf("stream: bounded read %s/%s: %d values, want quadruples", stream, group, len(vals))
	}
	out := make([]Entry, 0, len(vals)/4)
	for i := 0; i < len(vals); i += 4 {
		id, _ := vals[i].(string)
		m, _ := vals[i+1].(string)
		mac, _ := vals[i+2].(string)
		flag, _ := vals[i+3].(int64)
		e := Entry{ID: id, MAC: mac, Oversize: flag == flagOversize}
		if flag == flagOK {
			e.Payload = []byte(m)
		}
		out = append(out, e)
	}
	return out, nil
}

// readGroupBounded is ReadGroup through boundedRead. A script cannot
// block, so it waits for new entries by polling, 10 ms apart at first,
// then up to 200 ms.
func (c *Client) readGroupBounded(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]Entry, error) {
	deadline := time.Now().Add(block)
	wait := 10 * time.Millisecond
	for {
		ents, err := c.readBounded(ctx, stream, group, consumer, count, ">")
		if err != nil || len(ents) > 0 {
			return ents, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// claimIDs takes over idle pending entries (XAUTOCLAIM JUSTID, in pages):
// ids only, the entries are read with ReadOwnPending.
func (c *Client) claimIDs(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]Entry, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var out []Entry
	start := "0-0"
	for int64(len(out)) < count {
		ids, next, err := c.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: group, Consumer: consumer, MinIdle: minIdle, Start: start, Count: min(count-int64(len(out)), 1000),
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("stream: xautoclaim %s/%s: %w", stream, group, err)
		}
		for _, id := range ids {
			out = append(out, Entry{ID: id, Redelivered: true})
		}
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	return out, nil
}
