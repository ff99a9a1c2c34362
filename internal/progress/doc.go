// Package progress turns what a training loop says about itself into Events:
// lines of a small versioned progress file the loop appends to, and
// iteration lines recognised in its stdout/stderr.
//
// # Progress-file line format (version 1)
//
// The training loop appends one line per event to the file named by the
// environment variable ISCHED_PROGRESS_FILE (scripts/isched.py does this; any
// language can). A line is ASCII fields separated by spaces or tabs and ends
// with "\n"; it is at most MaxLineLen bytes without the newline. The first
// field is the format version, "isched1". A later incompatible format will use
// "isched2" and is rejected by this version rather than misread.
//
//	isched1 step=<int> [epoch=<int>] [samples=<int>] [loss=<float>] [t=<float>] [total=<int>] [epochs=<int>] [steps_per_epoch=<int>]
//	isched1 ckpt path=<escaped path> [step=<int>] [epoch=<int>] [t=<float>]
//	isched1 resume step=<int> [path=<escaped path>] [epoch=<int>] [t=<float>]
//
// A step line has no kind word; ckpt and resume lines name their kind in the
// second field. Keys may come in any order, each at most once.
//
//   - step: completed optimizer steps (global, monotonic within a run), >= 0.
//   - epoch: 0-based index of the epoch in progress, >= 0.
//   - samples: samples processed so far, >= 0.
//   - loss: a decimal float, or nan / inf / -inf (any case). A non-finite loss
//     is kept only as Event.NonFinite: the value itself is not carried.
//   - t: the loop's own clock, Unix seconds as a decimal float, > 0
//     (Python's time.time()). It lets iteration times be measured without the
//     polling delay of the reader.
//   - total: total steps the run will take, > 0.
//   - epochs: total epochs the run will take, > 0.
//   - steps_per_epoch: > 0.
//   - path: the checkpoint file, percent-escaped (%XX, RFC 3986): every byte
//     other than A-Z a-z 0-9 - . _ ~ / should be escaped, as Python's
//     urllib.parse.quote(path, safe="/") does; a decoded path may not contain
//     NUL. Relative paths are relative to the training process's working
//     directory (scripts/isched.py always writes absolute paths).
//
// Integers are unsigned decimal digits (no sign). Parsing is strict: an unknown
// key, a repeated key, a key not allowed for the kind or a malformed value is
// an error naming the key (see ParseError), so a typo in a hand-written loop is
// reported instead of silently ignored.
//
// Absent values: Step and Epoch are NoValue (-1) when absent, since 0 is a
// meaningful value for both; Samples, Total, Epochs, StepsPerEpoch and
// LoopTime are 0 when absent.
//
// # Following the file
//
// Tail polls the file (every 200 ms by default), copes with it not existing
// yet, being truncated or replaced, and refuses anything but a regular file
// owned by the user. Each poll's events are delivered together with the time
// they were read.
//
// # Stdout patterns
//
// A Matcher recognises iteration lines in the child's output: a user regexp
// with named groups or a preset (tqdm, hf, lightning, keras, isched). See
// NewMatcher.
//
// # Iteration times
//
// IterClock turns batches of step events into per-step durations, measured by
// the wrapper (arrival times) and, when lines carry t=, by the loop itself.
package progress
