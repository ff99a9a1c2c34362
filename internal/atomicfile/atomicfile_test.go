package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFile: the file is replaced whole with its mode; a symbolic link
// at the path is replaced, not followed; a failed write leaves the old file
// and no temporary file behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("content %q, want two", b)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
	}

	// a link planted at the path: the victim file it names stays as it was
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "linked.json")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("the link is still a link (%v): it should have been replaced by the file", err)
	}

	// a failing writer: the old file stays, no temporary file is left
	boom := errors.New("boom")
	if err := Write(path, 0o600, func(w io.Writer) error { _, _ = w.Write([]byte("par")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("after a failed write the file reads %q, want two", b)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	// a directory that does not exist: an error naming it, nothing created
	if err := WriteFile(filepath.Join(dir, "no", "such"), nil, 0o600); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}
