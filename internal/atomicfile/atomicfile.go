// Package atomicfile replaces files whole: a reader finds the old file or
// the complete new one, never a part, and a link planted at the path or at
// the temporary name is never followed.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Write replaces path with what write writes. It writes a new temporary
// file beside path (path.<random>.tmp, created O_EXCL|O_NOFOLLOW with perm:
// never an existing file, nor one a planted link points to) and renames it
// over path, which replaces path itself, never what a link at path names.
// On any error the temporary file is removed and path is untouched.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	var b [8]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return fmt.Errorf("atomic write of %s: %w", path, err)
	}
	tmp := path + "." + hex.EncodeToString(b[:]) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// WriteFile replaces path with b, as Write does.
func WriteFile(path string, b []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
