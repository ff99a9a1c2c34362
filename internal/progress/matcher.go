package progress

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// MaxPatternLine bounds a line of the child's output kept for matching;
// longer lines (a dumped tensor, a base64 blob) are discarded and counted.
const MaxPatternLine = 64 << 10

// Presets are the names NewMatcher accepts besides a regexp.
var Presets = []string{"tqdm", "hf", "lightning", "keras", "isched"}

// Group names a user regexp may use.
var patternGroups = map[string]bool{"step": true, "epoch": true, "loss": true, "total": true, "samples": true}

// MatcherStats are counters of a Matcher.
type MatcherStats struct {
	Lines    uint64 // non-empty lines seen
	Matched  uint64 // lines that produced an event
	Rejected uint64 // lines that looked like iteration lines but did not parse
	TooLong  uint64 // lines over MaxPatternLine, discarded
	LastErr  string // why the last rejected line was rejected
}

type rule func(m *Matcher, line string) (Event, bool, error)

// Matcher recognises iteration lines in a stream of output. It is not safe
// for concurrent use: give stdout and stderr one Matcher each.
type Matcher struct {
	rules      []rule
	custom     *regexp.Regexp
	buf        []byte
	discarding bool
	stats      MatcherStats

	hfLogs      int64 // hf: loss lines seen so far
	kerasEpoch  int   // keras: 1-based epoch from the last "Epoch N/M" line, 0 before
	kerasEpochs int
}

// NewMatcher compiles spec, which is either
//
//   - a preset name, or several separated by commas ("hf,tqdm"); the first
//     preset that recognises a line wins:
//   - tqdm: " 45%|████▌     | 450/1000 [00:12<00:15, 36.2it/s]" gives step 450
//     of total 1000 (also "450it [00:12, 36.2it/s]" without a total and a
//     "loss=" postfix). tqdm bars are often per epoch: the step then restarts,
//     which IterClock treats as a reset.
//   - hf: Hugging Face Trainer log dicts "{'loss': 0.41, ..., 'epoch': 0.27}".
//     They carry no step: Step counts the loss lines (1, 2, ...), so a "step"
//     is one logging interval (logging_steps optimizer steps); Epoch is the
//     integer part of 'epoch'.
//   - lightning: "Epoch 3:  45%|████▌     | 450/1000 [...]" (and the rich bar
//     "Epoch 3/9 ━━━━ 450/1000 ..."). Step is the global step
//     epoch*steps_per_epoch + batch, StepsPerEpoch the bar's total.
//   - keras: "Epoch 3/10" followed by "450/1000 [====>....] - ETA ... - loss: 0.12"
//     (Keras 2) or "450/1000 ━━━━ 3s 2ms/step - loss: 0.12" (Keras 3). Keras
//     epochs are 1-based on screen and 0-based in the Event; Step is global as
//     for lightning.
//   - isched: a progress-file line (see the package doc) printed to the
//     output, starting the line or after a space, ':' or ']' (log prefixes).
//   - otherwise a Go regexp with the named group "step" and optionally
//     "epoch" (integer or float, floored), "loss", "total" and "samples".
//     Other named groups are an error, to catch typos.
//
// Before matching, ANSI escape sequences and control characters other than
// tab are removed from each line.
func NewMatcher(spec string) (*Matcher, error) {
	if spec == "" {
		return nil, errors.New("progress: empty iteration pattern")
	}
	m := &Matcher{}
	var rules []rule
	for name := range strings.SplitSeq(spec, ",") {
		r := presetRule(strings.TrimSpace(name))
		if r == nil {
			rules = nil
			break
		}
		rules = append(rules, r)
	}
	if rules != nil {
		m.rules = rules
		return m, nil
	}
	re, err := regexp.Compile(spec)
	if err != nil {
		return nil, fmt.Errorf("progress: iteration pattern is neither a preset (%s) nor a valid regexp: %w",
			strings.Join(Presets, ", "), err)
	}
	hasStep := false
	for _, name := range re.SubexpNames() {
		if name == "" {
			continue
		}
		if !patternGroups[name] {
			return nil, fmt.Errorf("progress: iteration pattern: unknown group name %q (want step, epoch, loss, total, samples)", name)
		}
		hasStep = hasStep || name == "step"
	}
	if !hasStep {
		return nil, errors.New(`progress: iteration pattern: no (?P<step>...) group`)
	}
	m.custom = re
	m.rules = []rule{(*Matcher).matchCustom}
	return m, nil
}

