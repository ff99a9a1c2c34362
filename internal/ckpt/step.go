package ckpt

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Where ParseStep found the number, in order of preference.
const (
	StepFromStep   = "step"   // after "step" ("global_step1000", "epoch=3-step=1500")
	StepFromIter   = "iter"   // after "iter" ("iter_000500", "iteration-500")
	StepFromEpoch  = "epoch"  // after "epoch": an epoch number, not a step
	StepFromNumber = "number" // the last number of the name ("resnet50_1000")
)

var (
	keywordRes = []struct {
		from string
		re   *regexp.Regexp
	}{
		{StepFromStep, regexp.MustCompile(`(?i)step[a-z]*[-_=.: ]*([0-9]+)`)},
		{StepFromIter, regexp.MustCompile(`(?i)iter[a-z]*[-_=.: ]*([0-9]+)`)},
		{StepFromEpoch, regexp.MustCompile(`(?i)epoch[a-z]*[-_=.: ]*([0-9]+)`)},
	}
	lastNumberRe = regexp.MustCompile(`([0-9]+)[^0-9]*$`)
)

// ParseStep reads a step number from a checkpoint file name (a base name).
//
// An extension containing a letter (".pt", ".h5", ".ckpt") is dropped first,
// so "model_100.h5" is 100, not 5. Then the first integer after the keyword
// "step" is taken, else after "iter", else after "epoch" (case-insensitive;
// the keyword may continue with letters and be followed by -, _, =, ., : or
// spaces: "steps_1000", "iteration-500", "epoch=3"); else the last integer of
// the name. So Lightning's "epoch=3-step=1500.ckpt" is step 1500. from says
// which rule matched (StepFrom*): an "epoch" number counts epochs, a "number"
// is a guess ("model_v2.pt" is 2). ok is false when the name has no integer
// or it does not fit an int64.
func ParseStep(name string) (step int64, from string, ok bool) {
	if ext := filepath.Ext(name); strings.ContainsAny(ext, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		name = strings.TrimSuffix(name, ext)
	}
	for _, k := range keywordRes {
		if m := k.re.FindStringSubmatch(name); m != nil {
			return parseInt(m[1], k.from)
		}
	}
	if m := lastNumberRe.FindStringSubmatch(name); m != nil {
		return parseInt(m[1], StepFromNumber)
	}
	return 0, "", false
}

func parseInt(s, from string) (int64, string, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, from, true
}
