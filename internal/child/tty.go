package child

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// foregroundTTY returns stdin's file when it is the wrapper's controlling
// terminal and the wrapper's group is its foreground group, nil otherwise.
//
// TIOCGPGRP answers both questions at once: it fails with ENOTTY unless the
// descriptor is the caller's controlling terminal. A terminal that is not
// ours, or one where the wrapper runs as a background job, is left alone:
// taking the foreground from someone else's job would be worse than the
// SIGTTIN it saves.
func foregroundTTY(stdin io.Reader) *os.File {
	f, ok := stdin.(*os.File)
	if !ok || f == nil {
		return nil
	}
	fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	if err != nil || fg != unix.Getpgrp() {
		return nil
	}
	return f
}

// restoreForeground makes the wrapper's group the terminal's foreground group
// again, so that the wrapper (and the shell behind srun --pty after it) can
// use the terminal once the child is gone.
//
// The wrapper is a background group at this point, and tcsetpgrp from a
// background group raises SIGTTOU, which stops the wrapper unless the signal
// is ignored; shells ignore it for the same reason. Ignore followed by Reset
// brings back the disposition the wrapper started with (Go remembers it), but
// would also drop a signal.Notify for SIGTTOU; the wrapper has none.
//
// While the child owns the terminal the wrapper does not read from it. Its
// own writes to it (stderr logs) are allowed as long as the terminal's TOSTOP
// flag is off, the default; with TOSTOP on they would stop the wrapper.
func restoreForeground(tty *os.File) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(int(tty.Fd()), unix.TIOCSPGRP, unix.Getpgrp())
}
