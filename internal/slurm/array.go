package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxArrayTask bounds an array's task ids: Slurm's MaxArraySize is at
// most 4000001, so a task id is at most 4000000.
const MaxArrayTask = 4_000_000

// ArraySpec is an sbatch --array value: task ids as a list of N, N-M or
// N-M:S, and an optional %T for the most elements running at once.
type ArraySpec struct {
	Count    int // elements
	MaxTask  int // highest task id
	Throttle int // %T; 0: none
	// Tasks are the task ids in order, when there are at most
	// MaxListedTasks (nil for more).
	Tasks []int
}

// MaxListedTasks bounds ArraySpec.Tasks.
const MaxListedTasks = 10000

// ParseArraySpec reads an sbatch --array value ("0-15", "1,3,5-9:2%4")
// as sbatch 22.05 takes it; the error says which part is wrong.
func ParseArraySpec(s string) (ArraySpec, error) {
	var a ArraySpec
	list, throttle, hasThrottle := strings.Cut(s, "%")
	if hasThrottle {
		n, err := strconv.Atoi(throttle)
		if err != nil || n < 1 {
			return a, fmt.Errorf("array %q: %%%s: want a positive count of elements at once", s, throttle)
		}
		a.Throttle = n
	}
	if list == "" {
		return a, fmt.Errorf("array %q: no task ids", s)
	}
	var ranges [][3]int
	for _, part := range strings.Split(list, ",") {
		lo, hi, step, err := arrayRange(part)
		if err != nil {
			return a, fmt.Errorf("array %q: %q: %w", s, part, err)
		}
		ranges = append(ranges, [3]int{lo, hi, step})
		a.MaxTask = max(a.MaxTask, lo+(hi-lo)/step*step)
	}
	ids := make([]bool, a.MaxTask+1) // as Slurm's bitmap: a task listed twice is one element
	for _, r := range ranges {
		for t := r[0]; t <= r[1]; t += r[2] {
			if !ids[t] {
				ids[t] = true
				a.Count++
			}
		}
	}
	if a.Count <= MaxListedTasks {
		a.Tasks = make([]int, 0, a.Count)
		for t, in := range ids {
			if in {
				a.Tasks = append(a.Tasks, t)
			}
		}
	}
	return a, nil
}

// arrayRange reads one N, N-M or N-M:S of an array's list.
func arrayRange(part string) (lo, hi, step int, err error) {
	rng, stepStr, hasStep := strings.Cut(part, ":")
	loStr, hiStr, isRange := strings.Cut(rng, "-")
	if lo, err = arrayTask(loStr); err != nil {
		return 0, 0, 0, err
	}
	hi, step = lo, 1
	if isRange {
		if hi, err = arrayTask(hiStr); err != nil {
			return 0, 0, 0, err
		}
		if hi < lo {
			return 0, 0, 0, fmt.Errorf("the range ends before it starts")
		}
	}
	if hasStep {
		if !isRange {
			return 0, 0, 0, fmt.Errorf("a step (:S) needs a range N-M")
		}
		if step, err = strconv.Atoi(stepStr); err != nil || step < 1 {
			return 0, 0, 0, fmt.Errorf("step %q: want a positive number", stepStr)
		}
	}
	return lo, hi, step, nil
}

func arrayTask(s string) (int, error) {
	if s == "" || !isDigits(s) || len(s) > 7 {
		return 0, fmt.Errorf("task id %q: want a number from 0 to %d", s, MaxArrayTask)
	}
	n, _ := strconv.Atoi(s)
	if n > MaxArrayTask {
		return 0, fmt.Errorf("task id %d: over %d, the most any Slurm takes", n, MaxArrayTask)
	}
	return n, nil
}
