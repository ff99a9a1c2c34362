package cli

import (
	"flag"
	"strings"
)

// suggest returns the known names closest to a mistyped one: those one
// edit away (a swap of two neighbours counts one: "stauts" is one from
// "status"), else those the name starts (3 runes at least: "--partition"
// for "--partition-ideal", "stat" for "status"), else those two edits
// away (for names of 4 runes or more: any short name is two from another).
// nil when none is close. Equally close names are all returned, in
// known's order, three at most: the choice between them is the user's.
func suggest(name string, known []string) []string {
	n := len([]rune(name))
	var near, prefix, far []string
	for _, k := range known {
		switch d := editDistance(name, k); {
		case d == 0:
		case d == 1 && n >= 2:
			near = append(near, k)
		case n >= 3 && strings.HasPrefix(k, name):
			prefix = append(prefix, k)
		case d == 2 && n >= 4:
			far = append(far, k)
		}
	}
	for _, out := range [][]string{near, prefix, far} {
		if len(out) > 0 {
			return out[:min(len(out), 3)]
		}
	}
	return nil
}

// editDistance is the optimal string alignment distance between a and b
// (Damerau-Levenshtein without editing a substring twice): insertions,
// deletions, substitutions and swaps of two neighbouring runes count one.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// rows i-2, i-1 and i of the (len(s)+1) x (len(t)+1) table
	prev2, prev, cur := make([]int, len(t)+1), make([]int, len(t)+1), make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}

// didYouMean is " (did you mean X?)" or " (did you mean X or Y?)" for the
// names quoted by quote; "" for none.
func didYouMean(names []string, quote func(string) string) string {
	if len(names) == 0 {
		return ""
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	if len(q) == 1 {
		return " (did you mean " + q[0] + "?)"
	}
	return " (did you mean " + strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1] + "?)"
}

// flagName writes a flag as users type it: --name, or -x for one letter
// (the flag package takes both with one or two dashes).
func flagName(name string) string {
	if len([]rune(name)) == 1 {
		return "-" + name
	}
	return "--" + name
}

// undefinedFlagPrefix starts the flag package's error for a flag the set
// does not define. The package has no typed error for it; its text has
// not changed since Go 1, and TestUnknownFlagError pins it.
const undefinedFlagPrefix = "flag provided but not defined: -"

// flagSuggestion is the did-you-mean of a parse error of fs when the error
// (or the usage error wrapping it: its message ends with the flag
// package's) is an undefined flag; "" otherwise.
func flagSuggestion(fs *flag.FlagSet, err error) string {
	_, name, ok := strings.Cut(err.Error(), undefinedFlagPrefix)
	if !ok {
		return ""
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	return didYouMean(suggest(name, known), flagName)
}
