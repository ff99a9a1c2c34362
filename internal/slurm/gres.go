package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// GPUs counts GPUs by type ("" for untyped GRES) in a GRES or TRES string.
//
// GRES spellings seen (node gres, gres_used, job gres_detail):
//
//	gpu:2                  untyped, 2
//	gpu:tesla:2(S:0)       type tesla, 2, socket affinity
//	gpu:1(IDX:0)           allocated, device index 0
//	gpu:a100:1(IDX:0),mps:100(IDX:N/A)
//	gpu                    1
//
// TRES spellings (node tres, job tres_alloc_str with gres accounting):
//
//	cpu=4,mem=8000M,gres/gpu=2,gres/gpu:tesla=2
//
// When a string lists typed GPUs, its untyped entry is their total and is
// left out, so no GPU is counted twice.
func GPUs(s string) (map[string]int, error) {
	typed := map[string]int{}
	untyped, sawUntyped := 0, false
	for _, item := range splitGres(s) {
		name, typ, count, ok, err := gresItem(item)
		if err != nil {
			return nil, fmt.Errorf("gres %q: %w", s, err)
		}
		if !ok || name != "gpu" {
			continue
		}
		if typ == "" {
			untyped += count
			sawUntyped = true
		} else {
			typed[typ] += count
		}
	}
	if len(typed) == 0 {
		if !sawUntyped {
			return map[string]int{}, nil
		}
		return map[string]int{"": untyped}, nil
	}
	return typed, nil
}

// splitGres splits on commas outside parentheses ("gpu:2(IDX:0,2)").
func splitGres(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	out = append(out, s[start:])
	return out
}

// gresItem reads one GRES ("gpu:tesla:2(S:0)") or TRES ("gres/gpu:tesla=2")
// item. ok is false for items that are not GRES (cpu=4, mem=8000M, empty,
// "(null)").
func gresItem(item string) (name, typ string, count int, ok bool, err error) {
	item = strings.TrimSpace(item)
	if i := strings.IndexByte(item, '('); i >= 0 {
		item = item[:i]
	}
	if item == "" || item == "N/A" || item == "(null)" {
		return "", "", 0, false, nil
	}
	if k, v, isTRES := strings.Cut(item, "="); isTRES {
		rest, isGres := strings.CutPrefix(k, "gres/")
		if !isGres {
			return "", "", 0, false, nil // cpu=, mem=, node=, billing=, license/...
		}
		name, typ, _ = strings.Cut(rest, ":")
		n, err := gresCount(v)
		if err != nil {
			return "", "", 0, false, err
		}
		return name, typ, n, true, nil
	}
	item = strings.TrimPrefix(strings.TrimPrefix(item, "gres:"), "gres/")
	parts := strings.Split(item, ":")
	name = parts[0]
	switch len(parts) {
	case 1:
		return name, "", 1, true, nil
	case 2:
		if n, err := gresCount(parts[1]); err == nil {
			return name, "", n, true, nil
		}
		return name, parts[1], 1, true, nil // "gpu:tesla"
	default:
		n, err := gresCount(parts[len(parts)-1])
		if err != nil {
			return "", "", 0, false, err
		}
		return name, strings.Join(parts[1:len(parts)-1], ":"), n, true, nil
	}
}

// gresCount reads a GRES count, which may carry a K/M/G/T/P suffix (mps:100K).
func gresCount(s string) (int, error) {
	mult := 1
	if s != "" {
		switch s[len(s)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		case 'P', 'p':
			mult = 1 << 50
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count %q is not a number", s)
	}
	return n * mult, nil
}
