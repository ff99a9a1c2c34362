package progress

import (
	"time"
)

// Measure says whose clock measured an Iter.
type Measure string

const (
	// ByWrapper: arrival times of batches. Includes the reader's polling
	// delay and any output buffering of the child, so only averages over
	// batches are meaningful.
	ByWrapper Measure = "wrapper"
	// ByLoop: the t= values of consecutive lines; exact as the loop's clock.
	ByLoop Measure = "loop"
)

// Iter is a measured iteration time.
type Iter struct {
	Step    int64         // step reached at the end of the interval
	Steps   int64         // steps the interval covers, >= 1
	PerStep time.Duration // interval duration / Steps
	By      Measure
	At      time.Time // arrival time of the event closing the interval
	// AfterCkpt is set when a ckpt event arrived inside the interval: it then
	// includes checkpoint writing and is not a plain iteration time.
	AfterCkpt bool
}

// IterClock turns step events into iteration durations. Give it the events
// of one source (a Tail, or one Matcher) in arrival order, one batch per
// call, where a batch is everything read at the same time (one Tail poll, one
// Matcher.Feed). The zero value is ready to use; it is not safe for
// concurrent use.
//
// Wrapper measurement: lines arriving together were produced at different
// times, so an interval runs from the last step event of one batch to the
// last step event of the next, and its duration is divided by the step delta
// (steps may jump by many per batch when the loop logs every N steps or its
// output is block-buffered). The first batch only sets the baseline, so
// start-up time is not counted.
//
// Loop measurement: every pair of consecutive step events that both carry t=
// gives an interval, divided by the step delta.
//
// A step that repeats (a redrawn progress bar) is ignored; a step that goes
// back (a new tqdm bar per epoch, a restart), a loop clock that goes back,
// and a resume event start a new baseline without an Iter.
type IterClock struct {
	wrapBase, loopBase       bool
	wrapStep, loopStep       int64
	wrapAt                   time.Time
	loopT                    float64
	wrapSawCkpt, loopSawCkpt bool
}

// Reset forgets the baselines.
func (c *IterClock) Reset() { *c = IterClock{} }

// Observe takes one batch and returns the intervals it closes: loop-measured
// ones first, in event order, then at most one wrapper-measured one.
func (c *IterClock) Observe(batch []Event) []Iter {
	var out []Iter
	var last *Event
	reset := false
	// A ckpt line comes after the save: one before the batch's last step
	// falls in the interval closed now, one after it in the next interval.
	ckptBefore, ckptAfter := c.wrapSawCkpt, false
	for i := range batch {
		ev := &batch[i]
		switch ev.Kind {
		case KindResume:
			c.Reset()
			last, reset, ckptBefore, ckptAfter = nil, false, false, false
			continue
		case KindCkpt:
			c.loopSawCkpt = true
			ckptAfter = true
			continue
		case KindStep:
		default:
			continue
		}
		if ev.Step < 0 {
			continue
		}
		if last != nil && ev.Step < last.Step {
			reset = true
		}
		last = ev
		ckptBefore = ckptBefore || ckptAfter
		ckptAfter = false
		if ev.LoopTime > 0 {
			out = c.observeLoop(ev, out)
		}
	}
	if last == nil {
		c.wrapSawCkpt = c.wrapSawCkpt || ckptAfter
		return out
	}
	return c.observeWrap(last, reset, ckptBefore, ckptAfter, out)
}

// observeWrap closes the wrapper-measured interval at last, the batch's
// last step (reset: the steps went back within the batch), and moves the
// baseline there; ckptBefore and ckptAfter say where the batch's
// checkpoints fell.
func (c *IterClock) observeWrap(last *Event, reset, ckptBefore, ckptAfter bool, out []Iter) []Iter {
	switch {
	case !c.wrapBase || reset || last.Step < c.wrapStep || last.At.Before(c.wrapAt):
		c.setWrapBase(last)
	case last.Step == c.wrapStep:
		// No progress: keep the time the step was first seen.
		ckptAfter = ckptBefore || ckptAfter
	case last.At.Equal(c.wrapAt):
		// The rest of the baseline's batch, handed over in another call.
		c.wrapStep = last.Step
	default:
		steps := last.Step - c.wrapStep
		out = append(out, Iter{
			Step: last.Step, Steps: steps,
			PerStep:   time.Duration(float64(last.At.Sub(c.wrapAt)) / float64(steps)),
			By:        ByWrapper,
			At:        last.At,
			AfterCkpt: ckptBefore,
		})
		c.setWrapBase(last)
	}
	c.wrapSawCkpt = ckptAfter
	return out
}

func (c *IterClock) setWrapBase(ev *Event) {
	c.wrapBase, c.wrapStep, c.wrapAt = true, ev.Step, ev.At
}

func (c *IterClock) observeLoop(ev *Event, out []Iter) []Iter {
	switch {
	case !c.loopBase || ev.Step < c.loopStep || ev.LoopTime < c.loopT:
	case ev.Step == c.loopStep || ev.LoopTime == c.loopT:
		return out
	default:
		steps := ev.Step - c.loopStep
		out = append(out, Iter{
			Step: ev.Step, Steps: steps,
			PerStep:   time.Duration((ev.LoopTime - c.loopT) * float64(time.Second) / float64(steps)),
			By:        ByLoop,
			At:        ev.At,
			AfterCkpt: c.loopSawCkpt,
		})
	}
	c.loopBase, c.loopStep, c.loopT, c.loopSawCkpt = true, ev.Step, ev.LoopTime, false
	return out
}
