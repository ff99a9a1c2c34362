package relayproto

import (
	"fmt"

	"github.com/isched/isched/internal/report"
)

// ModeQuery is the Hello's mode of a status-query connection ("": reports).
const ModeQuery = "query"

// Query operations.
const (
	OpGet  = "get"  // one value (Redis GET)
	OpList = "list" // a list's values (Redis LRANGE 0 -1)
)

// Query is a status connection's frame: one key to read.
type Query struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}

// QueryReply answers a Query: OK with Found and the Value (get) or Values
// (list), or Code and Err. A key that does not exist and one the uid may
// not see are answered alike (not found): as with Slurm's PrivateData,
// another user's job is not there for you.
type QueryReply struct {
	OK     bool     `json:"ok,omitempty"`
	Found  bool     `json:"found,omitempty"`
	Value  string   `json:"value,omitempty"`
	Values []string `json:"values,omitempty"`
	Code   string   `json:"code,omitempty"`
	Err    string   `json:"err,omitempty"`
}

// Query reply codes (with CodeBusy, CodeThrottled and CodeUnavail).
const (
	CodeBadQuery    = "bad-query"   // not a key a status query may read
	CodeUnsupported = "unsupported" // this relay serves no status queries
)

// MaxQueryFrame bounds a Query frame: a key is at most ~100 bytes.
const MaxQueryFrame = 1 << 10

// MaxQueryReply bounds a QueryReply frame: the agent's tables are at most
// report.MaxTablePayload, at most doubled by escaping them into a string.
const MaxQueryReply = 2*report.MaxTablePayload + 4<<10

// QueryRefused is a status query the relay refused.
type QueryRefused struct{ Code, Err string }

func (e *QueryRefused) Error() string {
	return fmt.Sprintf("relay: status query refused (%s): %s", e.Code, e.Err)
}

func (e *QueryRefused) Unwrap() error { return ErrRefused }
