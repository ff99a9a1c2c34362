package ckpt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// MaxTreeEntries bounds the entries of a directory checkpoint ReadTree
// reads: a checkpoint is tens of files (shards), not a data set.
const MaxTreeEntries = 100_000

// Tree is the state of a directory checkpoint (Hugging Face's
// checkpoint-<step>/, a torch.distributed.checkpoint directory, DeepSpeed's
// global_step<N>/) at one moment.
type Tree struct {
	Files int       // regular files
	Size  int64     // their bytes
	MTime time.Time // the newest modification time of any entry
	// Digest is a SHA-256 of every entry's relative name, type, size,
	// modification time (ns) and, for a link, its target: any file added,
	// removed, written or replaced changes it.
	Digest string
	Owners []int // the uids owning the directory and its entries, sorted
	// OthersWritable names the first entry a user other than its owner
	// and group may write ("" if none).
	OthersWritable string
}

// ReadTree reads the directory dir (not following links) into a Tree.
func ReadTree(dir string) (Tree, error) {
	var t Tree
	h := sha256.New()
	owners := map[int]bool{}
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > MaxTreeEntries {
			return fmt.Errorf("more than %d entries", MaxTreeEntries)
		}
		fi, err := d.Info() // Lstat
		if err != nil {
			return err
		}
		if p == dir && !fi.IsDir() {
			return fmt.Errorf("%s: not a directory", dir)
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + "\x00" + fi.Mode().Type().String() + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" +
			strconv.FormatInt(fi.ModTime().UnixNano(), 10)
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += "\x00" + target
		}
		h.Write([]byte(line + "\n"))
		if fi.Mode().IsRegular() {
			t.Files++
			t.Size += fi.Size()
		}
		if fi.ModTime().After(t.MTime) {
			t.MTime = fi.ModTime()
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owners[int(st.Uid)] = true
		}
		if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o002 != 0 && t.OthersWritable == "" {
			t.OthersWritable = rel
		}
		return nil
	})
	if err != nil {
		return Tree{}, err
	}
	for u := range owners {
		t.Owners = append(t.Owners, u)
	}
	slices.Sort(t.Owners)
	t.Digest = hex.EncodeToString(h.Sum(nil))
	return t, nil
}

// Directory checkpoint layouts and the file each writes last.
const (
	LayoutHF        = "huggingface"       // checkpoint-<step>/, trainer_state.json last
	LayoutDCP       = "torch-distributed" // *.distcp shards, .metadata last
	LayoutDeepSpeed = "deepspeed"         // global_step<N>/, then the parent's "latest" names it
	LayoutUnknown   = "unknown"           // complete when the whole tree stays unchanged
)

// DeepSpeedLatest is the file DeepSpeed writes beside its tag directories,
// naming the newest complete one. It is a marker, never a checkpoint.
const DeepSpeedLatest = "latest"

// dirLayout says which layout the directory name (under parent) has, and
// whether its marker is there (complete as far as the layout says).
func dirLayout(parent, name string) (layout string, marked bool) {
	dir := filepath.Join(parent, name)
	nonEmpty := func(p string) bool {
		fi, err := os.Lstat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
	}
	switch {
	case hfRe.MatchString(name):
		return LayoutHF, nonEmpty(filepath.Join(dir, "trainer_state.json"))
	case dsRe.MatchString(name):
		return LayoutDeepSpeed, deepSpeedTag(parent) == name
	}
	if nonEmpty(filepath.Join(dir, ".metadata")) {
		return LayoutDCP, true
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.distcp")); len(m) > 0 {
		return LayoutDCP, false
	}
	return LayoutUnknown, false
}

// deepSpeedTag is the tag the parent's "latest" file names, "" if none.
func deepSpeedTag(parent string) string {
	p := filepath.Join(parent, DeepSpeedLatest)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 256 {
		return ""
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	tag := string(bytes.TrimSpace(b))
	if tag == "" || filepath.Base(tag) != tag {
		return ""
	}
	return tag
}

// isDeepSpeedLatest says whether name in parent is DeepSpeed's tag file:
// "latest", naming an existing sibling directory.
func isDeepSpeedLatest(parent, name string) bool {
	if name != DeepSpeedLatest {
		return false
	}
	tag := deepSpeedTag(parent)
	if tag == "" {
		return false
	}
	fi, err := os.Lstat(filepath.Join(parent, tag))
	return err == nil && fi.IsDir()
}

var (
	hfRe = regexp.MustCompile(`^checkpoint-[0-9]+$`)
	dsRe = regexp.MustCompile(`^global_step[0-9]+$`)
)
