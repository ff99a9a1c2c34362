package cli

import (
	"crypto/rand"
	"io"
	"os"
)

func cryptoRandom(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux (getrandom)
	return b
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
