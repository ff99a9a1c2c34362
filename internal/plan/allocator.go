package plan

import (
	"errors"
	"fmt"
	"sort"
)

// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// torch 2.x, default settings: no max_split_size_mb, no expandable
// segments, no garbage collection threshold, one stream). It replays a
// sequence of mallocs and frees and says what the allocator would have
// allocated (torch.cuda.max_memory_allocated) and reserved from the driver
// (max_memory_reserved, which nvidia-smi shows plus the CUDA context):
//
//   - a request is rounded up to a multiple of 512 bytes (512 at least);
//   - requests of up to 1 MiB come from the small pool, whose segments are
//     2 MiB; larger ones from the large pool, whose segments are 20 MiB for
//     requests under 10 MiB and the request rounded up to 2 MiB otherwise;
//   - a request takes the smallest free block of its pool that holds it
//     (the lowest address among equals), else a new segment (cudaMalloc);
//   - a block is split when what remains is at least 512 bytes (small
//     pool) or more than 1 MiB (large pool); the rest stays free;
//   - a freed block merges with free neighbours of its segment;
//   - segments are never given back, except when a new one would not fit
//     the device: then every wholly free segment is released and the
//     cudaMalloc retried (release_cached_blocks), and failing that the
//     request is out of memory.
const (
	allocMinBlock   = 512
	allocSmallSize  = 1 << 20
	allocSmallBuf   = 2 << 20
	allocLargeBuf   = 20 << 20
	allocMinLarge   = 10 << 20
	allocRoundLarge = 2 << 20
)

// errAllocOOM is a replay that needed more than the device holds.
var errAllocOOM = errors.New("out of device memory")

// allocEvent is one step of a replay: a malloc of Size bytes named ID, or
// (Free) the free of the block malloc'd as ID.
type allocEvent struct {
	ID   int
	Size int64
	Free bool
}

// allocPeaks is what a replay ends with: the peaks of the bytes in blocks
// handed out (allocated, rounded as the allocator rounds) and of the bytes
// in segments (reserved).
type allocPeaks struct {
	Allocated, Reserved int64
}

// allocBlock is a run of bytes of one segment; prev and next are its
// neighbours in the segment.
type allocBlock struct {
	addr, size int64
	small      bool
	free       bool
	prev, next *allocBlock
}

// cachingAllocator is the replay's state. Its pools hold the free blocks,
// sorted by size, then address, as the allocator's std::set is.
type cachingAllocator struct {
	capacity            int64 // bytes the segments may take; 0: unlimited
	pools               [2][]*allocBlock
	live                map[int]*allocBlock
	nextAddr            int64
	allocated, reserved int64
	peak                allocPeaks
}

// replayAllocator runs events through a fresh allocator with the device's
// capacity (0: unlimited).
func replayAllocator(events []allocEvent, capacity int64) (allocPeaks, error) {
	a := &cachingAllocator{capacity: capacity, live: map[int]*allocBlock{}}
	for i, e := range events {
		var err error
		if e.Free {
			err = a.free(e.ID)
		} else {
			err = a.malloc(e.ID, e.Size)
		}
		if err != nil {
			return a.peak, fmt.Errorf("event %d: %w", i, err)
		}
	}
	return a.peak, nil
}

// allocRound is the allocator's round_size.
func allocRound(size int64) int64 {
	if size < allocMinBlock {
		return allocMinBlock
	}
	return (size + allocMinBlock - 1) / allocMinBlock * allocMinBlock
}

// allocSegmentSize is the allocator's get_allocation_size: the segment a
// request that found no free block gets.
func allocSegmentSize(size int64) int64 {
	switch {
	case size <= allocSmallSize:
		return allocSmallBuf
	case size < allocMinLarge:
		return allocLargeBuf
	}
	return (size + allocRoundLarge - 1) / allocRoundLarge * allocRoundLarge
}

// allocShouldSplit is the allocator's should_split.
func allocShouldSplit(b *allocBlock, size int64) bool {
	rest := b.size - size
	if b.small {
		return rest >= allocMinBlock
	}
	return rest > allocSmallSize
}

func poolIndex(small bool) int {
	if small {
		return 0
	}
	return 1
}

