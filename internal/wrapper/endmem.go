package wrapper

import (
	"log/slog"
	"sync"
	"syscall"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/procstat"
	"github.com/isched/isched/internal/report"
)

// MemCgroup reads the memory cgroup of the child, also after the child has
// exited (procstat.MemCgroup).
type MemCgroup interface {
	Read() (procstat.CgroupMemory, error)
}

// OpenMemCgroup resolves the memory cgroup of the child's pid; nil and no
// error when it has none.
type OpenMemCgroup func(pid int32) (MemCgroup, error)

// SystemMemCgroup is the production OpenMemCgroup: /proc and /sys.
func SystemMemCgroup(pid int32) (MemCgroup, error) {
	cg, err := procstat.OpenMemCgroup("/proc", "/sys", pid)
	if cg == nil || err != nil {
		return nil, err // no typed nil in the interface
	}
	return cg, nil
}

// endMemory watches the child's memory cgroup across the child's life: a
// reading when it starts (the OOM-kill counter before it) and one when it
// has ended (the kernel's peak, which includes an allocation made between
// two samples, and the counter after). Without a memory cgroup, or without
// the files, it learns nothing and the wrapper carries on.
type endMemory struct {
	mu     sync.Mutex
	cg     MemCgroup
	before procstat.CgroupMemory
}

// open is called once the child runs.
func (m *endMemory) open(open OpenMemCgroup, pid int32, log *slog.Logger) {
	if open == nil {
		return
	}
	cg, err := open(pid)
	if err != nil {
		log.Info("memory cgroup not found; OOM kills are told from the sampled peak only", "err", err)
	}
	if cg == nil {
		return
	}
	before, err := cg.Read()
	if err != nil {
		log.Info("memory cgroup partly unreadable", "path", before.Path, "err", err)
	}
	m.mu.Lock()
	m.cg, m.before = cg, before
	m.mu.Unlock()
}

// final reads the cgroup after the child has ended; ok is false without a
// cgroup.
func (m *endMemory) final(log *slog.Logger) (before, after procstat.CgroupMemory, ok bool) {
	m.mu.Lock()
	cg, before := m.cg, m.before
	m.mu.Unlock()
	if cg == nil {
		return before, after, false
	}
	after, err := cg.Read()
	if err != nil {
		log.Info("memory cgroup partly unreadable at the end", "path", after.Path, "err", err)
	}
	return before, after, true
}

// memVerdict is what the end report says about memory.
type memVerdict struct {
	reason string
	peak   int64 // the cgroup's peak, bytes; 0 unknown
	limit  int64 // the memory limit, bytes; 0 unknown or unlimited
}

// judgeEnd decides whether the child was OOM-killed and what the cgroup's
// peak and limit were. sampledPeak and sampledLimit are what the periodic
// samples saw of the cgroup while the child lived; risk is the memory that
// could not be reclaimed (memSplit.oomRisk), 0 when unknown.
//
// The kernel's word is the OOM-kill counter: a child that died of SIGKILL
// (not ours) while the counter of its cgroup rose was the OOM killer's
// victim, whatever the last sample saw. Only where the kernel keeps no
// counter (v1 before Linux 4.13) does a peak within 5% of the limit stand in:
// the peak of what could not be reclaimed when memory.stat told it, since the
// cgroup's own peak counts page cache and sits at the limit of any job that
// wrote more than its limit in files.
func judgeEnd(reason string, exit child.Exit, before, after procstat.CgroupMemory, haveCg bool, sampledPeak, sampledLimit, risk int64) memVerdict {
	v := memVerdict{reason: reason, peak: sampledPeak, limit: sampledLimit}
	if haveCg {
		v.peak = max(v.peak, after.PeakBytes)
		if after.LimitBytes > 0 {
			v.limit = after.LimitBytes
		}
	}
	if reason != report.EndSignaled || exit.Signal != syscall.SIGKILL || exit.Escalated {
		return v
	}
	switch {
	case haveCg && before.OOMKillsKnown && after.OOMKillsKnown:
		if after.OOMKills > before.OOMKills {
			v.reason = report.EndOOM
		}
	case v.limit > 0 && risk > 0:
		if risk >= v.limit*95/100 {
			v.reason = report.EndOOM
		}
	case v.limit > 0 && v.peak >= v.limit*95/100:
		v.reason = report.EndOOM
	}
	return v
}