func presetRule(name string) rule {
	switch name {
	case "tqdm":
		return (*Matcher).matchTqdm
	case "hf":
		return (*Matcher).matchHF
	case "lightning":
		return (*Matcher).matchLightning
	case "keras":
		return (*Matcher).matchKeras
	case "isched":
		return (*Matcher).matchIsched
	}
	return nil
}

// Feed consumes a chunk of output, split anywhere, and returns the events of
// the lines it completed, all with At set to at. Lines end at "\n" or "\r"
// (tqdm redraws with "\r"); the unterminated rest is kept for the next call.
func (m *Matcher) Feed(chunk []byte, at time.Time) []Event {
	var out []Event
	for len(chunk) > 0 {
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			if !m.discarding {
				if len(m.buf)+len(chunk) > MaxPatternLine {
					m.stats.TooLong++
					m.discarding = true
					m.buf = m.buf[:0]
				} else {
					m.buf = append(m.buf, chunk...)
				}
			}
			break
		}
		seg := chunk[:i]
		chunk = chunk[i+1:]
		if m.discarding {
			m.discarding = false
			continue
		}
		line := seg
		if len(m.buf) > 0 {
			if len(m.buf)+len(seg) > MaxPatternLine {
				m.stats.TooLong++
				m.buf = m.buf[:0]
				continue
			}
			m.buf = append(m.buf, seg...)
			line = m.buf
		}
		m.line(line, at, &out)
		m.buf = m.buf[:0]
	}
	return out
}

func (m *Matcher) line(raw []byte, at time.Time, out *[]Event) {
	if len(raw) > MaxPatternLine {
		m.stats.TooLong++
		return
	}
	line := cleanLine(raw)
	if strings.TrimSpace(line) == "" {
		return
	}
	m.stats.Lines++
	for _, r := range m.rules {
		ev, ok, err := r(m, line)
		if err != nil {
			m.stats.Rejected++
			m.stats.LastErr = err.Error()
			return
		}
		if ok {
			m.stats.Matched++
			ev.At = at
			ev.Source = SourcePattern
			*out = append(*out, ev)
			return
		}
	}
}

