package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Repair says what RepairGroup found wrong and put right ("" fields: nothing).
type Repair struct {
	// Recreated: the stream or the group was missing and was created
	// (the group at the stream's start: entries still there are delivered
	// again, and a reader's replay checks drop what it had seen).
	Recreated string
	// FutureIDs: entries whose ids were ahead of now by more than the
	// allowed skew (a writer's explicit id; the last possible one
	// exhausts the stream) were deleted, and the stream's and the group's
	// last ids set back to LastID.
	FutureIDs int
	LastID    string
}

// Any reports whether something was repaired.
func (r Repair) Any() bool { return r.Recreated != "" || r.FutureIDs > 0 }

func isNoSuchKey(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such key") || strings.HasPrefix(err.Error(), "NOGROUP"))
}

// RepairGroup makes a consumer group's stream usable again after a writer
// damaged it: a missing stream or group is created; entries with ids more
// than skew ahead of now are deleted and the stream's last id (XSETID) and
// the group's position (XGROUP SETID) are set back to the newest entry
// left, so that new entries (id "*", from the clock) are accepted and
// delivered again. Cheap when nothing is wrong: XINFO STREAM and GROUPS.
func (c *Client) RepairGroup(ctx context.Context, stream, group string, now time.Time, skew time.Duration) (Repair, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var r Repair
	lastGenerated, delivered, err := c.ensureGroup(ctx, stream, group, &r)
	if err != nil || r.Recreated == "stream" {
		return r, err
	}
	limit := uint64(now.Add(skew).UnixMilli())
	if ms, _ := splitID(lastGenerated); ms <= limit {
		return r, nil
	}
	if r.FutureIDs, err = c.deleteFrom(ctx, stream, strconv.FormatUint(limit+1, 10)+"-0"); err != nil {
		return r, err
	}
	last := "0-1"
	switch newest, err := c.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result(); {
	case err != nil:
		return r, fmt.Errorf("stream: xrevrange %s: %w", stream, err)
	case len(newest) == 1:
		last = newest[0].ID
	}
	r.LastID = last
	r.FutureIDs = max(r.FutureIDs, 1) // the last id alone was ahead (its entry trimmed or deleted)
	if err := c.rdb.Do(ctx, "XSETID", stream, last, "MAXDELETEDID", last).Err(); err != nil {
		return r, fmt.Errorf("stream: xsetid %s %s: %w", stream, last, err)
	}
	if delivered != "" && CompareIDs(delivered, last) < 0 {
		last = delivered // entries after it were never delivered: keep them coming
	}
	if err := c.rdb.XGroupSetID(ctx, stream, group, last).Err(); err != nil {
		return r, fmt.Errorf("stream: xgroup setid %s %s %s: %w", stream, group, last, err)
	}
	return r, nil
}

// ensureGroup creates the stream or the group where missing (saying which
// in r.Recreated) and returns the stream's last generated id and the
// group's last delivered one.
func (c *Client) ensureGroup(ctx context.Context, stream, group string, r *Repair) (lastGenerated, delivered string, err error) {
	info, err := c.rdb.XInfoStream(ctx, stream).Result()
	missing := isNoSuchKey(err)
	if err != nil && !missing {
		return "", "", fmt.Errorf("stream: xinfo stream %s: %w", stream, err)
	}
	if !missing {
		groups, err := c.rdb.XInfoGroups(ctx, stream).Result()
		if err != nil {
			return "", "", fmt.Errorf("stream: xinfo groups %s: %w", stream, err)
		}
		missing = true
		for _, g := range groups {
			if g.Name == group {
				missing, delivered = false, g.LastDeliveredID
			}
		}
		if missing {
			r.Recreated = "group"
		}
	} else {
		r.Recreated = "stream"
	}
	if missing {
		err := c.rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return "", "", fmt.Errorf("stream: create group %s on %s: %w", group, stream, err)
		}
	}
	if info == nil {
		return "", delivered, nil // the stream was missing: created empty
	}
	return info.LastGeneratedID, delivered, nil
}

// deleteFrom deletes the entries from id from on, a page at a time, and
// counts them.
func (c *Client) deleteFrom(ctx context.Context, stream, from string) (int, error) {
	n := 0
	for {
		msgs, err := c.rdb.XRangeN(ctx, stream, from, "+", 1000).Result()
		if err != nil {
			return n, fmt.Errorf("stream: xrange %s: %w", stream, err)
		}
		if len(msgs) == 0 {
			return n, nil
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		if err := c.rdb.XDel(ctx, stream, ids...).Err(); err != nil {
			return n, fmt.Errorf("stream: xdel %s: %w", stream, err)
		}
		n += len(ids)
	}
}
