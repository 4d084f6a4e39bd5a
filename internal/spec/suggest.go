package spec

import "strings"

// DidYouMean returns the entry of known that word is most likely a misspelling of, or "" when
// none is close. Case, '-' and '_' are ignored first, so "Storage", "allowRemoteRefs" and
// "mismatch-status" find storage, allow-remote-refs and mismatchStatus; otherwise a candidate
// must start with the same letter and may differ by a few edits (a transposition counts as one),
// fewer for short words, so that "storrage", "ouput" and "skip-prun" are caught while "name"
// does not suggest "header", nor "include" its opposite "exclude". Ties go to the earlier entry
// of known, which lists the likelier ones first.
func DidYouMean(word string, known []string) string {
	w := fold(word)
	if w == "" {
		return ""
	}
	limit := 1
	switch {
	case len(w) > 8:
		limit = 3
	case len(w) > 4:
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, k := range known {
		fk := fold(k)
		if fk == "" || fk[0] != w[0] {
			continue
		}
		d := editDistance(w, fk)
		if d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func fold(s string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(s))
}

// editDistance is the optimal string alignment distance: insertions, deletions, substitutions
// and transpositions of adjacent bytes each cost one.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
