package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// GroupLag is how far a consumer group is behind on a stream, from XINFO
// STREAM and XINFO GROUPS (Redis >= 7.0: entries-added, entries-read, lag).
type GroupLag struct {
	Length  int64 // entries in the stream now
	Added   int64 // entries ever added to the stream
	Read    int64 // the group's entries-read counter
	Lag     int64 // entries added but never delivered to the group; -1 when Redis cannot tell
	Pending int64 // delivered, not acknowledged
	// LastDelivered is the group's last-delivered-id, FirstEntry the
	// stream's oldest entry ("" when empty), LastGenerated its newest id ever.
	LastDelivered, FirstEntry, LastGenerated string
}

// Behind reports whether the group's last delivered entry is older than
// the stream's oldest one: MAXLEN trimming removed entries the group had
// not read yet.
func (g GroupLag) Behind() bool {
	return g.FirstEntry != "" && CompareIDs(g.LastDelivered, g.FirstEntry) < 0
}

// TrimmedUnread is how many entries were removed before the group read
// them, when the group's read counter tells it. Once valid (after the
// group's first read), Redis advances entries-read by one per delivered
// entry, also across a gap trimming left, so lost entries stay in the lag
// for good: lost = lag - unread entries still in the stream. Those are known
// exactly when the group is Behind (all Length of them) or at the end of the
// stream (none); in between ok is false. Before the counter is valid Redis
// estimates positions instead, and a gap read then is not counted: the
// figure is a lower bound.
func (g GroupLag) TrimmedUnread() (n int64, ok bool) {
	switch {
	case g.Lag < 0, g.FirstEntry == "" && g.Length > 0:
		// a stream with entries but no first entry: a server that does
		// not say (miniredis), not a loss
		return 0, false
	case g.Behind():
		return max(g.Added-g.Length-g.Read, 0), true
	case g.FirstEntry == "" || CompareIDs(g.LastDelivered, g.LastGenerated) >= 0:
		return g.Lag, true
	}
	return 0, false
}

// Lag reads the stream's and the group's counters (two O(1) commands in
// one MULTI/EXEC, so both describe the same moment).
func (c *Client) Lag(ctx context.Context, stream, group string) (GroupLag, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	// One MULTI: read apart, an entry appended between the two could be
	// in the group's lag but after the stream's last id, and a group at
	// the end of the stream would count it as trimmed unread.
	pipe := c.rdb.TxPipeline()
	infoCmd := pipe.XInfoStream(ctx, stream)
	groupsCmd := pipe.XInfoGroups(ctx, stream)
	_, _ = pipe.Exec(ctx) // each command's own error is checked below
	info, err := infoCmd.Result()
	if err != nil {
		return GroupLag{}, fmt.Errorf("stream: xinfo stream %s: %w", stream, err)
	}
	groups, err := groupsCmd.Result()
	if err != nil {
		return GroupLag{}, fmt.Errorf("stream: xinfo groups %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == group {
			return GroupLag{Length: info.Length, Added: info.EntriesAdded, Read: g.EntriesRead, Lag: g.Lag, Pending: g.Pending,
				LastDelivered: g.LastDeliveredID, FirstEntry: info.FirstEntry.ID, LastGenerated: info.LastGeneratedID}, nil
		}
	}
	return GroupLag{}, fmt.Errorf("stream: group %s on %s: %w", group, stream, ErrNotFound)
}

// CompareIDs orders two stream ids ("ms-seq"; a missing seq is 0): -1, 0 or 1.
// An id that does not parse sorts first.
func CompareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am != bm:
		return cmpU(am, bm)
	default:
		return cmpU(as, bs)
	}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
