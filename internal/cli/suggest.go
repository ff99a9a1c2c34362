package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// flagSuggestion is the did-you-mean of a parse error of cmd's flags
// when it is a flag the command does not have; "" otherwise. A long flag
// given with one dash ("-json", as Go's flag package took it) reads as
// shorthands: the whole group is the name meant.
func flagSuggestion(cmd *cobra.Command, err error) string {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return ""
	}
	name := ne.GetSpecifiedName()
	if group := ne.GetSpecifiedShortnames(); group != "" {
		name, _, _ = strings.Cut(group, "=")
	}
	dashes := func(n string) string { return "--" + n }
	if f := cmd.Flags().Lookup(name); f != nil && len(name) > 1 {
		return didYouMean([]string{f.Name}, dashes)
	}
	var known []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
	return didYouMean(suggest(name, known), dashes)
}
