package procstat

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/shirou/gopsutil/v4/common"
	"github.com/shirou/gopsutil/v4/process"
)

// member is one process found in the tree. stat is filled when discovery
// already read /proc/<pid>/stat.
type member struct {
	pid      int32
	stat     procStat
	haveStat bool
}

// How descendants are found.
const (
	modeUnknown  = iota
	modeChildren // /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)
	modeScan     // one pass over /proc/*/stat
)

// discovery finds a root's descendants, again on every sample, so DataLoader
// workers that come and go are followed.
//
// With CONFIG_PROC_CHILDREN the kernel lists each thread's children, and a
// sample costs reads proportional to the tree's threads. Without it (some
// distribution and VM kernels), every /proc/<pid>/stat on the node is read once
// per sample to learn parents. Both are far cheaper than gopsutil's
// Process.Children, which scans all of /proc for every process it is asked
// about.
//
// A descendant whose parent exits is reparented to init (or the nearest
// subreaper) and leaves the tree; the wrapper can keep such orphans in the tree
// by making the training process a child subreaper.
type discovery struct {
	procRoot string
	mode     int

	members []member
	inTree  map[int32]bool
	pids    []int32
	all     []member // modeScan: every process on the node
}

// errTooMany reports a tree truncated at MaxProcs.
type errTooMany int

func (e errTooMany) Error() string {
	return fmt.Sprintf("process tree larger than %d processes; truncated", int(e))
}

// walk returns the tree rooted at root, root first. An empty result means the
// root is gone. Errors concern the tree's processes only; vanished processes
// are skipped.
func (d *discovery) walk(ctx context.Context, r *reader, root int32, maxProcs int) ([]member, error) {
	if d.inTree == nil {
		d.inTree = make(map[int32]bool)
	}
	clear(d.inTree)
	d.members = d.members[:0]
	if d.mode == modeUnknown {
		d.probe(r, root)
	}
	switch d.mode {
	case modeChildren:
		return d.walkChildren(ctx, r, root, maxProcs)
	case modeScan:
		return d.walkScan(ctx, r, root, maxProcs)
	}
	return nil, nil // root gone before the mode could be learnt
}

// probe learns once whether the kernel has children files.
func (d *discovery) probe(r *reader, root int32) {
	dir := d.procRoot + "/" + strconv.Itoa(int(root))
	if _, err := r.read(dir + "/task/" + strconv.Itoa(int(root)) + "/children"); err == nil {
		d.mode = modeChildren
		return
	}
	if _, err := r.read(dir + "/stat"); err == nil {
		d.mode = modeScan
	}
}

func (d *discovery) walkChildren(ctx context.Context, r *reader, root int32, maxProcs int) ([]member, error) {
	d.members = append(d.members, member{pid: root})
	d.inTree[root] = true
	var firstErr error
	for i := 0; i < len(d.members); i++ {
		if err := ctx.Err(); err != nil {
			return d.members, err
		}
		pid := d.members[i].pid
		dir := d.procRoot + "/" + strconv.Itoa(int(pid)) + "/task"
		tids, err := readDirNames(dir)
		if err != nil {
			if !vanished(err) && firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, tid := range tids {
			b, err := r.read(dir + "/" + tid + "/children")
			if err != nil {
				// A thread that exited is expected; other failures are not.
				if !vanished(err) && firstErr == nil {
					firstErr = err
				}
				continue
			}
			d.pids, err = parsePIDList(d.pids[:0], b)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			for _, c := range d.pids {
				if d.inTree[c] {
					continue
				}
				if len(d.members) >= maxProcs {
					return d.members, errTooMany(maxProcs)
				}
				d.inTree[c] = true
				d.members = append(d.members, member{pid: c})
			}
		}
	}
	return d.members, firstErr
}

func (d *discovery) walkScan(ctx context.Context, r *reader, root int32, maxProcs int) ([]member, error) {
	// gopsutil lists the PIDs; it honours the proc root given in the context.
	pctx := context.WithValue(ctx, common.EnvKey, common.EnvMap{common.HostProcEnvKey: d.procRoot})
	pids, err := process.PidsWithContext(pctx)
	if err != nil {
		return nil, err
	}
	d.all = d.all[:0]
	rootFound := false
	for i, pid := range pids {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		b, err := r.read(d.procRoot + "/" + strconv.Itoa(int(pid)) + "/stat")
		if err != nil {
			// Unrelated processes may vanish or be unreadable; only the
			// root's own stat matters, and it is read again below if missing.
			continue
		}
		ps, err := parseStat(b)
		if err != nil {
			continue
		}
		d.all = append(d.all, member{pid: pid, stat: ps, haveStat: true})
		if pid == root {
			d.members = append(d.members, d.all[len(d.all)-1])
			d.inTree[root] = true
			rootFound = true
		}
	}
	if !rootFound {
		return nil, nil
	}
	// PIDs are mostly allocated in increasing order, so children usually come
	// after their parent and one pass finds the tree; a second pass confirms.
	// Wrapped PIDs only cost more passes.
	for changed := true; changed; {
		changed = false
		for _, m := range d.all {
			if d.inTree[m.pid] || !d.inTree[m.stat.ppid] {
				continue
			}
			if len(d.members) >= maxProcs {
				return d.members, errTooMany(maxProcs)
			}
			d.inTree[m.pid] = true
			d.members = append(d.members, m)
			changed = true
		}
	}
	return d.members, nil
}

// readDirNames lists a directory. os.File.Readdirnames allocates a string per
// name; a task directory is small.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
