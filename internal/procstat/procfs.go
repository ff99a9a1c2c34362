package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"syscall"
)

// userHZ is the unit of the tick fields of /proc/<pid>/stat. It is part of
// the Linux user ABI and is 100 on every architecture Go supports (it is what
// sysconf(_SC_CLK_TCK) returns there, and what gopsutil's go-sysconf returns
// without a syscall).
const userHZ = 100

// reader reads small procfs and cgroupfs files into one reused buffer.
// It uses the syscall package directly rather than os.Open: an *os.File costs
// an allocation, a finalizer and a failed attempt to register the fd with the
// netpoller, three times per process per sample.
type reader struct {
	buf []byte
}

// read returns the content of path. The slice is valid until the next call.
func (r *reader) read(path string) ([]byte, error) {
	if r.buf == nil {
		r.buf = make([]byte, 4096)
	}
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for {
		if n == len(r.buf) {
			if len(r.buf) >= maxFileSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
			}
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := syscall.Read(fd, r.buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return r.buf[:n], nil
		}
		n += m
	}
}

// maxFileSize bounds one read; mountinfo on a host with many mounts is the
// largest file read here.
const maxFileSize = 16 << 20

// vanished reports whether err means the process went away while it was read:
// its directory is gone (ENOENT), or the task exited between open and read
// (ESRCH). Neither is a sampling error.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// errVanished is returned by parsers for an empty file: procfs returns no bytes
// for some files of a task that exited after open.
var errVanished = fmt.Errorf("process vanished: %w", fs.ErrNotExist)

// procStat is what one read of /proc/<pid>/stat gives.
type procStat struct {
	state     byte
	ppid      int32
	cpuTicks  uint64 // utime + stime, in userHZ ticks
	startTime uint64 // ticks after boot; identifies the process together with the PID
}

// parseStat parses /proc/<pid>/stat (proc(5)). The command name is field 2, in
// parentheses, and may contain spaces and parentheses itself, so fields are
// counted after the last ')'.
func parseStat(b []byte) (procStat, error) {
	var ps procStat
	if len(b) == 0 {
		return ps, errVanished
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ps, errors.New("stat: no ')'")
	}
	rest := b[i+1:]
	// Field numbers as in proc(5): 3 state, 4 ppid, 14 utime, 15 stime, 22 starttime.
	var utime, stime uint64
	field := 3
	for len(rest) > 0 && field <= 22 {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		tok := rest[:j]
		rest = rest[j:]
		if len(tok) == 0 {
			break
		}
		var err error
		switch field {
		case 3:
			ps.state = tok[0]
		case 4:
			var v uint64
			v, err = parseUint(tok)
			ps.ppid = int32(v)
		case 14:
			utime, err = parseUint(tok)
		case 15:
			stime, err = parseUint(tok)
		case 22:
			ps.startTime, err = parseUint(tok)
		}
		if err != nil {
			return ps, fmt.Errorf("stat field %d: %w", field, err)
		}
		field++
	}
	if field <= 22 {
		return ps, fmt.Errorf("stat: %d fields, want at least 22", field-1)
	}
	ps.cpuTicks = utime + stime
	return ps, nil
}

// procStatus is what the sampler takes from /proc/<pid>/status.
type procStatus struct {
	rss int64 // VmRSS, bytes
	hwm int64 // VmHWM: the process's own peak RSS since exec, bytes
}

// parseStatus parses /proc/<pid>/status. Zombies and kernel threads have no
// Vm* lines; they give zeros.
func parseStatus(b []byte) (procStatus, error) {
	var st procStatus
	if len(b) == 0 {
		return st, errVanished
	}
	for len(b) > 0 {
		line := b
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			line, b = b[:j], b[j+1:]
		} else {
			b = nil
		}
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &st.rss
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &st.hwm
		default:
			continue
		}
		v, err := parseKB(line[6:])
		if err != nil {
			return st, fmt.Errorf("status %q: %w", line, err)
		}
		*dst = v
	}
	return st, nil
}

// parsePSS returns the Pss line of /proc/<pid>/smaps_rollup, in bytes.
func parsePSS(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errVanished
	}
	for len(b) > 0 {
		line := b
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			line, b = b[:j], b[j+1:]
		} else {
			b = nil
		}
		if bytes.HasPrefix(line, []byte("Pss:")) {
			return parseKB(line[4:])
		}
	}
	return 0, errors.New("smaps_rollup: no Pss line")
}

// parseKB parses "   1664 kB" into bytes.
func parseKB(b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	b = bytes.TrimSuffix(b, []byte("kB"))
	v, err := parseUint(bytes.TrimSpace(b))
	if err != nil {
		return 0, err
	}
	return int64(v) * 1024, nil
}

// parseUptime parses /proc/uptime ("12345.67 54321.00") into userHZ ticks,
// the unit of a process's starttime.
func parseUptime(b []byte) (uint64, error) {
	if j := bytes.IndexAny(b, " \n"); j >= 0 {
		b = b[:j]
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("uptime %q: bad value", b)
	}
	return uint64(f * userHZ), nil
}

// parsePIDList appends the PIDs of a /proc/<pid>/task/<tid>/children file
// ("12 13 14 ") to dst.
func parsePIDList(dst []int32, b []byte) ([]int32, error) {
	for len(b) > 0 {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\n') {
			b = b[1:]
		}
		j := bytes.IndexAny(b, " \n")
		if j < 0 {
			j = len(b)
		}
		if j == 0 {
			break
		}
		v, err := parseUint(b[:j])
		if err != nil || v == 0 || v > 1<<22 {
			return dst, fmt.Errorf("children: bad pid %q", b[:j])
		}
		dst = append(dst, int32(v))
		b = b[j:]
	}
	return dst, nil
}

// parseUint parses a decimal without allocating.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("bad number %q", b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number %q", b)
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("number %q overflows", b)
		}
		v = v*10 + d
	}
	return v, nil
}