func (a *cachingAllocator) malloc(id int, req int64) error {
	if req <= 0 {
		return fmt.Errorf("malloc %d: size %d", id, req)
	}
	if _, ok := a.live[id]; ok {
		return fmt.Errorf("malloc %d: already allocated", id)
	}
	size := allocRound(req)
	small := size <= allocSmallSize
	b := a.takeFree(small, size)
	if b == nil {
		var err error
		if b, err = a.newSegment(small, allocSegmentSize(size)); err != nil {
			return fmt.Errorf("malloc %d of %d bytes: %w", id, req, err)
		}
	}
	if allocShouldSplit(b, size) {
		rest := &allocBlock{addr: b.addr + size, size: b.size - size, small: small, free: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next, b.size = rest, size
		a.insertFree(rest)
	}
	b.free = false
	a.live[id] = b
	a.allocated += b.size
	a.peak.Allocated = max(a.peak.Allocated, a.allocated)
	return nil
}

// newSegment is a cudaMalloc of size bytes, releasing the cached segments
// first when the device would not hold it.
func (a *cachingAllocator) newSegment(small bool, size int64) (*allocBlock, error) {
	if a.capacity > 0 && a.reserved+size > a.capacity {
		a.releaseCached()
		if a.reserved+size > a.capacity {
			return nil, fmt.Errorf("%d bytes reserved, a %d-byte segment more: %w", a.reserved, size, errAllocOOM)
		}
	}
	b := &allocBlock{addr: a.nextAddr, size: size, small: small}
	a.nextAddr += size
	a.reserved += size
	a.peak.Reserved = max(a.peak.Reserved, a.reserved)
	return b, nil
}

func (a *cachingAllocator) free(id int) error {
	b, ok := a.live[id]
	if !ok {
		return fmt.Errorf("free %d: not allocated", id)
	}
	delete(a.live, id)
	a.allocated -= b.size
	b.free = true
	if p := b.prev; p != nil && p.free {
		a.removeFree(p)
		absorb(p, b)
		b = p
	}
	if n := b.next; n != nil && n.free {
		a.removeFree(n)
		absorb(b, n)
	}
	a.insertFree(b)
	return nil
}

// absorb merges block right into its left neighbour left.
func absorb(left, right *allocBlock) {
	left.size += right.size
	left.next = right.next
	if right.next != nil {
		right.next.prev = left
	}
}

// releaseCached gives every wholly free segment back to the driver.
func (a *cachingAllocator) releaseCached() {
	for i, pool := range a.pools {
		kept := pool[:0]
		for _, b := range pool {
			if b.prev == nil && b.next == nil {
				a.reserved -= b.size
				continue
			}
			kept = append(kept, b)
		}
		a.pools[i] = kept
	}
}

// less orders free blocks as the allocator's BlockComparator does.
func (b *allocBlock) less(size, addr int64) bool {
	return b.size < size || b.size == size && b.addr < addr
}

// takeFree removes and returns the best-fitting free block of at least
// size bytes, or nil.
func (a *cachingAllocator) takeFree(small bool, size int64) *allocBlock {
	pool := a.pools[poolIndex(small)]
	i := sort.Search(len(pool), func(i int) bool { return pool[i].size >= size })
	if i == len(pool) {
		return nil
	}
	b := pool[i]
	a.pools[poolIndex(small)] = append(pool[:i], pool[i+1:]...)
	return b
}

func (a *cachingAllocator) insertFree(b *allocBlock) {
	pool := a.pools[poolIndex(b.small)]
	i := sort.Search(len(pool), func(i int) bool { return !pool[i].less(b.size, b.addr) })
	pool = append(pool, nil)
	copy(pool[i+1:], pool[i:])
	pool[i] = b
	a.pools[poolIndex(b.small)] = pool
}

func (a *cachingAllocator) removeFree(b *allocBlock) {
	pool := a.pools[poolIndex(b.small)]
	i := sort.Search(len(pool), func(i int) bool { return !pool[i].less(b.size, b.addr) })
	if i < len(pool) && pool[i] == b {
		a.pools[poolIndex(b.small)] = append(pool[:i], pool[i+1:]...)
	}
}
