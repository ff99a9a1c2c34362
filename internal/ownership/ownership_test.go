package ownership

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Holder walks up past missing (or unreadable) parents to the nearest
// existing directory; it follows links (Stat), as the kernel will.
func TestHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(sub, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(sub, "ckpt"), sub},
		{filepath.Join(sub, "a", "b", "ckpt"), sub},
		{filepath.Join(link, "a", "ckpt"), link},
		{sub, dir},
		{filepath.Join(file, "ckpt"), sub}, // nothing can be made under a file
		{"/", ""},
	} {
		got, fi, err := Holder(tt.path, os.Stat)
		if got != tt.want || (tt.want != "") != (err == nil) || (err == nil && !fi.IsDir()) {
			t.Errorf("Holder(%s) = %q, %v, %v; want %q", tt.path, got, fi, err, tt.want)
		}
	}
	denied := func(p string) (fs.FileInfo, error) {
		if p == sub {
			return nil, fs.ErrPermission
		}
		return os.Stat(p)
	}
	if got, _, err := Holder(filepath.Join(sub, "ckpt"), denied); got != dir || err != nil {
		t.Errorf("past an unreadable parent: %q %v, want %s", got, err, dir)
	}
}

type owned int

func (o owned) Name() string       { return "f" }
func (o owned) Size() int64        { return 0 }
func (o owned) Mode() fs.FileMode  { return fs.ModeDir | 0o755 }
func (o owned) ModTime() time.Time { return time.Time{} }
func (o owned) IsDir() bool        { return true }
func (o owned) Sys() any {
	if o < 0 {
		return nil
	}
	return &syscall.Stat_t{Uid: uint32(o)}
}

func TestForeign(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		owner owned
		want  bool
	}{{1001, false}, {0, false}, {4242, true}, {-1, false}} {
		if _, got := Foreign(tt.owner, 1001); got != tt.want {
			t.Errorf("owner %d for uid 1001: foreign %v, want %v", tt.owner, got, tt.want)
		}
	}
}