// cleanLine drops ANSI escape sequences (CSI "ESC [ ... final" and two-byte
// "ESC x") and C0 controls other than tab, and returns the rest as a string.
func cleanLine(b []byte) string {
	clean := true
	for _, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == 0x1b {
			if i+1 < len(b) && b[i+1] == '[' {
				j := i + 2
				for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
					j++
				}
				i = j // skip the final byte too
			} else {
				i++
			}
			continue
		}
		if c < 0x20 && c != '\t' || c == 0x7f {
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

func newPatternEvent() Event {
	return Event{Kind: KindStep, Step: NoValue, Epoch: NoValue}
}

func setLoss(ev *Event, s string) error {
	f, ok := parseFloat([]byte(s))
	if !ok {
		return fmt.Errorf("loss: not a float: %q", truncate(s))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		ev.NonFinite = true
		return nil
	}
	ev.Loss = &f
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func atoi(s string) (int64, bool) { return parseUint([]byte(s)) }

// parseEpoch accepts "3" and "0.27" (floored).
func parseEpoch(s string) (int, bool) {
	if n, ok := atoi(s); ok && n <= math.MaxInt32 {
		return int(n), true
	}
	f, ok := parseFloat([]byte(s))
	if !ok || math.IsNaN(f) || f < 0 || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

func (m *Matcher) matchCustom(line string) (Event, bool, error) {
	idx := m.custom.FindStringSubmatchIndex(line)
	if idx == nil {
		return Event{}, false, nil
	}
	ev := newPatternEvent()
	for g, name := range m.custom.SubexpNames() {
		if name == "" || idx[2*g] < 0 {
			continue
		}
		v := line[idx[2*g]:idx[2*g+1]]
		var ok = true
		switch name {
		case "step":
			ev.Step, ok = atoi(v)
		case "samples":
			ev.Samples, ok = atoi(v)
		case "total":
			ev.Total, ok = atoi(v)
		case "epoch":
			ev.Epoch, ok = parseEpoch(v)
		case "loss":
			if err := setLoss(&ev, v); err != nil {
				return Event{}, false, err
			}
		}
		if !ok {
			return Event{}, false, fmt.Errorf("group %s: not a number: %q", name, truncate(v))
		}
	}
	if ev.Step < 0 {
		return Event{}, false, errors.New("group step did not match")
	}
	return ev, true, nil
}

// lossRe finds a loss in a tqdm/lightning postfix ("loss=0.12",
// "train_loss_step=0.12") or a rich bar ("train_loss: 0.12").
var lossRe = regexp.MustCompile(`(?:^|[\s,\[])(?:train_)?loss(?:_step)?(?:=|: )\s*([-+0-9.eE]+|[-+]?(?i:nan|inf))`)

func findLoss(ev *Event, s string) error {
	if sm := lossRe.FindStringSubmatch(s); sm != nil {
		return setLoss(ev, sm[1])
	}
	return nil
}

var (
	tqdmBarRe     = regexp.MustCompile(`(\d+)%\|[^|]*\|\s*(\d+)/(\d+|\?)\s*(\[.*)?$`)
	tqdmNoTotalRe = regexp.MustCompile(`(?:^\s*|:\s*)(\d+)[A-Za-z]*\s\[\d+:\d\d(?::\d\d)?,\s*([^\]]*)\]`)
)

func (m *Matcher) matchTqdm(line string) (Event, bool, error) {
	ev := newPatternEvent()
	if sm := tqdmBarRe.FindStringSubmatch(line); sm != nil {
		n, ok := atoi(sm[2])
		if !ok {
			return Event{}, false, fmt.Errorf("tqdm: step not a number: %q", truncate(sm[2]))
		}
		ev.Step = n
		if sm[3] != "?" {
			if ev.Total, ok = atoi(sm[3]); !ok {
				return Event{}, false, fmt.Errorf("tqdm: total not a number: %q", truncate(sm[3]))
			}
		}
		return ev, true, findLoss(&ev, sm[4])
	}
	if sm := tqdmNoTotalRe.FindStringSubmatch(line); sm != nil {
		n, ok := atoi(sm[1])
		if !ok {
			return Event{}, false, fmt.Errorf("tqdm: step not a number: %q", truncate(sm[1]))
		}
		ev.Step = n
		return ev, true, findLoss(&ev, sm[2])
	}
	return Event{}, false, nil
}

var (
	hfLineRe = regexp.MustCompile(`^\s*\{.*\}\s*$`)
	hfPairRe = regexp.MustCompile(`'([A-Za-z0-9_]+)':\s*'?([^,'}]*?)'?\s*(?:,|\}$)`)
)

func (m *Matcher) matchHF(line string) (Event, bool, error) {
	if !hfLineRe.MatchString(line) || !strings.Contains(line, "'loss'") {
		return Event{}, false, nil
	}
	var loss, epoch string
	var haveLoss, haveEpoch bool
	for _, sm := range hfPairRe.FindAllStringSubmatch(strings.TrimSpace(line), -1) {
		switch sm[1] {
		case "loss":
			loss, haveLoss = strings.TrimSpace(sm[2]), true
		case "epoch":
			epoch, haveEpoch = strings.TrimSpace(sm[2]), true
		}
	}
	if !haveLoss || !haveEpoch {
		// An eval or summary dict, or a user's own dict.
		return Event{}, false, nil
	}
	ev := newPatternEvent()
	if err := setLoss(&ev, loss); err != nil {
		return Event{}, false, fmt.Errorf("hf: %w", err)
	}
	e, ok := parseEpoch(epoch)
	if !ok {
		return Event{}, false, fmt.Errorf("hf: epoch not a number: %q", truncate(epoch))
	}
	ev.Epoch = e
	m.hfLogs++
	ev.Step = m.hfLogs
	return ev, true, nil
}

var (
	lightningBarRe  = regexp.MustCompile(`^\s*Epoch (\d+):\s*(?:\d+%)?\|[^|]*\|\s*(\d+)/(\d+|\?)\s*(\[.*)?$`)
	lightningRichRe = regexp.MustCompile(`^\s*Epoch (\d+)/(\d+)\s+\S+\s+(\d+)/(\d+)\b(.*)$`)
)

func (m *Matcher) matchLightning(line string) (Event, bool, error) {
	ev := newPatternEvent()
	var epoch, batch, perEpoch, rest string
	maxEpoch := ""
	if sm := lightningBarRe.FindStringSubmatch(line); sm != nil {
		epoch, batch, perEpoch, rest = sm[1], sm[2], sm[3], sm[4]
	} else if sm := lightningRichRe.FindStringSubmatch(line); sm != nil {
		epoch, maxEpoch, batch, perEpoch, rest = sm[1], sm[2], sm[3], sm[4], sm[5]
	} else {
		return Event{}, false, nil
	}
	e, ok1 := atoi(epoch)
	i, ok2 := atoi(batch)
	if !ok1 || !ok2 || e > math.MaxInt32 {
		return Event{}, false, fmt.Errorf("lightning: bad epoch or batch in %q", truncate(line))
	}
	ev.Epoch = int(e)
	ev.Step = i
	if n, ok := atoi(perEpoch); ok && n > 0 {
		ev.StepsPerEpoch = n
		ev.Step = globalStep(e, n, i)
		// The rich bar shows max_epochs-1 as the last epoch.
		if me, ok := atoi(maxEpoch); ok && me < math.MaxInt32 {
			ev.Epochs = int(me) + 1
			ev.Total = mulSat(int64(ev.Epochs), n)
		}
	}
	return ev, true, findLoss(&ev, rest)
}

var (
	kerasEpochRe = regexp.MustCompile(`^\s*Epoch (\d+)/(\d+)\s*$`)
	kerasStepRe  = regexp.MustCompile(`^\s*(\d+)/(\d+)\s+(?:\[[=>.]*\]|━+|-\s)(.*)$`)
	kerasLossRe  = regexp.MustCompile(`(?:^|\s)loss: ([-+0-9.eE]+|[-+]?(?i:nan|inf))`)
)

func (m *Matcher) matchKeras(line string) (Event, bool, error) {
	if sm := kerasEpochRe.FindStringSubmatch(line); sm != nil {
		e, ok1 := atoi(sm[1])
		n, ok2 := atoi(sm[2])
		if !ok1 || !ok2 || e < 1 || e > math.MaxInt32 || n > math.MaxInt32 {
			return Event{}, false, fmt.Errorf("keras: bad epoch line %q", truncate(line))
		}
		m.kerasEpoch, m.kerasEpochs = int(e), int(n)
		// Not an iteration, but the line is understood.
		return Event{}, false, nil
	}
	sm := kerasStepRe.FindStringSubmatch(line)
	if sm == nil {
		return Event{}, false, nil
	}
	i, ok1 := atoi(sm[1])
	n, ok2 := atoi(sm[2])
	if !ok1 || !ok2 {
		return Event{}, false, fmt.Errorf("keras: bad step in %q", truncate(line))
	}
	ev := newPatternEvent()
	ev.Step = i
	if n > 0 {
		ev.StepsPerEpoch = n
	}
	if m.kerasEpoch > 0 {
		ev.Epoch = m.kerasEpoch - 1
		ev.Epochs = m.kerasEpochs
		if n > 0 {
			ev.Step = globalStep(int64(ev.Epoch), n, i)
			ev.Total = mulSat(int64(ev.Epochs), n)
		}
	}
	if lm := kerasLossRe.FindStringSubmatch(sm[3]); lm != nil {
		if err := setLoss(&ev, lm[1]); err != nil {
			return Event{}, false, fmt.Errorf("keras: %w", err)
		}
	}
	return ev, true, nil
}

func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func globalStep(epoch, perEpoch, i int64) int64 {
	s := mulSat(epoch, perEpoch)
	if s > math.MaxInt64-i {
		return math.MaxInt64
	}
	return s + i
}

func (m *Matcher) matchIsched(line string) (Event, bool, error) {
	start := -1
	for off := 0; ; {
		i := strings.Index(line[off:], "isched")
		if i < 0 {
			break
		}
		i += off
		if i == 0 || strings.IndexByte(" \t:]", line[i-1]) >= 0 {
			end := strings.IndexAny(line[i:], " \t")
			if end < 0 {
				end = len(line) - i
			}
			if isVersionField([]byte(line[i : i+end])) {
				start = i
				break
			}
		}
		off = i + len("isched")
	}
	if start < 0 {
		return Event{}, false, nil
	}
	ev, err := ParseLine([]byte(line[start:]))
	if err != nil {
		return Event{}, false, err
	}
	return ev, true, nil
}
