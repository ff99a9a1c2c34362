package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWriteBatch(t *testing.T) {
	t.Parallel()
	c, mr := openMini(t)
	ctx := context.Background()
	var b Batch
	if err := c.WriteBatch(ctx, &b); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	b.Set("k1", []byte("v1"), 0)
	b.Set("k2", []byte("v2"), time.Minute)
	b.HSet("h", "a", "1", "b", "2")
	b.HSet("h") // nothing to write: not queued
	b.PushList("l", 3, []byte("1"), []byte("2"))
	b.PushList("l", 3, []byte("3"), []byte("4"))
	b.PushList("l", 3) // nothing to write: not queued
	if _, err := mr.XAdd("s", "*", []string{"p", "1"}); err != nil {
		t.Fatal(err)
	}
	id2, err := mr.XAdd("s", "*", []string{"p", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureGroup(ctx, "s", "g"); err != nil {
		t.Fatal(err)
	}
	read, err := c.ReadGroup(ctx, "s", "g", "c1", 10, time.Millisecond)
	if err != nil || len(read) != 2 {
		t.Fatalf("read %d entries, err %v", len(read), err)
	}
	b.Ack("s", "g", read[0].ID)
	b.Ack("s", "g") // nothing to ack: not queued
	if b.Len() != 6 {
		t.Fatalf("Len %d, want 6", b.Len())
	}
	if err := c.WriteBatch(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if v, _ := mr.Get("k1"); v != "v1" || mr.TTL("k1") != 0 {
		t.Errorf("k1 = %q ttl %s", v, mr.TTL("k1"))
	}
	if v, _ := mr.Get("k2"); v != "v2" || mr.TTL("k2") != time.Minute {
		t.Errorf("k2 = %q ttl %s", v, mr.TTL("k2"))
	}
	if a, b := mr.HGet("h", "a"), mr.HGet("h", "b"); a != "1" || b != "2" {
		t.Errorf("h = %q %q", a, b)
	}
	if l, _ := mr.List("l"); strings.Join(l, ",") != "2,3,4" {
		t.Errorf("l = %v, want the last 3 of 1..4", l)
	}
	// the acked entry left the consumer's pending list, the other stayed
	pend, err := c.ReadOwnPending(ctx, "s", "g", "c1", 10)
	if err != nil || len(pend) != 1 || pend[0].ID != id2 {
		t.Errorf("pending after the batch: %v (err %v), want only %s", pend, err, id2)
	}
	b.Reset()
	if b.Len() != 0 {
		t.Fatalf("Len after Reset %d", b.Len())
	}

	// malformed batches are refused before anything is sent
	for name, bad := range map[string]func(*Batch){
		"odd hset":     func(b *Batch) { b.Set("x", []byte("1"), 0); b.HSet("h2", "a") },
		"push max 0":   func(b *Batch) { b.Set("x", []byte("1"), 0); b.PushList("l2", 0, []byte("1")) },
		"ack no group": func(b *Batch) { b.Set("x", []byte("1"), 0); b.Ack("s", "", "1-1") },
	} {
		var b Batch
		bad(&b)
		if err := c.WriteBatch(ctx, &b); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if mr.Exists("x") {
			t.Errorf("%s: part of a refused batch was written", name)
		}
	}

	// a server error is returned, wrapped
	mr.SetError("server down")
	b.Set("k3", []byte("v3"), 0)
	if err := c.WriteBatch(ctx, &b); err == nil || !strings.Contains(err.Error(), "batch of 1 writes") {
		t.Errorf("error %v, want the batch's error", err)
	}
	mr.SetError("")
}

// Reset drops what the writes referenced, so a large round's values do not
// stay alive in the slots past the next, smaller round; a very large slice
// is not kept at all.
func TestBatchResetReleasesValues(t *testing.T) {
	t.Parallel()
	var b Batch
	for i := range 8 {
		b.Set(fmt.Sprintf("k%d", i), make([]byte, 10<<10), 0)
	}
	b.PushList("l", 10, []byte("x"))
	b.HSet("h", "f", "v")
	b.Reset()
	if b.Len() != 0 {
		t.Fatalf("Len after Reset: %d", b.Len())
	}
	for i, op := range b.ops[:cap(b.ops)] {
		if op.val != nil || op.vals != nil || op.fields != nil || op.key != "" {
			t.Fatalf("slot %d still references %q (%d bytes)", i, op.key, len(op.val))
		}
	}
	for i := range maxKeptOps + 1 {
		b.Set(fmt.Sprintf("k%d", i), nil, 0)
	}
	b.Reset()
	if cap(b.ops) != 0 {
		t.Fatalf("a %d-op slice kept after Reset", cap(b.ops))
	}
}

// TestBatchThenWaves: on a Redis Cluster a batch goes out one MULTI/EXEC
// per slot, wave by wave: a write queued after Then is not sent when one
// before it failed. (miniredis has no cluster mode: the client is told it
// is one, and each slot's MULTI/EXEC goes to the one server.)
func TestBatchThenWaves(t *testing.T) {
	t.Parallel()
	c, mr := openMini(t)
	c.cluster = true
	ctx := context.Background()
	if err := mr.Set("isched:lab:job:{bad}:state", "a string"); err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.Then() // nothing queued yet: no empty wave
	b.Set("isched:lab:job:{L1}:state", []byte("s1"), 0)
	b.HSet("isched:lab:job:{bad}:state", "f", "v") // WRONGTYPE at EXEC
	b.Then()
	b.Then() // twice: one wave
	b.HSet("isched:lab:coord:sessions", "sid", "1")
	if len(b.waves) != 1 || b.waves[0] != 2 {
		t.Fatalf("waves %v, want [2]", b.waves)
	}
	err := c.WriteBatch(ctx, &b)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "wave 1 of 2") {
		t.Fatalf("err %v, want WRONGTYPE in wave 1 of 2", err)
	}
	if v, _ := mr.Get("isched:lab:job:{L1}:state"); v != "s1" {
		t.Errorf("a good slot of the failed wave: %q, want s1 (each slot lands on its own)", v)
	}
	if mr.Exists("isched:lab:coord:sessions") {
		t.Error("the write after Then was sent although the wave before it failed")
	}
	b.Reset()
	if len(b.waves) != 0 {
		t.Errorf("waves after Reset: %v", b.waves)
	}
	b.HSet("isched:lab:coord:sessions", "sid", "2")
	if err := c.WriteBatch(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if v := mr.HGet("isched:lab:coord:sessions", "sid"); v != "2" {
		t.Errorf("session %q, want 2", v)
	}
}
