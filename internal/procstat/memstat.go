package procstat

import (
	"bytes"
	"fmt"
	"strconv"
)

// CgroupMemStat splits a memory cgroup's charge by what the kernel can take
// back (memory.stat). A cgroup's usage and peak count the page cache of the
// files its processes wrote (a checkpoint stays cached after it is saved),
// and the kernel reclaims that cache before it OOM-kills anything: the risk
// of an OOM kill is the part that cannot be reclaimed.
type CgroupMemStat struct {
	// Known is false when memory.stat could not be read.
	Known bool
	// AnonBytes is anonymous memory: heaps, tensors (v2 anon; v1 total_rss).
	AnonBytes int64
	// FileBytes is the page cache (v2 file; v1 total_cache), shmem
	// included.
	FileBytes int64
	// ShmemBytes is the swap-backed part of FileBytes (tmpfs, /dev/shm,
	// shared anonymous mappings): cache that is not dropped, only swapped.
	ShmemBytes int64
	// KernelBytes is kernel memory that is not reclaimed (v2
	// slab_unreclaimable, kernel_stack, pagetables, sock; v1 reports none).
	KernelBytes int64
}

// UnreclaimableBytes is what the kernel cannot drop to stay under the limit
// (without swap): anonymous memory, shmem and unreclaimable kernel memory.
func (m CgroupMemStat) UnreclaimableBytes() int64 {
	return m.AnonBytes + m.ShmemBytes + m.KernelBytes
}

// ParseMemoryStat parses a cgroup's memory.stat: v2 names when v2, else v1's
// (hierarchical total_* preferred over the cgroup's own). Unknown keys are
// ignored; a known key with a bad value is an error.
func ParseMemoryStat(b []byte, v2 bool) (CgroupMemStat, error) {
	vals := map[string]int64{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok {
			continue
		}
		key := string(k)
		if !memStatKeys[key] {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil || n < 0 {
			return CgroupMemStat{}, fmt.Errorf("memory.stat: %s: bad value %q", key, truncateBytes(v, 32))
		}
		vals[key] = n
	}
	if len(vals) == 0 {
		return CgroupMemStat{}, fmt.Errorf("memory.stat: none of anon, file, rss, cache found")
	}
	out := CgroupMemStat{Known: true}
	if v2 {
		out.AnonBytes, out.FileBytes, out.ShmemBytes = vals["anon"], vals["file"], vals["shmem"]
		out.KernelBytes = vals["slab_unreclaimable"] + vals["kernel_stack"] + vals["pagetables"] + vals["sock"]
		return out, nil
	}
	pick := func(name string) int64 {
		if v, ok := vals["total_"+name]; ok {
			return v
		}
		return vals[name]
	}
	out.AnonBytes, out.FileBytes, out.ShmemBytes = pick("rss"), pick("cache"), pick("shmem")
	return out, nil
}

// memStatKeys are the memory.stat keys ParseMemoryStat reads (v1 and v2).
var memStatKeys = map[string]bool{
	"anon": true, "file": true, "shmem": true, "slab_unreclaimable": true, "kernel_stack": true, "pagetables": true, "sock": true,
	"rss": true, "cache": true, "total_rss": true, "total_cache": true, "total_shmem": true,
}
